"""What the broker's dispatcher takes from each CommitLog record.

CommitLog.checkMessageAndReturnSize builds a DispatchRequest per record; the
ConsumeQueue and IndexFile builders consume it. Verify, rebuild and export all
need the same values, so they are computed here once per scan batch, as
columns: tagsCode (Java hashCode of TAGS, or the delivery time of a delayed
message), the index keys, the transaction type.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rmqdump.common.javahash import java_hash
from rmqdump.scan import layout as K
from rmqdump.scan._walk import Batch
from rmqdump.schemas import constants as C

_UNITS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


@dataclass(frozen=True)
class DelayLevels:
    """The broker's messageDelayLevel: level (1-based) -> delay in ms."""

    millis: tuple[int, ...]

    @classmethod
    def parse(cls, spec: str = C.DEFAULT_DELAY_LEVELS) -> DelayLevels:
        out = []
        for tok in spec.split():
            unit = _UNITS.get(tok[-1:])
            if unit is None or not tok[:-1].isdigit():
                raise ValueError(f"bad delay level {tok!r} in {spec!r} (want e.g. '1s 5s 1m 2h')")
            out.append(int(tok[:-1]) * unit)
        if not out:
            raise ValueError("no delay levels given")
        return cls(tuple(out))

    def deliver_time(self, level: int, store_timestamp: int) -> int:
        """DefaultMessageStore.computeDeliverTimestamp, with the level capped as the dispatcher does."""
        level = min(level, len(self.millis))
        return store_timestamp + self.millis[level - 1]


# --- Columnar dispatch: the kernel's values (rmqdump.readers.kernel) turned into the dispatcher's ---
#
# The scan kernel found, per record, the topic (an id into the batch's topic
# table), the Java hashCode of TAGS, the DELAY level, and the hashCode of
# every index key over its UTF-16 code units, as Java hashes strings. Here the
# few values the kernel leaves to Python are filled in: a TAGS or key that is
# not valid UTF-8 is decoded with replacement characters and hashed, a DELAY
# that is not plain digits is read by int(), and the hash of "topic#key" is
# hashCode("topic#") * 31**len(key) + hashCode(key), so keys are never built
# as strings.


def _pow31(n: int) -> np.ndarray:
    """31**i mod 2**32 for i < n (a running product wraps exactly like Java int arithmetic)."""
    out = np.full(max(n, 1), 31, dtype=np.uint32)
    out[0] = 1
    np.cumprod(out, out=out)
    return out


_POW31 = _pow31(1 << 16)


@dataclass
class DispatchColumns:
    """The dispatch values of a run of records, as columns: what every command computes with.

    topic_id indexes `topics`; key_rec/key_hash list the index keys in the
    broker's put order (UNIQ_KEY, then each KEYS token; ROLLBACK records
    have none), key_hash being Java hashCode("topic#key") as int32.
    """

    phys: np.ndarray
    size: np.ndarray
    topic_id: np.ndarray
    topics: list[str]
    queue_id: np.ndarray
    queue_offset: np.ndarray
    sys_flag: np.ndarray
    store_timestamp: np.ndarray
    tags_code: np.ndarray
    key_rec: np.ndarray
    key_hash: np.ndarray

    def __len__(self) -> int:
        return len(self.phys)

    @property
    def queued(self) -> np.ndarray:
        t = self.sys_flag & C.TRANSACTION_MASK
        return (t == C.TRANSACTION_NOT) | (t == C.TRANSACTION_COMMIT)

    @property
    def indexed(self) -> np.ndarray:
        """Records the IndexFile takes: every transaction type but rollback."""
        return (self.sys_flag & C.TRANSACTION_MASK) != C.TRANSACTION_ROLLBACK

    def key_counts(self) -> np.ndarray:
        """Index keys per record (they are listed record after record)."""
        return np.bincount(self.key_rec, minlength=len(self)) if len(self.key_rec) else np.zeros(len(self), dtype=np.int64)

    def select(self, keep: np.ndarray) -> DispatchColumns:
        """The records where `keep` is True, their keys renumbered (the topic table is kept whole)."""
        newpos = np.cumsum(keep) - 1
        ksel = keep[self.key_rec]
        return DispatchColumns(
            *(a[keep] for a in (self.phys, self.size, self.topic_id)),
            self.topics,
            *(a[keep] for a in (self.queue_id, self.queue_offset, self.sys_flag, self.store_timestamp, self.tags_code)),
            newpos[self.key_rec[ksel]].astype(np.int32),
            self.key_hash[ksel],
        )

    def of_topics(self, wanted: set[str] | frozenset[str] | None) -> DispatchColumns:
        """Only the records of these topics (all when None)."""
        if wanted is None:
            return self
        keep_t = np.array([t in wanted for t in self.topics], dtype=bool)
        return self.select(keep_t[self.topic_id]) if len(self.topics) else self


_DC_DTYPES = {
    "phys": np.int64,
    "size": np.int32,
    "topic_id": np.int32,
    "queue_id": np.int32,
    "queue_offset": np.int64,
    "sys_flag": np.int32,
    "store_timestamp": np.int64,
    "tags_code": np.int64,
    "key_rec": np.int32,
    "key_hash": np.int32,
}


class DispatchJoin:
    """Dispatch columns of many batches (or of other joins) joined in order: one topic table, keys renumbered.

    The one place where batches' columns are accumulated: verify, rebuild and
    the Spark tasks keep these compact columns (about 45 bytes a record plus
    8 a key) and nothing else of a batch.
    """

    def __init__(self):
        self.tmap: dict[str, int] = {}
        self.parts: dict[str, list[np.ndarray]] = {k: [] for k in _DC_DTYPES}
        self.n = 0

    def add(self, d: DispatchColumns) -> None:
        if not len(d):
            return
        remap = np.array([self.tmap.setdefault(t, len(self.tmap)) for t in d.topics], dtype=np.int32)
        p = self.parts
        for k, dt in _DC_DTYPES.items():
            a = getattr(d, k)
            if k == "topic_id":
                a = remap[a]
            elif k == "key_rec":
                a = a.astype(np.int64) + self.n
                if self.n + len(d) >= 1 << 31:
                    raise OverflowError("more than 2**31 records in one join")
            p[k].append(a.astype(dt))  # a copy: a batch's columns are views of its whole kernel output
        self.n += len(d)

    def take(self) -> DispatchColumns:
        """Everything added so far, joined; the join starts empty again (its topic table stays)."""
        if not self.n:
            return DispatchColumns(topics=list(self.tmap), **{k: np.zeros(0, dtype=dt) for k, dt in _DC_DTYPES.items()})
        cols = {k: (v[0] if len(v) == 1 else np.concatenate(v)) for k, v in self.parts.items()}
        self.parts = {k: [] for k in _DC_DTYPES}
        self.n = 0
        return DispatchColumns(topics=list(self.tmap), **cols)


def _java_hash_bytes(raw: bytes, cache: dict[bytes, tuple[int, int]]) -> tuple[int, int]:
    """(hashCode, UTF-16 length) of bytes decoded as the broker decodes properties."""
    got = cache.get(raw)
    if got is None:
        s = raw.decode("utf-8", errors="replace")
        got = cache[raw] = (java_hash(s), len(s.encode("utf-16-be", "surrogatepass")) // 2)
    return got


def dispatch_columns(batch: Batch, delays: DelayLevels, *, keys: bool = True) -> DispatchColumns:
    """A batch's dispatch values (tests prove them equal to the broker's own files and the manifests on every real record)."""
    c = batch.cols
    n = len(batch)
    if n == 0:
        z = np.zeros(0, dtype=np.int64)
        return DispatchColumns(z, z.astype(np.int32), z.astype(np.int32), [], z, z, z, z, z, z.astype(np.int32), z.astype(np.int32))
    found, view = batch.found, batch.mf.view
    tp, tl = c["topic_pos"], c["topic_length"]
    topics = [bytes(view[int(tp[r]) : int(tp[r]) + int(tl[r])]).decode("utf-8", errors="replace") for r in found["topic_first"].tolist()]
    topic_id = found["topic_id"].astype(np.int32)
    st = c["store_timestamp"]
    sys_flag = c["sys_flag"]
    cache: dict[bytes, tuple[int, int]] = {}

    tags_code = found["tags_hash"].copy()
    for i in np.flatnonzero(found["tags_slow"]).tolist():
        a = int(found["tags_pos"][i])
        tags_code[i] = _java_hash_bytes(bytes(view[a : a + int(found["tags_len"][i])]), cache)[0]
    if C.SCHEDULE_TOPIC in topics:
        delay = found["delay"]
        sched = (topic_id == topics.index(C.SCHEDULE_TOPIC)) & (delay != K.DELAY_NONE)
        level = delay.copy()
        for i in np.flatnonzero(sched & (delay == K.DELAY_PY)).tolist():
            a = int(found["delay_pos"][i])
            d = bytes(view[a : a + int(found["delay_len"][i])]).decode("utf-8", errors="replace")
            try:
                level[i] = int(d)
            except ValueError:
                level[i] = 0
        sched &= level > 0
        if sched.any():
            millis = np.array(delays.millis, dtype=np.int64)
            lv = np.minimum(level[sched], len(millis))
            tags_code[sched] = st[sched] + millis[lv - 1]

    key_rec, key_hash = np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int32)
    if keys:
        rec = found["key_rec"]
        indexed = (sys_flag[rec] & C.TRANSACTION_MASK) != C.TRANSACTION_ROLLBACK
        rec = rec[indexed]
        h = found["key_hash"][indexed].astype(np.uint32)
        ln = found["key_units"][indexed]
        slow = np.flatnonzero(found["key_slow"][indexed])
        if len(slow):  # not valid UTF-8: decoded with replacement characters
            ln = ln.copy()
            pos, nbytes = found["key_pos"][indexed], found["key_len"][indexed]
            for j in slow.tolist():
                a = int(pos[j])
                hv, lv = _java_hash_bytes(bytes(view[a : a + int(nbytes[j])]), cache)
                h[j] = np.uint32(hv & 0xFFFFFFFF)
                ln[j] = lv
        prefix = np.array([java_hash(t + C.INDEX_KEY_SEPARATOR) & 0xFFFFFFFF for t in topics], dtype=np.uint32)
        pw = _POW31 if ln.max(initial=0) < len(_POW31) else _pow31(int(ln.max()) + 1)
        with np.errstate(over="ignore"):
            full = prefix[topic_id[rec]] * pw[ln] + h
        key_rec, key_hash = rec.astype(np.int32), full.view(np.int32)
    return DispatchColumns(
        phys=batch.phys,
        size=c["total_size"].astype(np.int32),
        topic_id=topic_id,
        topics=topics,
        queue_id=c["queue_id"],
        queue_offset=c["queue_offset"],
        sys_flag=sys_flag,
        store_timestamp=st,
        tags_code=tags_code,
        key_rec=key_rec,
        key_hash=key_hash,
    )
