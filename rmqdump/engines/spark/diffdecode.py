"""`rmqdump diff --engine spark`: each side's records past the common prefix decoded by Spark tasks.

The part of a diff that grows with the divergence is decoding the records past the prefix; here it runs as
Spark tasks over the planner's ranges (rmqdump.scan.splits, from the prefix on), each task decoding its range
with the one scan path (rmqdump.scan.ranges.range_batches) into the diff's columns and writing them as a
Parquet part of the side's table in the diff's temporary directory, so the executors must share that path
with the driver (they run on this machine). What follows (pairing, queues, consumers) is the local diff's.
"""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pyarrow.parquet as pq

from rmqdump.checks.diff import SPILLED, identities, side_schema
from rmqdump.common.problems import InputError, Problem
from rmqdump.engines.spark.rangemap import ranges_stage
from rmqdump.export.arrowbatch import record_batches
from rmqdump.readers.commitlog import CommitLog
from rmqdump.scan.ranges import range_batches
from rmqdump.scan.splits import RANGE_BYTES, Split, splits_past

SPARK_SHARED = "usage"  # the executors must write into the driver's temporary directory


SUMMARY = pa.schema([("split_no", pa.int32()), ("records", pa.int64()), ("data_end", pa.int64()), ("problems", pa.string())])


def _task(folder: str):
    """A range decoded and written as part-{range number}.parquet; one summary row for it."""
    sch = side_schema()
    out_schema = pa.schema([sch.field(c) for c in SPILLED]).append(pa.field("ident", pa.string()))

    def run(no: int, split: Split):
        count, end, problems = 0, 0, []
        with pq.ParquetWriter(os.path.join(folder, f"part-{no:06d}.parquet"), out_schema, compression="lz4") as w:
            for b in range_batches(split, keys=False):
                problems += [p.to_dict() for p in b.problems()]
                if not len(b):
                    continue
                count += len(b)
                end = max(end, int((b.phys + b.cols["total_size"].astype("int64")).max()))
                for rb in record_batches(b, "", columns=list(sch.names)):
                    t = pa.Table.from_batches([rb])
                    w.write_table(t.select(SPILLED).append_column("ident", identities(t)).cast(out_schema), row_group_size=16384)
        yield pa.RecordBatch.from_pylist([{"split_no": no, "records": count, "data_end": end, "problems": json.dumps(problems)}], schema=SUMMARY)

    return run


def spark_decoder(spark, range_bytes: int | None = None):
    """A `decode(spill, side, commitlog, start, check_crc)` for rmqdump.checks.diff.diff_stores that runs on `spark`."""
    from rmqdump.engines.spark.session import on_this_host

    if not on_this_host(spark.sparkContext.master):
        raise InputError(
            SPARK_SHARED, "--master", "diff --engine spark writes each side's records into a local temporary directory: its executors must run on this machine"
        )

    def decode(sp, side: str, cl: CommitLog, start: int, check_crc: bool):
        if any(f.frame for f in cl.files):
            return None  # DLedger: entries framed around the messages; decoded locally
        splits = splits_past(cl, start, range_bytes or RANGE_BYTES, check_crc)
        if not splits:
            return None
        folder = os.path.join(sp.dir, f"rec_{side}")
        os.makedirs(folder)
        done = sorted(ranges_stage(spark, splits, _task(folder), SUMMARY).collect(), key=lambda r: r["split_no"])
        problems = [Problem.from_dict(d) for r in done for d in json.loads(r["problems"])]
        return sum(r["records"] for r in done), max([r["data_end"] for r in done] or [0]), problems

    return decode
