"""One Parquet file from row groups encoded side by side: every core encodes, one file comes out.

pyarrow encodes a file's row groups one after another on one thread. A
salvage writes one `messages.parquet`, so that thread was its slowest. Here
each row group is encoded by a writer of its own into memory (`encode_part`,
safe on any thread), and `PartsWriter` writes their column chunks one after
another under one footer: the footer of an empty file of the same schema and
options, with every part's RowGroup, its page offsets moved by where its
chunks land (schemas/parquet.py names the fields). A row group's bytes do not
depend on the writer that encoded it, so the file is byte for byte the one
pyarrow's single writer gives for the same row groups (tests/test_parquetparts.py).
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from rmqdump.export.thrift import ThriftError, decode, encode, field
from rmqdump.schemas import parquet as F

_TRAILER = F.Trailer.sizeof()


@dataclass
class Part:
    """One row group as its own file encoded it: its column chunks' bytes (the writer's own pieces, in order) and its
    RowGroup struct (offsets in that file)."""

    data: list[memoryview]
    size: int
    row_group: list[list]
    rows: int


class _Writes:
    """The file object a part's writer writes into: each write kept as pyarrow made it (a new bytes object), none
    copied again. An in-memory Arrow stream grows by doubling, and its fresh pages cost more than the encoding saves."""

    closed = False

    def __init__(self):
        self.pieces: list[bytes] = []
        self.size = 0
        self._starts: list[int] = []  # where each piece starts, once span() is asked

    def write(self, data) -> int:
        if type(data) is not bytes:  # pyarrow hands over bytes of its own; anything else may change after the call
            data = bytes(data)
        self.pieces.append(data)
        self.size += len(data)
        return len(data)

    def tell(self) -> int:
        return self.size

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def span(self, start: int, stop: int) -> list[memoryview]:
        """Bytes [start, stop) of what was written, as views of the pieces that hold them (found by bisection: a part
        is hundreds of pieces, a page's header and its data each one)."""
        if len(self._starts) != len(self.pieces):
            self._starts = list(itertools.accumulate((len(p) for p in self.pieces), initial=0))[:-1]
        out = []
        for i in range(max(0, bisect.bisect_right(self._starts, start) - 1), len(self.pieces)):
            at, p = self._starts[i], self.pieces[i]
            if at >= stop:
                break
            a, b = max(start, at), min(stop, at + len(p))
            if a < b:
                out.append(memoryview(p)[a - at : b - at])
        return out


def footer(data) -> tuple[list[list], int]:
    """A whole Parquet file's FileMetaData struct and where it starts."""
    n = len(data)
    if n < len(F.MAGIC) + _TRAILER or bytes(data[: len(F.MAGIC)]) != F.MAGIC:
        raise ThriftError("not a Parquet file")
    trailer = F.Trailer.parse(bytes(data[n - _TRAILER :]))
    start = n - _TRAILER - trailer.footer_length
    if start < len(F.MAGIC):
        raise ThriftError(f"footer length {trailer.footer_length} runs past the start")
    meta, end = decode(data, start)
    if end != n - _TRAILER:
        raise ThriftError(f"footer ends at {end}, its trailer starts at {n - _TRAILER}")
    return meta, start


def _file(schema: pa.Schema, options: dict, table: pa.Table | None) -> _Writes:
    sink = _Writes()
    w = pq.ParquetWriter(sink, schema, **options)
    if table is not None:
        w.write_table(table, row_group_size=max(1, table.num_rows))
    w.close()
    return sink


def template(schema: pa.Schema, options: dict) -> bytes:
    """An empty file of the schema, written with the options the parts are: its footer is the joined file's."""
    return b"".join(_file(schema, options, None).pieces)


def encode_part(batches: list[pa.RecordBatch], schema: pa.Schema, options: dict) -> Part:
    """The batches as one row group (at least one row), encoded by a writer of its own."""
    table = pa.Table.from_batches(batches, schema)
    if not table.num_rows:
        raise ValueError("a part holds at least one row")
    sink = _file(schema, options, table)
    at = sink.size - _TRAILER - F.Trailer.parse(b"".join(sink.span(sink.size - _TRAILER, sink.size))).footer_length
    meta, _ = footer(F.MAGIC + b"".join(sink.span(at, sink.size)))  # the footer alone, with the trailer after it
    groups = field(meta, F.FILE_ROW_GROUPS)[2][1]
    if len(groups) != 1:
        raise ValueError(f"a part encoded as {len(groups)} row groups")
    return Part(sink.span(len(F.MAGIC), at), at - len(F.MAGIC), groups[0], table.num_rows)


def _move(row_group: list[list], shift: int, ordinal: int) -> None:
    """A part's RowGroup as it stands `shift` bytes further into the file, the `ordinal`-th row group."""
    f = field(row_group, F.ROW_GROUP_FILE_OFFSET)
    if f is not None:
        f[2] += shift
    f = field(row_group, F.ROW_GROUP_ORDINAL)
    if f is not None:
        if ordinal <= 0x7FFF:
            f[2] = ordinal
        else:  # an i16 cannot hold it; the field is optional
            row_group.remove(f)
    for chunk in field(row_group, F.ROW_GROUP_COLUMNS)[2][1]:
        if field(chunk, F.CHUNK_OFFSET_INDEX_OFFSET) or field(chunk, F.CHUNK_COLUMN_INDEX_OFFSET):
            raise ValueError("a part with a page index: it lies after the row groups, outside the part's bytes")
        f = field(chunk, F.CHUNK_FILE_OFFSET)
        if f is not None and f[2]:
            f[2] += shift
        meta = field(chunk, F.CHUNK_META_DATA)[2]
        if field(meta, F.COLUMN_BLOOM_FILTER_OFFSET):
            raise ValueError("a part with a bloom filter: it lies after the row groups, outside the part's bytes")
        for fid in F.COLUMN_PAGE_OFFSETS:
            f = field(meta, fid)
            if f is not None:
                f[2] += shift


class PartsWriter:
    """Parts written in the order appended, through `write`, then the footer by close(): one Parquet file."""

    def __init__(self, write: Callable[[object], None], template_file: bytes):
        self.write = write
        self.meta, _ = footer(template_file)
        self.groups: list[list[list]] = []
        self.rows = 0
        self.pos = len(F.MAGIC)
        write(F.MAGIC)

    def append(self, part: Part) -> None:
        _move(part.row_group, self.pos - len(F.MAGIC), len(self.groups))
        for piece in part.data:
            self.write(piece)
        self.pos += part.size
        self.groups.append(part.row_group)
        self.rows += part.rows

    def close(self) -> None:
        meta = [list(f) for f in self.meta]
        field(meta, F.FILE_NUM_ROWS)[2] = self.rows
        groups = field(meta, F.FILE_ROW_GROUPS)
        if groups is None:
            meta.append([F.FILE_ROW_GROUPS, F.T_LIST, (F.T_STRUCT, self.groups)])
            meta.sort(key=lambda f: f[0])
        else:
            groups[2] = (F.T_STRUCT, self.groups)
        body = encode(meta)
        self.write(body + F.Trailer.build({"footer_length": len(body)}))
