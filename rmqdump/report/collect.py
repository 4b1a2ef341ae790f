"""What `rmqdump report` shows, as aggregates whose size is bounded by bins and caps, never by the message count.

Every finding comes from an existing analysis: query.storeinfo (the `info` summary and the recovery preview),
checks.cqverify (every `cq verify` finding, the CommitLog scan's problems included), checks.offsets (committed
consumer offsets and lag) and readers.indexfile (index fill, slots, chains). The one thing added here is a pass
over the CommitLog's records that bins them by store time per topic and by born-to-store latency, done inside cq
verify's walk (a fold over each range's batches, rmqdump.scan.ranges.ScanOptions.fold); the same fold finds each
range's clean chain, which the recovery preview then steps over, so the CommitLog is walked whole once.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import Enum

import numpy as np

from rmqdump.checks import cqunits
from rmqdump.checks.cqunits import PROBLEM_COLUMNS, MissingUnits
from rmqdump.checks.cqverify import VerifySummary, record_windows, verify
from rmqdump.checks.findingruns import Run, RunFolder, causes
from rmqdump.checks.offsets import OffsetsReport, consumer_offsets
from rmqdump.checks.recovery import CleanChain, DroppedRecord, RecoveryPreview, chain_step, preview, store_rules
from rmqdump.common import problems as P
from rmqdump.common.problems import InputError, Problem
from rmqdump.query.storeinfo import StoreInfo, store_info, walk_bytes
from rmqdump.readers.configfiles import BAD_CONFIG
from rmqdump.readers.indexfile import IndexFile, iter_entries, list_index_files
from rmqdump.readers.store import Store
from rmqdump.report import svg
from rmqdump.report.lifecyclesection import Lifecycle, collect_lifecycle
from rmqdump.scan.ranges import SERIAL, Mapper
from rmqdump.scan.splits import RANGE_BYTES

RATE_MAX_BINS = 200  # time bins of the rate plot; the bin width grows to keep within this
# Bin widths (ms), each a multiple of the one before, so counts re-bin exactly when the span grows.
BIN_LADDER_MS = (100, 200, 1_000, 2_000, 10_000, 20_000, 60_000, 120_000, 600_000, 1_200_000, 3_600_000, 7_200_000, 21_600_000, 43_200_000, 86_400_000)
LATENCY_BUCKETS = 42  # <0, 0, then [2^k, 2^(k+1)) ms for k = 0..39
DAMAGE_BINS = 400  # bins along the CommitLog's offset axis
CHAIN_MAX = 64  # chain lengths at or above this share the last histogram bar
MAX_DROPPED = 50  # records a restart would drop, listed on the page (the preview describes up to 10,000)
REDISPATCHED = "a restart dispatches these again: no loss"
TRUNCATED = "past where a restart truncates: lost with their records unless repaired"
HELD_MISSING = 1 << 20  # missing units held in memory (as columns: 32 MB) while they wait for the preview; the rest in a temporary file
MAX_CQ_HOLE_LOOKUPS = 10_000  # holes placed on the offset axis (by the unit before them); the rest are counted only


# Damage map rows: (key, label). Point findings are counted per bin; spans cover bytes.
class Row(str, Enum):
    """The damage map's rows (keys of DamageMap.counts; not problem codes)."""

    TORN = "torn"
    BAD_RECORD = "bad_record"
    ZERO = "zero"
    CL_LAYOUT = "cl_layout"
    CQ_HOLES = "cq_holes"
    CQ_MISSING = "cq_missing"
    CQ_BAD = "cq_bad"
    DROPPED = "dropped"
    UNWRITTEN = "unwritten"


TORN, BAD_RECORD, ZERO, CL_LAYOUT = Row.TORN, Row.BAD_RECORD, Row.ZERO, Row.CL_LAYOUT
CQ_HOLES, CQ_MISSING, CQ_BAD, DROPPED, UNWRITTEN = Row.CQ_HOLES, Row.CQ_MISSING, Row.CQ_BAD, Row.DROPPED, Row.UNWRITTEN
DAMAGE_ROWS = (
    (TORN, "torn records"),
    (BAD_RECORD, "bad records (magic, size, CRC ...)"),
    (ZERO, "zero ranges"),
    (CL_LAYOUT, "CommitLog file layout"),
    (CQ_HOLES, "ConsumeQueue holes"),
    (CQ_MISSING, "messages missing from their ConsumeQueue"),
    (CQ_BAD, "bad ConsumeQueue units"),
    (DROPPED, "dropped by a restart"),
    (UNWRITTEN, "unwritten (zero tail)"),
)
SPAN_ROWS = {ZERO, DROPPED, UNWRITTEN}
_TORN_CODES = {P.RECORD_PAST_END, P.TRUNCATED_TAIL, P.TRAILING_GARBAGE}
_LAYOUT_CODES = {P.CL_BAD_FILE_NAME, P.CL_FILE_SIZE, P.CL_GAP, P.CL_OVERLAP}


class RateHistogram:
    """Messages per topic per store-time bin; the bin width steps up the ladder as the time span grows."""

    def __init__(self, max_bins: int = RATE_MAX_BINS):
        self.max_bins = max_bins
        self.width = BIN_LADDER_MS[0]
        self.t0: int | None = None
        self.topics: dict[str, int] = {}
        self.counts = np.zeros((0, 0), dtype=np.int64)  # (topic, bin)
        self.unplotted = 0  # records whose store time is outside svg.TIME_RANGE (a flipped bit: the CRC covers only the body)

    @property
    def bins(self) -> int:
        return self.counts.shape[1]

    def _next_width(self, w: int) -> int:
        for x in BIN_LADDER_MS:
            if x > w:
                return x
        return w * 2

    def _fit(self, lo: int, hi: int) -> None:
        """Make the bins cover [lo, hi]: widen them (exact re-binning) and move the start as needed."""
        if self.t0 is not None:
            lo, hi = min(lo, self.t0), max(hi, self.t0 + self.bins * self.width - 1)
        w = self.width
        while hi // w - lo // w + 1 > self.max_bins:
            w = self._next_width(w)
        t0 = lo // w * w
        nb = hi // w - lo // w + 1
        if self.t0 is None:
            self.width, self.t0 = w, t0
            self.counts = np.zeros((len(self.topics), nb), dtype=np.int64)
            return
        if w == self.width and t0 == self.t0 and nb == self.bins:
            return
        old = self.counts
        k = (self.t0 + np.arange(old.shape[1], dtype=np.int64) * self.width - t0) // w
        new = np.zeros((old.shape[0], nb), dtype=np.int64)
        np.add.at(new, (slice(None), k), old)
        self.width, self.t0, self.counts = w, t0, new

    def add(self, topic_ids: np.ndarray, topics: list[str], store_ts: np.ndarray) -> None:
        kept = (store_ts >= svg.TIME_RANGE[0]) & (store_ts <= svg.TIME_RANGE[1])
        if not kept.all():
            self.unplotted += int(len(kept) - np.count_nonzero(kept))
            topic_ids, store_ts = topic_ids[kept], store_ts[kept]
        if not len(store_ts):
            return
        remap = np.array([self.topics.setdefault(t, len(self.topics)) for t in topics], dtype=np.int64)
        rows = remap[topic_ids]
        self._fit(int(store_ts.min()), int(store_ts.max()))
        if self.counts.shape[0] < len(self.topics):
            self.counts = np.vstack([self.counts, np.zeros((len(self.topics) - self.counts.shape[0], self.bins), dtype=np.int64)])
        b = (store_ts.astype(np.int64) - self.t0) // self.width
        flat = np.bincount(rows * self.bins + b, minlength=self.counts.size)
        self.counts += flat.reshape(self.counts.shape)

    def topic_names(self) -> list[str]:
        return list(self.topics)

    def per_second(self) -> np.ndarray:
        return self.counts * (1000.0 / self.width)


def latency_bucket(lat_ms: np.ndarray) -> np.ndarray:
    """Bucket of each born-to-store latency: 0 negative (clock skew), 1 zero, 2 + k for [2^k, 2^(k+1)) ms."""
    lat = lat_ms.astype(np.int64)
    out = np.ones(len(lat), dtype=np.int64)
    out[lat < 0] = 0
    pos = lat > 0
    if pos.any():
        _, exp = np.frexp(lat[pos].astype(np.float64))  # lat = m * 2**exp with 0.5 <= m < 1: k = exp - 1
        out[pos] = np.minimum(exp.astype(np.int64) + 1, LATENCY_BUCKETS - 1)
    return out


def latency_label(bucket: int) -> str:
    if bucket == 0:
        return "<0"
    if bucket == 1:
        return "0"
    k = bucket - 2
    return _ms(1 << k) + "+" if bucket == LATENCY_BUCKETS - 1 else _ms(1 << k)


def _ms(v: int) -> str:
    if v < 1000:
        return f"{v} ms"
    if v < 60_000:
        return f"{v / 1000:g} s"
    if v < 3_600_000:
        return f"{v / 60_000:.3g} min"
    return f"{v / 3_600_000:.3g} h"


@dataclass
class Traffic:
    """The records pass: rate per topic over store time, born-to-store latency per topic."""

    rate: RateHistogram = field(default_factory=RateHistogram)
    latency: dict[str, np.ndarray] = field(default_factory=dict)  # topic -> counts per latency bucket
    messages: int = 0

    def add(self, topic_ids: np.ndarray, topics: list[str], store_ts: np.ndarray, born_ts: np.ndarray) -> None:
        self.messages += len(store_ts)
        self.rate.add(topic_ids, topics, store_ts)
        buckets = latency_bucket(store_ts.astype(np.int64) - born_ts.astype(np.int64))
        per = np.bincount(topic_ids * LATENCY_BUCKETS + buckets, minlength=len(topics) * LATENCY_BUCKETS).reshape(len(topics), LATENCY_BUCKETS)
        for i, t in enumerate(topics):
            if per[i].any():
                cur = self.latency.get(t)
                self.latency[t] = per[i] if cur is None else cur + per[i]

    def latency_quantile(self, topic: str, q: float) -> int | None:
        """Upper edge (ms) of the bucket holding the q-quantile; None without messages, -1 in the negative bucket."""
        c = self.latency.get(topic)
        if c is None or not c.sum():
            return None
        i = int(np.searchsorted(np.cumsum(c), q * c.sum()))
        return -1 if i == 0 else 0 if i == 1 else (1 << (i - 1))


def report_fold(b, d, allow_v2: bool = True) -> tuple:
    """What the report takes of a batch in cq verify's walk (ScanOptions.fold, run in the range's task): the traffic
    bins' columns (topics, topic ids, store and born times) and the recovery walk's chain step (recovery.chain_step,
    with the checks of the store's broker: allow_v2)."""
    cols = (d.topics, d.topic_id.astype(np.int64), d.store_timestamp.astype(np.int64), b.cols["born_timestamp"].astype(np.int64))
    return cols, chain_step(b, allow_v2)


class _WalkFolds:
    """A range's folded report_fold values, in offset order (on_scan of cq verify's walk): into the traffic bins, and
    the range's clean chain into `chains`, which the recovery preview then steps over instead of reading again."""

    def __init__(self, traffic: Traffic):
        self.traffic = traffic
        self.chains: dict[int, tuple[int, int]] = {}

    def __call__(self, scan) -> None:
        chain = CleanChain()
        for (topics, topic_id, store_ts, born_ts), step in scan.folded:
            self.traffic.add(topic_id, topics, store_ts, born_ts)
            chain.step(step)
        e = chain.entry()
        if e is not None:
            self.chains[e[0]] = e[1]


@dataclass
class DamageMap:
    """Findings along the CommitLog's offset axis, counted per bin; byte spans as covered bytes per bin."""

    lo: int
    hi: int
    bins: int = DAMAGE_BINS
    counts: dict[str, np.ndarray] = field(default_factory=dict)
    unplaced: dict[str, int] = field(default_factory=dict)  # findings with no CommitLog position
    span_bytes: dict[str, int] = field(default_factory=dict)  # bytes covered, per span row

    def __post_init__(self):
        self.hi = max(self.hi, self.lo + 1)
        for key, _ in DAMAGE_ROWS:
            self.counts[key] = np.zeros(self.bins, dtype=np.float64 if key in SPAN_ROWS else np.int64)

    @property
    def width(self) -> float:
        return (self.hi - self.lo) / self.bins

    def _bin(self, offset: int) -> int:
        return min(self.bins - 1, max(0, int((offset - self.lo) / self.width)))

    def point(self, key: str, offset: int | None) -> None:
        if offset is None:
            self.unplaced[key] = self.unplaced.get(key, 0) + 1
        else:
            self.counts[key][self._bin(offset)] += 1

    def points(self, key: str, offsets: np.ndarray) -> None:
        """point() of each offset, at once."""
        b = np.clip(((offsets - self.lo) / self.width).astype(np.int64), 0, self.bins - 1)
        self.counts[key] += np.bincount(b, minlength=self.bins)

    def span(self, key: str, start: int, end: int) -> None:
        """Bytes [start, end) as the covered fraction of each bin."""
        start, end = max(start, self.lo), min(end, self.hi)
        if end <= start:
            return
        self.span_bytes[key] = self.span_bytes.get(key, 0) + (end - start)
        w = self.width
        for i in range(self._bin(start), self._bin(end - 1) + 1):
            a, b = self.lo + i * w, self.lo + (i + 1) * w
            self.counts[key][i] += (min(b, end) - max(a, start)) / w

    def edges(self) -> np.ndarray:
        return self.lo + np.arange(self.bins + 1) * self.width


def damage_row(p: Problem) -> str | None:
    """The damage map row of a finding (None: not a position finding, e.g. a config or index file problem)."""
    c = p.code
    if c in _TORN_CODES:
        return TORN
    if c == P.ZEROED_RANGE:
        return ZERO
    if c in _LAYOUT_CODES:
        return CL_LAYOUT
    if c == cqunits.CQ_HOLE:
        return CQ_HOLES
    if c == cqunits.CQ_MISSING_UNIT:
        return CQ_MISSING
    if c.startswith("cq_"):
        return CQ_BAD
    if c in _RECORD_CODES:
        return BAD_RECORD
    return None


_RECORD_CODES = {
    P.BAD_MAGIC,
    P.BAD_TOTAL_SIZE,
    P.SIZE_MISMATCH,
    P.PHYS_OFFSET_MISMATCH,
    P.BODY_CRC_MISMATCH,
    P.PROP_CRC_MISMATCH,
    P.BAD_PROPERTIES,
    P.BAD_BLANK,
    P.DECOMPRESS_FAILED,
}


@dataclass
class IndexStats:
    """One index file: header, fill, slot use, chain lengths (entries per slot, from each entry's key hash)."""

    name: str
    size: int
    hash_slots: int | None = None
    index_entries: int | None = None
    keys: int = 0  # entries written (entry 0 is never used)
    used_slots: int = 0
    chains: np.ndarray | None = None  # slots per chain length 0..CHAIN_MAX (the last: CHAIN_MAX or more)
    begin_timestamp: int | None = None
    end_timestamp: int | None = None
    error: str | None = None

    @property
    def fill(self) -> float | None:
        return None if not self.index_entries else self.keys / (self.index_entries - 1)

    @property
    def slot_use(self) -> float | None:
        return None if not self.hash_slots else self.used_slots / self.hash_slots


def index_stats(path: str) -> IndexStats:
    import os

    st = IndexStats(os.path.basename(path), os.path.getsize(path))
    try:
        f = IndexFile(path)
    except InputError as e:
        st.error = e.line()
        return st
    with f:
        n = f.layout.hash_slots
        st.hash_slots, st.index_entries = n, f.layout.index_entries
        st.begin_timestamp, st.end_timestamp = f.header.begin_timestamp, f.header.end_timestamp
        st.keys = max(0, f.count - 1)
        st.used_slots = int(np.count_nonzero(f.slots))
        per_slot = np.zeros(n, dtype=np.int64)
        for _, e in iter_entries(f):
            kh = e["key_hash"].astype(np.int64)
            per_slot += np.bincount(np.where(kh >= 0, kh, 0) % n, minlength=n)
            f.release()
        st.chains = np.bincount(np.minimum(per_slot, CHAIN_MAX), minlength=CHAIN_MAX + 1)
    return st


@dataclass
class Report:
    info: StoreInfo
    traffic: Traffic
    damage: DamageMap
    runs: list[Run]  # the first `limit` lines of the findings: a run of one code in one queue is one (checks.findingruns)
    problem_total: int
    problem_codes: dict[str, int]
    verify: VerifySummary
    dropped: list[DroppedRecord]  # the first records a restart would drop, as the recovery preview describes them
    offsets: OffsetsReport | None
    offsets_note: str | None
    index: list[IndexStats]
    check_crc: bool
    causes: list[str] = field(default_factory=list)  # the findings said in a few words per kind (findingruns.causes)
    run_total: int = 0  # lines in all
    lifecycle: Lifecycle | None = None  # delays, transactions, DLQs, POP (None: the store has none)

    @property
    def bad(self) -> bool:
        r = self.info.recovery
        return bool(self.problem_total) or (r is not None and (r.truncated_bytes > 0 or bool(r.load_errors)))


def _fate(r: RecoveryPreview | None, p: Problem) -> str | None:
    """What a restart does with a message missing from its ConsumeQueue: dispatches it again, or drops it (None: neither)."""
    if r is None or p.code != cqunits.CQ_MISSING_UNIT or p.phys_offset is None:
        return None
    return FATES[int(_fates(r, np.array([p.phys_offset], dtype=np.int64))[0])]


FATES = (None, REDISPATCHED, TRUNCATED)


def _fates(r: RecoveryPreview | None, phys: np.ndarray) -> np.ndarray | None:
    """What a restart does with messages missing from their ConsumeQueue at these offsets, as indices into FATES."""
    if r is None:
        return None
    return np.where(r.redispatches(phys), 1, np.where(phys >= r.valid_end, 2, 0))


def _hole_offset(store: Store, p: Problem) -> int | None:
    """A hole has no CommitLog offset of its own: place it at the unit before it (or after it), if that one is valid."""
    q = store.queue(p.extra.get("topic"), p.extra.get("queue_id"))
    idx = p.extra.get("unit_index")
    if q is None or idx is None:
        return None
    for i in (idx - 1, idx + 1):
        u = q.unit_at(i) if i >= 0 else None
        if u is not None and u[0] >= 0 and u[1] > 0:
            return int(u[0])
    return None


class _Waiting:
    """Findings whose fate needs the recovery preview, which reads the CommitLog after cq verify's walk (stepping over
    its clean chains): missing units as columns (in a temporary file past HELD_MISSING, so memory stays bounded on a
    store with a finding per message), LMQ missing units, and bad records' offsets (torn, or not, as the preview says)."""

    def __init__(self, temp_dir: str | None):
        self.batches: list = []  # MissingUnits, or (topics, cq_file_of) of one whose columns are in the file
        self.held = 0
        self.temp_dir = temp_dir
        self.file = None
        self.problems: list[Problem] = []
        self.bad: list[int] = []

    def add(self, m: MissingUnits) -> None:
        if self.held + len(m) <= HELD_MISSING:
            self.held += len(m)
            self.batches.append(m)
            return
        if self.file is None:
            import tempfile

            self.file = tempfile.TemporaryFile(dir=self.temp_dir)  # noqa: SIM115 (closed when missing() has read it back)
        for a in (m.topic_id, m.queue_id, m.queue_offset, m.phys):
            np.save(self.file, a, allow_pickle=False)
        self.batches.append((m.topics, m.cq_file_of))

    def missing(self) -> Iterator[MissingUnits]:
        """The missing units in the order they were found; the temporary file is gone afterwards."""
        if self.file is not None:
            self.file.seek(0)
        try:
            for b in self.batches:
                yield b if isinstance(b, MissingUnits) else MissingUnits(b[0], *(np.load(self.file) for _ in range(4)), b[1])
        finally:
            if self.file is not None:
                self.file.close()


class _Share:
    """One walk's share of the progress total: passes on what the walk tells, then the rest of its share when it ends
    (the zero tail and empty preallocated files a record scan goes past without telling), so the bar ends full."""

    def __init__(self, on_bytes: Callable[[int], None] | None, share: int):
        self.on_bytes, self.share, self.told = on_bytes, share, 0

    def __call__(self, n: int) -> None:
        self.told += n
        if self.on_bytes is not None:
            self.on_bytes(n)

    def finish(self) -> None:
        if self.on_bytes is not None and self.share > self.told:
            self.on_bytes(self.share - self.told)
        self.told = max(self.told, self.share)


def collect_bytes(store: Store) -> int:
    """The CommitLog bytes collect() walks and tells its `on_bytes` of: info's walks (data end, recovery preview) and verify's (with the traffic bins)."""
    return walk_bytes(store, with_recovery=True) + sum(f.size for f in store.commitlog.files)


def collect(
    store: Store,
    *,
    check_crc: bool = True,
    limit: int = 200,
    mapper: Mapper = SERIAL,
    on_bytes: Callable[[int], None] | None = None,
    on_problem: Callable[[Problem], None] | None = None,
    temp_dir: str | None = None,
    range_bytes: int = RANGE_BYTES,
) -> Report:
    """Everything the page shows. on_bytes(n): CommitLog bytes walked, collect_bytes() in all; on_problem(p): every
    finding, in cq verify's order, as it is found (the page shows the first `limit` lines of runs and counts the rest).

    The CommitLog is walked whole once, by cq verify, whose ranges also fill the traffic bins and find the clean
    chains the recovery preview then steps over (so it reads only around them); the info summary reads the newest file
    with data, to find the data end. A DLedger CommitLog's preview walks its entries itself. temp_dir: where missing
    units wait for their fate past HELD_MISSING (default: the system's). range_bytes: the walk's ranges (tests cut records anywhere).
    """
    fused = store.dledger is None
    info = store_info(store, with_recovery=not fused, check_crc=check_crc, on_bytes=on_bytes, mapper=mapper)
    cl = info.commitlog
    damage = DamageMap(cl.min_offset, max(cl.files_end, cl.data_end))
    summary = VerifySummary()
    folder = RunFolder()
    holes_placed = 0
    cl_bytes = sum(f.size for f in store.commitlog.files)
    told = _Share(on_bytes, cl_bytes)
    traffic = Traffic()
    folds = _WalkFolds(traffic)
    allow_v2 = store_rules(store).allow_v2
    fold = functools.partial(report_fold, allow_v2=allow_v2)
    windows = record_windows(store.commitlog, check_crc=check_crc, on_bytes=told, mapper=mapper, fold=fold, on_scan=folds, range_bytes=range_bytes)
    waiting = _Waiting(temp_dir)
    for p in verify(store, check_crc=check_crc, summary=summary, mapper=mapper, windows=windows, batched=True):
        if isinstance(p, MissingUnits):
            for one in p if on_problem is not None else ():
                on_problem(one)
            waiting.add(p)
            damage.points(CQ_MISSING, p.phys)
            continue
        if on_problem is not None:
            on_problem(p)
        if p.code == cqunits.CQ_MISSING_UNIT and p.phys_offset is not None:
            waiting.problems.append(p)  # an LMQ's
        else:
            folder.add(p.to_dict(PROBLEM_COLUMNS))
        row = damage_row(p)
        if row is None:
            continue
        if row == BAD_RECORD and p.phys_offset is not None:
            waiting.bad.append(p.phys_offset)  # TORN if the preview says so
            continue
        if row == ZERO:
            start = p.phys_offset
            if start is None:
                damage.point(row, None)
            else:
                damage.span(row, start, start + max(1, int(p.extra.get("skipped", 0) or 0)))
        elif row == CQ_HOLES:
            at = None
            if holes_placed < MAX_CQ_HOLE_LOOKUPS:
                holes_placed += 1
                at = _hole_offset(store, p)
            damage.point(row, at)
        else:
            damage.point(row, p.phys_offset)
    for p in info.problems:
        if p.code == BAD_CONFIG:  # a config file no broker could load: info's finding (cq verify reads no config)
            summary.count(p)
            if on_problem is not None:
                on_problem(p)
            folder.add(p.to_dict(PROBLEM_COLUMNS))
    told.finish()
    if fused:
        chains = folds.chains
        info.recovery = preview(store, check_crc=check_crc, on_bytes=on_bytes, mapper=mapper.on_driver, chains=lambda: chains, chains_allow_v2=allow_v2)
    r = info.recovery
    torn = {d.phys_offset for d in r.dropped if d.state == "torn"} if r is not None else set()
    for at in waiting.bad:
        damage.point(TORN if at in torn else BAD_RECORD, at)  # as the preview names it
    for m in waiting.missing():
        folder.add_missing(m, _fates(r, m.phys), FATES)
    for p in waiting.problems:
        folder.add(p.to_dict(PROBLEM_COLUMNS), _fate(r, p))
    dropped: list[DroppedRecord] = []
    if r is not None:
        damage.span(DROPPED, r.valid_end, r.valid_end + r.truncated_bytes)
        dropped = r.dropped[:MAX_DROPPED]  # the preview describes them (up to its own cap); the page lists the first few
    if cl.data_is_records:  # else no record decodes there: not a zero tail
        damage.span(UNWRITTEN, cl.data_end, cl.files_end)
    try:
        offsets, note = consumer_offsets(store), None
    except InputError as e:
        offsets, note = None, e.line()
    index = [index_stats(p) for p in list_index_files(store.root)]
    runs = folder.runs()
    lifecycle = collect_lifecycle(store, check_crc=check_crc)
    return Report(info, traffic, damage, runs[:limit], summary.problems, dict(summary.codes), summary, dropped, offsets, note, index, check_crc, causes(runs), len(runs), lifecycle)
