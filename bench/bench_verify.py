"""Benchmark `cq verify` on a large store: units/s, messages/s and peak RSS.

    python bench/bench_verify.py STORE [--build-cq] [--no-crc]

STORE is a store root. A generated store (bench/gen_store.py) has only a
CommitLog; with --build-cq this script first writes its ConsumeQueues from the
dispatch columns of rmqdump.scan.dispatch (what the broker's CommitLogDispatcher
gives the ConsumeQueue: offset, size, tagsCode at index = queueOffset),
default broker sizing (300,000 units per file). That writer is bench-only
code: rmqdump itself never writes into a store.

The verify run happens in a fresh child process, so its peak RSS is verify's own.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time

import numpy as np

from rmqdump.scan import scanner


def build_cq(root: str, units_per_file: int = 300_000) -> int:
    from rmqdump.readers.commitlog import CommitLog
    from rmqdump.readers.consumequeue import UNIT_DTYPE
    from rmqdump.scan.dispatch import DelayLevels, dispatch_columns

    cl = CommitLog.open(os.path.join(root, "commitlog"))
    delays = DelayLevels.parse()
    per_queue: dict[tuple[str, int], list[np.ndarray]] = {}
    n = 0
    for b in scanner.batches(cl, check_crc=False):
        if not len(b):
            continue
        d = dispatch_columns(b, delays, keys=False)
        q = d.queued
        for tid, t in enumerate(d.topics):
            sel = q & (d.topic_id == tid)
            for qid in np.unique(d.queue_id[sel]).tolist():
                s = sel & (d.queue_id == qid)
                rows = np.zeros(int(s.sum()), dtype=[("qoff", "i8"), ("u", UNIT_DTYPE)])
                rows["qoff"] = d.queue_offset[s]
                rows["u"]["commit_log_offset"] = d.phys[s]
                rows["u"]["size"] = d.size[s]
                rows["u"]["tags_code"] = d.tags_code[s]
                per_queue.setdefault((t, int(qid)), []).append(rows)
                n += len(rows)
    file_bytes = units_per_file * UNIT_DTYPE.itemsize
    for (t, qid), parts in per_queue.items():
        rows = np.concatenate(parts)
        rows = rows[np.argsort(rows["qoff"], kind="stable")]
        assert rows["qoff"][0] == 0 and np.all(np.diff(rows["qoff"]) == 1), f"{t}/{qid}: queue offsets are not 0..n-1"
        d = os.path.join(root, "consumequeue", t, str(qid))
        os.makedirs(d, exist_ok=True)
        units = rows["u"].astype(UNIT_DTYPE)  # concatenate may have made the fields native-endian
        for start in range(0, len(units), units_per_file):
            buf = bytearray(file_bytes)
            chunk = units[start : start + units_per_file].tobytes()
            buf[: len(chunk)] = chunk
            with open(os.path.join(d, f"{start * UNIT_DTYPE.itemsize:020d}"), "wb") as f:
                f.write(buf)
    return n


def run_verify(root: str, check_crc: bool, window: int | None, workers: int) -> dict:
    from rmqdump.checks.cqverify import VerifySummary, verify
    from rmqdump.readers.store import Store

    t0 = time.perf_counter()
    st = Store.open(root)
    s = VerifySummary()
    kw = {"window_records": window} if window else {}
    kw["workers"] = workers
    problems = sum(1 for _ in verify(st, check_crc=check_crc, summary=s, **kw))
    dt = time.perf_counter() - t0
    cl_bytes = sum(f.size for f in st.commitlog.files)
    return {
        "store": root,
        "commitlog_bytes": cl_bytes,
        "queues": s.queues,
        "units": s.units,
        "messages": s.messages,
        "problems": problems,
        "check_crc": check_crc,
        "window_records": window,
        "workers": workers,
        "seconds": round(dt, 2),
        "units_per_s": round(s.units / dt),
        "messages_per_s": round(s.messages / dt),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "peak_rss_worker_mb": round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, 1),
    }


def run_join_only(root: str) -> dict:
    """The vectorized unit checks alone, on a record table already built: what verify adds to the scan."""
    from rmqdump.checks.cqunits import CommitLogExtent, check_units
    from rmqdump.checks.cqverify import record_windows
    from rmqdump.readers.store import Store

    st = Store.open(root)
    t0 = time.perf_counter()
    ((records, _),) = record_windows(st.commitlog, check_crc=False, window_records=1 << 62)
    t_scan = time.perf_counter() - t0
    extent = CommitLogExtent.of(st.commitlog, records.data_end)
    t0 = time.perf_counter()
    units = 0
    for q in st.select_queues():
        prev, seen, last = -1, False, q.last_valid_index()
        for chunk in q.chunks():
            r = check_units(chunk, q.topic, q.queue_id, records, extent, last_valid_index=last, prev_offset=prev, seen_real=seen)
            prev, seen = r.last_offset, r.seen_real
            units += r.units
    t_join = time.perf_counter() - t0
    return {"scan_dispatch_seconds": round(t_scan, 2), "join_seconds": round(t_join, 3), "join_units_per_s": round(units / t_join)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("store")
    ap.add_argument("--build-cq", action="store_true", help="write the ConsumeQueues first if the store has none (bench-only)")
    ap.add_argument("--no-crc", action="store_true", help="verify without the body CRC check")
    ap.add_argument("--window", type=int, default=None, help="records joined at a time (default: verify's)")
    ap.add_argument("--join-only", action="store_true", help="also time the unit checks alone (a second scan builds the record table)")
    ap.add_argument("--workers", type=int, default=1, help="processes scanning CommitLog files (one file per task)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(run_verify(a.store, not a.no_crc, a.window, a.workers)))
        return
    if not os.path.isdir(os.path.join(a.store, "consumequeue")):
        if not a.build_cq:
            sys.exit(f"{a.store} has no consumequeue/: pass --build-cq (bench stores only)")
        t0 = time.perf_counter()
        n = build_cq(a.store)
        print(f"built {n} ConsumeQueue units in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    args = (
        [sys.executable, __file__, a.store, "--child"]
        + (["--no-crc"] if a.no_crc else [])
        + (["--window", str(a.window)] if a.window else [])
        + ["--workers", str(a.workers)]
    )
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    res = json.loads(out)
    with open("/proc/cpuinfo") as f:
        cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), platform.processor())
    res.update({"nproc": os.cpu_count(), "cpu": cpu, "python": platform.python_version(), "load_avg_1m": round(os.getloadavg()[0], 1)})
    if a.join_only:
        res.update(run_join_only(a.store))
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
