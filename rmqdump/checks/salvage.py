"""Which CommitLog records a restart would lose or no consumer can reach, and why: what `rmqdump salvage` gives back.

The broker's recovery (checks.recovery.preview, which agrees with the broker)
stops at the first record it cannot prove and truncates there: every record
from that point on is gone after a restart, in the kept file or in the files
it deletes. Before that point a record can still be out of reach when no
ConsumeQueue unit the broker keeps points at it and the restart does not
dispatch it again. A survey of every range keeps a few columns of each
record (export.salvage spills them to disk); a Classifier then sorts them
into reasons a window at a time, in physical order, carrying what it must
from window to window (each queue's highest queue offset so far), and
`records` reads the chosen ones again:

to re-send (the producer's message, intact):
  after_recovery_stop  at or past the broker's new end (its body CRC checks)
  undispatched         before it, a queued type, no unit and no re-dispatch reaches it
  cq_damaged           the same, in a queue whose ConsumeQueue files are damaged
  header_damaged       its magic code or totalSize is wrong, everything else proves it
                       (rmqdump.scan.headerfix): given back with its header restored, when
                       no consumer gets it after the restart (header_damaged())
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
from dataclasses import dataclass

import numpy as np

from rmqdump.checks.recovery import Chains, CleanChain, RecoveryPreview, preview
from rmqdump.common.problems import Problem
from rmqdump.readers.commitlog import SegmentFile
from rmqdump.readers.consumequeue import read_units, unit_places, valid_units
from rmqdump.readers.mapped import MappedFile
from rmqdump.readers.store import Store
from rmqdump.scan import scanner
from rmqdump.scan.headerfix import MAGIC_CODE, Restored, restore_stretches
from rmqdump.scan.queueorder import above_earlier, queue_key, queue_members
from rmqdump.scan.ranges import range_batches
from rmqdump.scan.scanner import Batch
from rmqdump.scan.splits import Split
from rmqdump.schemas import constants as C

AFTER_STOP = "after_recovery_stop"
UNDISPATCHED = "undispatched"
CQ_DAMAGED = "cq_damaged"
HEADER_DAMAGED = "header_damaged"
STALE_TAIL = "stale_tail"
DAMAGED = "damaged"
KEPT_DAMAGED = "kept_damaged"
REASONS = (AFTER_STOP, UNDISPATCHED, CQ_DAMAGED, STALE_TAIL, DAMAGED, KEPT_DAMAGED, HEADER_DAMAGED)
TO_RESEND = (AFTER_STOP, UNDISPATCHED, CQ_DAMAGED, HEADER_DAMAGED)
FLAGGED = (STALE_TAIL, DAMAGED, KEPT_DAMAGED)
NONE = -1  # reason code of a record that needs nothing
BATCH_RECORDS = 16384  # records per scan batch: the pages and Arrow copies of one batch are what salvage holds
RANGES_LISTED = 1000  # byte ranges (and damage entries) described one by one; past that only counted


@dataclass
class Reach:
    """The CommitLog offsets, within one window, that the broker serves through a ConsumeQueue unit after a restart."""

    offsets: np.ndarray  # sorted physical offsets of the units it keeps
    sizes: np.ndarray  # their sizes, in the same order

    @classmethod
    def of(cls, offsets: np.ndarray, sizes: np.ndarray) -> Reach:
        order = np.argsort(offsets, kind="stable")
        return cls(offsets[order], sizes[order])

    def reached(self, phys: np.ndarray, size: np.ndarray) -> np.ndarray:
        if not len(self.offsets):
            return np.zeros(len(phys), dtype=bool)
        at = np.searchsorted(self.offsets, phys)
        at_c = np.minimum(at, len(self.offsets) - 1)
        return (at < len(self.offsets)) & (self.offsets[at_c] == phys) & (self.sizes[at_c] == size)


def _kept_units(q, valid_end: int) -> Iterator[tuple[np.ndarray, np.ndarray, bool]]:
    """(offsets, sizes, damaged so far) of the units a restart keeps in one queue, file by file.

    ConsumeQueue.recover reads the last three files up to the first unit with
    offset < 0 or size <= 0 (or a file not full) and drops what follows;
    truncateDirtyLogicFiles drops units at or past the CommitLog's new end.
    No reason depends on that cut (a unit reaches only the record at its
    offset, and a record at or past the new end is given back whatever
    reaches it); it spares sorting those units into windows.
    """
    files = list(q.files)
    damaged = bool(q.problems)
    tail_from = max(0, len(files) - 3)
    cut = False
    for i, f in enumerate(files):
        offset, size = unit_places(read_units(f))
        v = valid_units(offset, size)
        keep = v.copy()
        bad = np.flatnonzero(~v)
        if bad.size and v[bad[0] :].any():
            damaged = True  # an invalid unit with valid ones after it: not the zero tail of a preallocated file
        if i >= tail_from:
            if cut:
                keep[:] = False
            else:
                k = int(bad[0]) if bad.size else len(offset)
                keep[k:] = False
                if k < (q.file_size or f.size) // 20 or bad.size:
                    cut = True
        keep &= offset < valid_end
        yield offset[keep], size[keep], damaged
    if not files:
        yield np.zeros(0, np.int64), np.zeros(0, np.int32), damaged


def kept_units(store: Store, valid_end: int) -> Iterator[tuple[tuple[str, int], np.ndarray, np.ndarray, bool]]:
    """(queue, offsets, sizes, damaged) for every stretch of units a restart keeps, a queue file (or batch chunk) at a time.

    damaged: the queue has a hole, an invalid unit or a layout problem (known for sure at its last stretch)."""
    for key, q in store.queues.items():
        for o, s, bad in _kept_units(q, valid_end):
            yield key, o, s, bad
    for key, bq in store.batch_queues.items():
        yield key, np.zeros(0, np.int64), np.zeros(0, np.int32), bool(bq.problems)
        for u in bq.chunks():
            keep = u.valid_mask() & (u.offset < valid_end)
            yield key, u.offset[keep], u.size[keep], bool(bq.problems)


@dataclass
class Plan:
    """What the classification needs from the store, worked out once before the scan."""

    preview: RecoveryPreview
    redispatch_from: int
    valid_end: int
    topics: frozenset[str] | None = None
    since: int | None = None
    until: int | None = None


def plan(
    store: Store,
    *,
    check_crc: bool = True,
    topics=None,
    since=None,
    until=None,
    on_bytes: Callable[[int], None] | None = None,
    chains: Chains | None = None,
    chains_allow_v2: bool = True,
) -> Plan:
    """chains: the survey's clean record chains as it finds them (run side by side, the walk steps over what it read),
    found with chains_allow_v2 (survey_range's allow_v2)."""
    # the survey reads every record past the new end: the preview does not walk there (export.salvage counts them)
    p = preview(store, check_crc=check_crc, on_bytes=on_bytes, count_after=False, chains=chains, chains_allow_v2=chains_allow_v2)
    return Plan(p, p.redispatch_from, p.valid_end, frozenset(topics) if topics else None, since, until)


def _zeroed_properties(b: Batch) -> np.ndarray:
    """Records whose properties hold a zero byte: producers never write one (names and values are text, separators 1 and 2)."""
    c = b.cols
    return scanner.holds_zero(b.mf.data, c["properties_pos"].astype(np.int64), c["properties_length"].astype(np.int64))


SURVEY_DTYPES = {  # what classification needs of every record (~43 bytes; no body, no bytes)
    "phys": np.int64,
    "size": np.int32,
    "ok": bool,  # CRCs hold (where checked) and the properties hold no zero byte
    "crc": np.int8,  # body CRC 1 matches, 0 does not, -1 not checked (kept: the chosen records are read again without it)
    "prop_crc": np.int8,  # property CRC 1 matches, 0 does not, -1 absent or not checked
    "topic": np.int32,  # index into the survey's topic list
    "queue_id": np.int32,
    "queue_offset": np.int64,
    "sys_flag": np.int32,
    "store_timestamp": np.int64,
}


def survey_range(split: Split, allow_v2: bool = True) -> tuple[dict[str, np.ndarray], list[str], list[Problem], int, tuple | None, list[Restored]]:
    """One byte range's compact columns (topic ids into the range's own topic list), its damage, its bytes, its chain
    (with the recovery walk's checks of a broker that reads V2 records or not), and the records of its damaged
    stretches whose header alone is wrong, restored (with CRCs checked only)."""
    cols: dict[str, list[np.ndarray]] = {k: [] for k in SURVEY_DTYPES}
    names: dict[str, int] = {}
    damage: list[Problem] = []
    chain = CleanChain(allow_v2)
    for b in range_batches(split, keys=False, batch_records=BATCH_RECORDS):
        chain.add(b)
        n = len(b)
        if n:
            c = b.cols
            crc = np.ones(n, dtype=bool) if b.crc_ok is None else b.crc_ok.astype(bool)
            pcrc = np.ones(n, dtype=bool) if b.prop_crc is None else b.prop_crc != 0
            ids = np.array([names.setdefault(b.topic(int(r)), len(names)) for r in b.found["topic_first"]], dtype=np.int32)
            cols["phys"].append(c["_pos"].astype(np.int64) + b.seg.base)
            cols["size"].append(c["total_size"].astype(np.int32))
            cols["ok"].append(crc & pcrc & ~_zeroed_properties(b))
            cols["crc"].append(np.full(n, -1, np.int8) if b.crc_ok is None else b.crc_ok.astype(np.int8))
            cols["prop_crc"].append(np.full(n, -1, np.int8) if b.prop_crc is None else b.prop_crc.astype(np.int8))
            cols["topic"].append(ids[b.found["topic_id"]])
            cols["queue_id"].append(c["queue_id"].astype(np.int32))
            cols["queue_offset"].append(c["queue_offset"].astype(np.int64))
            cols["sys_flag"].append(c["sys_flag"].astype(np.int32))
            cols["store_timestamp"].append(c["store_timestamp"].astype(np.int64))
        damage.extend(b.damage())
    arrays = {k: np.concatenate(v) if v else np.zeros(0, SURVEY_DTYPES[k]) for k, v in cols.items()}
    restored = restore_stretches(SegmentFile(split.path, split.base, split.size), damage) if split.check_crc else []
    return arrays, list(names), damage, split.length, chain.entry(), restored


def header_damaged(p: Plan, r: Restored, reach: Reach) -> bool:
    """Whether a restored record is given back: no consumer gets it after the restart (it lies at or past the new
    end; its magic is damaged, which the pull path's decoder refuses too; or no unit the restart keeps reaches it,
    and no re-dispatch reads past its header), and it passes the filters."""
    m = r.batch().message(0)
    if p.topics is not None and m.topic not in p.topics:
        return False
    if (p.since is not None and m.store_timestamp < p.since) or (p.until is not None and m.store_timestamp >= p.until):
        return False
    if r.phys >= p.valid_end or MAGIC_CODE in r.fields:  # no walk and no pull decodes a record of another magic
        return True
    return not bool(reach.reached(np.array([r.phys]), np.array([r.length]))[0])


def _regressed(ok: np.ndarray, topic: np.ndarray, queue_id: np.ndarray, qo: np.ndarray, n_topics: int, highest: dict) -> np.ndarray:
    """Records (intact ones) whose queue offset is not above the highest their queue reached earlier in the CommitLog
    (scan.queueorder: the rule by which the ConsumeQueue builder skips a unit).

    `highest` holds each queue's highest queue offset in the windows before this one, and is raised by this one's."""
    out = np.zeros(len(ok), dtype=bool)
    idx = np.flatnonzero(ok)
    for m in queue_members(n_topics, topic[idx], queue_id[idx]):
        rows = idx[m]
        key = (int(topic[rows[0]]), int(queue_id[rows[0]]))
        q = qo[rows]
        last = highest.get(key, _LOWEST)
        out[rows] = ~above_earlier(q, last)
        highest[key] = max(last, int(q.max()))
    return out


_LOWEST = np.iinfo(np.int64).min


class Classifier:
    """Sorts the survey's records into reasons, window after window in physical order (one pass, bounded memory)."""

    def __init__(self, p: Plan, damaged_queues: set[tuple[str, int]]):
        self.p = p
        self.damaged_queues = damaged_queues
        self.highest: dict[tuple[int, int], int] = {}  # each queue's highest queue offset among the intact records so far

    def classify(self, cols: dict[str, np.ndarray], topics: list[str], reach: Reach) -> np.ndarray:
        """The reason (index into REASONS, NONE for nothing) of every record of the next window.

        cols: SURVEY_DTYPES columns; topics: the names their topic indices point at; reach: the kept units within the window."""
        p = self.p
        n = len(cols["phys"])
        reason = np.full(n, NONE, dtype=np.int8)
        if not n:
            return reason
        ok, phys, size = cols["ok"], cols["phys"], cols["size"]
        after = phys >= p.valid_end
        stale = _regressed(ok, cols["topic"], cols["queue_id"], cols["queue_offset"], len(topics), self.highest)
        t = cols["sys_flag"] & C.TRANSACTION_MASK
        queued = (t == C.TRANSACTION_NOT) | (t == C.TRANSACTION_COMMIT)
        before = ~after & ok & ~stale & queued & (phys < p.redispatch_from)  # from there on the restart dispatches it again
        missing = before & ~reach.reached(phys, size)
        reason[ok & after & ~stale] = REASONS.index(AFTER_STOP)
        reason[ok & stale] = REASONS.index(STALE_TAIL)
        reason[~ok & after] = REASONS.index(DAMAGED)
        reason[~ok & ~after] = REASONS.index(KEPT_DAMAGED)
        if missing.any():
            ids = {name: i for i, name in enumerate(topics)}
            bad = [(ids[tn], q) for tn, q in self.damaged_queues if tn in ids]
            bad_keys = queue_key(np.array([i for i, _ in bad], np.int64), np.array([q for _, q in bad], np.int64))
            in_bad = np.isin(queue_key(cols["topic"], cols["queue_id"]), bad_keys)
            reason[missing & in_bad] = REASONS.index(CQ_DAMAGED)
            reason[missing & ~in_bad] = REASONS.index(UNDISPATCHED)
        keep = np.ones(n, dtype=bool)
        if p.topics is not None:
            keep &= np.array([tn in p.topics for tn in topics], dtype=bool)[cols["topic"]]
        if p.since is not None:
            keep &= cols["store_timestamp"] >= p.since
        if p.until is not None:
            keep &= cols["store_timestamp"] < p.until
        reason[~keep] = NONE
        return reason


def records(store: Store, phys: np.ndarray, *, check_crc: bool = True) -> Iterator[tuple[Batch, np.ndarray, np.ndarray]]:
    """The records at `phys` (sorted record starts the survey found), read again: (batch, their indices in it, their indices in phys).

    Each file is scanned from its first wanted record to its last, so only the stretches that hold them are read twice;
    should a start not resync onto its record, the file is scanned again from its start (as the survey did) for
    the ones missed.
    """
    for seg in store.commitlog.files:
        lo, hi = (int(x) for x in np.searchsorted(phys, [seg.base, seg.base + seg.size]))
        if lo == hi:
            continue
        want = phys[lo:hi]
        got = np.zeros(len(want), dtype=bool)
        with MappedFile(seg.path, limit=store.commitlog.file_size) as mf:
            for start in (int(want[0] - seg.base), 0):
                stop = int(want[-1] - seg.base) + 1
                for b in scanner.file_batches_from(seg, mf, start=start, end=stop, check_crc=check_crc, batch_records=BATCH_RECORDS):
                    if not len(b):
                        continue
                    bp = b.cols["_pos"].astype(np.int64) + seg.base
                    at = np.searchsorted(want, bp)
                    hit = (at < len(want)) & (want[np.minimum(at, len(want) - 1)] == bp)
                    hit[hit] &= ~got[at[hit]]
                    idx = np.flatnonzero(hit)
                    if idx.size:
                        got[at[idx]] = True
                        yield b, idx, lo + at[idx]
                    if got.all() or bp[-1] >= want[-1]:
                        break
                if got.all():
                    break
