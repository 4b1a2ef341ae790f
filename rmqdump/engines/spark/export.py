"""`rmqdump export --engine spark`: the planner's byte ranges mapped by Spark tasks (rmqdump.engines.spark.rangemap).

Each task opens its files itself (the stores sit on a filesystem every
executor sees at the same path). Nothing is read through binaryFile(s):
no 2 GiB record limit, no whole file in a task's memory. With pyarrow's writer
the export is the local engine's own (rmqdump.export.dataset.export_ranges) with Spark as its mapper:
each task writes its part files and returns its counts, through plain Python tasks (no Spark SQL
stage: its first run alone cost a small job seconds). With Spark's writer each task runs the same
decoder, export.split_batches (for JSON Lines, export.jsonlines' lines), inside mapInArrow; the rows go to DataFrameWriter and problems and
counts come back through accumulators.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pyarrow as pa
from pyspark.accumulators import AccumulatorParam

from rmqdump.common.problems import InputError
from rmqdump.common.publish import check_target, publishing
from rmqdump.engines.spark.rangemap import SparkMap, ranges_stage
from rmqdump.engines.spark.session import on_this_host
from rmqdump.export import arrowbatch
from rmqdump.export.dataset import (
    MAX_PROBLEMS,
    ExportResult,
    SplitResult,
    export_ranges,
    problem_order,
    split_batches,
    split_scan,
    start_export,
)
from rmqdump.export.jsonlines import Lines, line_values
from rmqdump.scan.compaction import served_views
from rmqdump.scan.splits import RANGE_BYTES, Split, StoreRef

JSONL = pa.schema([("topic", pa.string()), ("value", pa.string())])
REMOTE_ARROW = "spark_writer_needs_shared_path"


class ProblemsParam(AccumulatorParam):
    """(count, first MAX_PROBLEMS problem dicts) summed over tasks."""

    def zero(self, value):
        return (0, [])

    def addInPlace(self, a, b):
        return (a[0] + b[0], (a[1] + b[1])[:MAX_PROBLEMS])


def _decoder(with_body: bool, check_crc: bool, fmt: str, problems, counts, served):
    def decode(_no: int, split: Split):
        res = SplitResult()
        if fmt == "parquet":
            yield from split_batches(split, res, with_body=with_body, check_crc=check_crc, served=served)
        else:  # the local export's lines (export.jsonlines), a row each without its newline
            lines = Lines(split.broker, with_body, (served or {}).get(split.broker))
            for b in split_scan(split, res, check_crc):
                for topic, pieces in lines.batch(b):
                    for piece in pieces:
                        values = line_values(piece)
                        yield pa.RecordBatch.from_arrays([pa.array([topic] * len(values), pa.string()), values], schema=JSONL)
                res.messages += len(b)
        problems.add((res.problem_count, res.problems))
        counts.add((res.messages, res.bytes, res.record_bytes))

    return decode


WRITERS = ("auto", "spark", "arrow")


def pick_writer(writer: str, out: str, master: str) -> str:
    """`auto`: the tasks write with pyarrow (the local engine's writer, several times faster than Spark's
    row conversion) when `out` is a path and every executor runs on this machine, so it is shared for certain;
    Spark's writer otherwise (a URI, or a cluster whose nodes may not share the path)."""
    if writer != "auto":
        return writer
    return "arrow" if not _has_scheme(out) and on_this_host(master) else "spark"


class _Counts(AccumulatorParam):
    """(messages, bytes, record bytes) summed over the tasks."""

    def zero(self, value):
        return (0, 0, 0)

    def addInPlace(self, a, b):
        return tuple(x + y for x, y in zip(a, b, strict=True))


def _write(writer, out: str, fmt: str, remote: bool, force: bool, stores: list[StoreRef], sync: bool) -> None:
    if remote:
        writer = writer.mode("overwrite" if force else "errorifexists")
        (writer.parquet(out) if fmt == "parquet" else writer.text(out))
        return
    with publishing(out, force=force, stores=[s.root for s in stores], sync=sync) as tmp:
        writer = writer.mode("overwrite")  # the empty temporary directory is ours
        (writer.parquet(tmp) if fmt == "parquet" else writer.text(tmp))


def _has_scheme(path: str) -> bool:
    return "://" in path


def export_spark(
    spark,
    stores: list[StoreRef],
    out: str,
    *,
    fmt: str = "parquet",
    with_body: bool = False,
    range_bytes: int = RANGE_BYTES,
    force: bool = False,
    check_crc: bool = True,
    partitions: int | None = None,
    writer: str = "auto",
    on_bytes: Callable[[int], None] | None = None,
    sync: bool = True,
) -> ExportResult:
    """Write the dataset with Spark; a local `out` is written beside itself and renamed into place.

    writer: spark (Spark's Parquet writer), arrow (each task writes its part files with pyarrow: `out`
    must be a path every executor shares), or auto (pick_writer). partitions: the Spark writer's stage only.
    on_bytes: called with each task's CommitLog bytes as it is done (the arrow writer's tasks; Spark's writer is
    one stage, done at once)."""
    remote = _has_scheme(out)
    sc = spark.sparkContext
    if writer not in WRITERS:
        raise ValueError(f"writer must be one of {WRITERS}")
    writer = pick_writer(writer, out, sc.master)
    if writer == "arrow":
        if remote:
            raise InputError(REMOTE_ARROW, out, "--spark-writer arrow writes with pyarrow to a shared path; use --spark-writer spark for a URI")
        mapper = SparkMap(spark)
        return export_ranges(stores, out, fmt=fmt, with_body=with_body, mapper=mapper, engine="spark", range_bytes=range_bytes, force=force, check_crc=check_crc, on_bytes=on_bytes, sync=sync)
    if not remote:
        out = check_target(out, force=force, stores=[s.root for s in stores])
    t0 = time.perf_counter()
    splits, res = start_export(stores, out, fmt, "spark", range_bytes)
    problems = sc.accumulator((0, []), ProblemsParam())
    counts = sc.accumulator((0, 0, 0), _Counts())
    schema = arrowbatch.schema(with_body) if fmt == "parquet" else JSONL
    decoded = ranges_stage(spark, splits, _decoder(with_body, check_crc, fmt, problems, counts, served_views(stores)), schema, partitions)
    writer = decoded.write.partitionBy("topic")
    conf_key = "spark.sql.maxConcurrentOutputFileWriters"  # one open file per topic, no sort of the rows by topic first
    before = spark.conf.get(conf_key, None)
    if before in (None, "0"):
        spark.conf.set(conf_key, "128")
    try:
        _write(writer, out, fmt, remote, force, stores, sync)
    finally:
        if before in (None, "0"):
            spark.conf.unset(conf_key) if before is None else spark.conf.set(conf_key, before)
    n, found = problems.value
    res.problem_count += n
    res.problems.extend(found[: max(0, MAX_PROBLEMS - len(res.problems))])
    res.messages, res.bytes, res.record_bytes = counts.value
    res.problems.sort(key=problem_order)
    res.seconds = time.perf_counter() - t0
    return res
