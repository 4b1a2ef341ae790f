"""Each side's records past the common prefix, kept on disk: Parquet files in a temporary directory, read by DuckDB.

A divergence may span millions of messages; held as Arrow tables and joined in memory, a 1M-message one
peaked near 1 GB. Here every batch the scan decodes goes straight into the side's Parquet file (in offset
order); the pairings are DuckDB aggregations (grouped by identity or by queue offset, never a join of the two
big sides) written to Parquet files again, and every listing is read back a batch at a time. DuckDB keeps
its aggregations and sorts within MEMORY_LIMIT by spilling beside them. The directory lies in the system temp
directory or the one given (beside `--out`), never inside a store, and is removed on close.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator

from rmqdump.common.closing import Closing
from rmqdump.common.publish import refuse_inside_stores

MEMORY_LIMIT = "64MB"  # DuckDB's own buffers; past it aggregations and sorts spill to files in the directory
FLUSH_PAST = "8MB"  # after a task that allocated more, DuckDB gives its allocator's free memory back
THREADS = 1  # each thread adds its own buffers; the queries here are short next to the scan
READ_ROWS = 8192  # rows per batch read back
ROW_GROUP = 16384  # rows per Parquet row group written: what a reader decompresses at once
GROUPS_PER_PART = 250_000  # rows an aggregation groups at once: past it the rows are split by a hash of the key


def system_arrow_pool() -> None:
    """Make Arrow allocate with the system allocator for the rest of the process. Its default (mimalloc) keeps the
    pages it freed: beside DuckDB's buffers, a 1M-message divergence took the process past 500 MB on memory no
    longer in use. For commands that compare two stores, called by the command before it starts."""
    import pyarrow as pa

    pa.set_memory_pool(pa.system_memory_pool())


class Spill(Closing):
    """A temporary directory beside `parent` (never inside one of `stores`) and a DuckDB connection reading its files."""

    def __init__(self, parent: str | None, stores: list[str], *, memory_limit: str = MEMORY_LIMIT, threads: int = THREADS):
        import duckdb

        parent = parent or tempfile.gettempdir()
        refuse_inside_stores(parent, stores, "the diff's temporary files go elsewhere (--temp-dir)")
        self.dir = tempfile.mkdtemp(prefix=".rmqdump-diff-", dir=parent)
        try:
            config = {
                "memory_limit": memory_limit,
                "temp_directory": os.path.join(self.dir, "spill"),
                "threads": threads,
                "preserve_insertion_order": False,  # every ordered read says ORDER BY
                "allocator_flush_threshold": FLUSH_PAST,
            }
            self.con = duckdb.connect(":memory:", config=config)
            self.con.execute("SET enable_progress_bar = false")
        except BaseException:
            shutil.rmtree(self.dir, ignore_errors=True)
            raise

    def path(self, name: str) -> str:
        return os.path.join(self.dir, f"{name}.parquet")

    def file(self, name: str) -> str:
        """`name`'s Parquet file (or the files of its parts) as a DuckDB table expression."""
        parts = os.path.join(self.dir, name)
        where = os.path.join(parts, "*.parquet") if os.path.isdir(parts) else self.path(name)
        return "read_parquet('" + where.replace("'", "''") + "')"

    def writer(self, name: str, schema):
        """A Parquet writer of `name` (the caller closes it)."""
        import pyarrow.parquet as pq

        return _Writer(pq.ParquetWriter(self.path(name), schema, compression="lz4"))

    def copy(self, name: str, sql: str, params: list | None = None) -> None:
        """The result of `sql` written to `name`'s Parquet file."""
        self.con.execute(f"COPY ({sql}) TO '{self.path(name)}' (FORMAT parquet, COMPRESSION lz4, ROW_GROUP_SIZE {ROW_GROUP})", params or [])

    def copy_parts(self, name: str, sql: str, key: str, rows: int) -> None:
        """An aggregation `sql` (with `{part}`, a condition to put in its WHERE) run on the rows whose `key` hashes
        to each of N parts in turn, N such that a part holds about GROUPS_PER_PART of the `rows` rows: whatever
        the size, no run groups more, and DuckDB's memory limit is never the bound that decides."""
        n = max(1, -(-rows // GROUPS_PER_PART))
        os.makedirs(os.path.join(self.dir, name))
        for k in range(n):
            where = "true" if n == 1 else f"hash({key}) % {n} = {k}"
            self.copy(os.path.join(name, f"part-{k}"), sql.format(part=where))  # name/part-{k}.parquet

    def copy_sorted(self, name: str, sql: str, rows: int = READ_ROWS) -> None:
        """The result of `sql` (an ORDER BY query) written to `name`'s Parquet file in its order. DuckDB streams a
        sorted result within its memory limit where a sorted COPY of wide rows may not fit."""
        cur = self.con.cursor()
        try:
            reader = cur.sql(sql).to_arrow_reader(rows)
            with self.writer(name, reader.schema) as w:
                for rb in reader:
                    w.write_batch(rb)
        finally:
            cur.close()

    def rows(self, sql: str, params: list | None = None) -> list[tuple]:
        """A small result, whole (counts, per-queue figures)."""
        return self.con.execute(sql, params or []).fetchall()

    def batches(self, sql: str, params: list | None = None, rows: int = READ_ROWS) -> Iterator:
        """A result as Arrow record batches, read as they are consumed (a cursor of its own, so several can be open)."""
        cur = self.con.cursor()
        try:
            yield from cur.sql(sql, params=params or None).to_arrow_reader(rows)
        finally:
            cur.close()

    def scan(self, name: str, columns: list[str] | None, rows: int = READ_ROWS) -> Iterator:
        """`name`'s Parquet file in the order it was written, a batch at a time. Read a row group at a time on this
        thread through a small buffer: `iter_batches` held some 60 MB more for the same file."""
        import pyarrow.parquet as pq

        parts = os.path.join(self.dir, name)
        paths = sorted(os.path.join(parts, p) for p in os.listdir(parts)) if os.path.isdir(parts) else [self.path(name)]
        for path in paths:  # the parts of a table written by several tasks, in their order
            with pq.ParquetFile(path, buffer_size=1 << 20) as f:
                for i in range(f.num_row_groups):
                    yield from f.read_row_group(i, columns=columns, use_threads=False).to_batches(max_chunksize=rows)

    def close(self) -> None:
        con, self.con = self.con, None
        if con is not None:
            con.close()
        shutil.rmtree(self.dir, ignore_errors=True)


class _Writer(Closing):
    """A Parquet writer whose row groups hold at most ROW_GROUP rows."""

    def __init__(self, w):
        self.w = w

    def write_table(self, t) -> None:
        self.w.write_table(t, row_group_size=ROW_GROUP)

    def write_batch(self, rb) -> None:
        self.w.write_batch(rb, row_group_size=ROW_GROUP)

    def close(self) -> None:
        self.w.close()
