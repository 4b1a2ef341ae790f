"""`cq verify` for Light Message Queues (`consumequeue/%LMQ%name/0/`), both ways.

With enableLmq/enableMultiDispatch a message of a parent topic names LMQ
queues in INNER_MULTI_DISPATCH ("%LMQ%a,%LMQ%b"); the CommitLog assigns each
its queue offset and stores them, in the same order, in
INNER_MULTI_QUEUE_OFFSET. After the parent's own unit is written, one more
20-byte unit per LMQ goes to that queue (queue id 0) at that offset, with
the record's offset, size and tagsCode. So a unit in an LMQ queue is right
when it points at a record whose properties name that queue at that
offset, and every such record needs that unit. Records of %RETRY%, rmq_sys_
and SCHEDULE_TOPIC_XXXX topics are never multi-dispatched.
"""

from __future__ import annotations

import numpy as np

from rmqdump.checks.cqunits import (
    CQ_QUEUE_MISMATCH,
    CQ_QUEUE_OFFSET_MISMATCH,
    CQ_TOPIC_MISMATCH,
    RecordTable,
    RecordWindow,
    findings_to_problems,
    missing_unit,
    pointer_checks,
)
from rmqdump.common.problems import Problem
from rmqdump.readers.commitlog import CommitLog, SegmentFile
from rmqdump.readers.consumequeue import QueueUnits
from rmqdump.readers.recordprops import RecordProps, find_all, multi_dispatch
from rmqdump.schemas import constants as C

CQ_LMQ_NOT_DISPATCHED = "cq_lmq_not_dispatched"  # the record's INNER_MULTI_DISPATCH does not name this queue

_NEEDLE = (C.PROPERTY_INNER_MULTI_DISPATCH + C.NAME_VALUE_SEPARATOR).encode()
_NOT_HERE = {CQ_TOPIC_MISMATCH, CQ_QUEUE_MISMATCH, CQ_QUEUE_OFFSET_MISMATCH}


def check_lmq_units_in_window(
    u: QueueUnits,
    topic: str,
    queue_id: int,
    window: RecordWindow,
    *,
    seen_real: bool,
    cq_file_of,
    reader: RecordProps,
) -> tuple[list[Problem], set[tuple[str, int, int]]]:
    """Pointer checks of one LMQ queue's valid units pointing into one window of records.

    Returns the problems and the (queue, offset, phys) of every unit that is
    right, for the record side (`missing_lmq_units`).
    """
    if len(u) == 0:
        return [], set()
    records = window.records
    vpos, _ = window.pointing_in(u, seen_real)
    found, _, rows = pointer_checks(u, vpos, topic, queue_id, records, window.extent, True)
    found = [f for f in found if f[1] not in _NOT_HERE]  # the record is the parent topic's, by design
    ok: set[tuple[str, int, int]] = set()
    hv, hr = vpos[rows >= 0], rows[rows >= 0]
    for k, props in reader.each(records.phys[hr], records.size[hr]):
        j, ri = int(hv[k]), int(hr[k])
        phys, idx = int(u.offset[j]), int(u.index[j])
        parent = records.topics[int(records.topic_id[ri])]
        pairs = multi_dispatch(parent, props)
        offs = [o for name, o in pairs if name == topic]
        if not offs:
            found.append((j, CQ_LMQ_NOT_DISPATCHED, f"record of {parent!r} does not name {topic!r} in {C.PROPERTY_INNER_MULTI_DISPATCH}", phys))
            continue
        if idx not in offs:
            found.append(
                (j, CQ_QUEUE_OFFSET_MISMATCH, f"record's {C.PROPERTY_INNER_MULTI_QUEUE_OFFSET} gives {topic!r} offset {offs[0]}, unit index {idx}", phys)
            )
            continue
        if queue_id != C.LMQ_QUEUE_ID:
            found.append((j, CQ_QUEUE_MISMATCH, f"an LMQ unit is in queue {C.LMQ_QUEUE_ID}, not {queue_id}", phys))
            continue
        ok.add((topic, idx, phys))  # the record's unit is here (a wrong size or tagsCode is reported above)
    return findings_to_problems(found, u, topic, queue_id, cq_file_of), ok


def dispatching_records(files: list[SegmentFile], phys: np.ndarray, size: np.ndarray) -> np.ndarray:
    """Indices of the records (sorted starts, sizes) whose bytes hold an INNER_MULTI_DISPATCH name (one search over their stretch of `files`)."""
    if not len(phys):
        return np.zeros(0, np.int64)
    lo, hi = int(phys[0]), int((phys + size).max())
    hits: list[int] = []
    for seg in files:
        a, b = max(lo, seg.base), min(hi, seg.base + seg.size)
        if a < b:
            hits += [seg.base + p for p in find_all(seg.path, _NEEDLE, a - seg.base, b - seg.base)]
    if not hits:
        return np.zeros(0, np.int64)
    h = np.array(hits, dtype=np.int64)
    i = np.searchsorted(phys, h, side="right") - 1
    ok = (i >= 0) & (h < phys[np.clip(i, 0, None)] + size[np.clip(i, 0, None)])
    return np.unique(i[ok])


def missing_lmq_units(
    cl: CommitLog,
    records: RecordTable,
    found: set[tuple[str, int, int]],
    *,
    reader: RecordProps,
    expected_path,
    select=None,
) -> list[Problem]:
    """Records that name an LMQ queue at an offset with no right unit there.

    found: (queue, offset, phys) of the right units (check_lmq_units_in_window).
    expected_path(queue, queue_id, offset) -> the CQ file that should hold the unit.
    select(queue) -> whether that LMQ queue is being verified.
    """
    out = []
    idx = dispatching_records(cl.files, records.phys, records.size)
    idx = idx[records.queued[idx]]
    for k, props in reader.each(records.phys[idx], records.size[idx]):
        i = int(idx[k])
        phys = int(records.phys[i])
        parent = records.topics[int(records.topic_id[i])]
        for name, off in multi_dispatch(parent, props):
            if (name, off, phys) in found or (select is not None and not select(name)):
                continue
            path = expected_path(name, C.LMQ_QUEUE_ID, off)
            out.append(missing_unit(name, C.LMQ_QUEUE_ID, off, path, phys, f"record at {phys} of {parent!r} names {name!r} at offset {off}: no unit there points at it"))
    return out
