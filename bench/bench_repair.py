"""Benchmark `rmqdump repair` against `rmqdump rebuild`, whole commands, on a big store with one damaged record.

    python bench/bench_repair.py [--store bench/data/gen-1m] [--damage magic|crc] [--repeat 3]

Makes a copy of STORE's commitlog/ (holes kept, made once: STORE-badmagic or
STORE-badcrc) with one record damaged, the one at or after physical offset
600,000,000: `magic` overwrites its magic code (the broker's recovery stops
there; `rebuild`'s scan skips the record), `crc` flips one body byte (the
recovery stops there too, checkCRCOnRecover; `rebuild` checks CRCs only with
--crc). Then runs `rebuild`, `rebuild --crc` (crc only), `repair` and
`repair --no-crc` (the same without the body CRC pass), each
command in a subprocess under /usr/bin/time -v: one warm-up run of each, then
`--repeat` runs alternating rebuild and repair (the machine's speed drifts;
alternating keeps the two comparable), outputs removed between runs (not
timed). Prints one JSON line per run (wall seconds, peak RSS) and a summary
line with the medians and their ratio, of wall seconds and of CPU seconds (user +
system: repair writes a whole copy of the CommitLog, which rebuild does not, so
its wall time follows the disk's write speed, which drifts between runs).
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
from rmqdump.scan import scanner

DAMAGE_AT = 600_000_000


def make_damaged(src: str, dst: str, kind: str) -> dict:
    """A copy of src's CommitLog with one record damaged; what was damaged."""
    if not os.path.isdir(os.path.join(dst, "commitlog")):
        tmp = dst + ".tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
        subprocess.run(["cp", "-r", "--sparse=always", os.path.join(src, "commitlog"), tmp], check=True)
        cl = CommitLog.open(os.path.join(tmp, "commitlog"))
        it = scanner.batches(cl, from_offset=DAMAGE_AT, check_crc=False)  # held: the batch's map lives as long as its walk
        b = next(it)
        m = b.message(0)
        with open(b.seg.path, "r+b") as f:
            if kind == "magic":
                f.seek(int(b.cols["_pos"][0]) + 4)
                f.write(b"ZZZZ")
            else:
                pos = int(b.cols["body_pos"][0]) + 5
                f.seek(pos)
                x = f.read(1)
                f.seek(pos)
                f.write(bytes([x[0] ^ 0xFF]))
        with open(os.path.join(tmp, "damage.json"), "w") as f:
            json.dump(
                {"damage": kind, "phys_offset": m.phys_offset, "size": m.total_size, "topic": m.topic, "queue_id": m.queue_id, "queue_offset": m.queue_offset},
                f,
            )
        del b, it
        os.rename(tmp, dst)
    with open(os.path.join(dst, "damage.json")) as f:
        return json.load(f)


def timed(cmd: list[str]) -> dict:
    p = subprocess.run(["/usr/bin/time", "-v", *cmd], capture_output=True, text=True)
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (?:(\d+):)?(\d+):([\d.]+)", p.stderr)
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr)
    cpu = sum(float(x) for x in re.findall(r"(?:User|System) time \(seconds\): ([\d.]+)", p.stderr))
    h, m, s = (int(wall.group(1) or 0), int(wall.group(2)), float(wall.group(3)))
    return {
        "exit": p.returncode,
        "seconds": round(h * 3600 + m * 60 + s, 2),
        "cpu_seconds": round(cpu, 2),
        "rss_mb": round(int(rss.group(1)) / 1024),
        "last": p.stdout.strip().split("\n")[-1][:2000],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", default="bench/data/gen-1m")
    ap.add_argument("--damage", choices=["magic", "crc"], default="magic")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    damaged = a.store.rstrip("/") + "-bad" + a.damage
    print(json.dumps({"kind": "damage", "store": damaged, **make_damaged(a.store, damaged, a.damage)}), flush=True)
    outdir = tempfile.mkdtemp(prefix="rmqdump-bench-repair-", dir=os.path.dirname(os.path.abspath(damaged)))
    commands = {"rebuild": ["rebuild"], "rebuild --crc": ["rebuild", "--crc"], "repair": ["repair"], "repair --no-crc": ["repair", "--no-crc"]}
    if a.damage == "magic":
        del commands["rebuild --crc"]
    runs: dict[str, list[dict]] = {c: [] for c in commands}
    try:
        for i in range(a.repeat + 1):
            for cmd, argv in commands.items():
                out = os.path.join(outdir, "out")
                shutil.rmtree(out, ignore_errors=True)
                subprocess.run(["sync"], check=False)
                r = timed([sys.executable, "-m", "rmqdump", *argv, "-s", damaged, "--out", out, "-f", "jsonl"])
                summary = json.loads(r.pop("last"))
                row = {"kind": "run", "command": cmd, "warmup": i == 0, **r}
                if argv[0] == "repair":
                    row["timings"] = summary.get("timings")
                    row["repaired"] = summary.get("repaired")
                print(json.dumps(row), flush=True)
                if i:
                    runs[cmd].append(row)
    finally:
        shutil.rmtree(outdir, ignore_errors=True)
    med = {c: statistics.median(r["seconds"] for r in rs) for c, rs in runs.items()}
    rss = {c: max(r["rss_mb"] for r in rs) for c, rs in runs.items()}
    ratio = {c: round(m / med["rebuild"], 2) for c, m in med.items()}
    cpu = {c: statistics.median(r["cpu_seconds"] for r in rs) for c, rs in runs.items()}
    cpu_ratio = {c: round(m / cpu["rebuild"], 2) for c, m in cpu.items()}
    print(json.dumps({"kind": "summary", "median_seconds": med, "median_cpu_seconds": cpu, "peak_rss_mb": rss, "ratio_to_rebuild": ratio, "cpu_ratio_to_rebuild": cpu_ratio}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
