"""Which CommitLog records a restart would lose or no consumer can reach, and why: what `rmqdump salvage` gives back.

The broker's recovery (checks.recovery.preview, which agrees with the broker)
stops at the first record it cannot prove and truncates there: every record
from that point on is gone after a restart, in the kept file or in the files
it deletes. Before that point a record can still be out of reach when no
ConsumeQueue unit the broker keeps points at it and the restart does not
dispatch it again. One pass over the whole CommitLog, in physical order,
sorts each record into a reason:

to re-send (the producer's message, intact):
  after_recovery_stop  at or past the broker's new end (its body CRC checks)
  undispatched         before it, a queued type, no unit and no re-dispatch reaches it
  cq_damaged           the same, in a queue whose ConsumeQueue files are damaged
flagged (evidence, not to re-send):
  stale_tail           its queue offset is not above one its queue reached earlier in
                       the CommitLog: written before the records in front of it, the
                       leftover of an older run past a later write position (#10017)
  damaged              past the new end, decodes but fails a CRC or holds zeroed properties
  kept_damaged         the broker keeps and serves it, but it fails a CRC or its
                       properties hold zero bytes (a lost page): what consumers get
                       is not what was sent
Stretches the scan cannot decode at all are listed as damage (code, offsets, length).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from rmqdump.checks.recovery import RecoveryPreview, preview
from rmqdump.readers import kernel
from rmqdump.readers.commitlog import Batch, scan_file
from rmqdump.readers.consumequeue import QueueUnits, read_units
from rmqdump.readers.mapped import MappedFile
from rmqdump.readers.store import Store
from schemas import constants as C

AFTER_STOP = "after_recovery_stop"
UNDISPATCHED = "undispatched"
CQ_DAMAGED = "cq_damaged"
STALE_TAIL = "stale_tail"
DAMAGED = "damaged"
KEPT_DAMAGED = "kept_damaged"
REASONS = (AFTER_STOP, UNDISPATCHED, CQ_DAMAGED, STALE_TAIL, DAMAGED, KEPT_DAMAGED)
TO_RESEND = (AFTER_STOP, UNDISPATCHED, CQ_DAMAGED)
FLAGGED = (STALE_TAIL, DAMAGED, KEPT_DAMAGED)
NONE = -1  # reason code of a record that needs nothing
BATCH_RECORDS = 16384  # records per scan batch: the pages and Arrow copies of one batch are what salvage holds
RANGES_LISTED = 1000  # byte ranges (and damage entries) described one by one; past that only counted


@dataclass
class Reach:
    """The CommitLog offsets the broker serves through a ConsumeQueue unit after a restart."""

    offsets: np.ndarray  # sorted physical offsets of the units it keeps
    sizes: np.ndarray  # their sizes, in the same order
    damaged_queues: set[tuple[str, int]]  # queues with a hole, an invalid unit or a layout problem

    def reached(self, phys: np.ndarray, size: np.ndarray) -> np.ndarray:
        if not len(self.offsets):
            return np.zeros(len(phys), dtype=bool)
        at = np.searchsorted(self.offsets, phys)
        at_c = np.minimum(at, len(self.offsets) - 1)
        return (at < len(self.offsets)) & (self.offsets[at_c] == phys) & (self.sizes[at_c] == size)


def _kept_units(q, valid_end: int) -> tuple[list[np.ndarray], list[np.ndarray], bool]:
    """(offsets, sizes, damaged) of the units a restart keeps in one queue.

    ConsumeQueue.recover reads the last three files up to the first unit with
    offset < 0 or size <= 0 (or a file not full) and drops what follows;
    truncateDirtyLogicFiles drops units at or past the CommitLog's new end.
    """
    files = list(q.files)
    damaged = bool(q.problems)
    offs, sizes = [], []
    tail_from = max(0, len(files) - 3)
    cut = False
    for i, f in enumerate(files):
        u = QueueUnits.from_array(read_units(f), f.first_index)
        v = u.valid_mask()
        keep = v.copy()
        bad = np.flatnonzero(~v)
        if bad.size and v[bad[0] :].any():
            damaged = True  # an invalid unit with valid ones after it: not the zero tail of a preallocated file
        if i >= tail_from:
            if cut:
                keep[:] = False
            else:
                k = int(bad[0]) if bad.size else len(u)
                keep[k:] = False
                if k < (q.file_size or f.size) // 20 or bad.size:
                    cut = True
        keep &= u.offset < valid_end
        offs.append(u.offset[keep])
        sizes.append(u.size[keep])
    return offs, sizes, damaged


def reach(store: Store, valid_end: int) -> Reach:
    offs: list[np.ndarray] = []
    sizes: list[np.ndarray] = []
    damaged: set[tuple[str, int]] = set()
    for key, q in store.queues.items():
        o, s, bad = _kept_units(q, valid_end)
        offs += o
        sizes += s
        if bad:
            damaged.add(key)
    for key, bq in store.batch_queues.items():
        if bq.problems:
            damaged.add(key)
        for u in bq.chunks():
            keep = u.valid_mask() & (u.offset < valid_end)
            offs.append(u.offset[keep])
            sizes.append(u.size[keep])
    o = np.concatenate(offs) if offs else np.zeros(0, np.int64)
    s = np.concatenate(sizes) if sizes else np.zeros(0, np.int32)
    order = np.argsort(o, kind="stable")
    return Reach(o[order], s[order], damaged)


@dataclass
class Classified:
    """One scan batch and the reason code (index into REASONS, NONE for nothing) of each of its records."""

    batch: Batch
    reason: np.ndarray  # int8
    topics: list[str]  # the batch's topic names, by its topic id


@dataclass
class Plan:
    """What the classification needs from the store, worked out once before the scan."""

    preview: RecoveryPreview
    reach: Reach
    redispatch_from: int
    valid_end: int
    topics: frozenset[str] | None = None
    since: int | None = None
    until: int | None = None
    queue_max: dict[tuple[str, int], int] = field(default_factory=dict)  # highest queue offset seen, in physical order


def plan(store: Store, *, check_crc: bool = True, topics=None, since=None, until=None, on_bytes: Callable[[int], None] | None = None) -> Plan:
    p = preview(store, check_crc=check_crc, on_bytes=on_bytes)
    return Plan(p, reach(store, p.valid_end), p.redispatch_from, p.valid_end, frozenset(topics) if topics else None, since, until)


def _zeroed_properties(b: Batch) -> np.ndarray:
    """Records whose properties hold a zero byte: producers never write one (names and values are text, separators 1 and 2)."""
    c = b.cols
    length = c["properties_length"].astype(np.int64)
    offsets, buf = kernel.jit().pack_bytes(b.mf.data, c["properties_pos"].astype(np.int64), length)
    out = np.zeros(len(length), dtype=bool)
    zeros = np.flatnonzero(buf == 0)  # almost always none: one pass, no per-record work
    if zeros.size:
        out[np.unique(np.searchsorted(offsets, zeros, side="right") - 1)] = True
    return out


def _regressed(p: Plan, topics: list[str], tid: np.ndarray, qid: np.ndarray, qoff: np.ndarray, ok: np.ndarray) -> np.ndarray:
    """Records (among `ok`) whose queue offset is not above the highest its queue reached before them; updates p.queue_max."""
    out = np.zeros(len(tid), dtype=bool)
    idx = np.flatnonzero(ok)
    if not idx.size:
        return out
    key = tid[idx].astype(np.int64) << 32 | (qid[idx].astype(np.int64) & 0xFFFFFFFF)
    order = np.argsort(key, kind="stable")
    ks = key[order]
    cuts = np.flatnonzero(np.diff(ks)) + 1
    for part in np.split(order, cuts):
        rows = idx[part]
        k = key[part[0]]
        name = (topics[int(k >> 32)], int(np.int32(k & 0xFFFFFFFF)))
        qo = qoff[rows]
        before = p.queue_max.get(name, -1)
        run = np.maximum.accumulate(np.concatenate([[before], qo]))
        out[rows] = qo <= run[:-1]
        p.queue_max[name] = int(run[-1])
    return out


def classify(p: Plan, b: Batch) -> Classified:
    """The reason of each record of one batch (batches must come in physical order: stale tails are found by order)."""
    n = len(b)
    reason = np.full(n, NONE, dtype=np.int8)
    topics = [b.topic(int(r)) for r in b.found["topic_first"]] if n else []
    if not n:
        return Classified(b, reason, topics)
    c = b.cols
    phys = b.phys.astype(np.int64)
    size = c["total_size"]
    tid = b.found["topic_id"]
    crc = np.ones(n, dtype=bool) if b.crc_ok is None else b.crc_ok.astype(bool)
    pcrc = np.ones(n, dtype=bool) if b.prop_crc is None else b.prop_crc != 0
    ok = crc & pcrc & ~_zeroed_properties(b)
    after = phys >= p.valid_end
    stale = _regressed(p, topics, tid, c["queue_id"], c["queue_offset"], ok)
    t = c["sys_flag"] & C.TRANSACTION_MASK
    queued = (t == C.TRANSACTION_NOT) | (t == C.TRANSACTION_COMMIT)
    before = ~after & ok & ~stale & queued & (phys < p.redispatch_from)  # from there on the restart dispatches it again
    missing = before & ~p.reach.reached(phys, size)
    reason[ok & after & ~stale] = REASONS.index(AFTER_STOP)
    reason[ok & stale] = REASONS.index(STALE_TAIL)
    reason[~ok & after] = REASONS.index(DAMAGED)
    reason[~ok & ~after] = REASONS.index(KEPT_DAMAGED)
    if missing.any():
        dq = p.reach.damaged_queues
        qid = c["queue_id"]
        for i in np.flatnonzero(missing).tolist():
            reason[i] = REASONS.index(CQ_DAMAGED if (topics[int(tid[i])], int(qid[i])) in dq else UNDISPATCHED)
    keep = np.ones(n, dtype=bool)
    if p.topics is not None:
        keep &= np.array([tn in p.topics for tn in topics], dtype=bool)[tid]
    if p.since is not None:
        keep &= c["store_timestamp"] >= p.since
    if p.until is not None:
        keep &= c["store_timestamp"] < p.until
    reason[~keep] = NONE
    return Classified(b, reason, topics)


def scan(store: Store, p: Plan, *, check_crc: bool = True, on_bytes: Callable[[int], None] | None = None) -> Iterator[Classified | list]:
    """Every batch of the CommitLog, file after file, classified; damage (Problems) is yielded as lists between them."""
    for seg in store.commitlog.files:
        done = 0
        with MappedFile(seg.path) as mf:
            for b in scan_file(seg, mf, check_crc=check_crc, batch_records=BATCH_RECORDS):
                yield classify(p, b)
                dmg = b.damage()
                if dmg:
                    yield dmg
                if len(b) and on_bytes is not None:
                    end = int(b.cols["_end"][-1])
                    on_bytes(end - done)
                    done = end
            if on_bytes is not None and seg.size > done:
                on_bytes(seg.size - done)
