"""Benchmark `rmqdump salvage` against `rmqdump rebuild`, whole commands, on a store with one damaged record.

    python bench/bench_salvage.py setup GENSTORE DAMAGED [--at 0.5 | --offset N] [--link]   # once: copy, queues + index, one body byte flipped
    python bench/bench_salvage.py run DAMAGED [--repeat 3] [--baseline OTHER_CHECKOUT] [--broker-version 5.3.1]

`setup` copies GENSTORE/commitlog (from bench/gen_store.py) to DAMAGED, builds
its ConsumeQueues, IndexFiles and checkpoint with `rmqdump rebuild` (a clean
shutdown: no abort file, so the broker's normal recovery applies), then flips
one body byte of the first record at or after byte --offset (or fraction
--at) of the CommitLog: a body CRC mismatch where the broker's recovery
stops and drops every later record. --link hard-links the CommitLog files
instead of copying them and copies only the one damaged (the commands only
read the store): a 16M-message store where the disk has no room for a copy.
`run` times each command as an operator runs it (`python -m rmqdump ...` under
/usr/bin/time -v, output into a temporary directory beside DAMAGED, removed
after each run), one warm-up of each, then --repeat runs alternating the two,
and prints one JSON line per run (with the 1-minute load average before it)
and a summary: median seconds, their ratio, peak RSS. --baseline adds
`salvage` run from another checkout (e.g. an older commit's worktree) to the
same alternation: before and after under the same load. --broker-version is
passed to salvage: with 5.3.1 the normal recovery walks the last three files
(from 5.3.2 only the one holding the ConsumeQueues' max offset), so damage
there is where the broker stops and half the store is salvaged.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

from rmqdump.builders.sparsecopy import copy_file
from rmqdump.readers.commitlog import CommitLog
from rmqdump.scan import scanner

COMMANDS = {
    "rebuild": ["rebuild", "{store}", "--out", "{out}"],
    "salvage": ["salvage", "{store}", "--out", "{out}"],
}


def setup(gen: str, dest: str, at: float, offset: int | None = None, link: bool = False) -> None:
    os.makedirs(dest, exist_ok=True)
    # holes kept: the newest file is a preallocated sparse file, as the broker leaves it (shutil's copy fills them in)
    shutil.copytree(os.path.join(gen, "commitlog"), os.path.join(dest, "commitlog"), copy_function=os.link if link else copy_file)
    built = tempfile.mkdtemp(prefix="built-", dir=os.path.dirname(os.path.abspath(dest)))
    subprocess.run([sys.executable, "-m", "rmqdump", "rebuild", gen, "--out", os.path.join(built, "o")], check=True, stdout=subprocess.DEVNULL)
    for name in ("consumequeue", "index", "checkpoint"):
        os.rename(os.path.join(built, "o", name), os.path.join(dest, name))
    shutil.rmtree(built)
    cl = CommitLog.open(os.path.join(dest, "commitlog"))
    target = offset if offset is not None else int(at * sum(f.size for f in cl.files))
    for b in scanner.batches(cl, from_offset=target, check_crc=False):
        pos = int(b.cols["body_pos"][0]) + 5
        if os.stat(b.seg.path).st_nlink > 1:  # a hard link to GENSTORE's file: damage a copy of it, never the original
            copy_file(b.seg.path, b.seg.path + ".copy")
            os.replace(b.seg.path + ".copy", b.seg.path)
        with open(b.seg.path, "r+b") as f:
            f.seek(pos)
            c = f.read(1)
            f.seek(pos)
            f.write(bytes([c[0] ^ 0x10]))
        print(json.dumps({"damaged_record": int(b.phys[0]), "file": b.seg.path, "file_offset": pos}))
        return


def timed(cmd: str, store: str, cwd: str | None = None, extra: tuple[str, ...] = ()) -> dict:
    parent = tempfile.mkdtemp(prefix=f"bench-{cmd}-", dir=os.path.dirname(os.path.abspath(store)))
    try:
        store = os.path.abspath(store)
        args = [a.format(store=store, out=os.path.join(parent, "out")) for a in COMMANDS[cmd.split("@")[0]]]
        if cmd.startswith("salvage"):
            args += extra
        env = {**os.environ, "PYTHONPATH": cwd} if cwd else None
        load = os.getloadavg()[0]
        r = subprocess.run(["/usr/bin/time", "-v", sys.executable, "-m", "rmqdump", *args], capture_output=True, text=True, cwd=cwd, env=env)
        if r.returncode not in (0, 1):
            raise SystemExit(f"{cmd} failed ({r.returncode}): {r.stderr[-2000:]}")
        wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (?:(\d+):)?(\d+):([\d.]+)", r.stderr)
        h, m, s = (float(x) if x else 0.0 for x in wall.groups())
        rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", r.stderr).group(1))
        cpu = sum(float(re.search(rf"{k} time \(seconds\): ([\d.]+)", r.stderr).group(1)) for k in ("User", "System"))
        return {
            "command": cmd,
            "seconds": round(h * 3600 + m * 60 + s, 2),
            "cpu_seconds": round(cpu, 2),
            "peak_rss_mb": round(rss / 1024, 1),
            "exit": r.returncode,
            "load_1min_before": load,
        }
    finally:
        shutil.rmtree(parent, ignore_errors=True)


def run(store: str, repeat: int, baseline: str | None = None, extra: tuple[str, ...] = ()) -> None:
    cwd = {c: None for c in COMMANDS}
    if baseline:
        cwd["salvage@baseline"] = os.path.abspath(baseline)
    for cmd, d in cwd.items():  # warm-up: page cache, numba's compiled kernels
        timed(cmd, store, d, extra)
    runs: dict[str, list[dict]] = {c: [] for c in cwd}
    for _ in range(repeat):
        for cmd, d in cwd.items():
            r = timed(cmd, store, d, extra)
            runs[cmd].append(r)
            print(json.dumps(r), flush=True)
    med = {c: statistics.median(r["seconds"] for r in rs) for c, rs in runs.items()}
    cpu = {c: statistics.median(r["cpu_seconds"] for r in rs) for c, rs in runs.items()}
    print(
        json.dumps(
            {
                "kind": "summary",
                "median_seconds": med,
                "median_cpu_seconds": cpu,
                "over_rebuild": {c: round(med[c] / med["rebuild"], 2) for c in med if c != "rebuild"},
                "cpu_over_rebuild": {c: round(cpu[c] / cpu["rebuild"], 2) for c in cpu if c != "rebuild"},
                "peak_rss_mb": {c: max(r["peak_rss_mb"] for r in rs) for c, rs in runs.items()},
                "load_1min": [min(r["load_1min_before"] for rs in runs.values() for r in rs), max(r["load_1min_before"] for rs in runs.values() for r in rs)],
            }
        )
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="what", required=True)
    s = sub.add_parser("setup")
    s.add_argument("gen")
    s.add_argument("dest")
    s.add_argument("--at", type=float, default=0.5, help="where the damaged record lies, as a fraction of the CommitLog")
    s.add_argument("--offset", type=int, help="where the damaged record lies: the first record at or after this CommitLog byte")
    s.add_argument("--link", action="store_true", help="hard-link the CommitLog files; only the damaged one is copied")
    r = sub.add_parser("run")
    r.add_argument("store")
    r.add_argument("--repeat", type=int, default=3)
    r.add_argument("--baseline", help="another checkout whose salvage runs alongside (cwd and PYTHONPATH there)")
    r.add_argument("--broker-version", help="passed to salvage: the broker release whose recovery it follows")
    a = ap.parse_args()
    if a.what == "setup":
        setup(a.gen, a.dest, a.at, a.offset, a.link)
    else:
        run(a.store, a.repeat, a.baseline, ("--broker-version", a.broker_version) if a.broker_version else ())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
