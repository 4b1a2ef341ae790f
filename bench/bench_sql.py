"""`rmqdump sql` against the scan alone: the cost of DuckDB and the Arrow columns on top of reading the CommitLog.

    python bench/bench_sql.py [--store bench/data/gen-1m] [--repeat 3] [--query "SELECT ..."]

Modes, each in its own process, interleaved (each figure is the smallest of --repeat runs,
after one pass to warm the page cache):
  scan   the scan the `messages` table runs on (rmqdump.export.dataset.scan_split over
         every byte range, CRC off, as `sql` runs it when no CRC column is named), counting records
  sql    rmqdump.sql.query.run(query) with every result batch fetched (library, in process)
  cli    `python -m rmqdump sql -s STORE -f jsonl QUERY > /dev/null`, whole process incl. start-up
Peak RSS is each process's own (os.wait4). The store (1,000,000 messages, two 1 GiB
files) is generated on first use with bench/gen_store.py.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_STORE = ROOT / "bench" / "data" / "gen-1m"
GEN_ARGS = ["--size", "2GiB", "--count", "1000000", "--file-size", "1GiB", "--seed", "1"]
QUERY = "SELECT topic, count(*) FROM messages GROUP BY topic"
MODES = ("scan", "sql", "cli")


def _child(mode: str, store: str, query: str) -> dict:
    import dataclasses

    from rmqdump.export.dataset import scan_split
    from rmqdump.scan.splits import plan, resolve_stores
    from rmqdump.sql.query import run

    stores = resolve_stores([store])
    t0 = time.perf_counter()  # imports (duckdb, pyarrow) are not counted in either mode; the cli mode has them
    if mode == "scan":
        n = 0
        for s in plan(stores)[0]:
            for b in scan_split(dataclasses.replace(s, check_crc=False), lambda p: None):
                n += len(b)
        return {"records": n, "seconds": time.perf_counter() - t0}
    rows = []
    with run(stores, query) as result:
        for rb in result:
            rows.extend(rb.to_pylist())
    return {"rows": rows, "seconds": time.perf_counter() - t0}


def measure(mode: str, store: str, query: str) -> dict:
    if mode == "cli":
        cmd = [sys.executable, "-m", "rmqdump", "sql", "-s", store, "-f", "jsonl", query]
    else:
        cmd = [sys.executable, __file__, "--child", mode, "--store", store, "--query", query]
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    out = p.stdout.read()
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{mode} failed: {' '.join(cmd)}")
    res = {"wall": wall, "peak_rss_mb": usage.ru_maxrss / 1024}
    if mode == "cli":
        res["seconds"] = wall
        res["rows"] = [json.loads(x) for x in out.splitlines()]
    else:
        res.update(json.loads(out))
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", default=str(DEFAULT_STORE))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--query", default=QUERY)
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        print(json.dumps(_child(a.child, a.store, a.query)))
        return 0
    if not os.path.isdir(os.path.join(a.store, "commitlog")):
        subprocess.run([sys.executable, str(ROOT / "bench" / "gen_store.py"), a.store, *GEN_ARGS], check=True)
    modes = a.modes.split(",")
    measure("scan", a.store, a.query)  # warm the page cache
    best: dict[str, dict] = {}  # per mode, the smallest of each figure over the runs
    for _ in range(a.repeat):
        for m in modes:
            r = measure(m, a.store, a.query)
            if m not in best:
                best[m] = r
            else:
                for k in ("seconds", "wall", "peak_rss_mb"):
                    best[m][k] = min(best[m][k], r[k])
    print(f"store {a.store}; query: {a.query}; best of {a.repeat}; load average {os.getloadavg()[0]:.2f}")
    print("| mode | seconds (in process) | x scan | process wall s | x scan process | peak RSS MB | result |")
    print("|---|---|---|---|---|---|---|")
    base = best["scan"]["seconds"] if "scan" in best else None
    for m in modes:
        r = best[m]
        what = f"{r['records']:,} records" if m == "scan" else json.dumps(r["rows"])[:120]
        ratio = f"{r['seconds'] / base:.2f}" if base and m != "cli" else ""
        wall_ratio = f"{r['wall'] / best['scan']['wall']:.2f}" if base else ""
        secs = "" if m == "cli" else f"{r['seconds']:.2f}"
        print(f"| {m} | {secs} | {ratio} | {r['wall']:.2f} | {wall_ratio} | {r['peak_rss_mb']:.0f} | {what} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
