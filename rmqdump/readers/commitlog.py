"""The CommitLog: its files, and a damage-tolerant scan of their records.

The scan runs the compiled kernel (rmqdump.readers.kernel): it walks totalSize
from record to record, checks each record's lengths against its totalSize and
its CRCs, and gives a batch of records as columns, with what the broker's
dispatch takes from them. A record that does not hold together stops the
batch; it is diagnosed here, reported with a stable code, and the walk
resyncs at the next record it can prove: a message magic at a position whose
physicalOffset field equals the file's base offset plus that position.

A DLedger CommitLog (files of `dledger-<id>/data/`) frames every record in an
entry header: the kernel checks and skips it, and rmqdump.readers.dledger
diagnoses and resyncs entries; a record's position stays the message's own
(entry pos + header), which is what its physicalOffset field and the
ConsumeQueue hold.
"""

from __future__ import annotations

import itertools
import os
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np
from construct import ConstructError

from rmqdump.common import problems as P
from rmqdump.common.problems import InputError, Problem
from rmqdump.readers import kernel as K
from rmqdump.readers.fastpath import field_struct, gather, numpy_dtype, struct_format
from rmqdump.readers.mapped import OFFSET_NAME_RE, MappedFile, OffsetFile, next_data, offset_files
from rmqdump.readers.message import Message, decode_properties, format_host, offset_msg_id
from schemas import BlankMarker, HostV4, HostV6, MessageRecord, RecordPrefix, message_header
from schemas import constants as C
from schemas import dledger as DL
from schemas.commitlog import PropertiesLength

MIN_RECORD_SIZE = K.MIN_RECORD_SIZE  # empty body, topic and properties
BATCH_RECORDS = 32768
KEYS_PER_RECORD = 4  # room for index keys per record of a batch (grown when a batch needs more)
KEY_ROOM_MIN = 1 << 10
RELEASE_EVERY = 32 << 20
RESYNC_WINDOW = 16 << 20
LISTS_AFTER = 16  # Batch.message: records served from numpy scalars before the columns become lists
_ROW_COLUMNS = (
    "_pos", "total_size", "magic", "body_crc", "queue_id", "flag", "queue_offset", "sys_flag", "born_timestamp", "store_timestamp",
    "reconsume_times", "prepared_transaction_offset", "body_length", "body_pos", "topic_pos", "topic_length", "properties_pos",
    "properties_length", "born_host_pos", "born_host_then", "store_host_pos", "store_host_then",
)  # fmt: skip
_HOST_TEXT: dict[bytes, str] = {}  # raw address+port -> "ip:port"; hosts repeat across records
_HOST_TEXT_MAX = 1 << 16

_PREFIX = struct_format(RecordPrefix)
_BLANK = struct_format(BlankMarker)
_MAGIC = field_struct(RecordPrefix, "magic")[1]
_MAGIC_BYTES = [_MAGIC.pack(m) for m in C.MESSAGE_MAGICS]
_NEEDLES = (*_MAGIC_BYTES, _MAGIC.pack(C.MAGIC_BLANK))  # resync candidates; the BLANK last
_PHYS_FIELD_OFFSET, _PHYS = field_struct(message_header(), "phys_offset")
_HOSTS = {False: struct_format(HostV4), True: struct_format(HostV6)}


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


class SegmentFile(OffsetFile):
    """One CommitLog file: its name is its 20-digit start offset."""

    @property
    def frame(self) -> int:
        """Bytes of entry header before each record: a DLedger data file's, else 0."""
        return frame_of(self.path)


def frame_of(path: str) -> int:
    """DLedger's entry header size for a file of a `dledger-<id>/data/` directory, else 0."""
    d = os.path.dirname(os.path.abspath(path))
    return K.FRAME_SIZE if os.path.basename(d) == DL.DATA_DIR and os.path.basename(os.path.dirname(d)).startswith(DL.DIR_PREFIX) else 0


def commitlog_dir(root: str) -> str | None:
    """A store root's CommitLog directory: `commitlog/`, or a DLedger CommitLog's `dledger-<id>/data/` (beside or inside it).

    A DLedger directory holding data files wins (the broker runs on it); an empty one only when there is no `commitlog/`.
    """
    plain = os.path.join(root, "commitlog")
    found = []
    for parent in (root, plain):
        try:
            names = sorted(os.listdir(parent))
        except OSError:
            continue
        found += [os.path.join(parent, n, DL.DATA_DIR) for n in names if n.startswith(DL.DIR_PREFIX) and os.path.isdir(os.path.join(parent, n, DL.DATA_DIR))]
    with_data = [d for d in found if _has_files(d)]
    if with_data:
        return with_data[0]
    if os.path.isdir(plain):
        return plain
    return found[0] if found else None


def commitlog_path(root: str) -> str:
    """commitlog_dir(root), or where a plain store's `commitlog/` would be (for messages about its absence)."""
    return commitlog_dir(root) or os.path.join(root, "commitlog")


def _has_files(d: str) -> bool:
    try:
        return any(OFFSET_NAME_RE.match(n) and os.path.isfile(os.path.join(d, n)) for n in os.listdir(d))
    except OSError:
        return False


@dataclass
class Blank:
    """The end of a file's data: the BLANK marker, or the zero tail of the newest file."""

    file: str
    file_offset: int
    phys_offset: int
    length: int
    marker: str  # "blank" or "zeros"

    def to_dict(self) -> dict:
        return {"kind": "blank", "file": self.file, "phys_offset": self.phys_offset, "length": self.length, "marker": self.marker}


class CommitLog:
    """The files of a CommitLog, in offset order, with what is wrong with their layout."""

    def __init__(self, files: list[SegmentFile], problems: list[Problem], file_size: int | None):
        self.files = files
        self.problems = problems
        self.file_size = file_size

    @classmethod
    def open(cls, paths: list[str] | str) -> CommitLog:
        """From a `commitlog/` directory or a list of CommitLog files."""
        if isinstance(paths, (str, os.PathLike)):
            paths = [paths]
        probs: list[Problem] = []
        found: list[SegmentFile] = []
        for p in map(str, paths):
            if os.path.isdir(p) and os.path.basename(p).startswith(DL.DIR_PREFIX) and os.path.isdir(os.path.join(p, DL.DATA_DIR)):
                p = os.path.join(p, DL.DATA_DIR)  # a DLedger directory was given
            elif os.path.isdir(p) and commitlog_dir(p) is not None:
                p = commitlog_dir(p)  # a store root was given
            if os.path.isdir(p):
                try:
                    files, others = offset_files(p, SegmentFile)
                except OSError as e:
                    raise InputError("unreadable", p, e.strerror or str(e)) from None
                found.extend(files)
                probs.extend(Problem(P.CL_BAD_FILE_NAME, o, None, "not a 20-digit offset name: ignored") for o in others)
            elif os.path.isfile(p):
                n = os.path.basename(p)
                if not OFFSET_NAME_RE.match(n):
                    raise InputError("commitlog_bad_file_name", p, "a CommitLog file is named by its 20-digit start offset")
                found.append(SegmentFile(p, int(n), os.path.getsize(p)))
            elif not os.path.exists(p):
                raise InputError("not_found", p, "no such file or directory")
            else:
                raise InputError("unreadable", p, "not a regular file or directory")
        found.sort(key=lambda f: f.base)
        file_size = _common_size(found)
        for i, f in enumerate(found):
            if file_size and f.size != file_size:
                probs.append(Problem(P.CL_FILE_SIZE, f.path, f.size, f"file is {f.size} bytes, the others {file_size}", phys_offset=f.base + f.size))
            if i:
                prev = found[i - 1]
                expect = prev.base + (file_size or prev.size)
                if f.base > expect:
                    probs.append(Problem(P.CL_GAP, f.path, 0, f"gap: offsets {expect}..{f.base} are in no file", phys_offset=expect))
                elif f.base < expect:
                    probs.append(Problem(P.CL_OVERLAP, f.path, 0, f"starts at {f.base}, inside the previous file (ends at {expect})", phys_offset=f.base))
        return cls(found, probs, file_size)

    @property
    def min_offset(self) -> int:
        return self.files[0].base if self.files else 0

    def file_for(self, phys_offset: int) -> SegmentFile | None:
        for f in self.files:
            if f.base <= phys_offset < f.base + f.size:
                return f
        return None

    def out_of_range(self, code: str, phys_offset: int) -> Problem:
        """An offset in no CommitLog file, located at the CommitLog's directory (no file holds it)."""
        where = os.path.dirname(self.files[0].path) if self.files else "commitlog"
        first, end = self.min_offset, (self.files[-1].base + self.files[-1].size if self.files else 0)
        return Problem(code, where, None, f"offset {phys_offset} is in no CommitLog file (they hold {first}..{end})", phys_offset=phys_offset)

    def scan(self, *, from_offset: int | None = None, to_offset: int | None = None, check_crc: bool = True) -> Iterator[Batch]:
        """Batches of records in offset order, from `from_offset` (a record start or any byte) to `to_offset`."""
        for seg in self.files:
            if to_offset is not None and seg.base >= to_offset:
                break
            if from_offset is not None and seg.base + seg.size <= from_offset:
                continue
            # offsets are the messages' (DLedger: past their entry header); the walk starts at records (entries)
            start = max(0, (from_offset or 0) - seg.base - seg.frame)
            end = seg.size if to_offset is None else max(0, min(seg.size, to_offset - seg.base - seg.frame))
            # bytes past the configured size are not data: they are reported as a layout problem
            with MappedFile(seg.path, limit=self.file_size) as mf:
                yield from scan_file(seg, mf, start=start, end=end, check_crc=check_crc)

    def read_at(self, phys_offset: int, *, check_crc: bool = True, with_body: bool = False) -> Message | Problem:
        """The record starting exactly at a physical offset, or the problem found there."""
        seg = self.file_for(phys_offset)
        if seg is None:
            return self.out_of_range("offset_out_of_range", phys_offset)
        with MappedFile(seg.path) as mf:
            return read_record(seg, mf, phys_offset - seg.base, check_crc=check_crc, with_body=with_body)


def _common_size(files: list[SegmentFile]) -> int | None:
    """The configured file size: the usual step between file names, else the usual file size."""
    if not files:
        return None
    counts: dict[int, int] = {}
    for a, b in itertools.pairwise(files):
        if b.base > a.base:
            counts[b.base - a.base] = counts.get(b.base - a.base, 0) + 1
    if not counts:
        for f in files:
            counts[f.size] = counts.get(f.size, 0) + 1
    return max(counts, key=lambda s: (counts[s], -s))


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

    def _host(self, name: str, i: int) -> tuple[bytes, int]:
        c = self.cols
        pos = int(c[name + "_pos"][i])
        n = 16 if c[name + "_then"][i] else 4
        return _HOSTS[n == 16].unpack(self.raw(pos, n + 4))

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
        text = _HOST_TEXT.get(raw)
        port = _HOSTS[v6].unpack(raw)[1]
        if text is None:
            if len(_HOST_TEXT) >= _HOST_TEXT_MAX:
                _HOST_TEXT.clear()
            text = _HOST_TEXT[raw] = format_host(raw[:n], port)
        return raw[:n], port, text

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
    bad_phys = np.flatnonzero(cols["phys_offset"] != pos + seg.base)
    for i in bad_phys.tolist():
        p = int(pos[i])
        out.setdefault(i, []).append(
            Problem(
                P.PHYS_OFFSET_MISMATCH,
                seg.path,
                p,
                f"physicalOffset field says {int(cols['phys_offset'][i])}, record is at {seg.base + p}",
                phys_offset=seg.base + p,
            )
        )
    if crc_ok is not None:
        for i in np.flatnonzero(~crc_ok).tolist():
            p = int(pos[i])
            out.setdefault(i, []).append(
                Problem(
                    P.BODY_CRC_MISMATCH,
                    seg.path,
                    int(cols["body_pos"][i]),
                    f"body CRC of the record at {p} does not match bodyCRC {int(cols['body_crc'][i])}",
                    phys_offset=seg.base + p,
                )
            )
    if prop_crc is not None:
        for i in np.flatnonzero(prop_crc == 0).tolist():
            p = int(pos[i])
            out.setdefault(i, []).append(
                Problem(P.PROP_CRC_MISMATCH, seg.path, p, "__CRC32# property does not match the record's bytes", phys_offset=seg.base + p)
            )
    return out


_DISPATCH = ("topic_id", "tags_hash", "tags_slow", "tags_pos", "tags_len", "delay", "delay_pos", "delay_len")


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


_DISPATCH = ("topic_id", "tags_hash", "tags_slow", "tags_pos", "tags_len", "delay", "delay_pos", "delay_len")
_POOL = 4  # output arrays kept for reuse per walk (a batch consumers still hold keeps its own)


class _Kernel:
    """Runs the kernel batch after batch over one walk.

    Each batch's columns are views into an output array of its own, so a
    batch is never copied; an array is reused for a later batch once nothing
    refers to it any more (no batch or column of it is alive).
    """

    def __init__(self, records: int):
        self.jit = K.jit()
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

    def run(self, seg: SegmentFile, mf: MappedFile, pos: int, end: int, check_crc: bool) -> tuple[Batch, int, int]:
        """One batch of records from `pos`, where the walk stopped, and why (a kernel stop code)."""
        out = self._out()
        while True:
            n, nk, p, code, reps = self.jit.scan(mf.data, mf.size, pos, end, check_crc, out, self.keys, seg.frame, seg.base)
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
        for name in K.KEY_COLUMNS:  # copied: the key room is reused from batch to batch
            found["key_" + name] = self.keys[K.KCOL[name], :nk].copy()
        batch = Batch(seg, mf, cols, crc_ok, prop_crc, [], _record_problems(seg, cols, crc_ok, prop_crc), found)
        if seg.frame:
            batch.entries = gather(mf.data, cols["_pos"] - seg.frame, _ENTRY)
        return batch, p, code


def scan_file(
    seg: SegmentFile, mf: MappedFile, *, start: int = 0, end: int | None = None, check_crc: bool = True, batch_records: int = BATCH_RECORDS
) -> Iterator[Batch]:
    """Records that start in [start, end) of one file; past `end` only to finish the last one.

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
        batch, p, code = kern.run(seg, mf, pos, end, check_crc)
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


def resync(seg: SegmentFile, mf: MappedFile, start: int) -> int | None:
    """The first position >= start where a record can be proven to start, or a valid BLANK marker.

    Searched window by window, giving the pages of each fruitless window back:
    a long damaged or empty stretch costs one pass and bounded memory.
    """
    if seg.frame:
        from rmqdump.readers import dledger

        return dledger.resync(seg, mf, start)
    lo = start + 4  # where a magic can begin
    if start + 8 <= mf.size and not any(mf.view[start : start + 8]):
        # A zero stretch (the unwritten tail of a preallocated file, or a zeroed range): skip it
        # in one read; a magic's first byte is never zero, so no record's magic lies before it.
        q = first_nonzero(mf, start, mf.size)
        if q is None:
            return None
        lo = max(lo, q)
    window = 64 << 10  # small first: at a healthy spot the next record is near, and absent magics cost their whole window
    while lo < mf.size:
        hi = min(mf.size, lo + window)
        p = _proof_in(seg, mf, lo, hi)
        if p is not None:
            return p
        if hi < mf.size:
            mf.release(lo, hi)
        lo = hi
        window = min(window * 4, RESYNC_WINDOW)
    return None


def _proof_in(seg: SegmentFile, mf: MappedFile, lo: int, hi: int) -> int | None:
    """The first provable record start (or valid BLANK) whose magic begins in [lo, hi)."""
    view, size = mf.view, mf.size
    for at, j in mf.find_each(_NEEDLES, lo, min(size, hi + 3)):
        p = at - 4
        if j == len(_NEEDLES) - 1:
            total, _ = _BLANK.unpack_from(view, p)
            if total == size - p:
                return p
        elif p + _PHYS_FIELD_OFFSET + _PHYS.size <= size:
            (phys,) = _PHYS.unpack_from(view, p + _PHYS_FIELD_OFFSET)
            if phys == seg.base + p:
                return p
    return None


_ZERO_CHUNK = bytes(4 << 20)
_ZERO_TAILS: dict[tuple, int] = {}  # file identity -> offset from which it is all zeros


def first_nonzero(mf: MappedFile, start: int, stop: int) -> int | None:
    """The first non-zero byte in [start, stop), or None.

    Read with pread, not through the map: a preallocated 1 GiB file is mostly
    zeros, and touching them through the map costs a page fault per 4 KiB
    (and resident memory); a read from the page cache compared with memcmp
    is several times faster and keeps nothing.
    """
    step = len(_ZERO_CHUNK)
    stop = min(stop, mf.size)
    fd = os.open(mf.path, os.O_RDONLY)
    try:
        st = os.fstat(fd)
        key = (mf.path, st.st_ino, st.st_size, st.st_mtime_ns)
        tail = _ZERO_TAILS.get(key)
        if tail is not None and start >= tail and stop == mf.size:
            return None
        pos = start
        while pos < stop:
            pos, data_end = next_data(fd, pos, stop)
            while pos < data_end:
                chunk = os.pread(fd, min(step, data_end - pos), pos)
                if not chunk:
                    pos = stop
                    break
                if chunk != (_ZERO_CHUNK if len(chunk) == step else bytes(len(chunk))):
                    return pos + len(chunk) - len(chunk.lstrip(b"\0"))
                pos += len(chunk)
        if stop == mf.size:  # remembered: the other byte ranges of this file need not read it again
            _ZERO_TAILS[key] = min(start, tail if tail is not None else start)
        return None
    finally:
        os.close(fd)


def diagnose(seg: SegmentFile, mf: MappedFile, p: int) -> tuple[list, int | None]:
    """What is at a position the walk could not take, and where the scan goes on."""
    if seg.frame:
        from rmqdump.readers import dledger

        return dledger.diagnose(seg, mf, p)
    return diagnose_record(seg, mf, p)


def short_tail(seg: SegmentFile, mf: MappedFile, p: int, what: str) -> tuple[list, None]:
    """The end of a file from p, too short to hold `what`: a zero tail, or a truncated one; the scan ends there."""
    size = mf.size
    if first_nonzero(mf, p, size) is None:
        return [Blank(seg.path, p, seg.base + p, size - p, "zeros")], None
    return [Problem(P.TRUNCATED_TAIL, seg.path, p, f"{size - p} bytes at the end of the file are too short for {what}", phys_offset=seg.base + p)], None


def diagnose_record(seg: SegmentFile, mf: MappedFile, p: int) -> tuple[list, int | None]:
    """diagnose() of a message record (in a DLedger file: the one inside an entry whose header holds together)."""
    size, path, base = mf.size, seg.path, seg.base
    if p + 8 > size:
        return short_tail(seg, mf, p, "a record")
    total, magic = _PREFIX.unpack_from(mf.view, p)
    if magic == C.MAGIC_BLANK and total == size - p:
        return [Blank(path, p, base + p, total, "blank")], None
    first = p + 1
    if total == 0 and magic == 0:
        # The newest file's zero tail (most of a preallocated 1 GiB file): one
        # releasing pass, and resync only past the zeros (a record's magic is
        # nonzero, so none starts more than 4 bytes before the first nonzero byte).
        nz = first_nonzero(mf, p, size)
        if nz is None:
            return [Blank(path, p, base + p, size - p, "zeros")], None
        first = max(first, nz - 4)
    nxt = resync(seg, mf, first)
    stop = size if nxt is None else nxt
    skipped = stop - p
    if total == 0 and magic == 0 and nz >= stop:  # zeros all the way to the next record (zeros to the end returned above)
        return [
            Problem(
                P.ZEROED_RANGE,
                path,
                p,
                f"{skipped} zero bytes where a record should start; next record at {nxt}",
                phys_offset=base + p,
                extra={"skipped": skipped},
            )
        ], nxt
    if magic in C.MESSAGE_MAGICS:
        if total > size - p:
            code, what = P.RECORD_PAST_END, f"record of totalSize {total} runs {total - (size - p)} bytes past the end of the file"
        elif total < MIN_RECORD_SIZE:
            code, what = P.BAD_TOTAL_SIZE, f"totalSize {total} is smaller than any record"
        else:
            code, what = P.SIZE_MISMATCH, _size_detail(mf, p, total)
    elif magic == C.MAGIC_BLANK:
        code, what = P.BAD_BLANK, f"BLANK marker says {total} bytes left, the file has {size - p}"
    elif total == 0 and magic == 0:
        code, what = P.ZEROED_RANGE, "zero bytes followed by data that is not a record"
    else:
        code, what = P.BAD_MAGIC, f"magic 0x{magic & 0xFFFFFFFF:08X} is not a message or BLANK code"
    if nxt is None:
        if code in (P.BAD_MAGIC, P.ZEROED_RANGE) and p > 0:
            code = P.TRAILING_GARBAGE
        where = f"skipped {skipped} bytes to the end of the file"
    else:
        where = f"skipped {skipped} bytes to the next record at {nxt}"
    return [Problem(code, path, p, f"{what}; {where}", phys_offset=base + p, extra={"skipped": skipped})], nxt


def _size_detail(mf: MappedFile, p: int, total: int) -> str:
    try:
        rec = MessageRecord.parse(bytes(mf.view[p : p + total]))
    except (ConstructError, ValueError) as e:
        return f"fields of the record overrun its totalSize {total} ({type(e).__name__})"
    built = len(MessageRecord.build(rec))
    return f"totalSize {total} but the fields add up to {built}"


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
