"""`rmqdump export --engine spark`: byte ranges as rows, decoded by mapInArrow.

The job's input is a small DataFrame of (broker, path, base, start, end, size)
rows, one per byte range of a CommitLog file; each task opens its files
itself (the stores sit on a filesystem every executor sees at the same
path) and runs the local engine's own decoder, export.split_batches, over
its ranges. Nothing is read through binaryFile(s): no 2 GiB record limit,
no whole file in a task's memory. Problems and counts come back through
accumulators.
"""

from __future__ import annotations

import json
import time

import pyarrow as pa
from pyspark.accumulators import AccumulatorParam

from rmqdump.common.problems import InputError
from rmqdump.common.publish import check_target, publishing
from rmqdump.engines.spark.session import on_this_host
from rmqdump.export import arrowbatch
from rmqdump.export.dataset import (
    MAX_PROBLEMS,
    ExportResult,
    SplitResult,
    jsonl_lines,
    problem_order,
    split_batches,
    start_export,
    write_split,
)
from rmqdump.scan.splits import DEFAULT_SPLIT, Split, StoreRef, partition_count

SPLIT_DDL = "broker string, path string, base bigint, start bigint, end bigint, size bigint"
JSONL_DDL = "topic string, value string"
TARGET_PARTITION_BYTES = DEFAULT_SPLIT
REMOTE_ARROW = "spark_writer_needs_shared_path"


class ProblemsParam(AccumulatorParam):
    """(count, first MAX_PROBLEMS problem dicts) summed over tasks."""

    def zero(self, value):
        return (0, [])

    def addInPlace(self, a, b):
        return (a[0] + b[0], (a[1] + b[1])[:MAX_PROBLEMS])


def splits_frame(spark, splits: list[Split], partitions: int | None = None):
    """The byte ranges as a DataFrame: one partition per range for real sizes, fewer for tiny test ranges."""
    rows = [(s.broker, s.path, s.base, s.start, s.end, s.size) for s in splits]
    partitions = partition_count(splits, spark.sparkContext.defaultParallelism, partitions, TARGET_PARTITION_BYTES)
    rdd = spark.sparkContext.parallelize(rows, numSlices=partitions)
    return spark.createDataFrame(rdd, SPLIT_DDL)


def _decoder(with_body: bool, check_crc: bool, fmt: str, problems, counts):
    def decode(batches):
        for batch in batches:
            for row in batch.to_pylist():
                split = Split(**row)
                res = SplitResult()
                for rb in split_batches(split, res, with_body=with_body, check_crc=check_crc):
                    if fmt == "parquet":
                        yield rb
                    else:
                        yield pa.RecordBatch.from_arrays([rb.column("topic"), pa.array(jsonl_lines(rb), pa.string())], names=["topic", "value"])
                problems.add((res.problem_count, res.problems))
                counts.add((res.messages, res.bytes, res.record_bytes))

    return decode


WRITTEN_DDL = "split_no int, messages bigint, bytes bigint, record_bytes bigint, problem_count bigint, problems string"
WRITERS = ("auto", "spark", "arrow")


def pick_writer(writer: str, out: str, master: str) -> str:
    """`auto`: the tasks write with pyarrow (the local engine's writer, several times faster than Spark's
    row conversion) when `out` is a path and every executor runs on this machine, so it is shared for certain;
    Spark's writer otherwise (a URI, or a cluster whose nodes may not share the path)."""
    if writer != "auto":
        return writer
    return "arrow" if not _has_scheme(out) and on_this_host(master) else "spark"


def _writer_tasks(splits: list[Split], target: str, fmt: str, with_body: bool, check_crc: bool):
    """writer="arrow": each task writes its ranges' part files itself, with the local engine's writer."""

    def write(batches):
        for batch in batches:
            for row in batch.to_pylist():
                no = row["split_no"]
                r = write_split(no, [splits[no]], target, fmt, with_body, check_crc)
                yield pa.RecordBatch.from_pylist(
                    [{"split_no": no, "messages": r.messages, "bytes": r.bytes, "record_bytes": r.record_bytes, "problem_count": r.problem_count, "problems": json.dumps(r.problems)}],
                    schema=pa.schema(
                        [("split_no", pa.int32()), ("messages", pa.int64()), ("bytes", pa.int64()), ("record_bytes", pa.int64()), ("problem_count", pa.int64()), ("problems", pa.string())]
                    ),
                )

    return write


class _Counts(AccumulatorParam):
    """(messages, bytes, record bytes) summed over the tasks."""

    def zero(self, value):
        return (0, 0, 0)

    def addInPlace(self, a, b):
        return tuple(x + y for x, y in zip(a, b, strict=True))


def _write(writer, out: str, fmt: str, remote: bool, force: bool, stores: list[StoreRef]) -> None:
    if remote:
        writer = writer.mode("overwrite" if force else "errorifexists")
        (writer.parquet(out) if fmt == "parquet" else writer.text(out))
        return
    with publishing(out, force=force, stores=[s.root for s in stores]) as tmp:
        writer = writer.mode("overwrite")  # the empty temporary directory is ours
        (writer.parquet(tmp) if fmt == "parquet" else writer.text(tmp))


def _export_arrow(
    spark,
    splits: list[Split],
    out: str,
    fmt: str,
    with_body: bool,
    check_crc: bool,
    partitions: int | None,
    res: ExportResult,
    force: bool,
    stores: list[StoreRef],
) -> None:
    sc = spark.sparkContext
    rows = [(i,) for i in range(len(splits))]
    partitions = partition_count(splits, sc.defaultParallelism, partitions, TARGET_PARTITION_BYTES)
    df = spark.createDataFrame(sc.parallelize(rows, partitions), "split_no int")
    with publishing(out, force=force, stores=[s.root for s in stores]) as tmp:
        done = df.mapInArrow(_writer_tasks(splits, tmp, fmt, with_body, check_crc), WRITTEN_DDL).collect()
    for r in sorted(done, key=lambda r: r["split_no"]):
        res.add(SplitResult(r["messages"], r["bytes"], json.loads(r["problems"]), r["problem_count"], r["record_bytes"]))


def _has_scheme(path: str) -> bool:
    return "://" in path


def export_spark(
    spark,
    stores: list[StoreRef],
    out: str,
    *,
    fmt: str = "parquet",
    with_body: bool = False,
    split_size: int = DEFAULT_SPLIT,
    force: bool = False,
    check_crc: bool = True,
    partitions: int | None = None,
    writer: str = "auto",
) -> ExportResult:
    """Write the dataset with Spark; a local `out` is written beside itself and renamed into place.

    writer: spark (Spark's Parquet writer), arrow (each task writes its part files with pyarrow: `out`
    must be a path every executor shares), or auto (pick_writer)."""
    remote = _has_scheme(out)
    if not remote:
        out = check_target(out, force=force, stores=[s.root for s in stores])
    t0 = time.perf_counter()
    splits, res = start_export(stores, out, fmt, "spark", split_size)
    sc = spark.sparkContext
    if writer not in WRITERS:
        raise ValueError(f"writer must be one of {WRITERS}")
    writer = pick_writer(writer, out, sc.master)
    if writer == "arrow":
        if remote:
            raise InputError(REMOTE_ARROW, out, "--spark-writer arrow writes with pyarrow to a shared path; use --spark-writer spark for a URI")
        _export_arrow(spark, splits, out, fmt, with_body, check_crc, partitions, res, force, stores)
        res.problems.sort(key=problem_order)
        res.seconds = time.perf_counter() - t0
        return res
    problems = sc.accumulator((0, []), ProblemsParam())
    counts = sc.accumulator((0, 0, 0), _Counts())
    df = splits_frame(spark, splits, partitions)
    ddl = arrowbatch.spark_ddl(with_body) if fmt == "parquet" else JSONL_DDL
    decoded = df.mapInArrow(_decoder(with_body, check_crc, fmt, problems, counts), ddl)
    writer = decoded.write.partitionBy("topic")
    conf_key = "spark.sql.maxConcurrentOutputFileWriters"  # one open file per topic, no sort of the rows by topic first
    before = spark.conf.get(conf_key, None)
    if before in (None, "0"):
        spark.conf.set(conf_key, "128")
    try:
        _write(writer, out, fmt, remote, force, stores)
    finally:
        if before in (None, "0"):
            spark.conf.unset(conf_key) if before is None else spark.conf.set(conf_key, before)
    n, found = problems.value
    res.problem_count += n
    res.problems.extend(found[: max(0, MAX_PROBLEMS - len(res.problems))])
    res.problems.sort(key=problem_order)
    res.messages, res.bytes, res.record_bytes = counts.value
    res.seconds = time.perf_counter() - t0
    return res
