"""`rmqdump export`: every message of one or more stores as a Parquet (or JSON Lines) dataset."""

from __future__ import annotations

import re
import time
from enum import Enum

import typer

from rmqdump.cli import render
from rmqdump.cli.commands import options as O
from rmqdump.cli.commands.options import Engine, Ship, SparkWriter, engine_option, master_option, ship_option, spark_conf_option, spark_writer_option


class ExportBody(str, Enum):
    none = "none"
    raw = "raw"


_SIZE = re.compile(r"^\s*(\d+)\s*([kmg]?)i?b?\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """Bytes from `268435456`, `256M`, `256MiB`, `1G`."""
    m = _SIZE.match(text)
    if not m or int(m.group(1)) <= 0:
        raise ValueError(f"not a size: {text!r} (e.g. 256M)")
    return int(m.group(1)) << {"": 0, "k": 10, "m": 20, "g": 30}[m.group(2).lower()]


def export(
    store: list[str] = typer.Option(
        ..., "--store", "-s", help="A store root (holds commitlog/); repeat it, or give a glob, for a fleet. NAME=DIR sets the broker name."
    ),
    out: str = O.out_option("The dataset directory to create (a Spark output URI such as s3a://... with --engine spark)."),
    fmt: O.DatasetFormat = O.format_option(O.DatasetFormat.parquet, "parquet, or jsonl (one JSON object per line)."),
    body: ExportBody = typer.Option(ExportBody.none, "--body", help="none, or raw: add the stored body bytes (Parquet binary; base64 in jsonl)."),
    engine: Engine = engine_option("the same rows, decoded by Spark tasks"),
    workers: int = O.workers_option(),
    master: str = master_option(),
    spark_conf: list[str] = spark_conf_option(),
    driver_memory: str = typer.Option("4g", "--driver-memory", help="spark engine: driver JVM memory."),
    ship: Ship = ship_option(),
    spark_writer: SparkWriter = spark_writer_option(),
    range_bytes: str = typer.Option("", "--range-bytes", help="Bytes of CommitLog per range, e.g. 256M (default: every pass's range size; 128M-512M suits big stores).", show_default=False),
    force: bool = O.force_option("Replace --out if it exists."),
    no_sync: bool = O.no_sync_option(),
    no_crc: bool = O.no_crc_option("Skip the body and property CRC checks (crc_ok and prop_crc_ok are then null)."),
):
    """Export every message as a row: the `commitlog -f jsonl` message fields plus `broker`, partitioned by topic.

    Parquet types: properties map<string,string>, keys list<string>, body binary. The broker name is the
    store directory's name (its parent's for a directory called `store`), or NAME in NAME=DIR.
    Problems found on the way go to stderr; exit 1 if there were any.

    Example:  rmqdump export -s brokers/a/store -s brokers/b/store -o /data/msgs -j 2
    """
    from rmqdump.scan.splits import RANGE_BYTES, resolve_stores

    with_body = body is ExportBody.raw
    split = O.parsed("--range-bytes", parse_size, range_bytes or None) or RANGE_BYTES
    stores = resolve_stores(store)
    crc = not no_crc
    if engine is Engine.local:
        from rmqdump.engines.local import WORKER_MEMORY, local_map
        from rmqdump.export.dataset import export_ranges  # pyarrow.dataset: imported only when exporting

        total = _total_bytes(stores)
        with render.progress(total, "export") as advance:
            mapper = local_map(workers, total, per_worker=2 * WORKER_MEMORY)  # a task holds a range's batches and its Parquet buffers
            res = export_ranges(stores, out, fmt=fmt.value, with_body=with_body, mapper=mapper, range_bytes=split, force=force, check_crc=crc, on_bytes=advance, sync=not no_sync)
    else:
        from rmqdump.engines.spark.export import export_spark, pick_writer

        t0 = time.perf_counter()
        python_tasks = pick_writer(spark_writer.value, out, master) == "arrow"
        with O.spark_session(master, spark_conf, driver_memory=driver_memory, ship=ship.value, python_tasks_only=python_tasks) as spark:
            startup = time.perf_counter() - t0
            with render.progress(_total_bytes(stores) if python_tasks else 0, "export", enabled=None if python_tasks else False) as advance:
                res = export_spark(spark, stores, out, fmt=fmt.value, with_body=with_body, range_bytes=split, force=force, check_crc=crc, writer=spark_writer.value, on_bytes=advance, sync=not no_sync)
        res.startup_seconds = startup
    for p in res.problems:
        render.err.print(f"{p['broker']}: {p['code']}: {p['file']}@{p['file_offset']}: {p['detail']}", markup=False, highlight=False)
    if res.problem_count > len(res.problems):
        render.err.print(f"... and {res.problem_count - len(res.problems)} more problems", markup=False)
    render.jsonl(res.to_dict())
    raise typer.Exit(1 if res.problem_count else 0)


def _total_bytes(stores) -> int:
    from rmqdump.scan.splits import plan

    splits, _ = plan(stores)
    return sum(s.length for s in splits)


def register(app, guarded) -> None:
    app.command("export")(guarded(export))
