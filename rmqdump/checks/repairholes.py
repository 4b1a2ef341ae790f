"""The filler units `repair` left in a store's queues: listed by `cq verify` as repair's doing, not as damage.

`repair` replaces a damaged CommitLog range by a filler record (or closes its
file with a BLANK marker: builders.filler) and gives the queue offset of each
message destroyed there a filler unit (0, 2147483647, 0), which the broker's
pull steps over. Joined with the record at offset 0 such a unit fails every
pointer check and the order check; those findings say nothing about the store.

What marks a unit as repair's: the store's `rmqdump-repair/report.json` names
its queue offset in a hole, and the CommitLog still holds, between the hole's
neighbouring units, a replaced range of the report as repair wrote it (the
filler record's size, rolled-back type, empty topic and note; or the BLANK
marker). A filler unit without both is checked as on any other store.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from rmqdump.builders.filler import BLANKED, FILLER, MIN_FILLER, REPAIR_DIR, REPORT, note
from rmqdump.readers.consumequeue import QueueUnits
from rmqdump.readers.store import Store
from rmqdump.schemas import BlankMarker
from rmqdump.schemas import constants as C

FILLER_UNIT = "filler_unit"  # the kind of a `cq verify` row for such a unit


@dataclass(frozen=True)
class Replaced:
    """One range repair replaced: [phys_offset, phys_offset + length), by a filler or a BLANK marker."""

    phys_offset: int
    length: int
    action: str
    destroyed: frozenset  # (topic, queue id, queue offset) of the records whose header still read


@dataclass(frozen=True)
class Hole:
    """Queue offsets [first, end) of one queue without a message, and the replaced ranges that held them."""

    first: int
    end: int
    ranges: tuple[Replaced, ...]

    def range_of(self, topic: str, queue_id: int, index: int) -> Replaced | None:
        """The range unit `index` stood for: the one naming it, else the only candidate (None: several)."""
        named = [r for r in self.ranges if (topic, queue_id, index) in r.destroyed]
        if named:
            return named[0]
        return self.ranges[0] if len(self.ranges) == 1 else None


class RepairHoles:
    """Per queue, the holes a repair by rmqdump left whose fillers are still in the CommitLog."""

    def __init__(self, holes: dict[tuple[str, int], list[Hole]]):
        self.holes = holes

    @classmethod
    def of(cls, store: Store) -> RepairHoles | None:
        """The store's repair holes; None when rmqdump did not repair it (no readable report, or no filler left)."""
        try:
            with open(os.path.join(store.root, REPAIR_DIR, REPORT), encoding="utf-8") as f:
                report = json.load(f)
            ranges = [
                Replaced(int(r["phys_offset"]), int(r["length"]), r["action"], frozenset((d["topic"], d["queue_id"], d["queue_offset"]) for d in r.get("destroyed") or ()))
                for r in report.get("ranges", ())
                if r.get("action") in (FILLER, BLANKED)
            ]
            holes = report.get("holes", ())
        except (OSError, ValueError, KeyError, TypeError):
            return None
        ranges = [r for r in ranges if _still_there(store, r)]
        out: dict[tuple[str, int], list[Hole]] = {}
        for h in holes:
            try:
                topic, qid, first, end = h["topic"], int(h["queue_id"]), int(h["from"]), int(h["to"])
            except (KeyError, TypeError, ValueError):
                continue
            q = store.queue(topic, qid)
            if q is None:
                continue
            before = q.unit_at(first - 1) if first > 0 else None
            after = q.unit_at(end)
            lo = before[0] if before is not None and before[1] != C.CQ_FILLER_SIZE else -1
            hi = after[0] if after is not None and after[1] > 0 else 1 << 63
            cands = tuple(r for r in ranges if lo < r.phys_offset < hi)
            if cands:
                out.setdefault((topic, qid), []).append(Hole(first, end, cands))
        return cls(out) if out else None

    def take(self, units: QueueUnits, topic: str, queue_id: int, where: Callable[[int], tuple[str, int]]) -> tuple[QueueUnits, list[dict]]:
        """(units without repair's filler units, a `filler_unit` row for each taken out)."""
        holes = self.holes.get((topic, queue_id))
        if not holes or not len(units):
            return units, []
        inside = np.zeros(len(units), dtype=bool)
        for h in holes:
            inside |= (units.index >= h.first) & (units.index < h.end)
        mine = inside & units.filler_mask()
        if not mine.any():
            return units, []
        rows = []
        for i in units.index[mine].tolist():
            h = next(h for h in holes if h.first <= i < h.end)
            rows.append(filler_row(topic, queue_id, i, where(i), h))
        keep = ~mine
        return QueueUnits(units.index[keep], units.offset[keep], units.size[keep], units.tags_code[keep]), rows


def filler_row(topic: str, queue_id: int, index: int, at: tuple[str, int | None], hole: Hole) -> dict:
    """The `cq verify` row of one repair filler unit: where it is, and the range it stands for."""
    r = hole.range_of(topic, queue_id, index)
    row = {"kind": FILLER_UNIT, "topic": topic, "queue_id": queue_id, "unit_index": index, "cq_file": at[0], "file_offset": at[1]}
    if r is not None:
        row.update(phys_offset=r.phys_offset, length=r.length, replaced_by=r.action)
    else:  # several replaced ranges lie between the hole's neighbours: which held this message is not known
        row.update(phys_offset=None, length=None, replaced_by=None, candidates=[[c.phys_offset, c.length] for c in hole.ranges])
    return row


def _still_there(store: Store, r: Replaced) -> bool:
    """Whether the CommitLog holds, at the range, what repair wrote there."""
    cl = store.commitlog
    if r.action == BLANKED:
        seg = cl.file_for(r.phys_offset)
        try:
            with open(seg.path, "rb") as f:
                head = os.pread(f.fileno(), BlankMarker.sizeof(), r.phys_offset - seg.base)
        except (OSError, AttributeError):  # unreadable, or no file holds the offset
            return False
        return head == BlankMarker.build({"total_size": r.length, "magic": C.MAGIC_BLANK})
    if r.length < MIN_FILLER:
        return False
    from rmqdump.scan import scanner

    m = scanner.record_at(cl, r.phys_offset, check_crc=True, with_body=True)
    if getattr(m, "total_size", None) != r.length or m.topic or m.sys_flag & C.TRANSACTION_MASK != C.TRANSACTION_ROLLBACK:
        return False
    text = note(r.length, r.phys_offset)[: r.length - MIN_FILLER]
    return bool(m.crc_ok) and (m.body or b"").startswith(text)
