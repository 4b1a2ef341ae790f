"""The scanner: the one door to CommitLog records for code outside rmqdump/scan/.

Every read of records goes through the same walk (rmqdump.scan._walk) and its
compiled kernel, whatever its shape: a pass over the whole CommitLog maps
`ranges.scan_range` over the planner's ranges on many workers; a pass that must
read in order (the recovery preview, salvage's survey and re-read, repair's
look-back, the DLedger index, compaction originals, diff past its common
prefix, listings) is this same scanner with one worker, over a window of
offsets or one file from a position; a lookup reads single records. Keeping the
walk private keeps those from growing loops of their own.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from rmqdump.common.problems import Problem
from rmqdump.readers.commitlog import CommitLog, SegmentFile
from rmqdump.readers.mapped import MappedFile
from rmqdump.readers.message import Message
from rmqdump.scan._walk import BATCH_RECORDS, RELEASE_EVERY, Batch, kernel, messages_at, read_at, read_record, scan_commitlog, scan_file

__all__ = [
    "RELEASE_EVERY",
    "Batch",
    "batches",
    "distinct_codes",
    "file_batches_from",
    "file_record_at",
    "holds_zero",
    "index_put",
    "join_offsets",
    "pack_bytes",
    "properties_columns",
    "record_at",
    "records_at",
    "runs",
    "unit_pointers",
]


# --- serial windows: one worker, records in offset order -------------------------------------------------------------


def batches(
    commitlog: CommitLog, *, from_offset: int | None = None, to_offset: int | None = None, check_crc: bool = True, keys: bool = False
) -> Iterator[Batch]:
    """The records of [from_offset, to_offset) of a CommitLog in offset order, one worker (default: all of it).

    For passes that need the records in order more than they need cores; `from_offset` may be any byte (the walk
    resyncs by the proof rule), DLedger offsets are the messages' own. keys=True: the batches carry the index keys'
    columns (no serial pass reads them: only the ranges of a pass that builds or checks the index, and tests of the
    dispatch columns), which the kernel otherwise does not hash.
    """
    return scan_commitlog(commitlog, from_offset=from_offset, to_offset=to_offset, check_crc=check_crc, keys=keys)


def file_batches_from(
    seg: SegmentFile,
    mf: MappedFile,
    start: int = 0,
    *,
    end: int | None = None,
    check_crc: bool = True,
    keys: bool = False,
    batch_records: int = BATCH_RECORDS,
) -> Iterator[Batch]:
    """One file's records from file position `start` (resynced when it is no record start) up to `end`, one worker.

    For passes that follow the broker from record to record inside one file and decide where to go on from what
    they saw (the recovery preview's jumps, salvage's re-read, repair's look-back); smaller `batch_records` when
    the caller usually stops after a few records; keys=True for the index keys' columns (as `batches`).
    """
    return scan_file(seg, mf, start=start, end=end, check_crc=check_crc, keys=keys, batch_records=batch_records)


# --- random reads: single records -------------------------------------------------------------------------------------


def record_at(commitlog: CommitLog, offset: int, *, check_crc: bool = True, with_body: bool = False) -> Message | Problem:
    """The record starting exactly at a physical offset, or the problem found there (what a lookup reads)."""
    return read_at(commitlog, offset, check_crc=check_crc, with_body=with_body)


def file_record_at(seg: SegmentFile, mf: MappedFile, pos: int, *, check_crc: bool = True, with_body: bool = False) -> Message | Problem:
    """The record starting exactly at file position `pos` of a file the caller holds mapped, or the problem found there.

    For callers that read many records of the same files (a queue read as a consumer reads it) and map each once.
    """
    return read_record(seg, mf, pos, check_crc=check_crc, with_body=with_body)


def records_at(commitlog: CommitLog, offsets: np.ndarray, *, check_crc: bool = False) -> dict[int, Message]:
    """The records starting exactly at these physical offsets, by one walk over their stretch rather than a read each."""
    return messages_at(commitlog, offsets, check_crc=check_crc)


# --- the kernel's column steps, for code that works on batches --------------------------------------------------------


def properties_columns(data: np.ndarray, pos: np.ndarray, length: np.ndarray) -> tuple:
    """Records' properties split into Arrow buffers in one compiled pass (names, values, TAGS, UNIQ_KEY, KEYS tokens)."""
    return kernel().properties_columns(data, pos, length)


def pack_bytes(data: np.ndarray, pos: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Byte stretches of a mapped file end to end with Arrow's int32 offsets, copied once, compiled."""
    return kernel().pack_bytes(data, pos, length)


def distinct_codes(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct values of uint64 keys in the order first met and each key's int32 index among them, compiled (no sort)."""
    return kernel().distinct_codes(keys)


def holds_zero(data: np.ndarray, pos: np.ndarray, length: np.ndarray) -> np.ndarray:
    """Whether each byte stretch holds a zero byte (a property block the broker's parser would cut short)."""
    return kernel().holds_zero(data, pos, length)


def join_offsets(phys: np.ndarray, offsets: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Mostly ascending offsets joined to sorted record starts, compiled: rows[i] gets the position, the result says found."""
    return kernel().join_offsets(phys, offsets, rows)


_INT64_MAX = (1 << 63) - 1  # a window that is not the last has no end (1 << 63): no offset reaches this either


def unit_pointers(units, vpos: np.ndarray, records, starts: np.ndarray, ends: np.ndarray, data_end: int, tid: int, qid: int, check_tags: bool):
    """Where a queue's units at positions `vpos` point, compiled in one pass: (a finding bit per unit, the record row
    each joined or -1); the bits are the kernel's UNIT_* constants. units: QueueUnits; records: a RecordTable."""
    i64, i32 = np.int64, np.int32
    c = np.ascontiguousarray
    rows = np.empty(len(vpos), dtype=i64)
    flags = kernel().unit_pointers(
        c(units.offset, i64), c(units.size, i32), c(units.tags_code, i64), c(units.index, i64), c(vpos, i64),
        c(records.phys, i64), c(records.size, i32), c(records.topic_id, i32), c(records.queue_id, i32), c(records.queue_offset, i64), c(records.tags_code, i64),
        c(starts, i64), c(ends, i64), min(int(data_end), _INT64_MAX), int(tid), int(qid), bool(check_tags), rows,
    )  # fmt: skip
    return flags, rows


def index_put(slot_table: np.ndarray, slot: np.ndarray, first: int, prev_out: np.ndarray) -> int:
    """IndexFile.putKey's chain step for keys in put order, compiled; returns how many keys found their slot empty."""
    return kernel().index_put(slot_table, slot, first, prev_out)


def runs(total_size: np.ndarray, max_bytes: int, max_rows: int | None = None) -> list[tuple[int, int]]:
    """Consecutive (lo, hi) runs of records holding at most `max_bytes` of record bytes and `max_rows` records each
    (a record bigger than max_bytes alone): what one Arrow batch, or one call of the text kernels, holds, whatever
    the messages' size."""
    n = len(total_size)
    if n == 0:
        return []
    csum = np.cumsum(total_size.astype(np.int64))
    out, lo, done = [], 0, 0
    while lo < n:
        hi = int(np.searchsorted(csum, done + max_bytes, side="right"))
        hi = max(hi, lo + 1)
        if max_rows is not None:
            hi = min(hi, lo + max_rows)
        out.append((lo, hi))
        done = int(csum[hi - 1])
        lo = hi
    return out
