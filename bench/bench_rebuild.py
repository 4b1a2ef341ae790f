"""Benchmark `rmqdump rebuild` on a big CommitLog.

    python bench/bench_rebuild.py STOREDIR [--out DIR] [--workers N] [--repeat N]
                                  [--cq-units-per-file N --hash-slots N --index-entries N]
                                  [--verify] [--sync]

STOREDIR holds commitlog/ (make one with bench/gen_store.py, e.g.
`python bench/gen_store.py /tmp/g1g --size 1GiB`). Sizes default to the
broker defaults (300,000 units per ConsumeQueue file, 5,000,000 slots and
20,000,000 entries per IndexFile: full-size 420 MB index files). The page
cache is warmed first (one read of the CommitLog), as in the broker figure
the issue cites. Prints one JSON line per run: wall seconds, messages/s,
MB/s of CommitLog, CPU seconds of this process and of the worker processes,
and peak RSS of this process and of the largest worker (ru_maxrss).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import tempfile
import time

from rmqdump.builders.rebuild import RebuildOptions, rebuild
from rmqdump.builders.settings import resolve
from rmqdump.readers.commitlog import CommitLog
from rmqdump.schemas import constants as C


def warm(paths: list[str]) -> None:
    buf = bytearray(16 << 20)
    for p in paths:
        with open(p, "rb", buffering=0) as f:
            while f.readinto(buf):
                pass


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("store")
    ap.add_argument("--out", help="output directory (default: a temporary directory, removed after each run)")
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--cq-units-per-file", type=int, default=C.DEFAULT_CQ_UNITS_PER_FILE)
    ap.add_argument("--hash-slots", type=int, default=C.DEFAULT_HASH_SLOTS)
    ap.add_argument("--index-entries", type=int, default=C.DEFAULT_INDEX_ENTRIES)
    ap.add_argument("--verify", action="store_true", help="also run the cq/index verify pass (timed separately)")
    ap.add_argument("--sync", action="store_true", help="fsync the new files (default off: measures the rebuild, not the disk)")
    a = ap.parse_args()

    cl = CommitLog.open(os.path.join(a.store, "commitlog"))
    total = sum(f.size for f in cl.files)
    warm([f.path for f in cl.files])
    settings = resolve(a.store, cq_units=a.cq_units_per_file, hash_slots=a.hash_slots, index_entries=a.index_entries)
    for _ in range(a.repeat):
        parent = a.out or tempfile.mkdtemp(prefix="rmqdump-bench-")
        out = os.path.join(parent, "rebuilt")
        shutil.rmtree(out, ignore_errors=True)
        self0 = resource.getrusage(resource.RUSAGE_SELF)
        kids0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        rep = rebuild(a.store, out, settings, RebuildOptions(workers=a.workers, verify=a.verify, sync=a.sync))
        wall = time.perf_counter() - t0
        self1 = resource.getrusage(resource.RUSAGE_SELF)
        kids1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        s = rep.summary()
        print(
            json.dumps(
                {
                    "store": a.store,
                    "commitlog_bytes": total,
                    "messages": rep.records,
                    "index_entries": s["index_entries"],
                    "workers": rep.workers,
                    "settings": {"cq_units_per_file": settings.cq_units_per_file, "hash_slots": settings.hash_slots, "index_entries": settings.index_entries},
                    "build_seconds": round(rep.seconds, 3),
                    "messages_per_s": round(rep.records / rep.seconds),
                    "mb_per_s": round(total / rep.seconds / 1e6, 1),
                    "verify_seconds": round(rep.verify_seconds, 3) if a.verify else None,
                    "verify_ok": rep.verify["ok"] if rep.verify else None,
                    "wall_seconds": round(wall, 3),
                    "cpu_self_s": round(self1.ru_utime + self1.ru_stime - self0.ru_utime - self0.ru_stime, 3),
                    "cpu_workers_s": round(kids1.ru_utime + kids1.ru_stime - kids0.ru_utime - kids0.ru_stime, 3),
                    "peak_rss_self_mb": round(self1.ru_maxrss / 1024, 1),
                    "peak_rss_worker_mb": round(kids1.ru_maxrss / 1024, 1),
                    "load_avg": os.getloadavg()[0],
                }
            ),
            flush=True,
        )
        if not a.out:
            shutil.rmtree(parent, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
