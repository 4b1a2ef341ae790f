"""Findings folded into causes, for people: a run of one code in one queue is one line, the damage before what follows from it.

One bad record or a crash's dispatch lag gives thousands of findings of one
code, one per unit or message; an operator reads causes. `cq verify`'s table and
the report show these lines; JSON Lines keep one row per finding for tools.
Memory is one Run per line, never per finding (a run grows while the queue's
offsets follow each other).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from rmqdump.checks import cqunits
from rmqdump.common import problems as P

# The order lines are shown in: the damage first, then what follows from it.
DAMAGE, UNITS, MISSING = 0, 1, 2
_RECORD_CODES = {P.BAD_MAGIC, P.BAD_TOTAL_SIZE, P.SIZE_MISMATCH, P.BODY_CRC_MISMATCH, P.PROP_CRC_MISMATCH, P.ZEROED_RANGE, P.RECORD_PAST_END, P.TRUNCATED_TAIL}


@dataclass
class Run:
    """Consecutive findings of one code in one queue (a CommitLog finding is a run of its own)."""

    code: str
    topic: str | None
    queue_id: int | None
    first_index: int | None
    last_index: int | None
    first_phys: int | None
    last_phys: int | None
    file: str | None
    detail: str  # the first finding's
    note: str | None = None  # what a restart does with these (the report's recovery preview)
    count: int = 1

    @property
    def rank(self) -> int:
        if self.topic is None:
            return DAMAGE
        return MISSING if self.code == cqunits.CQ_MISSING_UNIT else UNITS

    @property
    def units(self) -> str:
        """The queue offsets, `a` or `a..b`."""
        if self.first_index is None:
            return ""
        return str(self.first_index) if self.last_index == self.first_index else f"{self.first_index}..{self.last_index}"

    @property
    def phys(self) -> str:
        """The CommitLog offsets of the first and last finding, `a` or `a..b`."""
        if self.first_phys is None and self.last_phys is None:
            return ""
        if self.count == 1 or self.first_phys == self.last_phys:
            return str(self.first_phys)
        return f"{'' if self.first_phys is None else self.first_phys}..{'' if self.last_phys is None else self.last_phys}"

    @property
    def text(self) -> str:
        """The line's detail: the finding's own, or for a run the count and the first one's."""
        what = self.detail if self.count == 1 else f"{self.count} in a row; the first: {self.detail}"
        return what if self.note is None else f"{what} ({self.note})"


@dataclass
class RunFolder:
    """Folds `cq verify` findings (their JSON Lines objects) into Runs."""

    open: dict[tuple, Run] = field(default_factory=dict)
    closed: list[Run] = field(default_factory=list)
    findings: int = 0

    def add(self, d: dict, note: str | None = None) -> None:
        """One finding (Problem.to_dict with cqunits.PROBLEM_COLUMNS); `note` splits runs by what becomes of them."""
        self.findings += 1
        topic, qid, idx, phys = d.get("topic"), d.get("queue_id"), d.get("unit_index"), d.get("phys_offset")
        file = d.get("ext_file") or d.get("cq_file") or d.get("file")
        if topic is not None and idx is not None:
            key = (d["code"], topic, qid, note)
            r = self.open.get(key)
            if r is not None and r.last_index is not None and idx == r.last_index + 1:
                r.last_index, r.count = idx, r.count + 1
                if phys is not None:
                    r.last_phys = phys
                    r.first_phys = phys if r.first_phys is None else r.first_phys
                return
            if r is not None:
                self.closed.append(r)
            self.open[key] = Run(d["code"], topic, qid, idx, idx, phys, phys, file, d.get("detail") or "", note)
            return
        self.closed.append(Run(d["code"], topic, qid, idx, idx, phys, phys, file, d.get("detail") or "", note))

    def add_missing(self, batch: cqunits.MissingUnits, fate: np.ndarray | None = None, notes: tuple[str | None, ...] = (None,)) -> None:
        """A window's missing units at once (a store without ConsumeQueues has one per message): the runs add() makes
        of them one by one, in order, with notes[fate[i]] as finding i's note. A Problem is made only where a run starts."""
        n = len(batch)
        self.findings += n
        if not n:
            return
        note = np.zeros(n, dtype=np.int64) if fate is None else fate
        order = np.lexsort((note, batch.queue_id, batch.topic_id))  # stable: each key's findings keep their order
        t, q, f = batch.topic_id[order], batch.queue_id[order], note[order]
        idx, phys = batch.queue_offset[order], batch.phys[order]
        starts = np.ones(n, dtype=bool)
        starts[1:] = (t[1:] != t[:-1]) | (q[1:] != q[:-1]) | (f[1:] != f[:-1]) | (idx[1:] != idx[:-1] + 1)
        first = np.flatnonzero(starts)
        for s, e in zip(first.tolist(), [*first[1:].tolist(), n], strict=True):
            key = (cqunits.CQ_MISSING_UNIT, batch.topics[int(t[s])], int(q[s]), notes[int(f[s])])
            r = self.open.get(key)
            if r is not None and r.last_index is not None and int(idx[s]) == r.last_index + 1:
                r.count += e - s
            else:
                if r is not None:
                    self.closed.append(r)
                d = batch.problem(int(order[s])).to_dict(cqunits.PROBLEM_COLUMNS)
                r = self.open[key] = Run(
                    d["code"], key[1], key[2], int(idx[s]), None, int(phys[s]), None, d.get("cq_file") or d.get("file"), d["detail"], key[3], e - s
                )
            r.last_index, r.last_phys = int(idx[e - 1]), int(phys[e - 1])

    def runs(self) -> list[Run]:
        """Every line: the damage first (CommitLog and layout findings), then bad units, then missing units; each by offset."""
        out = self.closed + list(self.open.values())
        big = 1 << 63
        return sorted(out, key=lambda r: (r.rank, big if r.first_phys is None else r.first_phys, r.topic or "", r.queue_id or 0, r.first_index or 0))


def causes(runs: list[Run]) -> list[str]:
    """The runs said in a few words per kind, the damage first: e.g. `1 damaged record (bad_magic)`,
    `3,499 units missing in 12 queues`."""
    out = []
    damage: dict[str, int] = {}
    for r in runs:
        if r.rank == DAMAGE:
            damage[r.code] = damage.get(r.code, 0) + r.count
    if damage:
        n = sum(damage.values())
        what = "damaged record" if set(damage) <= _RECORD_CODES else "CommitLog or file finding"
        out.append(f"{n:,} {what}{'s' if n != 1 else ''} ({', '.join(sorted(damage))})")
    units = [r for r in runs if r.rank == UNITS]
    if units:
        n = sum(r.count for r in units)
        q = len({(r.topic, r.queue_id) for r in units})
        codes = sorted({r.code for r in units})
        out.append(f"{n:,} bad unit finding{'s' if n != 1 else ''} in {q} queue{'s' if q != 1 else ''} ({', '.join(codes)})")
    notes: dict[str | None, list[Run]] = {}
    for r in runs:
        if r.rank == MISSING:
            notes.setdefault(r.note, []).append(r)
    for note, rs in notes.items():
        n = sum(r.count for r in rs)
        q = len({(r.topic, r.queue_id) for r in rs})
        out.append(f"{n:,} unit{'s' if n != 1 else ''} missing in {q} queue{'s' if q != 1 else ''}" + ("" if note is None else f": {note}"))
    return out
