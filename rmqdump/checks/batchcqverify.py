"""`cq verify` for Batch ConsumeQueues: 46-byte units against CommitLog records, both ways.

A unit points at one record and covers batchSize queue offsets from its
msgBaseOffset: for an inner-batch record (INNER_BATCH flag, INNER_NUM and
INNER_BASE properties) batchSize = INNER_NUM and msgBaseOffset = INNER_BASE =
the record's queueOffset; for a plain record batchSize = 1. Units follow
each other with no gap in queue offsets (the next msgBaseOffset is this
one's + batchSize), and the broker writes compactedOffset -1, reserved 0.
The record side (which records need a unit) is the shared `missing_units`,
fed with the records these units cover.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rmqdump.checks.cqunits import CQ_HOLE, CQ_NON_MONOTONIC, RecordWindow, pointer_checks, position_runs
from rmqdump.common.problems import Problem
from rmqdump.readers.batchcq import BatchConsumeQueue, BatchUnits
from rmqdump.readers.consumequeue import QueueUnits
from rmqdump.readers.recordprops import RecordProps
from rmqdump.schemas import constants as C

# stable codes (with the shared cq_* codes of cqunits)
CQ_BATCH_OFFSET_GAP = "cq_batch_offset_gap"
CQ_BATCH_SIZE_MISMATCH = "cq_batch_size_mismatch"
CQ_BATCH_FIELD_INVALID = "cq_batch_field_invalid"
CQ_STORE_TIME_MISMATCH = "cq_store_time_mismatch"


def _problem(q: BatchConsumeQueue, u: BatchUnits, k: int, code: str, detail: str, phys: int | None) -> Problem:
    return Problem(
        code,
        u.file.path,
        int(u.pos[k]),
        detail,
        phys_offset=phys,
        extra={"topic": q.topic, "queue_id": q.queue_id, "cq_file": u.file.path, "unit_index": int(u.base_offset[k])},
    )


@dataclass
class BatchOrder:
    """What the order pass found and remembers per file for the window passes."""

    problems: list[Problem]
    units: int
    ranges: list[tuple[int, int] | None]  # per file: (min, max) commitLogOffset of its valid units


def check_batch_order(q: BatchConsumeQueue) -> BatchOrder:
    """Holes, garbage after the end, non-monotonic offsets, msgBaseOffset continuity and the fixed fields."""
    last_file, last_pos = q.last_valid()
    probs: list[Problem] = []
    ranges: list[tuple[int, int] | None] = []
    counted = 0
    prev_off, prev_end = -1, None
    for fi, u in enumerate(q.chunks()):  # one file at a time: memory is one file's units
        valid = u.valid_mask()
        before_end = np.zeros(len(u), dtype=bool)
        if fi < last_file:
            before_end[:] = True
        elif fi == last_file:
            before_end[:last_pos] = True
        inner = np.flatnonzero(~valid & before_end)
        for p, n in position_runs(inner):
            probs.append(_problem(q, u, p, CQ_HOLE, f"{n} invalid unit{'s' if n > 1 else ''} followed by valid units: consumers skip or stall here", None))
        tail = np.flatnonzero(~valid & ~before_end & ~u.zero_mask())
        for p, n in position_runs(tail):
            probs.append(_problem(q, u, p, CQ_HOLE, f"{n} non-zero invalid unit{'s' if n > 1 else ''} after the queue's last valid unit", None))
        vpos = np.flatnonzero(valid)
        counted += int(vpos.size + inner.size + tail.size)
        if not vpos.size:
            ranges.append(None)
            continue
        off = u.offset[vpos]
        base = u.base_offset[vpos]
        end = base + u.batch_size[vpos]
        prevs = np.concatenate([[prev_off], off[:-1]])
        for k in np.flatnonzero(off <= prevs).tolist():
            j = int(vpos[k])
            probs.append(_problem(q, u, j, CQ_NON_MONOTONIC, f"offset {int(off[k])} is not above the previous unit's {int(prevs[k])}", int(off[k])))
        expect = np.concatenate([[base[0] if prev_end is None else prev_end], end[:-1]])
        for k in np.flatnonzero(base != expect).tolist():
            j = int(vpos[k])
            probs.append(
                _problem(q, u, j, CQ_BATCH_OFFSET_GAP, f"msgBaseOffset {int(base[k])}, the previous unit ends at queue offset {int(expect[k])}", int(off[k]))
            )
        bad = (u.compacted_offset[vpos] != C.BCQ_COMPACTED_OFFSET_NONE) | (u.reserved[vpos] != 0)
        for k in np.flatnonzero(bad).tolist():
            j = int(vpos[k])
            probs.append(
                _problem(
                    q,
                    u,
                    j,
                    CQ_BATCH_FIELD_INVALID,
                    f"compactedOffset {int(u.compacted_offset[j])}, reserved {int(u.reserved[j])}: the broker writes {C.BCQ_COMPACTED_OFFSET_NONE} and 0",
                    int(off[k]),
                )
            )
        prev_off, prev_end = int(off[-1]), int(end[-1])
        ranges.append((int(off.min()), int(off.max())))
    probs.sort(key=lambda p: (p.file, p.file_offset or 0, p.code))
    return BatchOrder(probs, counted, ranges)


def expected_batch_size(props: dict[str, str] | None) -> int | None:
    """The batchSize the dispatcher gives a record: INNER_NUM when INNER_NUM and INNER_BASE are both there, else 1."""
    if props is None:
        return None
    if C.PROPERTY_INNER_NUM in props and C.PROPERTY_INNER_BASE in props:
        try:
            return int(props[C.PROPERTY_INNER_NUM])
        except ValueError:
            return None
    return 1


def check_batch_units_in_window(q: BatchConsumeQueue, u: BatchUnits, window: RecordWindow, reader: RecordProps) -> tuple[list[Problem], np.ndarray]:
    """Pointer checks of the valid units pointing into one window of records: (problems, record indices they cover)."""
    records = window.records
    vpos = np.flatnonzero(u.valid_mask() & (u.offset >= window.lo) & (u.offset < window.hi))
    if not vpos.size:
        return [], np.zeros(0, np.int64)
    as_cq = QueueUnits(u.base_offset, u.offset, u.size, u.tags_code)
    found, covered, rows = pointer_checks(as_cq, vpos, q.topic, q.queue_id, records, window.extent, True)
    probs = [_problem(q, u, p, code, detail, phys) for p, code, detail, phys in found]
    # the two values a 20-byte unit does not have: store time and batch size
    hp, hr = vpos[rows >= 0], rows[rows >= 0]
    for k in np.flatnonzero(u.store_time[hp] != records.store_timestamp[hr]).tolist():
        j = int(hp[k])
        probs.append(
            _problem(
                q,
                u,
                j,
                CQ_STORE_TIME_MISMATCH,
                f"unit storeTime {int(u.store_time[j])}, record's storeTimestamp {int(records.store_timestamp[hr[k]])}",
                int(u.offset[j]),
            )
        )
    for k, props in reader.each(records.phys[hr], records.size[hr]):
        j = int(hp[k])
        want = expected_batch_size(props)
        if want is not None and want != int(u.batch_size[j]):
            probs.append(
                _problem(
                    q,
                    u,
                    j,
                    CQ_BATCH_SIZE_MISMATCH,
                    f"unit batchSize {int(u.batch_size[j])}, the record holds {want} message{'s' if want != 1 else ''}",
                    int(u.offset[j]),
                )
            )
    probs.sort(key=lambda p: (p.file_offset or 0, p.code))
    return probs, covered
