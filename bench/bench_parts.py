"""The work a Parquet-writing command cannot leave out, each part timed alone in this process (CPU seconds).

    python bench/bench_parts.py scan STORE         the scan kernel over every record (CRCs checked, no index keys)
    python bench/bench_parts.py encode OUT         pyarrow's Parquet writer encoding OUT's Parquet files again
    python bench/bench_parts.py sha256 OUT         sha256 over OUT's files (salvage's manifest hashes what it writes)

Each prints one JSON line: the part, its CPU seconds (user + system of this process, around the part only) and what
it covered. `encode` reads each row group (not timed), then writes it as it was, with the options
rmqdump's writers use (rmqdump.export.dataset.parquet_options), into /dev/null: the encoder's and its page compression's
CPU, nothing of rmqdump's own. bench_limits.py --parts adds these up under export and salvage: a floor for any
implementation that scans with this kernel and writes with pyarrow, beside the command's own CPU.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from rmqdump.export.dataset import parquet_options
from rmqdump.scan.ranges import range_batches
from rmqdump.scan.splits import plan, resolve_stores

HASH_CHUNK = 8 << 20


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def scan(store: str) -> dict:
    """Every record of the store through the scan kernel, one thread: CPU s, records and record bytes."""
    splits, _ = plan(resolve_stores([store]))
    records = record_bytes = 0
    t0 = cpu_s()
    for sp in splits:
        for b in range_batches(sp, keys=False):
            records += len(b)
            record_bytes += int(b.cols["total_size"].sum()) if len(b) else 0
    return {"part": "scan", "cpu_s": round(cpu_s() - t0, 3), "records": records, "record_bytes": record_bytes}


def parquet_files(out: str) -> list[Path]:
    root = Path(out)
    return sorted(root.rglob("*.parquet")) if root.is_dir() else [root]


def encode(out: str) -> dict:
    """Each Parquet file under `out` encoded again by pyarrow with rmqdump's options and the file's own row groups."""
    spent, rows, files = 0.0, 0, parquet_files(out)
    for f in files:
        pf = pq.ParquetFile(f)
        sch = pf.schema_arrow
        t0 = cpu_s()
        w = pq.ParquetWriter(pa.OSFile(os.devnull, "wb"), sch, **parquet_options(sch))  # bytes dropped: memory stays flat
        spent += cpu_s() - t0
        for i in range(pf.metadata.num_row_groups):
            g = pf.read_row_group(i)  # one row group in memory at a time (salvage's hold its records' bytes)
            t0 = cpu_s()
            w.write_table(g, row_group_size=max(g.num_rows, 1))
            spent += cpu_s() - t0
            rows += g.num_rows
        t0 = cpu_s()
        w.close()
        spent += cpu_s() - t0
    return {"part": "encode", "cpu_s": round(spent, 3), "files": len(files), "rows": rows}


def sha256(out: str) -> dict:
    """sha256 over every file under `out` (read from the page cache)."""
    spent, nbytes = 0.0, 0
    for f in sorted(p for p in Path(out).rglob("*") if p.is_file()):
        h = hashlib.sha256()
        with open(f, "rb") as fh:
            while chunk := fh.read(HASH_CHUNK):
                t0 = cpu_s()
                h.update(chunk)
                spent += cpu_s() - t0
                nbytes += len(chunk)
    return {"part": "sha256", "cpu_s": round(spent, 3), "bytes": nbytes}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("part", choices=["scan", "encode", "sha256"])
    ap.add_argument("path")
    a = ap.parse_args()
    print(json.dumps({"scan": scan, "encode": encode, "sha256": sha256}[a.part](a.path)))


if __name__ == "__main__":
    main()
