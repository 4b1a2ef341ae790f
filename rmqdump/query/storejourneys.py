"""Every journey of a store, once, with what the store-wide views (`tx`, `pop`, `delay`) fold them against: the
config files (the journey Context) and each queue's bounds. The views are folds over this; none walks records again.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from rmqdump.checks.journey import Context, Journey
from rmqdump.common.problems import Problem
from rmqdump.query.journeys import lifecycle_journeys
from rmqdump.readers.store import Store
from rmqdump.scan.ranges import SERIAL, Mapper


@dataclass
class StoreJourneys:
    """One mapped scan's journeys, the CommitLog damage met on the way, and the context they were judged against."""

    store: Store
    found: list[Journey]
    damage: list[Problem]  # CommitLog problems of the scan: a view may miss what lies in a damaged range
    store_problems: list[Problem]  # problems about evidence (orphan or unreadable checkpoints, op records)
    ctx: Context

    def bounds(self, topic: str, queue_id: int) -> tuple[int, int] | None:
        """(min offset, max offset) of a queue as the broker reports them; None when the store has no such queue."""
        q = self.store.queues.get((topic, queue_id))
        return None if q is None else q.bounds()

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
    return StoreJourneys(store, found, damage, rest, ctx)


def about(p: Problem, j: Journey) -> Problem:
    """A journey's problem as a view passes it on: naming the message (UNIQ_KEY), as `journey` does."""
    return replace(p, extra={**p.extra, "uniq_key": j.uniq_key})
