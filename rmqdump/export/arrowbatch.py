"""A scanned CommitLog batch as Arrow record batches: the rows `rmqdump export` writes.

The columns and values are those of Message.to_dict() (the JSON Lines message
object) plus `broker`, so a Parquet row, a JSON Lines export line and
`rmqdump commitlog -f jsonl` agree; two more columns say what a consumer of a
compaction topic's compacted queue gets (rmqdump.scan.compaction.ServedView).
The same function feeds the local engine and Spark's mapInArrow, so both
engines decode with one decoder.

Header integers come straight from the batch's numpy columns; hosts and
message ids are formatted once per distinct address; only the properties
string needs a Python step per record. Columns spelled from a few values
(hosts, topics, flag names) are copied by compiled code (`coded`), not taken
by pyarrow.compute: its import alone is 60 ms of an export's start-up.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa

from rmqdump.readers.fastpath import field_offset, numpy_dtype
from rmqdump.readers.message import decode_properties, flag_names, split_keys
from rmqdump.scan import scanner
from rmqdump.scan.compaction import AFTER_CHECKPOINT, COMPACTED, NOT_SERVED, ServedView
from rmqdump.scan.hosts import host_text
from rmqdump.scan.scanner import Batch
from rmqdump.schemas import constants as C
from rmqdump.schemas.arrowview import INLINE, BinaryView

MAX_CHUNK_BYTES = 32 << 20  # record bytes per Arrow batch: bounds memory whatever the messages

FIELDS = [
    ("kind", pa.string()),
    ("file", pa.string()),
    ("phys_offset", pa.int64()),
    ("total_size", pa.int32()),
    ("magic_version", pa.int32()),
    ("body_crc", pa.int32()),
    ("crc_ok", pa.bool_()),
    ("prop_crc_ok", pa.bool_()),
    ("queue_id", pa.int32()),
    ("flag", pa.int32()),
    ("queue_offset", pa.int64()),
    ("sys_flag", pa.int32()),
    ("sys_flag_names", pa.list_(pa.string())),
    ("transaction", pa.string()),
    ("born_timestamp", pa.int64()),
    ("born_host", pa.string()),
    ("store_timestamp", pa.int64()),
    ("store_host", pa.string()),
    ("reconsume_times", pa.int32()),
    ("prepared_transaction_offset", pa.int64()),
    ("body_length", pa.int32()),
    ("topic", pa.string()),
    ("properties", pa.map_(pa.string(), pa.string())),
    ("tags", pa.string()),
    ("keys", pa.list_(pa.string())),
    ("uniq_key", pa.string()),
    ("msg_id", pa.string()),
    ("dledger_index", pa.int64()),  # a DLedger CommitLog's entry index and term; null in a plain CommitLog
    ("dledger_term", pa.int64()),
    ("broker", pa.string()),
    # compaction topics only (null elsewhere): whether the compacted queue serves the record, and where
    ("compaction_part", pa.string()),  # compacted (at or before the checkpoint), after_checkpoint, not_served
    ("compaction_log_offset", pa.int64()),  # the served copy's offset in the compaction log
]
BODY_FIELD = ("body", pa.binary())
# the record as stored without its body, and where the body goes back (rmqdump salvage: each byte written once):
# record = raw_without_body[:body_offset] + body + raw_without_body[body_offset:]
RAW_WITHOUT_BODY_FIELD = ("raw_without_body", pa.binary())
BODY_OFFSET_FIELD = ("body_offset", pa.int32())

_INT_COLUMNS = {
    "total_size": "total_size",
    "body_crc": "body_crc",
    "queue_id": "queue_id",
    "flag": "flag",
    "queue_offset": "queue_offset",
    "sys_flag": "sys_flag",
    "born_timestamp": "born_timestamp",
    "store_timestamp": "store_timestamp",
    "reconsume_times": "reconsume_times",
    "prepared_transaction_offset": "prepared_transaction_offset",
    "body_length": "body_length",
}
_TRANSACTIONS = [C.TRANSACTION_NAMES.get(i, "") for i in range(C.TRANSACTION_MASK + 1)]


def schema(with_body: bool = False) -> pa.Schema:
    return pa.schema(FIELDS + ([BODY_FIELD] if with_body else []))


def _bitmap(valid: np.ndarray) -> pa.Buffer | None:
    """An Arrow validity bitmap, or None when every row is valid."""
    return None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))


def _fixed(values: np.ndarray, typ: pa.DataType, valid: np.ndarray | None = None) -> pa.Array:
    """A fixed-width (or bool) Arrow column over a numpy array's values, null where `valid` is False: what pa.array
    gives, without it: its first call on a numpy array imports numpy.ma (10-20 ms of every export's start-up)."""
    if typ == pa.bool_():
        data = pa.py_buffer(np.packbits(np.asarray(values, dtype=bool), bitorder="little"))
    else:
        data = pa.py_buffer(np.ascontiguousarray(values, dtype=typ.to_pandas_dtype()))
    mask = None if valid is None else _bitmap(np.asarray(valid, dtype=bool))
    return pa.Array.from_buffers(typ, len(values), [mask, data], null_count=-1 if mask else 0)


def _binary(data: np.ndarray, pos: np.ndarray, length: np.ndarray) -> pa.Array:
    """Byte strings cut out of the mapped file as one Arrow array: offsets and data built by compiled code
    (one copy, no Python step per string)."""
    n = len(pos)
    if n and int(np.maximum(length, 0).sum()) >= 1 << 31:
        raise ValueError("a chunk holds 2 GiB of strings")  # chunks hold at most MAX_CHUNK_BYTES of records
    offsets, buf = scanner.pack_bytes(data, np.asarray(pos, np.int64), np.asarray(length, np.int64))
    return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(buf)], null_count=0)


_VIEW = numpy_dtype(BinaryView)
_VIEW_BYTES = field_offset(BinaryView, "prefix")  # where a short value's bytes (a long one's prefix) start


def _views(data: np.ndarray, pos: np.ndarray, length: np.ndarray) -> pa.Array:
    """Byte strings of the mapped file as an Arrow binary_view array over the map itself: the bytes are not copied
    (schemas/arrowview.py: each value's view holds its length, then the value itself when short, else its first 4
    bytes, buffer 0 and its offset there). The map stays open while the array lives (MappedFile.close leaves a map a
    view still holds). Values spread over 2 GiB or more (a view's offset is 32 bits) are copied as _binary copies them."""
    n = len(pos)
    pos, length = np.asarray(pos, np.int64), np.maximum(np.asarray(length, np.int64), 0)
    lo = int(pos.min()) if n else 0
    hi = int((pos + length).max()) if n else 0
    if hi - lo >= 1 << 31:
        return _binary(data, pos, length).cast(pa.binary_view())
    views = np.zeros(n, dtype=_VIEW)
    views["length"] = length
    head = views.view(np.uint8).reshape(n, _VIEW.itemsize)[:, _VIEW_BYTES : _VIEW_BYTES + INLINE]
    shown = np.arange(INLINE) < np.minimum(length, INLINE)[:, None]
    head[shown] = data[(pos[:, None] + np.arange(INLINE))[shown]]
    long = length > INLINE  # their view past the prefix: buffer 0, offset (written over the inline bytes' room)
    views["buffer_index"][long] = 0
    views["offset"][long] = pos[long] - lo
    return pa.Array.from_buffers(pa.binary_view(), n, [None, pa.py_buffer(views), pa.py_buffer(data[lo:hi])], null_count=0)


def without_body(data: np.ndarray, c: dict) -> tuple[np.ndarray, np.ndarray]:
    """Each record's bytes with its body cut out (the part before the body and the part after it, packed as one
    value), as Arrow's int32 offsets (one value a record) and the bytes: the raw_without_body column's, and salvage's
    JSON Lines."""
    pos, body = c["_pos"].astype(np.int64), c["body_pos"].astype(np.int64)
    after = body + np.maximum(c["body_length"].astype(np.int64), 0)
    end = pos + c["total_size"].astype(np.int64)
    starts = np.stack([pos, after], axis=1).ravel()
    lengths = np.stack([body - pos, end - after], axis=1).ravel()
    offsets, buf = scanner.pack_bytes(data, starts, lengths)
    return np.ascontiguousarray(offsets[::2]), buf


def _without_body(data: np.ndarray, c: dict) -> pa.Array:
    offsets, buf = without_body(data, c)
    return pa.Array.from_buffers(pa.binary(), len(offsets) - 1, [None, pa.py_buffer(offsets), pa.py_buffer(buf)], null_count=0)


def coded(texts: list[str], code: np.ndarray, valid: np.ndarray | None = None) -> pa.Array:
    """Row i: texts[code[i]] (null where `valid` is False), a string column copied by compiled code from a few values."""
    try:
        raw = [t.encode("utf-8") for t in texts]
    except UnicodeEncodeError:  # a name Python decoded with surrogates: pyarrow's own conversion decides, as before
        return pa.array(texts, pa.string()).take(pa.array(code, mask=None if valid is None else ~valid))
    code = np.asarray(code, np.intp)
    lens = np.array([len(r) for r in raw], dtype=np.int64)
    starts = np.zeros(len(raw), dtype=np.int64)
    np.cumsum(lens[:-1], out=starts[1:])
    length = lens[code] if valid is None else np.where(valid, lens[code], 0)
    offsets, buf = scanner.pack_bytes(np.frombuffer(b"".join(raw), dtype=np.uint8), starts[code], length)
    mask = None if valid is None else _bitmap(valid)
    return pa.Array.from_buffers(pa.string(), len(code), [mask, pa.py_buffer(offsets), pa.py_buffer(buf)], null_count=-1 if mask else 0)


def _coded_lists(lists: list[list[str]], code: np.ndarray) -> pa.Array:
    """Row i: the list lists[code[i]] (list<string>), its strings copied as `coded` copies."""
    code = np.asarray(code, np.intp)
    counts = np.array([len(x) for x in lists], dtype=np.int64)
    first = np.zeros(len(lists), dtype=np.int64)
    np.cumsum(counts[:-1], out=first[1:])
    per_row = counts[code]
    offsets = np.zeros(len(code) + 1, dtype=np.int32)
    np.cumsum(per_row, out=offsets[1:])
    item = np.repeat(first[code] - offsets[:-1], per_row) + np.arange(offsets[-1])  # each element's index among all the lists' strings
    return pa.ListArray.from_arrays(_fixed(offsets, pa.int32()), coded([s for x in lists for s in x], item))


def _host_column(hosts: list[bytes], code: np.ndarray) -> pa.Array:
    """Each record's host (Batch.hosts': the distinct ones and each record's index), as format_host spells it:
    each distinct host once."""
    return coded([host_text(h) for h in hosts], code)


def _msg_id_column(offsets: np.ndarray, text: np.ndarray) -> pa.Array:
    return pa.Array.from_buffers(pa.string(), len(offsets) - 1, [None, pa.py_buffer(offsets), pa.py_buffer(text)], null_count=0)


def _properties_py(view: memoryview, pos: np.ndarray, length: np.ndarray):
    """properties map, tags, keys, uniq_key: decoded by the one properties parser, record by record."""
    n = len(pos)
    names: list[str] = []
    values: list[str] = []
    offs = np.zeros(n + 1, dtype=np.int32)
    tags: list[str | None] = [None] * n
    uniq: list[str | None] = [None] * n
    key_items: list[str] = []
    key_offs = np.zeros(n + 1, dtype=np.int32)
    tag_name, key_name, uniq_name = C.PROPERTY_TAGS, C.PROPERTY_KEYS, C.PROPERTY_UNIQ_KEY
    for i, (p, ln) in enumerate(zip(pos.tolist(), length.tolist(), strict=True)):
        props, _ = decode_properties(bytes(view[p : p + ln]))
        names.extend(props)
        values.extend(props.values())
        offs[i + 1] = len(names)
        tags[i] = props.get(tag_name)
        uniq[i] = props.get(uniq_name)
        k = props.get(key_name)
        if k:
            key_items.extend(split_keys(k))
        key_offs[i + 1] = len(key_items)
    pmap = pa.MapArray.from_arrays(pa.array(offs), pa.array(names, pa.string()), pa.array(values, pa.string()))
    keys = pa.ListArray.from_arrays(pa.array(key_offs), pa.array(key_items, pa.string()))
    return pmap, pa.array(tags, pa.string()), keys, pa.array(uniq, pa.string())


def _strings(offsets: np.ndarray, buf: np.ndarray, valid: np.ndarray | None = None) -> pa.Array:
    """Compiled code's offsets and bytes as an Arrow string array (checked to be UTF-8: ArrowInvalid if not)."""
    n = len(offsets) - 1
    mask = None if valid is None else _bitmap(valid.view(bool))
    arr = pa.Array.from_buffers(pa.string(), n, [mask, pa.py_buffer(offsets), pa.py_buffer(buf)], null_count=-1 if mask else 0)
    if len(buf) and int(buf.max()) >= 0x80:  # ASCII is UTF-8 as it is: validated only past it (15x this check)
        arr.validate(full=True)
    return arr


def _properties(view: memoryview, pos: np.ndarray, length: np.ndarray):
    """The same values as _properties_py, as Arrow buffers built by compiled code in one pass.

    Chunks it cannot take exactly as decode_properties does (invalid UTF-8, a
    name twice in one record: the last value wins) go record by record.
    """
    data = np.frombuffer(view, dtype=np.uint8)
    pos, length = np.asarray(pos, np.int64), np.asarray(length, np.int64)
    if int(length.sum()) >= 1 << 31:
        raise ValueError("a chunk holds 2 GiB of properties")  # chunks hold at most MAX_CHUNK_BYTES of records
    rows, noffs, nbuf, voffs, vbuf, toffs, tbuf, tags, uoffs, ubuf, uniq, krows, koffs, kbuf, twice = scanner.properties_columns(data, pos, length)
    if twice:
        return _properties_py(view, pos, length)
    try:
        pmap = pa.MapArray.from_arrays(_fixed(rows, pa.int32()), _strings(noffs, nbuf), _strings(voffs, vbuf))
    except pa.ArrowInvalid:
        return _properties_py(view, pos, length)
    keys = pa.ListArray.from_arrays(_fixed(krows, pa.int32()), _strings(koffs, kbuf))
    return pmap, _strings(toffs, tbuf, tags), keys, _strings(uoffs, ubuf, uniq)


def _topics(b: Batch, sel) -> pa.Array:
    """Topic names from the scan's per-batch topic table: each distinct topic decoded once (invalid UTF-8 replaced)."""
    first = b.found["topic_first"]
    return coded([b.topic(int(r)) for r in first.tolist()], b.found["topic_id"][sel])


def _flag_names(sys_flag: np.ndarray) -> pa.Array:
    """Each distinct sysFlag's names spelled once, copied for every record."""
    uniq, code = scanner.distinct_codes(np.asarray(sys_flag, np.int64).view(np.uint64))
    return _coded_lists([flag_names(f) for f in uniq.view(np.int64).tolist()], code)


def _constant(value: str, n: int) -> pa.Array:
    """`value` n times, its buffers written directly (a take of one value cost 6x as much: a file's path on every row)."""
    try:
        raw = value.encode("utf-8")
    except UnicodeEncodeError:
        raw = None  # a name Python decoded with surrogates: pyarrow's own conversion decides, as before
    if raw is None or n * len(raw) >= 1 << 31:
        return coded([value], np.zeros(n, dtype=np.intp))
    offsets = np.arange(n + 1, dtype=np.int32) * np.int32(len(raw))
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(raw * n)], null_count=0)


class _Taken(dict):
    """The batch's columns at `sel`, each taken on its first use: a record batch needs only some of the scan's columns."""

    def __init__(self, cols: dict[str, np.ndarray], sel):
        super().__init__()
        self.cols, self.sel = cols, sel

    def __missing__(self, name: str) -> np.ndarray:
        v = self[name] = self.cols[name][self.sel]
        return v


def _sliced(b: Batch, sel):
    cols = _Taken(b.cols, sel)
    crc = None if b.crc_ok is None else b.crc_ok[sel]
    pcrc = None if b.prop_crc is None else b.prop_crc[sel]
    return cols, crc, pcrc


def _entry_column(b: Batch, sel, name: str, n: int) -> pa.Array:
    """A DLedger entry header field of the records (null for a plain CommitLog's)."""
    if b.entries is None:
        return pa.nulls(n, pa.int64())
    return _fixed(b.entries[name][sel], pa.int64())


_PARTS = [NOT_SERVED, AFTER_CHECKPOINT, COMPACTED]


def _compaction(b: Batch, sel, c: dict, n: int, served: ServedView | None) -> tuple[pa.Array, pa.Array]:
    """compaction_part and compaction_log_offset of records `sel`: null outside the store's compaction topics."""
    if served is None or not served.queues:
        return pa.nulls(n, pa.string()), pa.nulls(n, pa.int64())
    tid = b.found["topic_id"][sel]
    first = b.found["topic_first"]
    part, log = np.full(n, -1, np.int8), np.zeros(n, np.int64)
    for t, r in enumerate(first.tolist()):
        topic = b.topic(int(r))
        if topic in served.queues:
            rows = np.flatnonzero(tid == t)
            hit, compacted, at = served.lookup(topic, c["queue_id"][rows], c["queue_offset"][rows])
            part[rows] = np.where(hit, np.where(compacted, 2, 1), 0)
            log[rows] = at
    parts = coded(_PARTS, np.maximum(part, 0), valid=part >= 0)
    return parts, _fixed(log, pa.int64(), valid=part > 0)


def topic_groups(b: Batch, lo: int, hi: int) -> list:
    """Records lo..hi grouped by topic (record order kept within a topic): a slice when there is one topic."""
    tid = b.found["topic_id"][lo:hi]
    if not len(tid) or (tid == tid[0]).all():
        return [slice(lo, hi)]
    order = np.argsort(tid, kind="stable")
    cuts = np.flatnonzero(np.diff(tid[order])) + 1
    return [lo + part for part in np.split(order, cuts)]


def record_batches(
    b: Batch,
    broker: str,
    *,
    with_body: bool = False,
    max_bytes: int = MAX_CHUNK_BYTES,
    columns: list[str] | None = None,
    by_topic: bool = False,
    served: ServedView | None = None,
) -> Iterator[pa.RecordBatch]:
    """The batch's records as Arrow record batches of at most about `max_bytes` of records each.

    columns: only these columns, in this order (`rmqdump sql` decodes what a query names); default all.
    by_topic: each record batch holds one topic's records (in record order), so a writer partitioning by
    topic needs no take of every column.
    """
    if not len(b):
        return
    sch = schema(with_body) if columns is None else pa.schema([schema(True).field(c) for c in columns])
    for lo, hi in scanner.runs(b.cols["total_size"], max_bytes):
        for sel in topic_groups(b, lo, hi) if by_topic else [slice(lo, hi)]:
            yield pa.RecordBatch.from_arrays(_columns(b, sel, broker, sch, served), schema=sch)


def selected(b: Batch, sel: np.ndarray, broker: str, sch: pa.Schema, served: ServedView | None = None) -> pa.RecordBatch:
    """Records `sel` (strictly rising indices into the batch) with the columns of `sch`: any of FIELDS, BODY_FIELD (or `body`
    as binary_view: views of the map, no copy), RAW_WITHOUT_BODY_FIELD, BODY_OFFSET_FIELD. A run of consecutive
    indices (every record past a recovery stop) is taken as a slice: views of the columns, not gathered copies."""
    if len(sel) and int(sel[-1]) - int(sel[0]) + 1 == len(sel):
        sel = slice(int(sel[0]), int(sel[-1]) + 1)
    return pa.RecordBatch.from_arrays(_columns(b, sel, broker, sch, served), schema=sch)


def _columns(b: Batch, sel, broker: str, sch: pa.Schema, served: ServedView | None = None) -> list[pa.Array]:
    """The arrays of `sch`'s columns for records `sel` (a slice or indices) of the batch; each decoding step runs only if a column needs it."""
    c, crc_ok, prop_crc = _sliced(b, sel)
    n = len(c["_pos"])
    data, view = b.mf.data, b.mf.view
    done: dict[str, object] = {}

    def once(key, make):
        if key not in done:
            done[key] = make()
        return done[key]

    def phys():
        return once("phys", lambda: c["_pos"].astype(np.int64) + b.seg.base)

    def store_hosts():
        return once("store", lambda: b.hosts(sel, "store"))  # the store_host column's and the msgIds'

    def props(k):
        return once("props", lambda: _properties(view, c["properties_pos"], c["properties_length"]))[k]

    make = {
        "kind": lambda: _constant("message", n),
        "file": lambda: _constant(b.seg.path, n),
        "phys_offset": lambda: _fixed(phys(), pa.int64()),
        "magic_version": lambda: _fixed(np.where(c["magic"] == C.MAGIC_V2, 2, 1), pa.int32()),
        "crc_ok": lambda: pa.nulls(n, pa.bool_()) if crc_ok is None else _fixed(crc_ok, pa.bool_()),
        "prop_crc_ok": lambda: pa.nulls(n, pa.bool_()) if prop_crc is None else _fixed(prop_crc == 1, pa.bool_(), valid=prop_crc >= 0),
        "sys_flag_names": lambda: _flag_names(c["sys_flag"]),
        "transaction": lambda: coded(_TRANSACTIONS, c["sys_flag"] & C.TRANSACTION_MASK),
        "born_host": lambda: _host_column(*b.hosts(sel, "born")),
        "store_host": lambda: _host_column(*store_hosts()),
        "topic": lambda: _topics(b, sel),
        "properties": lambda: props(0),
        "tags": lambda: props(1),
        "keys": lambda: props(2),
        "uniq_key": lambda: props(3),
        "msg_id": lambda: _msg_id_column(*b.msg_id_text(sel, store_hosts())),
        "dledger_index": lambda: _entry_column(b, sel, "index", n),
        "dledger_term": lambda: _entry_column(b, sel, "term", n),
        "broker": lambda: _constant(broker, n),
        "body": lambda: (_views if sch.field("body").type == pa.binary_view() else _binary)(data, c["body_pos"], c["body_length"]),
        "raw_without_body": lambda: _without_body(data, c),
        "body_offset": lambda: _fixed(c["body_pos"].astype(np.int64) - c["_pos"], pa.int32()),
        "compaction_part": lambda: once("compaction", lambda: _compaction(b, sel, c, n, served))[0],
        "compaction_log_offset": lambda: once("compaction", lambda: _compaction(b, sel, c, n, served))[1],
    }
    for name, src in _INT_COLUMNS.items():
        typ = sch.field(name).type if name in sch.names else None
        make[name] = lambda src=src, typ=typ: _fixed(c[src], typ)
    return [make[f.name]() for f in sch]
