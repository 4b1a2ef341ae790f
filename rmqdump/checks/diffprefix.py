"""Where two CommitLogs part: the first differing byte, found range by range, and the record boundary before it.

The CommitLogs are compared as byte streams (a file's absent bytes read as zeros, as a preallocated file's
unwritten tail): range by range by CRC32 first (both sides at once), bytes only inside the first range whose
CRCs differ, so identical stretches are hashed in one pass and never compared twice; the same files given twice
are not read at all. The common prefix ends at the start of the record that holds the first differing byte,
found by walking that file's records (for DLedger, with the entry's index and term).
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from rmqdump.readers.commitlog import CommitLog
from rmqdump.readers.fastpath import field_struct
from rmqdump.readers.mapped import PreadFiles, next_data, open_binary
from rmqdump.readers.message import Message
from rmqdump.scan import scanner
from rmqdump.scan.ranges import SERIAL, Mapper
from rmqdump.scan.splits import RANGE_BYTES, stream_cuts
from rmqdump.schemas import RecordPrefix, message_header
from rmqdump.schemas import constants as C

READ_BYTES = 1 << 20  # bytes per read inside a range (small reads: no fresh pages to fault in per read)
_ZEROS = bytes(READ_BYTES)
_PHYS_AT, _PHYS = field_struct(message_header(), "phys_offset")
_MAGIC_AT, _MAGIC = field_struct(RecordPrefix, "magic")


@dataclass
class Prefix:
    """Where two CommitLogs part: bytes [start, identical_up_to) hold the same records on both sides."""

    start: int  # the first offset both sides hold (their min offsets' max)
    identical_up_to: int  # end of the last record before the first differing byte (or the end when identical)
    first_differing_byte: int | None  # None: the byte streams are identical
    end: int  # the end of the longer stream (its last file's end)
    ranges: int = 0  # ranges whose CRCs were compared
    bytes_hashed: int = 0  # bytes read for CRCs, or to check a range is zeros where the other side has a hole (both sides)
    bytes_skipped: int = 0  # bytes not read: holes of sparse files and offsets in no file (both sides)
    bytes_compared: int = 0  # bytes read again to find the first differing byte (both sides)
    last_common_entry: tuple[int, int] | None = None  # DLedger: (index, term) of the last entry both ledgers hold
    walk_from: int | None = None  # where the walk to the record holding the first differing byte started


def _files(cl: CommitLog) -> list[tuple[int, int, str]]:
    return [(f.base, f.size, f.path) for f in cl.files]


class _Stream(PreadFiles):
    """A CommitLog's files as one byte stream read with pread; offsets in no file read as zeros."""

    def __init__(self, cl: CommitLog):
        super().__init__()
        self.files = _files(cl)

    def hole(self, lo: int, hi: int) -> bool:
        """[lo, hi) reads as zeros with no data behind it: in no file, or a hole of a sparse file (readers.mapped.next_data)."""
        for base, size, path in self.files:
            if base + size <= lo or base >= hi:
                continue
            stop = min(hi, base + size) - base
            if next_data(self.fd(path), max(lo, base) - base, stop)[0] < stop:
                return False
        return True

    def first_nonzero(self, lo: int, hi: int) -> int | None:
        """The first offset in [lo, hi) whose byte is not zero, or None."""
        for p in range(lo, hi, READ_BYTES):
            chunk = self.read(p, min(hi, p + READ_BYTES))
            if chunk != (_ZEROS if len(chunk) == READ_BYTES else bytes(len(chunk))):
                return p + len(chunk) - len(chunk.lstrip(b"\0"))
        return None

    def read(self, lo: int, hi: int) -> bytes:
        parts, pos = [], lo
        for base, size, path in self.files:
            if base + size <= pos or base >= hi:
                continue
            if base > pos:
                parts.append(bytes(base - pos))
                pos = base
            stop = min(hi, base + size)
            data = self.pread(path, pos - base, stop - pos)
            parts.append(data + bytes(stop - pos - len(data)))  # a file that shrank under us: zeros
            pos = stop
        if pos < hi:
            parts.append(bytes(hi - pos))
        return parts[0] if len(parts) == 1 else b"".join(parts)


def _crc(stream: _Stream, lo: int, hi: int) -> int:
    crc = 0
    for p in range(lo, hi, READ_BYTES):
        crc = zlib.crc32(stream.read(p, min(hi, p + READ_BYTES)), crc)
    return crc


def _first_difference(sa: _Stream, sb: _Stream, lo: int, hi: int) -> tuple[int | None, int]:
    """The first offset in [lo, hi) where the streams differ (None if nowhere) and the bytes read."""
    read = 0
    for p in range(lo, hi, READ_BYTES):
        q = min(hi, p + READ_BYTES)
        x, y = sa.read(p, q), sb.read(p, q)
        read += 2 * (q - p)
        if x != y:
            ne = np.flatnonzero(np.frombuffer(x, np.uint8) != np.frombuffer(y, np.uint8))
            return p + int(ne[0]), read
    return None, read


def _same_files(a: CommitLog, b: CommitLog) -> bool:
    """Both CommitLogs are the very same files (one store given twice, or hard links)."""
    if len(a.files) != len(b.files):
        return False
    try:
        return all(x.base == y.base and x.size == y.size and os.path.samefile(x.path, y.path) for x, y in zip(a.files, b.files, strict=True))
    except OSError:
        return False


def common_prefix(
    a: CommitLog,
    b: CommitLog,
    *,
    range_bytes: int = RANGE_BYTES,
    progress: Callable[[int], None] | None = None,
    record_start_before: Callable[[str, int], int | None] | None = None,
    mapper: Mapper = SERIAL,
) -> Prefix:
    """Compare two CommitLogs range by range (CRC32 first, bytes in the first range that differs).

    record_start_before(side, d): a record start at or before byte d known from elsewhere (a ConsumeQueue unit), so
    the walk to the record holding d need not start at its file's first byte; checked before it is used.
    """
    fa, fb = _files(a), _files(b)
    start = max(a.min_offset if fa else 0, b.min_offset if fb else 0)
    end = max([base + size for base, size, _ in fa + fb] or [start])
    if _same_files(a, b):
        return Prefix(start, end, None, end)
    sa, sb = _Stream(a), _Stream(b)
    pre = Prefix(start, end, None, end)
    try:
        for lo, hi in stream_cuts(fa + fb, start, end, range_bytes):
            pre.ranges += 1
            holes = (sa.hole(lo, hi), sb.hole(lo, hi))
            if progress:
                progress(hi - lo)
            if holes[0] or holes[1]:  # zeros on one side without reading it: the other must be zeros too
                pre.bytes_skipped += (hi - lo) * (holes[0] + holes[1])
                pre.bytes_hashed += (hi - lo) * (2 - holes[0] - holes[1])
                d = None if all(holes) else (sb if holes[0] else sa).first_nonzero(lo, hi)
                if d is None:
                    continue
            else:
                pre.bytes_hashed += 2 * (hi - lo)
                ca, cb = mapper(lambda side, lo=lo, hi=hi: _crc(side, lo, hi), (sa, sb))  # side by side with an engine: both release the GIL
                if ca == cb:
                    continue
                d, read = _first_difference(sa, sb, lo, hi)
                pre.bytes_compared += read
            if d is not None:  # (a CRC collision on different bytes is caught here; equal bytes with unequal CRCs cannot be)
                pre.first_differing_byte = d
                side = "a" if a.file_for(d) else "b"
                hint = record_start_before(side, d) if record_start_before else None
                pre.walk_from, pre.identical_up_to, pre.last_common_entry = _record_start(a if side == "a" else b, d, hint)
                break
    finally:
        sa.close()
        sb.close()
    return pre


def _proven(cl: CommitLog, path: str, pos: int, phys: int) -> bool:
    """A record starts at file offset `pos`: a message magic, its physicalOffset field naming `phys`, and the record holds together."""
    try:
        with open_binary(path) as f:
            f.seek(pos)
            head = f.read(_PHYS_AT + _PHYS.size)
    except OSError:
        return False
    if len(head) < _PHYS_AT + _PHYS.size or _MAGIC.unpack_from(head, _MAGIC_AT)[0] not in C.MESSAGE_MAGICS:
        return False
    return _PHYS.unpack_from(head, _PHYS_AT)[0] == phys and isinstance(scanner.record_at(cl, phys, check_crc=False), Message)


def _record_start(cl: CommitLog, d: int, hint: int | None = None) -> tuple[int, int, tuple[int, int] | None]:
    """Where the walk started, the end of the last whole record before byte `d` (walking the records of the file that
    holds `d`, from `hint` when that is a record start in the same file), and for DLedger that record's entry (index, term)."""
    seg = cl.file_for(d)
    if seg is None:
        return d, d, None
    start = seg.base
    if hint is not None and seg.base < hint <= d and not seg.frame and _proven(cl, seg.path, hint - seg.base, hint):
        start = hint  # a record starts there: the bytes before it are whole records
    end, entry = start, None
    for batch in scanner.batches(cl, from_offset=start, to_offset=d, check_crc=False):
        if not len(batch):
            continue
        ends = batch.phys + batch.cols["total_size"].astype(np.int64)
        whole = np.flatnonzero(ends <= d)
        if len(whole) and int(ends[whole[-1]]) >= end:
            end = int(ends[whole[-1]])
            if batch.entries is not None:
                entry = (int(batch.entries["index"][whole[-1]]), int(batch.entries["term"][whole[-1]]))
    return start, end, entry
