"""The walk of a CommitLog file: the compiled kernel's batches of records as columns, with what stopped it.

Private to rmqdump/scan/: code outside it reads records through the scanner
(rmqdump.scan.scanner) or the range scan (rmqdump.scan.ranges), so there is
one walk and no pass grows a loop of its own.

The kernel (rmqdump.scan.kernel) walks totalSize from record to record,
checks each record's lengths against its totalSize and its CRCs, and gives a
batch of records as columns, with what the broker's dispatch takes from them.
A record that does not hold together stops the batch; it is diagnosed
(rmqdump.scan.damage), reported with a stable code, and the walk resyncs at the
next record it can prove (rmqdump.scan.resync).

A DLedger CommitLog (files of `dledger-<id>/data/`) frames every record in an
entry header: the kernel checks and skips it; a record's position stays the
message's own (entry pos + header), which is what its physicalOffset field and
the ConsumeQueue hold.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np

from rmqdump.common import problems as P
from rmqdump.common.problems import Problem
from rmqdump.readers.commitlog import Blank, CommitLog, SegmentFile
from rmqdump.readers.fastpath import gather, numpy_dtype
from rmqdump.readers.mapped import MappedFile
from rmqdump.readers.message import Message, decode_properties, offset_msg_id
from rmqdump.scan import layout as K
from rmqdump.scan.aot import SCAN, load
from rmqdump.scan.damage import diagnose
from rmqdump.scan.hosts import HOST_LAYOUTS, distinct_hosts, host_text, msg_id_text
from rmqdump.scan.resync import resync
from rmqdump.schemas import dledger as DL
from rmqdump.schemas import message_header
from rmqdump.schemas.commitlog import PropertiesLength

BATCH_RECORDS = 32768
KEYS_PER_RECORD = 4  # room for index keys per record of a batch (grown when a batch needs more)
KEY_ROOM_MIN = 1 << 10
RELEASE_EVERY = 32 << 20
LISTS_AFTER = 16  # Batch.message: records served from numpy scalars before the columns become lists
_ROW_COLUMNS = (
    "_pos", "total_size", "magic", "body_crc", "queue_id", "flag", "queue_offset", "sys_flag", "born_timestamp", "store_timestamp",
    "reconsume_times", "prepared_transaction_offset", "body_length", "body_pos", "topic_pos", "topic_length", "properties_pos",
    "properties_length", "born_host_pos", "born_host_then", "store_host_pos", "store_host_then",
)  # fmt: skip


def _column_dtypes() -> dict[str, np.dtype]:
    """The dtype of each record column: the schema field's, native; positions int64, host variants bool."""
    header = {sc.name: sc.subcon for sc in message_header().subcons}
    out = {}
    for name in K.RECORD_COLUMNS:
        if name in header:
            out[name] = numpy_dtype(header[name]).newbyteorder("=")
        elif name.endswith("_then"):
            out[name] = np.dtype(bool)
        else:
            out[name] = np.dtype(np.int64)
    out["properties_length"] = numpy_dtype(PropertiesLength).newbyteorder("=")
    return out


_DTYPES = _column_dtypes()
_ENTRY = numpy_dtype(DL.EntryHeader)


@dataclass
class Batch:
    """Records of one stretch of one file, as columns, then what ended the stretch.

    `events` (Blank or Problem) come after every record of the batch;
    `record_problems` maps a record's index to the problems found in it.
    """

    seg: SegmentFile
    mf: MappedFile
    cols: Mapping[str, np.ndarray]  # Columns: made on first use
    crc_ok: np.ndarray | None
    prop_crc: np.ndarray | None  # 1 ok, 0 mismatch, -1 absent
    events: list = field(default_factory=list)
    record_problems: dict[int, list[Problem]] = field(default_factory=dict)
    found: dict[str, np.ndarray] | None = None  # what the kernel took for the dispatch (rmqdump.scan.dispatch reads it)
    entries: np.ndarray | None = None  # DLedger: each record's entry header (schemas.dledger.EntryHeader), else None
    _lists: tuple | None = field(default=None, init=False, repr=False, compare=False)
    _served: int = field(default=0, init=False, repr=False, compare=False)

    def __len__(self) -> int:
        return len(self.cols["_pos"]) if self.cols else 0

    @property
    def phys(self) -> np.ndarray:
        return self.cols["_pos"] + self.seg.base

    def flagged(self) -> list[Problem]:
        """Problems of records still decoded (CRC, phys field), in record order."""
        return [p for i in sorted(self.record_problems) for p in self.record_problems[i]]

    def damage(self) -> list[Problem]:
        """Problems that ended the stretch (the events that are not a BLANK), in scan order."""
        return [e for e in self.events if isinstance(e, Problem)]

    def problems(self) -> list[Problem]:
        """Every problem of the batch, in order: its records' first, then what ended it."""
        return self.flagged() + self.damage()

    def raw(self, pos: int, length: int) -> bytes:
        return bytes(self.mf.view[pos : pos + length])

    def topic(self, i: int) -> str:
        c = self.cols
        return self.raw(int(c["topic_pos"][i]), int(c["topic_length"][i])).decode("utf-8", errors="replace")

    def properties_bytes(self, i: int) -> bytes:
        c = self.cols
        return self.raw(int(c["properties_pos"][i]), int(c["properties_length"][i]))

    def body(self, i: int) -> bytes:
        c = self.cols
        return self.raw(int(c["body_pos"][i]), int(c["body_length"][i]))

    def msg_id(self, i: int) -> str:
        """Record i's offset msgId (its store host and physical offset)."""
        c = self.cols
        addr, port, _ = self._host_at(int(c["store_host_pos"][i]), bool(c["store_host_then"][i]))
        return offset_msg_id(addr, port, self.seg.base + int(c["_pos"][i]))

    def msg_ids(self, rows: np.ndarray) -> list[str]:
        """The offset msgIds of these records."""
        offsets, text = self.msg_id_text(rows)
        s, o = text.tobytes().decode("ascii"), offsets.tolist()
        return [s[o[k] : o[k + 1]] for k in range(len(o) - 1)]

    def msg_id_text(self, rows, store_hosts: tuple[list[bytes], np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The offset msgIds of these records as an Arrow string column's buffers (rmqdump.scan.hosts.msg_id_text);
        `store_hosts`: their hosts(rows, "store"), when the caller has them already."""
        hosts, code = store_hosts if store_hosts is not None else self.hosts(rows, "store")
        return msg_id_text(hosts, code, self.cols["_pos"][rows].astype(np.int64) + self.seg.base)

    def hosts(self, rows, which: str) -> tuple[list[bytes], np.ndarray]:
        """These records' distinct born or store hosts (`which`), as stored, and each record's index among them."""
        c = self.cols
        return distinct_hosts(self.mf.data, c[f"{which}_host_pos"][rows], c[f"{which}_host_then"][rows])

    def raw_columns(self, names: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """Columns.raw(names) when the columns are the kernel's (else None: read them by name)."""
        return self.cols.raw(names) if isinstance(self.cols, Columns) else None

    def property_columns(self) -> tuple:
        """Every record's properties as the compiled parser splits them (scan.kernel.properties_columns): item names and
        values, TAGS, UNIQ_KEY and the KEYS tokens, as offsets into byte buffers."""
        c = self.cols
        return kernel().properties_columns(self.mf.data, np.asarray(c["properties_pos"], np.int64), np.asarray(c["properties_length"], np.int64))

    def _row(self, i: int) -> dict:
        """Record i's column values as Python scalars.

        Indexing numpy columns costs ~0.2 us per value; once a batch has
        served a few records its columns are turned into lists (one pass)
        and read from those.
        """
        cols = self.cols
        cached = self._lists
        if cached is None or cached[0] is not cols:
            self._served += 1
            if self._served <= LISTS_AFTER:
                return {k: cols[k][i].item() for k in _ROW_COLUMNS}
            cached = self._lists = (cols, {k: cols[k].tolist() for k in _ROW_COLUMNS})
        lists = cached[1]
        return {k: lists[k][i] for k in _ROW_COLUMNS}

    def _host_at(self, pos: int, v6: bool) -> tuple[bytes, int, str]:
        n = 16 if v6 else 4
        raw = self.raw(pos, n + 4)
        return raw[:n], HOST_LAYOUTS[v6].unpack(raw)[1], host_text(raw)

    def message(self, i: int, *, with_body: bool = False) -> Message:
        r = self._row(i)
        props, ok = decode_properties(self.raw(r["properties_pos"], r["properties_length"]))
        store_addr, store_port, store_text = self._host_at(r["store_host_pos"], r["store_host_then"])
        phys = self.seg.base + r["_pos"]
        prop_crc = None if self.prop_crc is None or self.prop_crc[i] < 0 else bool(self.prop_crc[i])
        extra = {} if self.entries is None else {"dledger_index": int(self.entries["index"][i]), "dledger_term": int(self.entries["term"][i])}
        return Message(
            file=self.seg.path,
            phys_offset=phys,
            total_size=r["total_size"],
            magic=r["magic"],
            body_crc=r["body_crc"],
            crc_ok=None if self.crc_ok is None else bool(self.crc_ok[i]),
            prop_crc_ok=prop_crc,
            queue_id=r["queue_id"],
            flag=r["flag"],
            queue_offset=r["queue_offset"],
            sys_flag=r["sys_flag"],
            born_timestamp=r["born_timestamp"],
            born_host=self._host_at(r["born_host_pos"], r["born_host_then"])[2],
            store_timestamp=r["store_timestamp"],
            store_host=store_text,
            reconsume_times=r["reconsume_times"],
            prepared_transaction_offset=r["prepared_transaction_offset"],
            body_length=r["body_length"],
            topic=self.raw(r["topic_pos"], r["topic_length"]).decode("utf-8", errors="replace"),
            properties=props,
            msg_id=offset_msg_id(store_addr, store_port, phys),
            body=self.raw(r["body_pos"], r["body_length"]) if with_body else None,
            properties_ok=ok,
            extra=extra,
        )

    def messages(self, *, with_body: bool = False) -> Iterator[Message]:
        for i in range(len(self)):
            yield self.message(i, with_body=with_body)


def _record_problems(seg: SegmentFile, cols, crc_ok, prop_crc) -> dict[int, list[Problem]]:
    out: dict[int, list[Problem]] = {}
    pos = cols["_pos"]

    def flag(i: int, code: str, at: int, detail: str) -> None:
        out.setdefault(i, []).append(Problem(code, seg.path, at, detail, phys_offset=seg.base + int(pos[i])))

    for i in np.flatnonzero(cols["phys_offset"] != pos + seg.base).tolist():
        p = int(pos[i])
        flag(i, P.PHYS_OFFSET_MISMATCH, p, f"physicalOffset field says {int(cols['phys_offset'][i])}, record is at {seg.base + p}")
    if crc_ok is not None:
        for i in np.flatnonzero(~crc_ok).tolist():
            flag(i, P.BODY_CRC_MISMATCH, int(cols["body_pos"][i]), f"body CRC of the record at {int(pos[i])} does not match bodyCRC {int(cols['body_crc'][i])}")
    if prop_crc is not None:
        for i in np.flatnonzero(prop_crc == 0).tolist():
            flag(i, P.PROP_CRC_MISMATCH, int(pos[i]), "__CRC32# property does not match the record's bytes")
    return out


class Columns(Mapping):
    """A batch's record columns, as views into the kernel's output rows, each made only when first asked for.

    An int64 column is the kernel's row itself; a narrower one (the schema
    field's dtype) is converted once, on first use: a consumer that reads 8
    of the 24 columns pays for 8.
    """

    __slots__ = ("_made", "_n", "_out")

    def __init__(self, out: np.ndarray, n: int):
        self._out, self._n, self._made = out, n, {}

    def __getitem__(self, name: str) -> np.ndarray:
        col = self._made.get(name)
        if col is None:
            dt = _DTYPES[name]  # KeyError for a name that is no column
            col = self._made[name] = self._out[K.COL[name], : self._n].astype(dt, copy=False)
        return col

    def __iter__(self):
        return iter(_DTYPES)

    def __len__(self) -> int:
        return len(_DTYPES)

    def __contains__(self, name) -> bool:
        return name in _DTYPES

    def raw(self, names: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For compiled code that reads many columns at once: the kernel's output rows (int64; a batch's record i is
        column i), and for each of `names` its row (-1: no column) and its dtype's width in bytes (1: bool), by
        which a row's value is narrowed to the column's (rmqdump.text.kernel.gather)."""
        pick, width = _raw_plan(names)
        return self._out, pick, width


@functools.cache
def _raw_plan(names: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    pick = np.array([K.COL[n] if n in _DTYPES else -1 for n in names], dtype=np.int64)
    width = np.array([_DTYPES[n].itemsize if n in _DTYPES else 8 for n in names], dtype=np.int64)
    return pick, width


_DISPATCH = ("topic_id", "tags_hash", "tags_slow", "tags_pos", "tags_len", "delay", "delay_pos", "delay_len")
_POOL = 4  # output arrays kept for reuse per walk (a batch consumers still hold keeps its own)


class _Kernel:
    """Runs the kernel batch after batch over one walk.

    Each batch's columns are views into an output array of its own, so a
    batch is never copied; an array is reused for a later batch once nothing
    refers to it any more (no batch or column of it is alive).
    """

    def __init__(self, records: int):
        self.jit = kernel()
        self.records = records
        self.pool: list[np.ndarray] = []
        self.keys = np.empty((len(K.KEY_COLUMNS), max(records * KEYS_PER_RECORD, KEY_ROOM_MIN)), dtype=np.int64)

    def _out(self) -> np.ndarray:
        for out in self.pool:
            if sys.getrefcount(out) <= 3:  # the pool's reference, the loop's and getrefcount's argument: free
                return out
        out = np.empty((len(K.COLUMNS), self.records), dtype=np.int64)
        if len(self.pool) < _POOL:
            self.pool.append(out)
        return out

    def run(self, seg: SegmentFile, mf: MappedFile, pos: int, end: int, check_crc: bool, keys: bool = True) -> tuple[Batch, int, int]:
        """One batch of records from `pos`, where the walk stopped, and why (a kernel stop code); the index keys' columns only with `keys`."""
        out = self._out()
        while True:
            n, nk, p, code, reps = self.jit.scan(mf.data, mf.size, pos, end, check_crc, keys, out, self.keys, seg.frame, seg.base)
            if code == K.FULL and n == 0:  # one record with more keys than room: make room
                self.keys = np.empty((self.keys.shape[0], self.keys.shape[1] * 2), dtype=np.int64)
                continue
            break
        cols = Columns(out, n)
        crc_ok = prop_crc = None
        if check_crc:
            crc_ok = out[K.COL["crc"], :n] == 1
            prop_crc = out[K.COL["prop_crc"], :n].astype(np.int8)
        found = {name: out[K.COL[name], :n] for name in _DISPATCH}
        found["topic_first"] = reps
        for name in K.KEY_COLUMNS if keys else ():  # copied: the key room is reused from batch to batch
            found["key_" + name] = self.keys[K.KCOL[name], :nk].copy()
        batch = Batch(seg, mf, cols, crc_ok, prop_crc, [], _record_problems(seg, cols, crc_ok, prop_crc), found)
        if seg.frame:
            batch.entries = gather(mf.data, cols["_pos"] - seg.frame, _ENTRY)
        return batch, p, code


def scan_file(
    seg: SegmentFile, mf: MappedFile, *, start: int = 0, end: int | None = None, check_crc: bool = True, keys: bool = True, batch_records: int = BATCH_RECORDS
) -> Iterator[Batch]:
    """Records that start in [start, end) of one file; past `end` only to finish the last one.

    keys=False: the batches carry no index key columns (the kernel does not hash them).

    A start other than 0 is resynced by the proof rule, so byte ranges of one
    file can be scanned independently and together give each record once.
    """
    size = mf.size
    end = size if end is None else min(end, size)
    pos = start if start == 0 else resync(seg, mf, start)
    released = 0
    kern = None
    while pos is not None and pos < end:
        kern = kern or _Kernel(batch_records)
        batch, p, code = kern.run(seg, mf, pos, end, check_crc, keys)
        if code == K.END:
            if p < size and resync(seg, mf, end) != p:
                # The last record crossed into the next range and is followed by something the
                # next range's resync will skip without a word: this range owns that report.
                batch.events.extend(diagnose(seg, mf, p)[0])
            yield batch
            break
        if code == K.FULL:
            yield batch
            pos = p
        else:
            events, nxt = diagnose(seg, mf, p)
            batch.events.extend(events)
            yield batch
            pos = nxt
        if pos is not None and pos - released >= RELEASE_EVERY:
            mf.release(released, pos)
            released = pos


def read_record(seg: SegmentFile, mf: MappedFile, p: int, *, check_crc: bool = True, with_body: bool = False) -> Message | Problem:
    """Decode the single record at file offset p, or say what is wrong there (DLedger: p is the message's, past its entry header)."""
    if p - seg.frame < 0 or p + 8 > mf.size:
        return Problem(P.RECORD_PAST_END, seg.path, p, "offset is past the end of the file", phys_offset=seg.base + p)
    batch, _, _ = _Kernel(1).run(seg, mf, p - seg.frame, p - seg.frame + 1, check_crc)
    if len(batch):
        return batch.message(0, with_body=with_body)
    events, _ = _diagnose_single(seg, mf, p)
    return events


def _diagnose_single(seg: SegmentFile, mf: MappedFile, p: int):
    events, nxt = diagnose(seg, mf, p - seg.frame)
    ev = events[0]
    if isinstance(ev, Blank):
        return Problem("not_a_message", seg.path, p, f"a {ev.marker} end-of-file marker is at this offset", phys_offset=seg.base + p), nxt
    return ev, nxt


def kernel():
    """The compiled kernel (rmqdump.scan.aot.load: ahead of time, else JIT): commands that scan nothing never load it."""
    return load(SCAN)


def scan_commitlog(
    cl: CommitLog, *, from_offset: int | None = None, to_offset: int | None = None, check_crc: bool = True, keys: bool = False
) -> Iterator[Batch]:
    """Batches of a whole CommitLog's records in offset order, from `from_offset` (a record start or any byte) to `to_offset`.

    For passes that read one stretch in order (listings, lookups, the recovery
    preview); passes over the whole CommitLog map scan_range (rmqdump.scan.ranges)
    over the planner's ranges instead. keys=True: with the index keys' columns, which none of these passes reads.
    """
    for seg in cl.files:
        if to_offset is not None and seg.base >= to_offset:
            break
        if from_offset is not None and seg.base + seg.size <= from_offset:
            continue
        # offsets are the messages' (DLedger: past their entry header); the walk starts at records (entries)
        start = max(0, (from_offset or 0) - seg.base - seg.frame)
        end = seg.size if to_offset is None else max(0, min(seg.size, to_offset - seg.base - seg.frame))
        # bytes past the configured size are not data: they are reported as a layout problem
        with MappedFile(seg.path, limit=cl.file_size) as mf:
            yield from scan_file(seg, mf, start=start, end=end, check_crc=check_crc, keys=keys)


def read_at(cl: CommitLog, phys_offset: int, *, check_crc: bool = True, with_body: bool = False) -> Message | Problem:
    """The record starting exactly at a physical offset, or the problem found there."""
    seg = cl.file_for(phys_offset)
    if seg is None:
        return cl.out_of_range("offset_out_of_range", phys_offset)
    with MappedFile(seg.path, limit=cl.file_size) as mf:
        return read_record(seg, mf, phys_offset - seg.base, check_crc=check_crc, with_body=with_body)


def messages_at(cl: CommitLog, offsets: np.ndarray, *, check_crc: bool = False) -> dict[int, Message]:
    """The records starting exactly at these physical offsets, by one scan over their stretch of the CommitLog."""
    want = np.unique(offsets[offsets >= 0])
    found: dict[int, Message] = {}
    if not want.size or not cl.files:
        return found
    for b in scan_commitlog(cl, from_offset=int(want[0]), to_offset=int(want[-1]) + 1, check_crc=check_crc):
        if not len(b):
            continue
        phys = b.phys
        for i in np.flatnonzero(np.isin(phys, want)).tolist():
            found[int(phys[i])] = b.message(i)
    return found
