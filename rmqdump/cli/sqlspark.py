"""`rmqdump sql --engine spark`: a session for the command, the query's result written as local `sql` writes it."""

from __future__ import annotations

from rmqdump.cli import render


def sql_spark(stores, query: str, fmt, out: str | None, force: bool, *, master: str, conf: list[str], driver_memory: str, ship: str, write) -> None:
    """A path --out is written as local `sql` writes it, by `write` (parquet, jsonl, csv); a URI by Spark's writers."""
    from rmqdump.cli.commands.options import spark_session
    from rmqdump.common.publish import check_target
    from rmqdump.engines.spark.sql import arrow_reader, query_frame, write_uri

    remote = bool(out) and "://" in out
    if remote and fmt.value == "table":
        render.fail("usage: an --out URI takes -f parquet, jsonl or csv", 2)
    if out and not remote:
        check_target(out, force=force, stores=[s.root for s in stores], kind="file")
    with spark_session(master, conf, driver_memory=driver_memory, ship=ship) as spark:
        df = query_frame(spark, stores, query)
        if remote:
            write_uri(df, out, fmt.value, force)
            return
        write(arrow_reader(df), fmt, out, force, stores)
