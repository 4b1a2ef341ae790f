"""Where the walk goes on after bytes it cannot take: the next record (or DLedger entry) it can prove.

A record is proven by a message magic at a position whose physicalOffset
field equals the file's base offset plus that position (a DLedger entry: the
entry magic and its pos field); a BLANK marker by its length reaching the end
of the file. Zero stretches are skipped by reading, not mapping, them
(`first_nonzero`).
"""

from __future__ import annotations

import os

from rmqdump.readers.commitlog import SegmentFile
from rmqdump.readers.fastpath import field_struct, struct_format
from rmqdump.readers.mapped import MappedFile, next_data, open_readonly
from rmqdump.schemas import BlankMarker, RecordPrefix, message_header
from rmqdump.schemas import constants as C
from rmqdump.schemas import dledger as DL

RESYNC_WINDOW = 16 << 20
HEADER = DL.EntryHeader.sizeof()
_BLANK = struct_format(BlankMarker)
_MAGIC = field_struct(RecordPrefix, "magic")[1]
_NEEDLES = (*[_MAGIC.pack(m) for m in C.MESSAGE_MAGICS], _MAGIC.pack(C.MAGIC_BLANK))  # resync candidates; the BLANK last
_PHYS_FIELD_OFFSET, _PHYS = field_struct(message_header(), "phys_offset")
_HEADER = struct_format(DL.EntryHeader)
_HEADER_NAMES = [sc.name for sc in DL.EntryHeader.subcons]
_BLANK_ENTRY = struct_format(DL.BlankEntry)
_ENTRY_NEEDLES = (_BLANK_ENTRY.pack(DL.ENTRY_MAGIC, 0)[:4], _BLANK_ENTRY.pack(DL.BLANK_MAGIC, 0)[:4])


def resync(seg: SegmentFile, mf: MappedFile, start: int) -> int | None:
    """The first position >= start where a record (DLedger: an entry) can be proven to start, or a valid BLANK marker.

    Searched window by window, giving the pages of each fruitless window back:
    a long damaged or empty stretch costs one pass and bounded memory.
    """
    if seg.frame:
        return _resync_entry(seg, mf, start)
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
        if lo + 8 <= mf.size and not any(mf.view[lo : lo + 8]):
            # the search ran into zeros (a zero tail after the last record, a zeroed range): skipped as at the start
            q = first_nonzero(mf, lo, mf.size)
            if q is None:
                return None
            lo = q
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
_ZERO_TAILS: dict[tuple, int] = {}  # file identity -> offset from which it is all zeros (other ranges of the file need not read it again)
_ZERO_TAILS_MAX = 4096


def first_nonzero(mf: MappedFile, start: int, stop: int) -> int | None:
    """The first non-zero byte in [start, stop), or None.

    Read with pread, not through the map: a preallocated 1 GiB file is mostly
    zeros, and touching them through the map costs a page fault per 4 KiB
    (and resident memory); a read from the page cache compared with memcmp
    is several times faster and keeps nothing.
    """
    step = len(_ZERO_CHUNK)
    stop = min(stop, mf.size)
    fd = open_readonly(mf.path)
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
            if len(_ZERO_TAILS) >= _ZERO_TAILS_MAX:
                _ZERO_TAILS.clear()
            _ZERO_TAILS[key] = min(start, tail if tail is not None else start)
        return None
    finally:
        os.close(fd)


def entry_at(mf: MappedFile, p: int) -> dict:
    """The DLedger entry header at p, by field name."""
    return dict(zip(_HEADER_NAMES, _HEADER.unpack_from(mf.view, p), strict=True))


def _resync_entry(seg: SegmentFile, mf: MappedFile, start: int) -> int | None:
    """The first position >= start where a DLedger entry can be proven to start, or a valid BLANK entry."""
    size = mf.size
    lo = start
    if start + 8 <= size and not any(mf.view[start : start + 8]):
        q = first_nonzero(mf, start, size)
        if q is None:
            return None
        lo = max(lo, q - 3)  # the entry magic's first bytes are zeros
    while lo < size:
        hi = min(size, lo + RESYNC_WINDOW)
        p = _entry_proof_in(seg, mf, lo, hi)
        if p is not None:
            return p
        if hi < size:
            mf.release(lo, hi)
        lo = hi
    return None


def _entry_proof_in(seg: SegmentFile, mf: MappedFile, lo: int, hi: int) -> int | None:
    size = mf.size
    for at, j in mf.find_each(_ENTRY_NEEDLES, lo, min(size, hi + 3)):
        if j == 1:
            if at + 8 <= size and _BLANK_ENTRY.unpack_from(mf.view, at)[1] == size - at:
                return at
        elif at + HEADER <= size and entry_at(mf, at)["pos"] == seg.base + at:
            return at
    return None
