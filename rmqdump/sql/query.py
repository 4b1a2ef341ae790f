"""Run one SELECT with DuckDB over the store tables it names, decoding only the columns it names.

DuckDB parses the query first (json_serialize_sql): the tables and column
names it mentions decide which tables are built and which columns each one
decodes (a `*` takes them all, bodies included). Each table is registered
as an Arrow RecordBatchReader over its generator (rmqdump.sql.tables), so
DuckDB pulls batches as it goes and nothing is exported or copied. A table
named twice in one query (a self-join) is read once into a DuckDB temporary
table, which DuckDB keeps within --memory-limit by spilling to a temporary
directory outside every store. File access from SQL is switched off: the
query sees the stores' tables and nothing else.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import duckdb
import pyarrow as pa

from rmqdump.common.problems import InputError
from rmqdump.common.publish import refuse_inside_stores
from rmqdump.readers.indexfile import key_hash
from rmqdump.scan.ranges import SERIAL, Mapper
from rmqdump.scan.splits import StoreRef
from rmqdump.sql import tables as T

BAD_QUERY = "bad_query"
DEFAULT_MEMORY_LIMIT = "160MB"  # with the scan and Python around it, peak RSS stays under 500 MB
RESULT_BATCH_ROWS = 65536
_CHEAPEST = {"messages": "phys_offset"}  # the column decoded for a query that names none (count(*))


@dataclass
class Plan:
    """Which tables a query reads, the columns each must decode, and those it reads more than once."""

    columns: dict[str, list[str]] = field(default_factory=dict)
    repeated: set[str] = field(default_factory=set)


def _walk(node, tables: list[str], names: set[str], stars: list[set[str]]) -> None:
    if isinstance(node, dict):
        kind = node.get("type")
        if kind == "BASE_TABLE" and not node.get("schema_name") and not node.get("catalog_name"):
            tables.append(node["table_name"].lower())  # DuckDB matches names without regard to case
        elif kind == "COLUMN_REF":
            names.update(n.lower() for n in node.get("column_names") or [])
        elif kind == "STAR":
            stars.append(set() if node.get("columns") else {n.lower() for n in node.get("exclude_list") or []})
        names.update(n.lower() for n in node.get("using_columns") or [])
        for v in node.values():
            _walk(v, tables, names, stars)
    elif isinstance(node, list):
        for v in node:
            _walk(v, tables, names, stars)


def one_line(message: str) -> str:
    """DuckDB's message without its caret drawing, on one line."""
    lines = [ln.strip() for ln in str(message).splitlines() if ln.strip()]
    keep = [ln for ln in lines if not ln.startswith("LINE ") and set(ln) != {"^"}]
    return " ".join(keep) or "bad query"


def plan(con: duckdb.DuckDBPyConnection, query: str) -> Plan:
    """The query's plan; InputError(bad_query) when DuckDB cannot parse it or it is not one SELECT."""
    ast = json.loads(con.execute("SELECT json_serialize_sql(?)", [query]).fetchall()[0][0])
    if ast.get("error"):
        raise InputError(BAD_QUERY, "query", one_line(ast.get("error_message", "")))
    if len(ast.get("statements", [])) != 1:
        raise InputError(BAD_QUERY, "query", "give exactly one SELECT statement")
    tables: list[str] = []
    names: set[str] = set()
    stars: list[set[str]] = []
    _walk(ast["statements"][0], tables, names, stars)
    out = Plan()
    for t in dict.fromkeys(tables):
        if t not in T.TABLES:
            continue
        every = T.columns_of(t)
        if t in names:  # the table's row as a struct
            stars.append(set())
        wanted = set(names)
        for excluded in stars:
            wanted |= set(every) - excluded
        cols = [c for c in every if c in wanted] or [_CHEAPEST.get(t, every[0])]
        out.columns[t] = cols
        if tables.count(t) > 1:
            out.repeated.add(t)
    return out


def binder_message(query: str) -> str | None:
    """DuckDB's error for the query over empty tables with every column, so that a misspelt column
    is reported with the tables' real columns (not only the ones this run decoded)."""
    con = duckdb.connect(config={"memory_limit": "64MB"})
    try:
        for name in T.TABLES:
            cols = T.columns_of(name)
            con.register(name, pa.table({c: pa.array([], t) for c, t in zip(cols, T.arrow_schema(name, cols).types, strict=True)}))
        add_functions(con)
        con.execute("SET enable_external_access = false")
        con.execute(f"EXPLAIN {query}").fetchall()
    except duckdb.Error as e:
        return one_line(str(e))
    finally:
        con.close()
    return None


def plan_of(query: str) -> Plan:
    """The plan of a query without a store (to size the progress bar before the run)."""
    con = duckdb.connect(config={"memory_limit": "64MB"})
    try:
        return plan(con, query)
    finally:
        con.close()


def check_temp_dir(path: str, stores: list[StoreRef]) -> str:
    refuse_inside_stores(path, [s.root for s in stores], "DuckDB's spill files go elsewhere (--temp-dir)")
    os.makedirs(path, exist_ok=True)
    return os.path.realpath(path)


def scans(p: Plan) -> int:
    """How many passes over the CommitLogs the plan makes (for the progress bar): messages, problems and
    units.status and compacted each scan once (problems are streamed, not kept, so the two verify runs are not shared)."""
    return int("messages" in p.columns) + int("problems" in p.columns) + int("status" in p.columns.get("units", [])) + int("compacted" in p.columns)


def add_functions(con: duckdb.DuckDBPyConnection) -> None:
    """SQL functions for the store's own encodings: rmq_key_hash(topic, key) is the IndexFile keyHash of topic#key."""
    con.create_function("rmq_key_hash", key_hash, [duckdb.sqltype("VARCHAR"), duckdb.sqltype("VARCHAR")], duckdb.sqltype("INTEGER"))


def _reader(name: str, stores: list[StoreRef], cols: list[str], on_bytes, failed: list[InputError], mapper) -> pa.RecordBatchReader:
    gens = {
        "messages": lambda: T.messages(stores, cols, on_bytes, mapper),
        "units": lambda: T.units(stores, cols, on_bytes, mapper),
        "index_entries": lambda: T.index_entries(stores, cols),
        "problems": lambda: T.problems(stores, cols, on_bytes, mapper),
        "offsets": lambda: T.offsets(stores, cols),
        "compacted": lambda: T.compacted(stores, cols, on_bytes),
        **{t: functools.partial(T.message_story_tables, t, stores, cols, on_bytes, mapper) for t in T.JOURNEY_TABLES + T.LIFECYCLE_TABLES},
    }

    def batches():
        try:
            yield from gens[name]()
        except InputError as e:  # a store that cannot be read: its own one-line error, not DuckDB's wrapping of it
            failed.append(e)
            raise

    return pa.RecordBatchReader.from_batches(T.arrow_schema(name, cols), batches())


@contextlib.contextmanager
def run(
    stores: list[StoreRef],
    query: str,
    *,
    memory_limit: str = DEFAULT_MEMORY_LIMIT,
    temp_dir: str | None = None,
    threads: int = 1,
    on_plan: Callable[[Plan], None] | None = None,
    on_bytes: Callable[[int], None] | None = None,
    mapper: Mapper = SERIAL,
) -> Iterator[pa.RecordBatchReader]:
    """The query's result as a stream of Arrow batches (valid inside the `with`); InputError(bad_query) on a bad query.
    `mapper` reads the tables' CommitLog ranges (the local engine's threads: every core scans)."""
    parent = check_temp_dir(temp_dir or tempfile.gettempdir(), stores)
    spill = tempfile.mkdtemp(prefix="rmqdump-sql-", dir=parent)
    con = None
    try:
        # one thread by default: every table is one Python stream, so more threads mostly wait for it
        config = {"memory_limit": memory_limit, "temp_directory": spill, "threads": threads}
        try:
            con = duckdb.connect(config=config)
        except duckdb.Error as e:
            raise InputError("usage", "--memory-limit", one_line(str(e))) from None
        p = plan(con, query)
        failed: list[InputError] = []
        if on_plan:
            on_plan(p)
        for name, cols in p.columns.items():
            con.register(f"_scan_{name}" if name in p.repeated else name, _reader(name, stores, cols, on_bytes, failed, mapper))
        con.execute("SET enable_progress_bar = false")  # rmqdump's own is on stderr
        add_functions(con)
        try:
            for name in p.repeated:
                con.execute(f"CREATE TEMP TABLE {name} AS SELECT * FROM _scan_{name}")
                con.unregister(f"_scan_{name}")
            con.execute("SET enable_external_access = false")
            result = con.sql(query).to_arrow_reader(RESULT_BATCH_ROWS)
        except duckdb.Error as e:
            if failed:
                raise failed[0] from None
            raise InputError(BAD_QUERY, "query", binder_message(query) or one_line(str(e))) from None
        yield _guarded(result, failed)
    finally:
        if con is not None:
            con.close()
        shutil.rmtree(spill, ignore_errors=True)


def _guarded(result: pa.RecordBatchReader, failed: list[InputError]) -> pa.RecordBatchReader:
    """The result stream, with errors met while it runs (DuckDB executes as batches are pulled) as bad_query."""

    def batches():
        try:
            yield from result
        except (duckdb.Error, pa.ArrowInvalid) as e:
            if failed:
                raise failed[0] from None
            raise InputError(BAD_QUERY, "query", one_line(str(e))) from None

    return pa.RecordBatchReader.from_batches(result.schema, batches())
