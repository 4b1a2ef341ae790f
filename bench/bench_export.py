"""Export throughput: local engine (1 and 2 workers) and Spark local[2] on the same store.

    python bench/bench_export.py STORE_ROOT [--out-dir DIR] [--range-bytes 256M] [--body raw] [--skip-spark]

Each run is the real command (`rmqdump export ...`) in a subprocess, so the
figures include process start-up; MB/s is CommitLog bytes / the export's own
wall time (for Spark without the session start-up, which is reported apart).
Peak RSS is the largest sum of resident memory over the command's process
tree (for Spark: driver JVM, Python driver and workers), sampled every 0.1 s.
Make a store with: python bench/gen_store.py bench/data/export-1g --size 1GiB
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

PAGE = os.sysconf("SC_PAGE_SIZE")


def _tree_rss(root: int) -> int:
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                parts = f.read().rsplit(")", 1)[1].split()
            pid, ppid = int(d), int(parts[1])
            children.setdefault(ppid, []).append(pid)
            rss[pid] = int(parts[21]) * PAGE
        except (OSError, IndexError, ValueError):
            continue
    total, todo = 0, [root]
    while todo:
        p = todo.pop()
        total += rss.get(p, 0)
        todo.extend(children.get(p, []))
    return total


def run(cmd: list[str]) -> tuple[dict, float, int]:
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = 0
    while p.poll() is None:
        peak = max(peak, _tree_rss(p.pid))
        time.sleep(0.1)
    out, err = p.communicate()
    wall = time.perf_counter() - t0
    if p.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(cmd)} failed ({p.returncode}): {err[-2000:]}")
    return json.loads(out.strip().splitlines()[-1]), wall, peak


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("store")
    ap.add_argument("--out-dir", default=None, help="where the datasets go (default: a temp dir, removed after)")
    ap.add_argument("--range-bytes", default="256M")
    ap.add_argument("--body", choices=["none", "raw"], default="none", help="raw: export the body column too (rmqdump export --body raw)")
    ap.add_argument("--skip-spark", action="store_true")
    a = ap.parse_args()
    base = a.out_dir or tempfile.mkdtemp(prefix="bench-export-")
    exe = [sys.executable, "-m", "rmqdump", "export", "-s", a.store, "--range-bytes", a.range_bytes, "--force"] + (["--body", "raw"] if a.body == "raw" else [])
    runs = [("local, 1 worker", ["--workers", "1"]), ("local, 2 workers", ["--workers", "2"])]
    if not a.skip_spark:
        runs.append(("spark local[2]", ["--engine", "spark", "--master", "local[2]"]))
        runs.append(("spark local[2], --spark-writer arrow", ["--engine", "spark", "--master", "local[2]", "--spark-writer", "arrow"]))
    print(f"store {a.store}; range bytes {a.range_bytes}; body {a.body}")
    print("| engine | messages | CommitLog MB | export s | MB/s | Spark start-up s | command wall s | peak RSS MB (process tree) |")
    print("|---|---|---|---|---|---|---|---|")
    try:
        for label, extra in runs:
            out = os.path.join(base, "".join(ch if ch.isalnum() else "_" for ch in label))
            summary, wall, peak = run([*exe, "-o", out, *extra])
            mb = summary["record_bytes"] / 1e6
            startup = summary.get("spark_startup_seconds")
            print(
                f"| {label} | {summary['messages']} | {mb:.0f} | {summary['seconds']:.1f} | {mb / summary['seconds']:.0f} | "
                f"{'' if startup is None else f'{startup:.1f}'} | {wall:.1f} | {peak / 1e6:.0f} |",
                flush=True,
            )
            shutil.rmtree(out, ignore_errors=True)
    finally:
        if a.out_dir is None:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
