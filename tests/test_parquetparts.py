"""Row groups encoded apart and joined under one footer (rmqdump.export.parquetparts) against pyarrow's own writer.

The model is pyarrow's ParquetWriter writing the same row groups one after
another into one file: the joined file must be that file, byte for byte, and
DuckDB must read it as pyarrow does. The Thrift codec is checked against the
footers pyarrow writes and against structs built here of every type.
"""

from __future__ import annotations

import io
import random

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import REAL
from hypothesis import example, given, settings
from hypothesis import strategies as st

from rmqdump.export import parquetparts as P
from rmqdump.export import salvage as SV
from rmqdump.export.dataset import parquet_options
from rmqdump.export.thrift import ThriftError, decode, encode, field
from rmqdump.schemas import parquet as F


def _pyarrow_file(groups: list[pa.Table], schema: pa.Schema, options: dict) -> bytes:
    """The model: pyarrow's one writer, each table one row group, in order."""
    sink = io.BytesIO()
    w = pq.ParquetWriter(sink, schema, **options)
    for g in groups:
        w.write_table(g, row_group_size=g.num_rows)
    w.close()
    return sink.getvalue()


def _joined(groups: list[pa.Table], schema: pa.Schema, options: dict) -> bytes:
    out = bytearray()
    w = P.PartsWriter(out.extend, P.template(schema, options))
    for g in groups:
        w.append(P.encode_part(g.to_batches(), schema, options))
    w.close()
    return bytes(out)


def _mixed_table(rng: random.Random, n: int) -> pa.Table:
    """Every kind of column salvage writes: numbers, dictionary strings, unique strings, lists, maps, nulls, bytes."""
    topics = ["orders", "payments", "TopicTest", "odd|topic%name"]
    return pa.table(
        {
            "phys_offset": pa.array([rng.randrange(1 << 40) for _ in range(n)], pa.int64()),
            "queue_id": pa.array([rng.randrange(8) for _ in range(n)], pa.int32()),
            "crc_ok": pa.array([rng.random() < 0.9 for _ in range(n)], pa.bool_()),
            "topic": pa.array([rng.choice(topics) for _ in range(n)], pa.string()),
            "uniq_key": pa.array([None if rng.random() < 0.1 else f"{rng.getrandbits(128):032X}" for _ in range(n)], pa.string()),
            "keys": pa.array([[f"k{rng.randrange(100)}" for _ in range(rng.randrange(3))] for _ in range(n)], pa.list_(pa.string())),
            "properties": pa.array([[("UNIQ_KEY", f"{i}"), ("TAGS", rng.choice("ABC"))] for i in range(n)], pa.map_(pa.string(), pa.string())),
            "body": pa.array([rng.randbytes(rng.randrange(0, 300)) for _ in range(n)], pa.binary()),
        }
    )


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_joined_parts_are_pyarrows_own_file(seed):
    """Random row groups of every column kind, with salvage's writer options: the joined file is pyarrow's, byte for
    byte, and reads back as the tables written."""
    rng = random.Random(seed)
    groups = [_mixed_table(rng, rng.randrange(1, 400)) for _ in range(rng.randrange(2, 9))]
    schema = groups[0].schema
    options = parquet_options(schema) | {"use_dictionary": ["topic", "queue_id"], "write_statistics": ["phys_offset", "topic", "uniq_key"]}
    got = _joined(groups, schema, options)
    assert got == _pyarrow_file(groups, schema, options)
    back = pq.read_table(io.BytesIO(got))
    assert back.equals(pa.concat_tables(groups))
    assert pq.ParquetFile(io.BytesIO(got)).num_row_groups == len(groups)


def test_no_parts_is_pyarrows_empty_file():
    schema = SV.schema()
    options = parquet_options(schema)
    assert _joined([], schema, options) == _pyarrow_file([], schema, options) == P.template(schema, options)


def test_a_salvage_file_is_pyarrows_file_of_its_row_groups(tmp_path, monkeypatch):
    """A real damaged store salvaged with row groups of 16 records (so many parts are joined): messages.parquet is
    byte for byte the file pyarrow's one writer makes of the same row groups, and DuckDB reads every row of it."""
    monkeypatch.setattr(SV, "ROWS_PER_GROUP", 16)
    from rmqdump.readers.store import Store

    res = SV.salvage(Store.open(str(REAL / "rmq53-damaged-size-field" / "store")), str(tmp_path / "out"), sync=False)
    path = tmp_path / "out" / "messages.parquet"
    pf = pq.ParquetFile(path)
    assert pf.num_row_groups > 5 and pf.metadata.num_rows == res.counts["after_recovery_stop"] + res.counts["header_damaged"]
    groups = [pf.read_row_group(i) for i in range(pf.num_row_groups)]
    schema = SV.schema()
    assert path.read_bytes() == _pyarrow_file(groups, schema, parquet_options(schema))
    con = duckdb.connect()
    rows, offsets = con.execute(f"select count(*), sum(phys_offset) from read_parquet('{path}')").fetchone()
    table = pq.read_table(path)
    assert rows == table.num_rows and offsets == sum(table.column("phys_offset").to_pylist())
    bodies = con.execute(f"select body from read_parquet('{path}') order by phys_offset").fetchall()
    assert [b for (b,) in bodies] == table.sort_by("phys_offset").column("body").to_pylist()


def test_the_codec_gives_back_the_footers_pyarrow_writes():
    rng = random.Random(3)
    groups = [_mixed_table(rng, 50) for _ in range(20)]  # 20 row groups: a list past the short header's 14
    data = _pyarrow_file(groups, groups[0].schema, parquet_options(groups[0].schema))
    meta, start = P.footer(data)
    assert encode(meta) == data[start : len(data) - 8]
    assert field(meta, F.FILE_NUM_ROWS)[2] == 1000 and len(field(meta, F.FILE_ROW_GROUPS)[2][1]) == 20


def _every_type() -> list[list]:
    inner = [[1, F.T_I32, -5], [40, F.T_BINARY, b"far field id"], [41, F.T_TRUE, True]]
    return [
        [1, F.T_TRUE, True],
        [2, F.T_FALSE, False],
        [3, F.T_BYTE, 0xFF],
        [4, F.T_I16, -32768],
        [5, F.T_I32, 2**31 - 1],
        [6, F.T_I64, -(2**63)],
        [7, F.T_I64, 5 << 40],
        [8, F.T_DOUBLE, b"\x00\x00\x00\x00\x00\x00\xf0\x3f"],
        [9, F.T_BINARY, b""],
        [10, F.T_LIST, (F.T_I64, list(range(-20, 20)))],
        [11, F.T_SET, (F.T_TRUE, [True, False, True])],
        [12, F.T_MAP, (0, 0, [])],
        [13, F.T_MAP, (F.T_BINARY, F.T_STRUCT, [(b"k", inner), (b"l", [])])],
        [30, F.T_STRUCT, inner],  # a jump past 15: the long field header
        [31, F.T_LIST, (F.T_STRUCT, [inner] * 16)],
        [33, F.T_LIST, (F.T_I32, list(range(14)))],  # the longest short list header
        [34, F.T_LIST, (F.T_I32, list(range(15)))],  # the shortest long one
        [32, F.T_UUID, bytes(range(16))],
    ]


def test_every_type_encodes_and_decodes_to_itself():
    fields = _every_type()
    data = encode(fields)
    back, end = decode(data)
    assert back == fields and end == len(data)
    assert encode(back) == data


@pytest.mark.parametrize("cut", [1, 5, 17, 60])
def test_cut_short_or_unknown_bytes_are_thrift_errors(cut):
    data = encode(_every_type())
    with pytest.raises(ThriftError):
        decode(data[:cut])
    with pytest.raises(ThriftError):
        decode(bytes([0x1E]))  # field 1 of type 14: no such type
    with pytest.raises(ThriftError):
        decode(bytes([0x1C]) * 200)  # structs nested 200 deep
    with pytest.raises(ThriftError):
        P.footer(b"PAR1" + b"\x00" * 4 + (100).to_bytes(4, "little") + b"PAR1")  # a footer longer than the file


def _row_group(offsets: dict[int, int], ordinal: int | None = 0, extra: list | None = None) -> list[list]:
    meta = [[1, F.T_I32, 6], *([[fid, F.T_I64, v] for fid, v in sorted(offsets.items())])]
    chunk = [[F.CHUNK_FILE_OFFSET, F.T_I64, 0], [F.CHUNK_META_DATA, F.T_STRUCT, meta], *(extra or [])]
    rg = [[F.ROW_GROUP_COLUMNS, F.T_LIST, (F.T_STRUCT, [chunk])], [F.ROW_GROUP_FILE_OFFSET, F.T_I64, 4]]
    if ordinal is not None:
        rg.append([F.ROW_GROUP_ORDINAL, F.T_I16, ordinal])
    return rg


def test_offsets_move_past_four_gib_and_ordinals_past_an_i16_are_dropped():
    """Every page offset and the row group's file offset move by the shift (past 4 GiB too); the deprecated chunk
    file_offset, 0, stays 0; an ordinal an i16 cannot hold is left out."""
    shift = 5 << 30
    rg = _row_group({F.COLUMN_DATA_PAGE_OFFSET: 100, F.COLUMN_DICTIONARY_PAGE_OFFSET: 4, F.COLUMN_INDEX_PAGE_OFFSET: 90})
    P._move(rg, shift, 3)
    meta = field(field(rg, F.ROW_GROUP_COLUMNS)[2][1][0], F.CHUNK_META_DATA)[2]
    assert [field(meta, f)[2] for f in (F.COLUMN_DATA_PAGE_OFFSET, F.COLUMN_DICTIONARY_PAGE_OFFSET, F.COLUMN_INDEX_PAGE_OFFSET)] == [
        100 + shift,
        4 + shift,
        90 + shift,
    ]
    assert field(rg, F.ROW_GROUP_FILE_OFFSET)[2] == 4 + shift and field(rg, F.ROW_GROUP_ORDINAL)[2] == 3
    assert field(field(rg, F.ROW_GROUP_COLUMNS)[2][1][0], F.CHUNK_FILE_OFFSET)[2] == 0
    late = _row_group({F.COLUMN_DATA_PAGE_OFFSET: 4})
    P._move(late, 0, 40_000)
    assert field(late, F.ROW_GROUP_ORDINAL) is None


@pytest.mark.parametrize(
    "extra",
    [[[F.CHUNK_OFFSET_INDEX_OFFSET, F.T_I64, 10]], [[F.CHUNK_COLUMN_INDEX_OFFSET, F.T_I64, 10]]],
)
def test_a_part_with_a_page_index_is_refused(extra):
    with pytest.raises(ValueError, match="page index"):
        P._move(_row_group({F.COLUMN_DATA_PAGE_OFFSET: 4}, extra=extra), 10, 1)


def test_a_part_with_a_bloom_filter_is_refused():
    with pytest.raises(ValueError, match="bloom"):
        P._move(_row_group({F.COLUMN_DATA_PAGE_OFFSET: 4, F.COLUMN_BLOOM_FILTER_OFFSET: 50}), 10, 1)


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_salvage_files_are_the_same_on_one_thread_or_several(tmp_path, monkeypatch, fmt):
    """The parts are encoded on the mapper's threads and written in order: one worker or three give the same bytes,
    and the manifest's sha256 is the file's."""
    import hashlib

    from rmqdump.engines.local import LocalMap
    from rmqdump.readers.store import Store

    monkeypatch.setattr(SV, "ROWS_PER_GROUP", 8)
    store = Store.open(str(REAL / "rmq53-damaged-size-field" / "store"))
    got = {}
    for workers in (1, 3):
        out = tmp_path / f"j{workers}"
        res = SV.salvage(store, str(out), fmt=fmt, sync=False, mapper=LocalMap(workers), range_bytes=1 << 20)
        data = (out / f"messages.{fmt}").read_bytes()
        assert [f["sha256"] for f in res.files if f["set"] == "messages"] == [hashlib.sha256(data).hexdigest()]
        got[workers] = data
    assert got[1] == got[3]


def test_parts_of_binary_views_are_pyarrows_file_of_binary():
    """Salvage encodes `body` from views of the map: the joined file is the one pyarrow writes from plain binary,
    byte for byte (the footer says binary)."""
    rng = random.Random(11)
    groups = [_mixed_table(rng, rng.randrange(1, 300)) for _ in range(4)]
    schema = groups[0].schema
    view_schema = schema.set(schema.get_field_index("body"), pa.field("body", pa.binary_view()))
    options = parquet_options(schema)
    out = bytearray()
    w = P.PartsWriter(out.extend, P.template(schema, options))
    for g in groups:
        w.append(P.encode_part(g.cast(view_schema).to_batches(), view_schema, options))
    w.close()
    assert bytes(out) == _pyarrow_file(groups, schema, options)
    assert pq.read_table(io.BytesIO(bytes(out))).schema.field("body").type == pa.binary()


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=1, max_size=300), st.data())
@example(b"0123456789abcdefgh", None)
def test_views_of_the_map_are_its_bytes(data, draw):
    """arrowbatch._views against slicing: short values inline, long ones by offset from the lowest start, empty ones."""
    import numpy as np

    from rmqdump.export.arrowbatch import _views

    buf = np.frombuffer(data, dtype=np.uint8)
    if draw is None:  # the pinned example: one inline value, one of exactly 12 bytes, one of 13, one empty
        spans = [(0, 5), (2, 12), (3, 13), (7, 0)]
    else:
        spans = draw.draw(st.lists(st.integers(0, len(data)).flatmap(lambda p: st.tuples(st.just(p), st.integers(0, len(data) - p))), min_size=1, max_size=30))
    pos = np.array([p for p, _ in spans], np.int64)
    length = np.array([n for _, n in spans], np.int64)
    arr = _views(buf, pos, length)
    arr.validate(full=True)
    assert arr.type == pa.binary_view() and arr.to_pylist() == [data[p : p + n] for p, n in spans]


def test_views_spread_over_two_gib_are_copied():
    """A view's offset is 32 bits: values spread over 2 GiB or more are copied (the zero pages are never touched)."""
    import numpy as np

    from rmqdump.export.arrowbatch import _views

    big = np.zeros((1 << 31) + 64, dtype=np.uint8)
    big[10:30] = 7
    big[-40:-10] = 9
    arr = _views(big, np.array([10, len(big) - 40]), np.array([20, 30]))
    assert arr.type == pa.binary_view() and arr.to_pylist() == [b"\x07" * 20, b"\x09" * 30]


def test_the_binary_view_layout_is_arrows():
    """schemas/arrowview.py against pyarrow's own views of a short and a long value (buffer 0, offset 0 for the long one)."""
    from rmqdump.schemas.arrowview import INLINE, BinaryView

    short, long = b"x" * INLINE, b"0123456789abcdef"
    views = pa.array([short, long], pa.binary_view()).buffers()[1].to_pybytes()
    assert views == BinaryView.build(
        {"length": INLINE, "prefix": short[:4], "buffer_index": int.from_bytes(short[4:8], "little"), "offset": int.from_bytes(short[8:], "little")}
    ) + BinaryView.build({"length": len(long), "prefix": long[:4], "buffer_index": 0, "offset": 0})


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=9), max_size=12), st.data())
@example([b"PAR1", b"", b"abc", b"defgh"], None)  # an empty piece, spans on the pieces' edges
def test_spans_of_the_writes_are_their_bytes(pieces, draw):
    """What a part's writer wrote, [start, stop) of it as views of its pieces: the model is the bytes joined and cut.
    Asked again after more writes, the answer covers them too."""
    w = P._Writes()
    for p in pieces:
        w.write(p)
    data = b"".join(pieces)
    if draw is None:
        cuts = [(0, 4), (4, 7), (3, 5), (7, 7), (0, len(data)), (6, 12), (12, 12)]
    else:
        cuts = draw.draw(st.lists(st.tuples(st.integers(0, len(data) + 2), st.integers(0, len(data) + 2)), max_size=10))
    for a, b in cuts:
        assert b"".join(w.span(a, b)) == data[a:b]
    w.write(b"tail")
    assert b"".join(w.span(max(0, len(data) - 2), len(data) + 4)) == (data + b"tail")[max(0, len(data) - 2) :]
