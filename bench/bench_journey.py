"""Journeys on a generated store: one message by the index, every journey, the store-wide views, beside `export`.

    python bench/bench_journey.py bench/data/gen-1m-idx [--repeat 3]

STORE is a store with ConsumeQueues and an IndexFile (gen_store.py, then `rmqdump rebuild`, its commitlog/ linked in).
Each command runs once as a warm-up, then `--repeat` times as a whole process under `/usr/bin/time`; the median wall
time and the largest peak RSS are printed as a Markdown table, with the MB/s of CommitLog record bytes (the data's
end, not the files' preallocated zeros) for the commands that read every record. Output goes to /dev/null.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

RMQDUMP = str(Path(sys.executable).with_name("rmqdump"))


def first_uniq_key(store: Path) -> str:
    r = subprocess.run([RMQDUMP, "commitlog", "-s", str(store), "-n", "1", "-f", "jsonl"], capture_output=True, text=True)
    return json.loads(r.stdout.splitlines()[0])["uniq_key"]


def record_bytes(store: Path) -> int:
    r = subprocess.run([RMQDUMP, "info", "-s", str(store), "-f", "jsonl"], capture_output=True, text=True)
    for line in r.stdout.splitlines():
        d = json.loads(line)
        if d.get("kind") == "commitlog":
            return int(d["data_end"]) - int(d["min_offset"])
    return 0


def timed(args: list[str]) -> tuple[float, int]:
    with open(os.devnull, "w") as null:
        r = subprocess.run(["/usr/bin/time", "-f", "@@ %e %M", RMQDUMP, *args], stdout=null, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    wall, rss = r.stderr.splitlines()[-1].split()[1:]
    return float(wall), int(rss)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("store", type=Path)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    s = str(a.store)
    out = tempfile.mkdtemp(prefix="rmqdump-bench-journey-")
    key = first_uniq_key(a.store)
    total = record_bytes(a.store)
    cmds = {
        f"journey {key}": (["journey", key, "-s", s, "-f", "jsonl"], False),
        "journey --all -f jsonl": (["journey", "--all", "-s", s, "-f", "jsonl"], True),
        "tx": (["tx", "-s", s, "-f", "jsonl"], False),
        "pop": (["pop", "-s", s, "-f", "jsonl"], False),
        "delay": (["delay", "-s", s, "-f", "jsonl"], False),
        "export (Parquet)": (["export", "-s", s, "-o", os.path.join(out, "export"), "--force"], True),
    }
    print(f"store {s}: {total} bytes of records; load {os.getloadavg()[0]:.1f}")
    print("| command | median s | MB/s of records | peak RSS MiB |\n|---|---:|---:|---:|")
    for name, (args, whole) in cmds.items():
        timed(args)
        runs = [timed(args) for _ in range(a.repeat)]
        med = statistics.median(w for w, _ in runs)
        rate = f"{total / med / 1e6:.0f}" if whole and total and med else ""
        print(f"| `rmqdump {name}` | {med:.2f} | {rate} | {max(r for _, r in runs) / 1024:.0f} |", flush=True)


if __name__ == "__main__":
    main()
