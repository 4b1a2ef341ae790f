"""Benchmark `rmqdump salvage` against `rmqdump rebuild`, whole commands, on a store with one damaged record.

    python bench/bench_salvage.py setup GENSTORE DAMAGED [--at 0.5]   # once: copy, queues + index, one body byte flipped
    python bench/bench_salvage.py run DAMAGED [--repeat 3]

`setup` copies GENSTORE/commitlog (from bench/gen_store.py) to DAMAGED, builds
its ConsumeQueues, IndexFiles and checkpoint with `rmqdump rebuild` (a clean
shutdown: no abort file, so the broker's normal recovery applies), then flips
one body byte of the record at fraction --at of the CommitLog: a body CRC
mismatch where the broker's recovery stops and drops every later record.
`run` times each command as an operator runs it (`python -m rmqdump ...` under
/usr/bin/time -v, output into a temporary directory beside DAMAGED, removed
after each run), one warm-up of each, then --repeat runs alternating the two,
and prints one JSON line per run and a summary: median seconds, their ratio,
peak RSS.
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

from rmqdump.readers.commitlog import CommitLog
from rmqdump.scan.walk import scan_commitlog

COMMANDS = {
    "rebuild": ["rebuild", "{store}", "--out", "{out}"],
    "salvage": ["salvage", "{store}", "--out", "{out}"],
}


def setup(gen: str, dest: str, at: float) -> None:
    os.makedirs(dest, exist_ok=True)
    shutil.copytree(os.path.join(gen, "commitlog"), os.path.join(dest, "commitlog"))
    built = tempfile.mkdtemp(prefix="built-", dir=os.path.dirname(os.path.abspath(dest)))
    subprocess.run([sys.executable, "-m", "rmqdump", "rebuild", gen, "--out", os.path.join(built, "o")], check=True, stdout=subprocess.DEVNULL)
    for name in ("consumequeue", "index", "checkpoint"):
        os.rename(os.path.join(built, "o", name), os.path.join(dest, name))
    shutil.rmtree(built)
    cl = CommitLog.open(os.path.join(dest, "commitlog"))
    target = int(at * sum(f.size for f in cl.files))
    for b in scan_commitlog(cl, from_offset=target, check_crc=False):
        pos = int(b.cols["body_pos"][0]) + 5
        with open(b.seg.path, "r+b") as f:
            f.seek(pos)
            c = f.read(1)
            f.seek(pos)
            f.write(bytes([c[0] ^ 0x10]))
        print(json.dumps({"damaged_record": int(b.phys[0]), "file": b.seg.path, "file_offset": pos}))
        return


def timed(cmd: str, store: str) -> dict:
    parent = tempfile.mkdtemp(prefix=f"bench-{cmd}-", dir=os.path.dirname(os.path.abspath(store)))
    try:
        args = [a.format(store=store, out=os.path.join(parent, "out")) for a in COMMANDS[cmd]]
        r = subprocess.run(["/usr/bin/time", "-v", sys.executable, "-m", "rmqdump", *args], capture_output=True, text=True)
        if r.returncode not in (0, 1):
            raise SystemExit(f"{cmd} failed ({r.returncode}): {r.stderr[-2000:]}")
        wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (?:(\d+):)?(\d+):([\d.]+)", r.stderr)
        h, m, s = (float(x) if x else 0.0 for x in wall.groups())
        rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", r.stderr).group(1))
        return {"command": cmd, "seconds": round(h * 3600 + m * 60 + s, 2), "peak_rss_mb": round(rss / 1024, 1), "exit": r.returncode}
    finally:
        shutil.rmtree(parent, ignore_errors=True)


def run(store: str, repeat: int) -> None:
    for cmd in COMMANDS:  # warm-up: page cache, numba's compiled kernels
        timed(cmd, store)
    runs: dict[str, list[dict]] = {c: [] for c in COMMANDS}
    for _ in range(repeat):
        for cmd in COMMANDS:
            r = timed(cmd, store)
            runs[cmd].append(r)
            print(json.dumps(r), flush=True)
    med = {c: statistics.median(r["seconds"] for r in rs) for c, rs in runs.items()}
    print(
        json.dumps(
            {
                "kind": "summary",
                "median_seconds": med,
                "salvage_over_rebuild": round(med["salvage"] / med["rebuild"], 2),
                "peak_rss_mb": {c: max(r["peak_rss_mb"] for r in rs) for c, rs in runs.items()},
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
    r = sub.add_parser("run")
    r.add_argument("store")
    r.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    if a.what == "setup":
        setup(a.gen, a.dest, a.at)
    else:
        run(a.store, a.repeat)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
