"""Every journey of a store, once, with what the store-wide views (`tx`, `pop`, `delay`) fold them against: the
config files (the journey Context) and each queue's bounds. The views are folds over this; none walks records again.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from rmqdump.checks.cqunits import CommitLogExtent, RecordTable, findings_to_problems, pointer_checks, real_mask
from rmqdump.checks.journey import Context, Journey
from rmqdump.common.problems import Problem
from rmqdump.query.journeys import SCAN_BELOW, lifecycle_journeys
from rmqdump.readers.consumequeue import UNIT_SIZE
from rmqdump.readers.store import Store
from rmqdump.scan import scanner
from rmqdump.scan.ranges import SERIAL, Mapper
from rmqdump.schemas import lifecycle as L


@dataclass
class StoreJourneys:
    """One mapped scan's journeys, the CommitLog damage met on the way, and the context they were judged against."""

    store: Store
    found: list[Journey]
    damage: list[Problem]  # CommitLog problems of the scan: a view may miss what lies in a damaged range
    store_problems: list[Problem]  # problems about evidence (orphan or unreadable checkpoints, op records)
    ctx: Context
    checked: dict[tuple[str, int], tuple[int, int] | None] = field(default_factory=dict)  # a system queue's bounds over the units that name its records
    unit_problems: list[Problem] = field(default_factory=list)  # the system queues' units that name no record of theirs

    def bounds(self, topic: str, queue_id: int) -> tuple[int, int] | None:
        """(min offset, max offset) of a queue as the broker reports them; None when the store has no such queue, or, for
        a system queue the views show (checked), when none of its units names a record of that queue."""
        if (topic, queue_id) in self.checked:
            return self.checked[(topic, queue_id)]
        q = self.store.queues.get((topic, queue_id))
        return None if q is None else q.bounds()

    @property
    def config_problems(self) -> list[Problem]:
        """bad_config: the config files read that do not parse (consumerOffset.json when neither it nor its .bak does),
        and their entries that are damage."""
        return self.ctx.offsets_problems + self.ctx.config_problems

    def queue_problems(self, topic_matches) -> list[Problem]:
        """The unit problems of the checked queues of the topics that match."""
        return [p for p in self.unit_problems if topic_matches(p.extra["topic"])]

    def evidence_problems(self, hops: tuple[str, ...], codes: tuple[str, ...]) -> list[Problem]:
        """The store-wide problems with `codes` about records of these evidence hops (op, checkpoint, ack)."""
        at = {ev.phys_offset for ev in self.ctx.evidence if ev.hop in hops}
        return [p for p in self.store_problems if p.code in codes and p.phys_offset in at]

    def queue_ids(self, topic_matches) -> list[tuple[str, int]]:
        return sorted(k for k in self.store.queues if topic_matches(k[0]))

    def progress(self, group: str, topic_matches) -> list[tuple[str, int, int | None, int | None]]:
        """(topic, queue id, the group's committed offset, the queue's max offset) for every queue of the topics that
        match, held by the store or committed by the group (a system service's progress: None where it has none)."""
        keys = {(t, q) for (g, t, q) in self.ctx.offsets if g == group and topic_matches(t)}
        keys |= set(self.queue_ids(topic_matches))
        out = []
        for t, q in sorted(keys):
            b = self.bounds(t, q)
            out.append((t, q, self.ctx.offsets.get((group, t, q)), None if b is None else b[1]))
        return out


@dataclass
class View:
    """A store-wide view: its rows (JSON Lines objects), the problems it passes through, and its summary counts."""

    rows: list[dict] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    summary: dict = field(default_factory=dict)


def store_journeys(store: Store, *, mapper: Mapper = SERIAL, check_crc: bool = True, on_bytes=None) -> StoreJourneys:
    """The journeys of every message the broker moved or a POP consumer popped (rmqdump.query.journeys: through the
    queues and the index, or one mapped scan without ConsumeQueues), split into damage and evidence problems."""
    found, problems, g, ctx = lifecycle_journeys(store, mapper=mapper, check_crc=check_crc, on_bytes=on_bytes)
    scanned = {id(p) for p in g.problems}
    damage = [p for p in problems if id(p) in scanned]
    rest = [p for p in problems if id(p) not in scanned]
    checked, unit_problems = checked_queues(store, is_view_queue, check_crc=check_crc)
    return StoreJourneys(store, found, damage, rest, ctx, checked, unit_problems)


def is_view_queue(topic: str) -> bool:
    """The system queues whose bounds the views show: the delay levels', the transaction half and op queues, the revive queues."""
    return topic in (L.SCHEDULE_TOPIC, L.TRANS_HALF_TOPIC, L.TRANS_OP_HALF_TOPIC) or topic.startswith(L.REVIVE_TOPIC_PREFIX)


def checked_queues(store: Store, topic_matches, *, check_crc: bool = False) -> tuple[dict[tuple[str, int], tuple[int, int] | None], list[Problem]]:
    """Each matching queue's units checked against the records they name by cq verify's own pointer checks
    (checks.cqunits.pointer_checks, over a record table of the records those units name): a unit past the CommitLog's
    files or in none of them, where no record starts, whose size is not its record's, or whose record is of another
    topic, queue or queue offset is a problem and does not count. Returns each queue's bounds over the units that count
    (first, last + 1; the queue's own bounds when it holds no valid unit, None when none counts) and the problems.
    Units below the CommitLog's first offset name records deleted with their files, as the broker expects: they count."""
    cl = store.commitlog
    extent = CommitLogExtent.of(cl, max((f.base + f.size for f in cl.files), default=0))
    low = int(extent.starts.min()) if len(extent.starts) else 0
    bounds: dict[tuple[str, int], tuple[int, int] | None] = {}
    problems: list[Problem] = []
    for (t, qid), q in sorted(store.queues.items()):
        if not topic_matches(t):
            continue
        u = q.units()
        real, _, _ = real_mask(u, False)
        pos = np.flatnonzero(real)
        if not pos.size:
            bounds[(t, qid)] = q.bounds()
            continue
        deleted = u.offset[pos] < low
        asked = pos[~deleted]
        found = pointer_checks(u, asked, t, qid, _record_table(cl, u.offset[asked], check_crc), extent, check_tags=False)[0] if asked.size else []
        problems += findings_to_problems(found, u, t, qid, _cq_file_of(q))
        bad = {p for p, *_ in found}
        good = deleted.copy()
        good[~deleted] = [int(p) not in bad for p in asked.tolist()]
        ok = u.index[pos][good]
        bounds[(t, qid)] = (int(ok.min()), int(ok.max()) + 1) if ok.size else None
    return bounds, problems


def _record_table(cl, offsets: np.ndarray, check_crc: bool) -> RecordTable:
    """The records these units name, as the record table cq verify's pointer checks join units with."""
    found = _records_at(cl, offsets, check_crc)
    ms = [found[o] for o in sorted(found)]
    topics = sorted({m.topic for m in ms})
    col = lambda f, dt: np.array([f(m) for m in ms], dtype=dt)  # noqa: E731
    return RecordTable(
        phys=col(lambda m: m.phys_offset, np.int64),
        size=col(lambda m: m.total_size, np.int32),
        topic_id=col(lambda m: topics.index(m.topic), np.int32),
        queue_id=col(lambda m: m.queue_id, np.int32),
        queue_offset=col(lambda m: m.queue_offset, np.int64),
        tags_code=np.zeros(len(ms), np.int64),  # not checked: a delay unit's tagsCode is its delivery time
        store_timestamp=col(lambda m: m.store_timestamp, np.int64),
        queued=np.ones(len(ms), bool),
        topics=topics,
    )


def _records_at(cl, offsets: np.ndarray, check_crc: bool) -> dict:
    """The records starting at these offsets: one walk over their stretch when it is short, else a read each (a long
    queue of a big store names records all over its CommitLog)."""
    if not offsets.size:
        return {}
    if int(offsets.max()) - int(offsets.min()) < SCAN_BELOW:
        return scanner.records_at(cl, offsets, check_crc=check_crc)
    out = {}
    for o in np.unique(offsets).tolist():
        m = scanner.record_at(cl, o, check_crc=check_crc)
        if not isinstance(m, Problem):
            out[o] = m
    return out


def _cq_file_of(q):
    """(file, byte offset in it) of a unit index, for a queue of ConsumeQueue files; the queue's directory otherwise."""
    if not hasattr(q, "file_for_index"):
        return lambda i: (getattr(q, "path", ""), None)

    def where(i: int) -> tuple[str, int | None]:
        f = q.file_for_index(i)
        return (q.path, None) if f is None else (f.path, i * UNIT_SIZE - f.base)

    return where


def about(p: Problem, j: Journey) -> Problem:
    """A journey's problem as a view passes it on: naming the message (UNIQ_KEY), as `journey` does."""
    return replace(p, extra={**p.extra, "uniq_key": j.uniq_key})
