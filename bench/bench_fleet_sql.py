"""`rmqdump sql` over one store and over a fleet of copies of it: local (DuckDB) and Spark SQL (`--engine spark`).

    python bench/bench_fleet_sql.py [--store bench/data/gen-1m] [--copies 4] [--master local[2]] [--repeat 2]

local  `python -m rmqdump sql -s STORES -f jsonl QUERY > /dev/null`, whole process incl. start-up
spark  rmqdump.engines.spark.sql.query_frame(QUERY) with every result row fetched, in one SparkSession,
       timed by the job's own clock after session start (the first run also starts the Python workers)
The fleet is `--copies` directory links to the same store under distinct broker names: the same bytes
(the page cache holds them once), so the figure is the engines' cost per store, not the disks'.
MB/s counts CommitLog record bytes (total_size), never the files' preallocated zero tails.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_STORE = ROOT / "bench" / "data" / "gen-1m"
QUERY = "SELECT broker, topic, count(*) AS n, sum(total_size) AS b FROM messages GROUP BY broker, topic"


def _fleet(store: str, copies: int, tmp: str) -> str:
    for i in range(copies):
        os.makedirs(os.path.join(tmp, f"b{i}"))
        os.symlink(os.path.abspath(store), os.path.join(tmp, f"b{i}", "store"))
    return os.path.join(tmp, "*", "store")


def _local(stores: str) -> tuple[float, list[dict]]:
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "rmqdump", "sql", "-s", stores, "-f", "jsonl", QUERY], capture_output=True, text=True, check=True, cwd=ROOT)
    return time.perf_counter() - t0, [json.loads(x) for x in out.stdout.splitlines()]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", default=str(DEFAULT_STORE))
    ap.add_argument("--copies", type=int, default=4)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--repeat", type=int, default=2)
    a = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from rmqdump.engines.spark.session import build_session
    from rmqdump.engines.spark.sql import arrow_reader, query_frame
    from rmqdump.scan.splits import resolve_stores

    with tempfile.TemporaryDirectory(prefix="rmqdump-fleet-") as tmp:
        targets = {"1 store": a.store, f"{a.copies} stores": _fleet(a.store, a.copies, tmp)}
        t0 = time.perf_counter()
        spark = build_session(a.master, ["spark.sql.shuffle.partitions=4"], driver_memory="1g")
        print(f"spark session start ({a.master}): {time.perf_counter() - t0:.1f} s", flush=True)
        try:
            for label, stores in targets.items():
                for run in range(a.repeat):
                    secs, rows = _local(stores)
                    mb = sum(r["b"] for r in rows) / 1e6
                    print(f"local {label} run {run}: {secs:.2f} s, {sum(r['n'] for r in rows)} messages, {mb / secs:.0f} MB/s", flush=True)
                    t0 = time.perf_counter()
                    got = [r for b in arrow_reader(query_frame(spark, resolve_stores([stores]), QUERY)) for r in b.to_pylist()]
                    secs = time.perf_counter() - t0
                    assert sorted(got, key=str) == sorted(rows, key=str), "the engines disagree"
                    print(f"spark {label} run {run}: {secs:.2f} s, {mb / secs:.0f} MB/s", flush=True)
        finally:
            spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
