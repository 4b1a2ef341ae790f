"""`rmqdump sql`: a DuckDB SELECT over one or more stores' messages, units, index entries, problems and offsets."""

from __future__ import annotations

import json
import os
from enum import Enum

import typer

from rmqdump.cli import render
from rmqdump.cli.commands.options import Engine, Ship, engine_option, master_option, ship_option, spark_conf_option, workers_option


class SqlFormat(str, Enum):
    table = "table"
    jsonl = "jsonl"
    csv = "csv"
    parquet = "parquet"


TABLE_ROWS = 1000  # rows a terminal table shows; -f jsonl/csv/parquet stream any number


def sql(
    query: str = typer.Argument(None, metavar="QUERY", help="One SELECT over messages, units, index_entries, problems, offsets."),
    store: list[str] = typer.Option([], "--store", "-s", help="A store root (holds commitlog/); repeat it, or give a glob. NAME=DIR sets the broker name."),
    fmt: SqlFormat = typer.Option(SqlFormat.table, "--format", "-f", help="table, jsonl, csv, or parquet (parquet needs --out)."),
    out: str = typer.Option(None, "--out", "-o", help="Write the result to this file (beside it first, then renamed into place) instead of stdout."),
    force: bool = typer.Option(False, "--force", help="Replace --out if it exists."),
    memory_limit: str = typer.Option("160MB", "--memory-limit", help="DuckDB's memory_limit; past it, joins and sorts spill to --temp-dir."),
    temp_dir: str = typer.Option(None, "--temp-dir", help="Where DuckDB may spill (default: the system temp directory; never inside a store)."),
    workers: int = workers_option(
        "Threads that read the CommitLog ranges (default: every usable core, as memory allows), and DuckDB's threads (default 1)."
    ),
    schema: bool = typer.Option(False, "--schema", help="Print the tables and their columns with what each means, and exit."),
    engine: Engine = engine_option("the same tables built by Spark tasks, the query run by Spark SQL"),
    master: str = master_option(),
    spark_conf: list[str] = spark_conf_option(),
    driver_memory: str = typer.Option("4g", "--driver-memory", help="spark engine: driver JVM memory."),
    ship: Ship = ship_option(),
):
    """Query stores in place with SQL (DuckDB): nothing is exported first, only the columns named are decoded.

    Tables: messages (the `export` columns, body included), units (every ConsumeQueue unit with its
    cq verify status), index_entries, problems (what cq verify reports), offsets (committed offsets, lag).
    A bad query is one line with DuckDB's message and exit 2. With --engine spark the same tables are
    built by Spark tasks and the query runs in Spark SQL (a fleet: -s 'brokers/*/store').

    Example:  rmqdump sql -s store "SELECT topic, count(*) FROM messages GROUP BY topic"
    """
    from rmqdump.sql import query as Q

    if schema:
        _schema(fmt)
        raise typer.Exit(0)
    if not query:
        render.fail("usage: give a query (or --schema)", 2)
    if not store:
        render.fail("usage: --store/-s is required", 2)
    if fmt is SqlFormat.parquet and not out:
        render.fail("usage: -f parquet writes a file: give --out", 2)
    from rmqdump.common.publish import check_target
    from rmqdump.scan.splits import resolve_stores

    stores = resolve_stores(store)
    if engine is Engine.spark:
        from rmqdump.cli.sqlspark import sql_spark

        sql_spark(stores, query, fmt, out, force, master=master, conf=spark_conf, driver_memory=driver_memory, ship=ship.value, write=write_result)
        return
    if out:
        check_target(out, force=force, stores=[s.root for s in stores], kind="file")
    total = _commitlog_bytes(stores) * Q.scans(Q.plan_of(query))
    with (
        render.progress(total, "sql") as advance,
        Q.run(stores, query, memory_limit=memory_limit, temp_dir=temp_dir, threads=workers or 1, on_bytes=advance, mapper=_mapper(workers, stores)) as result,
    ):
        write_result(result, fmt, out, force, stores)


def write_result(result, fmt: SqlFormat, out: str | None, force: bool, stores) -> None:
    """Either engine's result to --out (written beside it, then renamed into place) or to stdout, as -f spells it."""
    from rmqdump.common.publish import publishing
    from rmqdump.sql import output

    if not out:
        _write_text(result, fmt, None, output)
        return
    with publishing(out, force=force, stores=[s.root for s in stores], kind="file") as tmp:
        if fmt is SqlFormat.parquet:
            output.write_parquet(result, tmp)
        else:
            with open(tmp, "w", encoding="utf-8", newline="") as f:
                _write_text(result, fmt, f, output)


def _write_text(result, fmt: SqlFormat, f, output) -> None:
    import sys

    if fmt is SqlFormat.jsonl:
        output.write_jsonl(result, f or sys.stdout)
    elif fmt is SqlFormat.csv:
        output.write_csv(result, f or sys.stdout)
    else:
        _table(result, output, f)


def _table(result, output, f) -> None:
    from rich.console import Console

    t = render.table(*result.schema.names)
    shown = more = 0
    for r in output.rows(result):
        if shown < TABLE_ROWS:
            t.add_row(*("" if v is None else json.dumps(v, ensure_ascii=False) if isinstance(v, (list, dict)) else str(v) for v in r.values()))
            shown += 1
        else:
            more += 1
    (Console(file=f, width=220, highlight=False) if f else render.out).print(t)
    note = f"{shown + more} rows" + (f" (the first {shown} shown; -f jsonl or csv prints all)" if more else "")
    render.err.print(note, markup=False, highlight=False)


def _schema(fmt: SqlFormat) -> None:
    from rmqdump.sql.tables import TABLES

    rows = [{"table": t, "column": c.name, "type": str(c.type), "meaning": c.meaning} for t, cols in TABLES.items() for c in cols]
    if fmt is SqlFormat.jsonl:
        for r in rows:
            render.jsonl({"kind": "column", **r})
        return
    if fmt is SqlFormat.csv:
        import sys

        from rmqdump.cli.records import csv_line

        sys.stdout.write("".join(csv_line(list(r)) for r in [rows[0].keys(), *(r.values() for r in rows)]))
        return
    t = render.table("table", "column", "type", "meaning")
    for r in rows:
        t.add_row(r["table"], r["column"], r["type"], r["meaning"])
    render.out.print(t)


def _commitlog_bytes(stores) -> int:
    total = 0
    for s in stores:
        with os.scandir(s.commitlog) as it:
            total += sum(e.stat().st_size for e in it if e.is_file())
    return total


def register(app, guarded) -> None:
    app.command("sql")(guarded(sql))


def _mapper(workers: int | None, stores):
    """The local engine over the stores' CommitLog bytes; a worker holds a decoded range until DuckDB takes it."""
    from rmqdump.engines.local import WORKER_MEMORY, local_map

    return local_map(workers, _commitlog_bytes(stores), per_worker=2 * WORKER_MEMORY)
