"""`cq verify`: every ConsumeQueue of a store against the CommitLog records, both ways.

The CommitLog is read once, range by range (rmqdump.scan.ranges, mapped by an
engine), into windows of record columns; each window is checked against the
units of every queue kind that point into it (rmqdump.checks.cqunits and the
batch, ext and LMQ checks), and its records without a unit are found. Memory
is bounded by the window, not the store.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np

from rmqdump.checks.cqunits import (
    CQ_MISSING_UNIT,
    CommitLogExtent,
    MissingUnits,
    RecordTable,
    RecordTableBuilder,
    RecordWindow,
    check_order,
    check_units_in_window,
    missing_units,
    real_mask,
)
from rmqdump.checks.repairholes import RepairHoles
from rmqdump.common.jsontext import fields_of
from rmqdump.common.problems import Problem
from rmqdump.readers.commitlog import CommitLog
from rmqdump.readers.consumequeue import UNIT_SIZE, ConsumeQueue, QueueUnits, reads_cached, unit_path
from rmqdump.readers.store import Store
from rmqdump.scan.dispatch import DelayLevels
from rmqdump.scan.ranges import SERIAL, Mapper, RangeScan, ScanOptions, map_ranges, scan_range
from rmqdump.scan.splits import RANGE_BYTES, commitlog_splits
from rmqdump.schemas import constants as C


@dataclass
class VerifySummary:
    queues: int = 0
    units: int = 0
    messages: int = 0
    problems: int = 0
    codes: dict[str, int] = field(default_factory=dict)
    filler_units: list[dict] = field(default_factory=list)  # repair's own filler units (checks.repairholes): listed, not problems

    def count(self, p: Problem) -> None:
        self.problems += 1
        self.codes[p.code] = self.codes.get(p.code, 0) + 1

    def to_dict(self) -> dict:
        return {"kind": "summary", **fields_of(self, omit=("codes", "filler_units")), "filler_units": len(self.filler_units)}


WINDOW_RECORDS = 1 << 18  # records joined at a time: about 11 MB of columns, a few times that while a window is checked (peak RSS ~410 MB at 4M messages)


def record_windows(
    cl: CommitLog,
    *,
    check_crc: bool = True,
    delays: DelayLevels | None = None,
    window_records: int = WINDOW_RECORDS,
    on_bytes=None,
    mapper: Mapper = SERIAL,
    range_bytes: int = RANGE_BYTES,
    fold: Callable | None = None,
    on_scan: Callable[[RangeScan], None] | None = None,
) -> Iterator[tuple[RecordTable, list[Problem]]]:
    """Scan the CommitLog once, in offset order, as record tables of about `window_records` records.

    fold: ScanOptions.fold, run on every batch in the ranges' tasks; on_scan(range scan) sees each range's
    result in offset order (with its folded values) before it joins a table: a caller that needs more of
    each record than the table holds gets it from the same walk.

    The planner's byte ranges are read by `scan_range`, mapped by `mapper`
    (builtin map, or an engine's: threads give the same tables), and a window
    holds whole ranges. Each table comes with the scan problems found while
    reading it; the last one may be empty. Consecutive tables cover
    consecutive offset ranges. The ranges start being read now, not at the
    first table asked for.
    """
    options = ScanOptions(keys=False, delays=delays or DelayLevels.parse(), fold=fold)
    scans = map_ranges(commitlog_splits(cl, range_bytes, check_crc=check_crc), functools.partial(scan_range, options=options), mapper, progress=on_bytes)
    return _windows(scans, window_records, on_scan)


def _windows(scans: Iterable[tuple[object, RangeScan]], window_records: int, on_scan=None) -> Iterator[tuple[RecordTable, list[Problem]]]:
    table = RecordTableBuilder()
    problems: list[Problem] = []
    for _, r in scans:
        if on_scan is not None:
            on_scan(r)
        table.add_part(r.columns)
        problems += r.problems
        if table.n >= window_records:
            yield table.build(), problems
            table, problems = RecordTableBuilder(), []
    yield table.build(), problems


def cq_locator(q: ConsumeQueue) -> Callable[[int], tuple[str, int]]:
    """unit index -> (where the unit lives, byte offset there), for reporting."""
    if hasattr(q, "locate"):  # a RocksDB ConsumeQueue: units live in the database, named by their key
        return q.locate

    def where(index: int) -> tuple[str, int]:
        f = q.file_for_index(index)
        if f is None:
            return q.expected_path(index), None
        return f.path, index * UNIT_SIZE - f.base

    return where


@dataclass
class _QueueState:
    """Per queue, from the order pass: the offset range of each file's real units (to skip files per window)."""

    q: ConsumeQueue
    where: Callable
    ranges: list[tuple[int, int, bool] | None]  # per file: (min, max) offset of its real units, a real unit came before the file
    fillers: RepairHoles | None = None

    def read(self, f) -> QueueUnits:
        """One file's units, less repair's filler units (listed by the order pass)."""
        u = self.q.read_file(f).head_written()
        return u if self.fillers is None else self.fillers.take(u, self.q.topic, self.q.queue_id, self.where)[0]


@dataclass(frozen=True)
class VerifyScope:
    """What a `cq verify` run covers (a queue selection) and how it reads records: shared by the local and Spark engines."""

    topic: str | None = None
    queue_id: int | None = None
    check_crc: bool = True
    delays: DelayLevels | None = None

    def queues(self, store: Store) -> list[ConsumeQueue]:
        return store.select_queues(self.topic, self.queue_id)

    def layout_problems(self, store: Store, queues: list[ConsumeQueue]) -> list[Problem]:
        """The store's layout problems, less those of queues outside the selection."""
        wanted = {(q.topic, q.queue_id) for q in queues} | {(q.topic, q.queue_id) for q in store.select_batch_queues(self.topic, self.queue_id)}

        def elsewhere(p: Problem) -> bool:
            return "topic" in p.extra and p.extra.get("queue_id") is not None and (p.extra.get("topic"), p.extra.get("queue_id")) not in wanted

        return [p for p in store.problems if not elsewhere(p)]

    def selects(self, topic: str, queue_id: int) -> bool:
        return (self.topic is None or topic == self.topic) and (self.queue_id is None or queue_id == self.queue_id)

    def record_select(self, records: RecordTable) -> np.ndarray | None:
        """Which records are in the selected queues (None: all of them)."""
        if self.topic is None and self.queue_id is None:
            return None
        select = np.ones(len(records), dtype=bool)
        if self.topic is not None:
            select &= records.topic_id == records.topic_code(self.topic)
        if self.queue_id is not None:
            select &= records.queue_id == self.queue_id
        return select


def verify(
    store: Store,
    *,
    topic: str | None = None,
    queue_id: int | None = None,
    check_crc: bool = True,
    delays: DelayLevels | None = None,
    summary: VerifySummary | None = None,
    on_bytes=None,
    window_records: int = WINDOW_RECORDS,
    mapper: Mapper = SERIAL,
    range_bytes: int = RANGE_BYTES,
    windows: Iterable[tuple[RecordTable, list[Problem]]] | None = None,
    batched: bool = False,
) -> Iterator[Problem | MissingUnits]:
    """Every finding of `cq verify` on a store.

    batched: a window's records without a unit come as one MissingUnits (columns; iterating it gives the
    Problems), for a caller that folds a finding per message as arrays; by default one Problem at a time.

    `windows`: the CommitLog's record tables, as record_windows gives them,
    when a caller has them already (rebuild's self-check); by default the
    CommitLog is scanned.

    Order: layout problems; per queue the order checks (holes, monotonic
    offsets); then per window of CommitLog records its scan problems, the
    pointer checks of the units that point into it and the window's records
    that have no unit. Memory is bounded by the window, not the store.
    """
    s = summary if summary is not None else VerifySummary()
    scope = VerifyScope(topic, queue_id, check_crc, delays)
    if windows is None:
        windows = record_windows(
            store.commitlog, check_crc=check_crc, delays=delays, window_records=window_records, on_bytes=on_bytes, mapper=mapper, range_bytes=range_bytes
        )
    with reads_cached():  # each queue file read once: by the order pass, then by the windows its units point into
        for p in _findings(store, scope, s, windows, batched):
            if isinstance(p, MissingUnits):
                s.problems += len(p)
                s.codes[CQ_MISSING_UNIT] = s.codes.get(CQ_MISSING_UNIT, 0) + len(p)
            else:
                s.count(p)
            yield p


def _findings(
    store: Store, scope: VerifyScope, s: VerifySummary, windows: Iterable[tuple[RecordTable, list[Problem]]], batched: bool
) -> Iterator[Problem | MissingUnits]:
    """verify's findings in order; `s` gets the queue, unit and message counts."""
    queues = scope.queues(store)
    s.queues = len(queues)
    yield from scope.layout_problems(store, queues)
    kinds = _Kinds.of(store, scope)
    s.queues += len(kinds.batch)
    yield from kinds.ext_problems()
    for _bq, order in kinds.batch_orders():
        s.units += order.units
        yield from order.problems
    states: list[_QueueState] = []
    yield from _order_pass(queues, states, s, RepairHoles.of(store))
    from rmqdump.readers.recordprops import RecordProps

    reader = RecordProps(store.commitlog)
    try:
        yield from _window_pass(store, scope, kinds, states, windows, s, reader, batched)
    finally:
        reader.close()


def _order_pass(queues: list[ConsumeQueue], states: list[_QueueState], s: VerifySummary, fillers: RepairHoles | None = None) -> Iterator[Problem]:
    """Per queue, file by file: the order checks, and (into `states`) the offset range of each file's real units.

    fillers: the holes a repair by rmqdump left; their filler units are taken out of the checks and listed in `s`."""
    for q in queues:
        where = cq_locator(q)
        last_valid = q.last_valid_index()
        prev, seen = -1, False
        ranges: list[tuple[int, int, bool] | None] = []
        for chunk in q.chunks():
            chunk = chunk.head_written()
            if fillers is not None:
                chunk, rows = fillers.take(chunk, q.topic, q.queue_id, where)
                s.filler_units += rows
            seen_before = seen
            res = check_order(chunk, q.topic, q.queue_id, last_valid_index=last_valid, prev_offset=prev, seen_real=seen, cq_file_of=where)
            prev, seen = res.last_offset, res.seen_real
            s.units += res.units
            real, _, _ = real_mask(chunk, seen_before)
            ro = chunk.offset[real]
            ranges.append((int(ro.min()), int(ro.max()), seen_before) if ro.size else None)
            yield from res.problems
        states.append(_QueueState(q, where, ranges, fillers))


def _window_pass(store, scope, kinds, states, windows, s, reader, batched) -> Iterator[Problem | MissingUnits]:
    """Window by window of CommitLog records: its scan problems, the units pointing into it, its records without a unit."""
    lo = -(1 << 63)
    data_end = store.commitlog.min_offset
    for records, cl_problems in windows:
        s.messages += len(records)
        yield from cl_problems
        last = len(records) == 0  # record_windows ends with the remainder (empty when the store divides evenly)
        hi = records.data_end if len(records) else data_end
        data_end = max(data_end, hi)
        if last:
            hi = 1 << 63  # everything from here on is past the end of the data
        window = RecordWindow(records, CommitLogExtent.of(store.commitlog, data_end if last else 1 << 63), lo, hi)
        yield from _window_findings(store, scope, kinds, states, window, reader, batched)
        if last:
            return
        lo = hi
    # the scan ended on a full window: units past its end are dangling
    window = RecordWindow(RecordTable.empty(), CommitLogExtent.of(store.commitlog, data_end), lo, 1 << 63)
    for st in states:
        for _f, rng, chunk in _chunks_in(st, window.lo, window.hi):
            yield from check_units_in_window(chunk, st.q.topic, st.q.queue_id, window, seen_real=rng[2], cq_file_of=st.where)[0]
    from rmqdump.checks import batchcqverify

    for bq, u in kinds.batch_chunks_in(window.lo, window.hi):
        yield from batchcqverify.check_batch_units_in_window(bq, u, window, reader)[0]


def _window_findings(
    store, scope: VerifyScope, kinds: _Kinds, states: list[_QueueState], window: RecordWindow, reader, batched
) -> Iterator[Problem | MissingUnits]:
    """The units of every kind of queue pointing into one window, then the window's records that no unit covers."""
    from rmqdump.checks import batchcqverify, cqextverify, lmqverify
    from rmqdump.readers.recordprops import is_lmq

    records = window.records
    covered = np.zeros(len(records), dtype=bool)
    lmq_found: set = set()
    for st in states:
        lmq = is_lmq(st.q.topic)
        for _f, rng, chunk in _chunks_in(st, window.lo, window.hi):
            if lmq:
                probs, ok = lmqverify.check_lmq_units_in_window(chunk, st.q.topic, st.q.queue_id, window, seen_real=rng[2], cq_file_of=st.where, reader=reader)
                lmq_found |= ok
            else:
                probs, cov, _ = check_units_in_window(
                    chunk, st.q.topic, st.q.queue_id, window, seen_real=rng[2], cq_file_of=st.where, check_tags=not kinds.has_ext
                )
                covered[cov] = True
            if kinds.has_ext and not lmq:  # LMQ units carry the plain tagsCode, checked above
                ext = store.ext_queues.get((st.q.topic, st.q.queue_id))
                probs = probs + cqextverify.check_ext_units_in_window(chunk, st.q.topic, st.q.queue_id, ext, window, seen_real=rng[2], cq_file_of=st.where)
            yield from probs
    for bq, u in kinds.batch_chunks_in(window.lo, window.hi):
        probs, cov = batchcqverify.check_batch_units_in_window(bq, u, window, reader)
        covered[cov] = True
        yield from probs
    expected = functools.partial(expected_cq_path, store)
    missing = missing_units(records, covered, select=scope.record_select(records), cq_file_of=expected)
    if batched and len(missing):
        yield missing
    else:
        yield from missing
    if kinds.has_lmq:  # the records naming LMQ queues are searched for only when the store has LMQ queues
        yield from lmqverify.missing_lmq_units(store.commitlog, records, lmq_found, reader=reader, expected_path=expected, select=kinds.lmq_selected)


def expected_cq_path(store: Store, topic: str, queue_id: int, index: int) -> str | None:
    """The ConsumeQueue (or Batch ConsumeQueue) file that should hold a queue's unit `index`."""
    q = store.queue(topic, queue_id)
    if q is not None:
        return q.expected_path(index)
    bq = store.batch_queues.get((topic, queue_id))
    if bq is not None:
        return bq.expected_path(index)
    return unit_path(os.path.join(store.root, "consumequeue", topic, str(queue_id)), store.cq_file_size, index)


@dataclass
class _Kinds:
    """The 5.x queue kinds of a verify run: Batch ConsumeQueues, ConsumeQueue ext, LMQ selection."""

    store: Store
    batch: list
    has_ext: bool
    scope: VerifyScope
    ranges: dict = field(default_factory=dict)
    has_lmq: bool = False

    @classmethod
    def of(cls, store: Store, scope: VerifyScope) -> _Kinds:
        has_ext = bool(store.ext_queues) or os.path.isdir(os.path.join(store.root, "consumequeue_ext"))
        has_lmq = any(t.startswith(C.LMQ_PREFIX) for t, _ in store.queues)
        return cls(store, store.select_batch_queues(scope.topic, scope.queue_id), has_ext, scope, has_lmq=has_lmq)

    def ext_problems(self) -> list[Problem]:
        out = []
        for (t, qid), ext in sorted(self.store.ext_queues.items()):
            if self.scope.selects(t, qid):
                ext.units()
                out.extend(ext.problems)
        return out

    def batch_orders(self):
        from rmqdump.checks.batchcqverify import check_batch_order

        for bq in self.batch:
            order = check_batch_order(bq)
            self.ranges[(bq.topic, bq.queue_id)] = order.ranges
            yield bq, order

    def batch_chunks_in(self, lo: int, hi: int):
        """Per Batch ConsumeQueue, the files with valid units pointing into [lo, hi), read."""
        for bq in self.batch:
            for _f, u, rng in zip(bq.files, bq.chunks(), self.ranges.get((bq.topic, bq.queue_id), []), strict=False):
                if rng is None or rng[1] < lo or rng[0] >= hi:
                    continue
                yield bq, u

    def lmq_selected(self, name: str) -> bool:
        return self.scope.selects(name, C.LMQ_QUEUE_ID)


def _chunks_in(st: _QueueState, lo: int, hi: int):
    """The files of a queue that have real units pointing into [lo, hi), read; earlier files only decide fillers."""
    for f, rng in zip(st.q.files, st.ranges, strict=True):
        if rng is None or rng[1] < lo or rng[0] >= hi:
            continue
        yield f, rng, st.read(f)
