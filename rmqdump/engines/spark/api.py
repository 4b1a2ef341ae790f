"""The tables of `rmqdump sql` as PySpark DataFrames over a fleet of stores (public as `rmqdump.spark`).

Each function takes a SparkSession and stores (paths, globs such as
'brokers/*/store', `NAME=DIR`, or StoreRefs) and returns a DataFrame with
exactly the columns and types of the DuckDB table of the same name
(rmqdump.sql.tables.TABLES; `messages` are the `export` rows), every row
carrying its store's `broker`, so a fleet is one DataFrame.

The rows are made by Spark tasks, with the local engine's own decoders:
messages from the CommitLog's byte ranges (the planner's ranges, one
`scan_range` pass each, as `export --engine spark` maps them), units queue
by queue file by file, index entries IndexFile by IndexFile in chunks,
problems/offsets/compacted store by store (`cq verify` keeps its memory
bounded by its windows). The driver only lists ranges, queues and files. The
stores must sit at the same path on every executor (a shared filesystem).

Only the columns asked for are decoded: pass `columns` rather than
selecting from the full frame (a Python task's output is not pruned by Spark).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator, Sequence

import pyarrow as pa

from rmqdump.engines.spark.rangemap import arrow_stage, ranges_stage
from rmqdump.readers.indexfile import IndexFile, Layout, key_hash, open_all
from rmqdump.readers.store import Store
from rmqdump.scan.splits import RANGE_BYTES, Split, StoreRef, plan, resolve_stores
from rmqdump.sql import tables as T

StoresArg = str | os.PathLike | StoreRef | Sequence[str | os.PathLike | StoreRef]

CODES_BATCH = 10_000  # unit findings per Arrow batch of the status join
_UNIT_WHERE = T.arrow_schema("problems", ["broker", "topic", "queue_id", "unit_index", "code"])  # a finding's unit and code
UNIT_CODES = _UNIT_WHERE.append(pa.field("seq", pa.int64()))


def stores_of(stores: StoresArg) -> list[StoreRef]:
    """StoreRefs from paths, globs, NAME=DIR strings or StoreRefs (broker names must differ)."""
    if isinstance(stores, (str, os.PathLike, StoreRef)):
        stores = [stores]
    return resolve_stores([f"{s.name}={s.root}" if isinstance(s, StoreRef) else os.fspath(s) for s in stores])


def columns_for(table: str, columns: Sequence[str] | None) -> list[str]:
    """The columns asked for, in the table's order; None: every column (for messages, all but the body)."""
    every = T.columns_of(table)
    if columns is None:
        return [c for c in every if c != "body"]
    unknown = [c for c in columns if c not in every]
    if unknown:
        raise ValueError(f"{table} has no column {', '.join(unknown)} (columns: {', '.join(every)})")
    return [c for c in every if c in set(columns)]


def messages(spark, stores: StoresArg, columns: Sequence[str] | None = None, *, range_bytes: int = RANGE_BYTES):
    """Every message of every store (the `export` rows): one task per byte range of the CommitLogs.

    CRCs are checked only when crc_ok or prop_crc_ok is asked for; `body` only when named."""
    cols = columns_for("messages", columns)
    refs = stores_of(stores)
    splits, _layout = plan(refs, range_bytes)
    return ranges_stage(spark, splits, _messages_task(cols, T.compaction_views(refs, cols)), T.arrow_schema("messages", cols))


def _messages_task(cols: list[str], served: dict):
    def run(_no: int, split: Split):
        return T.split_messages(split, cols, served.get(split.broker))

    return run


def units(spark, stores: StoresArg, columns: Sequence[str] | None = None):
    """Every ConsumeQueue unit up to each queue's last valid one, read by tasks queue by queue, file by file.

    `status` is 'ok', 'filler', or the first `cq verify` code found at the unit: the codes come from one
    `cq verify` task per store, joined onto the units."""
    from pyspark.sql import functions as F

    cols = columns_for("units", columns)
    refs = stores_of(stores)
    keys = ["broker", "topic", "queue_id", "queue_offset"]
    want = [c for c in T.columns_of("units") if c in cols or ("status" in cols and c in keys)]
    queues = [(ref.name, ref.root, t, q) for ref in refs for (t, q) in sorted(Store.open(ref.root).queues)]
    schema = T.arrow_schema("units", want)
    df = arrow_stage(spark, queues, _units_task(schema), schema)
    if "status" not in cols:
        return df
    codes = _per_store(spark, refs, _unit_codes, UNIT_CODES)
    first = codes.groupBy("broker", "topic", "queue_id", "unit_index").agg(F.min_by("code", "seq").alias("_code"))
    on = [df.broker == first.broker, df.topic == first.topic, df.queue_id == first.queue_id, df.queue_offset == first.unit_index]
    joined = df.join(first, on, "left")
    return joined.select(*[F.coalesce(first["_code"], df["status"]).alias("status") if c == "status" else df[c] for c in cols])


def _units_task(schema: pa.Schema):
    opened: dict[str, Store] = {}  # per task process: each store's queues listed once

    def run(queue: tuple[str, str, str, int]):
        broker, root, topic, queue_id = queue
        st = opened.get(root) or opened.setdefault(root, Store.open(root))
        return T.queue_units(broker, topic, queue_id, st.queues[(topic, queue_id)], schema, None)

    return run


def _unit_codes(ref: StoreRef, _cols) -> Iterator[pa.RecordBatch]:
    """The `cq verify` findings about existing units, in its order (seq): the first one at a unit is its status."""
    found = [(p, i) for i, p in enumerate(T.verify_findings(ref)) if T.marks_unit(p)]
    for lo in range(0, len(found), CODES_BATCH):
        chunk = found[lo : lo + CODES_BATCH]
        rb = T.problem_batch(ref.name, [p for p, _ in chunk], _UNIT_WHERE)  # the problems table's own columns
        yield rb.append_column(UNIT_CODES.field("seq"), pa.array([i for _, i in chunk], pa.int64()))


def index_entries(spark, stores: StoresArg, columns: Sequence[str] | None = None):
    """Every written entry of every IndexFile: one task row per file, read a chunk at a time.

    The driver opens each store's IndexFiles once to settle their sizing (a file too empty to tell takes its store's)."""
    cols = columns_for("index_entries", columns)
    files = []
    for ref in stores_of(stores):
        for f in open_all(ref.root):
            files.append((ref.name, f.path, f.layout))
            f.close()
    schema = T.arrow_schema("index_entries", cols)
    return arrow_stage(spark, files, _index_task(schema), schema)


def _index_task(schema: pa.Schema):
    def run(file: tuple[str, str, Layout]):
        broker, path, layout = file
        with IndexFile(path, layout=layout) as f:
            yield from T.index_file_entries(broker, f, schema)

    return run


def _per_store(spark, refs: list[StoreRef], make: Callable[[StoreRef, list[str] | None], Iterator[pa.RecordBatch]], schema: pa.Schema, cols: list[str] | None = None):
    """One task per store running `make(ref, cols)`; the rows have `schema`."""
    return arrow_stage(spark, refs, lambda ref: make(ref, cols), schema, len(refs))


def _store_table(table: str, rows: Callable[[list[StoreRef], list[str]], Iterator[pa.RecordBatch]], doc: str):
    """A table whose rows the local engine makes store by store (`rows(stores, columns)`): one task per store."""

    def make(spark, stores: StoresArg, columns: Sequence[str] | None = None):
        cols = columns_for(table, columns)
        return _per_store(spark, stores_of(stores), lambda ref, c: rows([ref], c), T.arrow_schema(table, cols), cols)

    make.__name__, make.__doc__ = table, doc
    return make


problems = _store_table("problems", T.problems, "What `cq verify` reports on each store (layout, CommitLog, ConsumeQueue and compaction findings): one task per store.")
offsets = _store_table("offsets", T.offsets, "Committed consumer offsets with their queue's bounds and lag: one task per store.")
compacted = _store_table("compacted", T.compacted, "What consumers of each compaction topic's queues get (`compaction view`): one task per store.")
copies, evidence, journeys, transactions, pops, delays = (
    _store_table(t, functools.partial(T.message_story_tables, t), f"The `{t}` rows (`rmqdump journey --all`, `tx`, `pop`, `delay`) of each store: one task per store.")
    for t in T.JOURNEY_TABLES + T.LIFECYCLE_TABLES
)


TABLES: dict[str, Callable] = {
    "messages": messages,
    "units": units,
    "index_entries": index_entries,
    "problems": problems,
    "offsets": offsets,
    "compacted": compacted,
    "copies": copies,
    "evidence": evidence,
    "journeys": journeys,
    "transactions": transactions,
    "pops": pops,
    "delays": delays,
}


def register_functions(spark) -> None:
    """rmq_key_hash(topic, key): the IndexFile keyHash of topic#key, as in local `sql`."""
    spark.udf.register("rmq_key_hash", lambda topic, key: None if topic is None or key is None else key_hash(topic, key), "int")


def register(spark, stores: StoresArg, columns: dict[str, list[str]] | None = None) -> list[str]:
    """Every table (or those of `columns`, with only those columns) as a temporary view; their names."""
    refs = stores_of(stores)
    for name in TABLES:
        spark.catalog.dropTempView(name)
    names = list(TABLES) if columns is None else [t for t in TABLES if t in columns]
    for name in names:
        TABLES[name](spark, refs, None if columns is None else columns[name]).createOrReplaceTempView(name)
    register_functions(spark)
    return names


__all__ = ["compacted", "copies", "delays", "evidence", "index_entries", "journeys", "messages", "offsets", "pops", "problems", "register", "transactions", "units"]
