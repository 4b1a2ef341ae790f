"""What is wrong where the walk stopped: a stable problem code located to the byte, and where the walk goes on.

The compiled kernel stops at the first record it cannot take; `diagnose` says
why (bad magic, a size that runs past the file, fields that do not add up, a
zeroed range, a BLANK marker of the wrong length, a DLedger entry whose frame
does not hold together) and resyncs (rmqdump.scan.resync).
"""

from __future__ import annotations

from construct import ConstructError

from rmqdump.common import problems as P
from rmqdump.common.problems import Problem
from rmqdump.readers import dledger as DLR
from rmqdump.readers.commitlog import Blank, SegmentFile
from rmqdump.readers.fastpath import struct_format
from rmqdump.readers.mapped import MappedFile
from rmqdump.scan.resync import HEADER, entry_at, first_nonzero, resync
from rmqdump.schemas import MessageRecord, RecordPrefix
from rmqdump.schemas import constants as C
from rmqdump.schemas import dledger as DL
from rmqdump.schemas.commitlog import MIN_RECORD_SIZE

_PREFIX = struct_format(RecordPrefix)
_BLANK_ENTRY = struct_format(DL.BlankEntry)


def diagnose(seg: SegmentFile, mf: MappedFile, p: int) -> tuple[list, int | None]:
    """What is at a position the walk could not take, and where the scan goes on."""
    if seg.frame:
        return diagnose_entry(seg, mf, p)
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
    except (ConstructError, ValueError):
        return f"fields of the record overrun its totalSize {total} (a length field points past it)"
    built = len(MessageRecord.build(rec))
    return f"totalSize {total} but the fields add up to {built}"


def diagnose_entry(seg: SegmentFile, mf: MappedFile, p: int) -> tuple[list, int | None]:
    """What is at a DLedger entry position the walk could not take, and where the scan goes on."""
    size, path, base = mf.size, seg.path, seg.base
    if p + 8 > size or (p + HEADER > size and _BLANK_ENTRY.unpack_from(mf.view, p) != (DL.BLANK_MAGIC, size - p)):
        return short_tail(seg, mf, p, "an entry")
    magic, esize = _BLANK_ENTRY.unpack_from(mf.view, p)
    if magic == DL.BLANK_MAGIC and esize == size - p:
        return [Blank(path, p, base + p, esize, "blank")], None
    if magic == 0 and esize == 0:
        nz = first_nonzero(mf, p, size)
        if nz is None:
            return [Blank(path, p, base + p, size - p, "zeros")], None
    e = entry_at(mf, p)
    if magic == DL.BLANK_MAGIC:
        code, what = DLR.BAD_BLANK, f"BLANK entry says {esize} bytes left, the file has {size - p}"
    elif magic == 0 and esize == 0:
        code, what = P.ZEROED_RANGE, "zero bytes where an entry should start"
    elif magic != DL.ENTRY_MAGIC:
        code, what = DLR.BAD_ENTRY_MAGIC, f"entry magic {magic} is not {DL.ENTRY_MAGIC} (or a BLANK)"
    elif e["pos"] != base + p:
        code, what = DLR.ENTRY_POS_MISMATCH, f"entry pos field says {e['pos']}, the entry is at {base + p}"
    else:
        total = int.from_bytes(mf.view[p + HEADER : p + HEADER + 4], "big", signed=True) if p + HEADER + 4 <= size else None
        if esize != HEADER + e["body_size"] or total != e["body_size"]:
            code = DLR.ENTRY_SIZE_MISMATCH
            what = f"entry size {esize}, bodySize {e['body_size']} and the message's totalSize {total} disagree (size = {HEADER} + bodySize = {HEADER} + totalSize)"
        else:  # the header holds together: the message inside is what is wrong
            events, nxt = diagnose_record(seg, mf, p + HEADER)
            return [_in_entry(ev, e) for ev in events], nxt
    nxt = resync(seg, mf, p + 1)
    skipped = (size if nxt is None else nxt) - p
    where = f"skipped {skipped} bytes to the end of the file" if nxt is None else f"skipped {skipped} bytes to the next entry at {nxt}"
    extra = {"skipped": skipped, "dledger_index": e["index"] if magic == DL.ENTRY_MAGIC else None}
    return [Problem(code, path, p, f"{what}; {where}", phys_offset=base + p + HEADER, extra=extra)], nxt


def _in_entry(ev, entry: dict):
    if isinstance(ev, Problem):
        return Problem(ev.code, ev.file, ev.file_offset, ev.detail, ev.phys_offset, {**ev.extra, "dledger_index": entry["index"]})
    return ev
