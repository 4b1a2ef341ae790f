"""The ConsumeQueue unit checks: pure functions over numpy arrays, shared by every queue kind and engine.

* ``check_units(units, topic, queue_id, records, extent, ...)`` checks one
  stretch of one queue's units against the records and returns the problems
  and the records the units legitimately point at;
* ``missing_units(records, covered, ...)`` lists the records that should have
  a unit and were not covered by any.

``records`` is a :class:`RecordTable` (sorted physical offsets and the header
and dispatch values of every CommitLog record, from rmqdump.scan.dispatch) and
``extent`` a :class:`CommitLogExtent` (which byte ranges the CommitLog files
cover and where its valid data ends). The join is a compiled merge of the unit
offsets into the record offsets; every comparison is a vector operation, and
Python objects are only made for the units that fail. The batch, ext and LMQ
checks (batchcqverify, cqextverify, lmqverify) build on these; cqverify runs
them all over a store.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields

import numpy as np

from rmqdump.common.problems import Problem
from rmqdump.readers.commitlog import CommitLog
from rmqdump.readers.consumequeue import CQ_HOLE, QueueUnits
from rmqdump.scan.dispatch import DispatchColumns, DispatchJoin

# Unit problems (stable codes; the CommitLog scan adds its own codes).
CQ_OFFSET_OUT_OF_RANGE = "cq_offset_out_of_range"
CQ_NOT_MESSAGE_START = "cq_not_message_start"
CQ_SIZE_MISMATCH = "cq_size_mismatch"
CQ_TOPIC_MISMATCH = "cq_topic_mismatch"
CQ_QUEUE_MISMATCH = "cq_queue_mismatch"
CQ_QUEUE_OFFSET_MISMATCH = "cq_queue_offset_mismatch"
CQ_TAGS_CODE_MISMATCH = "cq_tags_code_mismatch"
CQ_HOLE = CQ_HOLE
CQ_DANGLING = "cq_dangling"
CQ_NON_MONOTONIC = "cq_non_monotonic"
CQ_MISSING_UNIT = "cq_missing_unit"


PROBLEM_COLUMNS = ("topic", "queue_id", "cq_file", "unit_index")  # on every JSON Lines problem, CommitLog problems included
PROBLEM_KEYS = ("code", *PROBLEM_COLUMNS, "phys_offset", "detail")


@dataclass
class RecordTable:
    """Every CommitLog record as columns, sorted by physical offset.

    `topic_id` indexes `topics`; `queued` marks transaction type none/commit
    (the records that must have a ConsumeQueue unit).
    """

    phys: np.ndarray  # int64
    size: np.ndarray  # int32 totalSize
    topic_id: np.ndarray  # int32
    queue_id: np.ndarray  # int32
    queue_offset: np.ndarray  # int64
    tags_code: np.ndarray  # int64
    store_timestamp: np.ndarray  # int64
    queued: np.ndarray  # bool
    topics: list[str]

    def __len__(self) -> int:
        return len(self.phys)

    def topic_code(self, topic: str) -> int:
        try:
            return self.topics.index(topic)
        except ValueError:
            return -1

    def rows_at(self, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The join of physical offsets with the records: (a record starts there, its row (clipped where none does))."""
        if not len(self) or not len(offsets):
            return np.zeros(len(offsets), dtype=bool), np.zeros(len(offsets), dtype=np.int64)
        from rmqdump.scan import scanner

        rows = np.empty(len(offsets), dtype=np.int64)
        hit = scanner.join_offsets(self.phys, np.ascontiguousarray(offsets, dtype=np.int64), rows)
        return hit, np.minimum(rows, len(self) - 1)

    @property
    def data_end(self) -> int:
        """End of the last record (0 when there is none)."""
        return int((self.phys + self.size).max()) if len(self) else 0

    @classmethod
    def empty(cls) -> RecordTable:
        return RecordTableBuilder().build()


class RecordTableBuilder:
    """Collects dispatch columns through the one accumulator (rmqdump.scan.dispatch.DispatchJoin), keeping nothing else of the batches."""

    def __init__(self):
        self.join = DispatchJoin()

    @property
    def n(self) -> int:
        return self.join.n

    def add_part(self, part: DispatchColumns) -> None:
        """A range's dispatch columns, topic ids renumbered into this builder's."""
        self.join.add(part)

    def build(self) -> RecordTable:
        d = self.join.take()
        arrays = {f.name: getattr(d, f.name) for f in fields(RecordTable) if f.name != "topics"}  # the dispatch columns of the same names
        order = np.argsort(arrays["phys"], kind="stable")
        if len(order) and not np.all(order[1:] > order[:-1]):
            arrays = {k: a[order] for k, a in arrays.items()}
        return RecordTable(**arrays, topics=d.topics)


@dataclass(frozen=True)
class CommitLogExtent:
    """Which physical offsets the CommitLog files hold, and where its records end."""

    starts: np.ndarray  # int64, sorted file start offsets
    ends: np.ndarray  # int64, start + size
    data_end: int

    @classmethod
    def of(cls, cl: CommitLog, data_end: int) -> CommitLogExtent:
        s = np.array([f.base for f in cl.files], dtype=np.int64)
        e = np.array([f.base + f.size for f in cl.files], dtype=np.int64)
        return cls(s, e, data_end)


@dataclass(frozen=True)
class RecordWindow:
    """One window of CommitLog records and the unit offsets it answers for, [lo, hi): each unit is joined in one window."""

    records: RecordTable
    extent: CommitLogExtent
    lo: int
    hi: int

    def pointing_in(self, u: QueueUnits, seen_real: bool) -> tuple[np.ndarray, bool]:
        """Positions of u's valid non-filler units whose offset is in [lo, hi), and seen_real after u."""
        real, _, seen_real = real_mask(u, seen_real)
        return np.flatnonzero(real & (u.offset >= self.lo) & (u.offset < self.hi)), seen_real


@dataclass
class UnitCheck:
    """What check_units found in one stretch of one queue."""

    problems: list[Problem]
    covered: np.ndarray  # record indices the stretch's units correctly point at
    units: int  # units checked (fillers and the zero tail excluded)
    last_offset: int  # commitLogOffset of the stretch's last valid unit (carry to the next stretch)
    seen_real: bool  # a non-filler unit has been seen (fillers only pad the queue's start)


def position_runs(mask_idx: np.ndarray) -> list[tuple[int, int]]:
    """Consecutive runs in a sorted array of positions: (first, length)."""
    if not len(mask_idx):
        return []
    breaks = np.flatnonzero(np.diff(mask_idx) != 1) + 1
    starts = np.concatenate([[0], breaks])
    ends = np.concatenate([breaks, [len(mask_idx)]])
    return [(int(mask_idx[s]), int(e - s)) for s, e in zip(starts, ends, strict=True)]


def real_mask(u: QueueUnits, seen_real: bool) -> tuple[np.ndarray, np.ndarray, bool]:
    """(valid non-filler units, leading filler units, seen_real after this stretch)."""
    valid = u.valid_mask()
    filler = u.filler_mask()
    if not seen_real:
        real_pos = np.flatnonzero(valid & ~filler)
        first_real = int(real_pos[0]) if real_pos.size else len(u)
        filler[first_real:] = False
        seen_real = real_pos.size > 0
    else:
        filler[:] = False
    return valid & ~filler, filler, seen_real


Found = list[tuple[int, str, str, "int | None"]]  # (unit position, code, detail, phys offset)


def _order_checks(u: QueueUnits, real: np.ndarray, filler: np.ndarray, last_valid: int, prev_offset: int) -> tuple[Found, int, int]:
    """Holes, garbage after the end and non-monotonic offsets: (findings, units counted, last offset)."""
    found: Found = []
    off, size, tags, idx = u.offset, u.size, u.tags_code, u.index
    invalid = ~real & ~filler
    zero = (off == 0) & (size == 0) & (tags == 0)
    inner = np.flatnonzero(invalid & (idx < last_valid))
    for p, length in position_runs(inner):
        what = "zero" if zero[p : p + length].all() else "invalid (offset < 0 or size <= 0)"
        found.append((p, CQ_HOLE, f"{length} {what} unit{'s' if length > 1 else ''} followed by valid units: consumers skip or stall here", None))
    tail_garbage = np.flatnonzero(invalid & (idx > last_valid) & ~zero)
    for p, length in position_runs(tail_garbage):
        found.append((p, CQ_HOLE, f"{length} non-zero invalid unit{'s' if length > 1 else ''} after the queue's last valid unit", None))
    vpos = np.flatnonzero(real)
    if vpos.size:
        vo = off[vpos]
        prevs = np.concatenate([[prev_offset], vo[:-1]])
        for k in np.flatnonzero(vo <= prevs).tolist():
            found.append((int(vpos[k]), CQ_NON_MONOTONIC, f"offset {int(vo[k])} is not above the previous unit's {int(prevs[k])}", int(vo[k])))
        prev_offset = int(vo[-1])
    return found, int(vpos.size + inner.size + tail_garbage.size), prev_offset


def pointer_checks(
    u: QueueUnits, vpos: np.ndarray, topic: str, queue_id: int, records: RecordTable, extent: CommitLogExtent, check_tags: bool
) -> tuple[Found, np.ndarray, np.ndarray]:
    """Where the units at positions `vpos` point: the CommitLog's range, a record start, its values (one compiled pass,
    rmqdump.scan.scanner.unit_pointers; Python only for the units with a finding). Returns the findings, the records
    the units rightly point at, and per unit of `vpos` the record row it names (-1: no record starts there)."""
    from rmqdump.scan import layout as L
    from rmqdump.scan import scanner

    tid = records.topic_code(topic)
    flags, rows = scanner.unit_pointers(u, vpos, records, extent.starts, extent.ends, extent.data_end, tid, queue_id, check_tags)
    off, size, idx = u.offset, u.size, u.index
    found: Found = []
    for k in np.flatnonzero(flags).tolist():
        j, b, r_ = int(vpos[k]), int(flags[k]), int(rows[k])
        o = int(off[j])
        if b == L.UNIT_DANGLING:
            found.append((j, CQ_DANGLING, f"offset {o} is at or past the end of the CommitLog's data ({extent.data_end})", o))
        elif b == L.UNIT_OUTSIDE:
            found.append((j, CQ_OFFSET_OUT_OF_RANGE, f"offset {o} is in no CommitLog file", o))
        elif b == L.UNIT_NOT_START:
            found.append((j, CQ_NOT_MESSAGE_START, f"no valid record starts at offset {o}", o))
        else:
            if b & L.UNIT_SIZE:
                found.append((j, CQ_SIZE_MISMATCH, f"unit size {int(size[j])}, record totalSize {int(records.size[r_])}", o))
            if b & L.UNIT_TOPIC:
                found.append((j, CQ_TOPIC_MISMATCH, f"record is in topic {records.topics[int(records.topic_id[r_])]!r}, not {topic!r}", o))
            if b & L.UNIT_QUEUE:
                found.append((j, CQ_QUEUE_MISMATCH, f"record is in queue {int(records.queue_id[r_])}, not {queue_id}", o))
            if b & L.UNIT_QUEUE_OFFSET:
                found.append((j, CQ_QUEUE_OFFSET_MISMATCH, f"record's queueOffset is {int(records.queue_offset[r_])}, unit index {int(idx[j])}", o))
            if b & L.UNIT_TAGS:
                found.append((j, CQ_TAGS_CODE_MISMATCH, f"unit tagsCode {int(u.tags_code[j])}, record's is {int(records.tags_code[r_])}", o))
    belongs = (rows >= 0) & ((flags & (L.UNIT_TOPIC | L.UNIT_QUEUE)) == 0)
    return found, rows[belongs], rows


def findings_to_problems(found: Found, u: QueueUnits, topic: str, queue_id: int, cq_file_of) -> list[Problem]:
    """Findings as Problems, in unit order (then code), located by `cq_file_of`."""
    found.sort(key=lambda t: (t[0], t[1]))
    return [_unit_problem(code, topic, queue_id, int(u.index[p]), phys, detail, cq_file_of) for p, code, detail, phys in found]


def check_units(
    units: QueueUnits | np.ndarray,
    topic: str,
    queue_id: int,
    records: RecordTable,
    extent: CommitLogExtent,
    *,
    first_index: int = 0,
    last_valid_index: int | None = None,
    prev_offset: int = -1,
    seen_real: bool = False,
    cq_file_of: Callable[[int], tuple[str, int]] | None = None,
    check_tags: bool = True,
) -> UnitCheck:
    """Check one stretch of one queue's units against the CommitLog records.

    units: QueueUnits, or a structured array of schemas.ConsumeQueueUnit whose
        first unit has queue offset `first_index`.
    records / extent: every record the stretch's units may point at, and the
        CommitLog's file ranges and data end.
    last_valid_index: queue offset of the queue's last valid unit (for telling
        holes from the zero tail); default: the last valid unit of this stretch.
    prev_offset / seen_real: carried from the previous stretch of the same queue.
    cq_file_of(unit_index) -> (cq file path, byte offset in it), for reporting.
    check_tags: False when tagsCode may be a ConsumeQueueExt address.
    Returns a UnitCheck; pure: reads nothing but its arguments.
    """
    u = units if isinstance(units, QueueUnits) else QueueUnits.from_array(units, first_index)
    if len(u) == 0:
        return UnitCheck([], np.zeros(0, np.int64), 0, prev_offset, seen_real)
    real, filler, seen_real = real_mask(u, seen_real)
    vpos = np.flatnonzero(real)
    if last_valid_index is None:
        last_valid_index = int(u.index[vpos[-1]]) if vpos.size else -1
    found, counted, prev_offset = _order_checks(u, real, filler, last_valid_index, prev_offset)
    more, covered, _ = pointer_checks(u, vpos, topic, queue_id, records, extent, check_tags)
    return UnitCheck(findings_to_problems(found + more, u, topic, queue_id, cq_file_of), covered, counted, prev_offset, seen_real)


def check_units_in_window(
    u: QueueUnits,
    topic: str,
    queue_id: int,
    window: RecordWindow,
    *,
    seen_real: bool = False,
    cq_file_of: Callable[[int], tuple[str, int]] | None = None,
    check_tags: bool = True,
) -> tuple[list[Problem], np.ndarray, bool]:
    """Only the pointer checks, for the valid units pointing into one window of records.

    With the CommitLog cut into windows of records, each unit is joined in the
    window that holds its offset, so memory stays bounded; the order checks
    (holes, monotonic offsets) run once per queue with check_units' other half.
    Returns (problems, covered record indices of this window, seen_real).
    """
    if len(u) == 0:
        return [], np.zeros(0, np.int64), seen_real
    vpos, seen_real = window.pointing_in(u, seen_real)
    found, covered, _ = pointer_checks(u, vpos, topic, queue_id, window.records, window.extent, check_tags)
    return findings_to_problems(found, u, topic, queue_id, cq_file_of), covered, seen_real


def check_order(
    u: QueueUnits,
    topic: str,
    queue_id: int,
    *,
    last_valid_index: int,
    prev_offset: int = -1,
    seen_real: bool = False,
    cq_file_of: Callable[[int], tuple[str, int]] | None = None,
) -> UnitCheck:
    """Only the order checks of one stretch (holes, garbage, non-monotonic offsets); `covered` is empty."""
    if len(u) == 0:
        return UnitCheck([], np.zeros(0, np.int64), 0, prev_offset, seen_real)
    real, filler, seen_real = real_mask(u, seen_real)
    found, counted, prev_offset = _order_checks(u, real, filler, last_valid_index, prev_offset)
    return UnitCheck(findings_to_problems(found, u, topic, queue_id, cq_file_of), np.zeros(0, np.int64), counted, prev_offset, seen_real)


def _unit_problem(code, topic, queue_id, unit_index, phys, detail, cq_file_of) -> Problem:
    path, pos = cq_file_of(unit_index) if cq_file_of else ("", None)
    return Problem(code, path, pos, detail, phys_offset=phys, extra={"topic": topic, "queue_id": queue_id, "cq_file": path or None, "unit_index": unit_index})


@dataclass
class MissingUnits:
    """A window's records that must have a unit and have none, as columns: a store without ConsumeQueues has a
    finding per record, and a caller that folds them (the report) takes them as arrays; iterating gives the
    cq_missing_unit Problems one at a time (a window's worth held at once would be hundreds of MB)."""

    topics: list[str]
    topic_id: np.ndarray  # int64, indexes topics
    queue_id: np.ndarray  # int64
    queue_offset: np.ndarray  # int64: the unit index the record's queue should have
    phys: np.ndarray  # int64
    cq_file_of: Callable[[str, int, int], str | None] | None = None

    def __len__(self) -> int:
        return len(self.phys)

    def problem(self, i: int) -> Problem:
        t, q, qo, phys = self.topics[int(self.topic_id[i])], int(self.queue_id[i]), int(self.queue_offset[i]), int(self.phys[i])
        path = self.cq_file_of(t, q, qo) if self.cq_file_of else None
        return missing_unit(t, q, qo, path, phys, f"record at {phys} (queueOffset {qo}) has no ConsumeQueue unit")

    def __iter__(self) -> Iterator[Problem]:
        return (self.problem(i) for i in range(len(self)))


def missing_units(
    records: RecordTable,
    covered: np.ndarray,
    *,
    select: np.ndarray | None = None,
    cq_file_of: Callable[[str, int, int], str | None] | None = None,
) -> MissingUnits:
    """Records that must have a unit (transaction type none/commit) and are not in `covered` (MissingUnits).

    covered: bool mask over records, or an array of record indices.
    select: optional bool mask of the records to consider (e.g. the queues verified).
    cq_file_of(topic, queue_id, unit_index) -> the CQ file that should hold the unit.
    """
    if covered.dtype != bool:
        mask = np.zeros(len(records), dtype=bool)
        mask[covered] = True
        covered = mask
    need = records.queued & ~covered
    if select is not None:
        need &= select
    rows = np.flatnonzero(need)
    return MissingUnits(
        records.topics,
        records.topic_id[rows].astype(np.int64),
        records.queue_id[rows].astype(np.int64),
        records.queue_offset[rows].astype(np.int64),
        records.phys[rows].astype(np.int64),
        cq_file_of,
    )


def missing_unit(topic: str, queue_id: int, unit_index: int, path: str | None, phys: int, detail: str) -> Problem:
    """cq_missing_unit: a record no unit points at, located at the file that should hold its unit (of a queue or an LMQ)."""
    return Problem(CQ_MISSING_UNIT, path or "", None, detail, phys_offset=phys, extra={"topic": topic, "queue_id": queue_id, "cq_file": path, "unit_index": unit_index})


# the driver ---------------------------------------------------------------------------------
