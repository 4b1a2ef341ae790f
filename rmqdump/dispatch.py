"""What the broker's dispatcher takes from each CommitLog record.

CommitLog.checkMessageAndReturnSize builds a DispatchRequest per record; the
ConsumeQueue and IndexFile builders consume it. Verify, rebuild and export all
need the same values, so they are computed here once per scan batch, as
columns: tagsCode (Java hashCode of TAGS, or the delivery time of a delayed
message), the index keys, the transaction type.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from rmqdump.commitlog import Batch, CommitLog
from rmqdump.javahash import java_hash, java_hash_many
from schemas import constants as C

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


@dataclass
class DispatchBatch:
    """Dispatch values of every record of one scan batch, in CommitLog order."""

    phys: np.ndarray  # int64 physical offsets
    size: np.ndarray  # int32 totalSize
    topic: list[str]
    queue_id: np.ndarray
    queue_offset: np.ndarray
    sys_flag: np.ndarray
    store_timestamp: np.ndarray
    tags_code: np.ndarray  # int64
    keys: list[list[str]]  # KEYS tokens, empty ones dropped
    uniq_key: list[str | None]

    def __len__(self) -> int:
        return len(self.phys)

    @property
    def transaction(self) -> np.ndarray:
        return self.sys_flag & C.TRANSACTION_MASK

    @property
    def queued(self) -> np.ndarray:
        """Records that get a ConsumeQueue unit: transaction type none or commit."""
        t = self.transaction
        return (t == C.TRANSACTION_NOT) | (t == C.TRANSACTION_COMMIT)

    @property
    def indexed(self) -> np.ndarray:
        """Records the IndexFile takes: every type but rollback."""
        return self.transaction != C.TRANSACTION_ROLLBACK

    def index_keys(self) -> tuple[np.ndarray, list[str]]:
        """(record index, "topic#key") for every index entry, in the order the broker puts them."""
        rec: list[int] = []
        keys: list[str] = []
        indexed = self.indexed
        for i in range(len(self)):
            if not indexed[i]:
                continue
            t = self.topic[i]
            u = self.uniq_key[i]
            if u is not None:
                rec.append(i)
                keys.append(f"{t}#{u}")
            for k in self.keys[i]:
                rec.append(i)
                keys.append(f"{t}#{k}")
        return np.array(rec, dtype=np.int64), keys


def _props_fields(raw: str) -> tuple[str | None, str | None, str | None, str | None]:
    tags = keys = uniq = delay = None
    for item in raw.split(C.PROPERTY_SEPARATOR):
        name, sep, value = item.partition(C.NAME_VALUE_SEPARATOR)
        if not sep:
            continue
        if name == "TAGS":
            tags = value
        elif name == "KEYS":
            keys = value
        elif name == "UNIQ_KEY":
            uniq = value
        elif name == "DELAY":
            delay = value
    return tags, keys, uniq, delay


def dispatch_of(batch: Batch, delays: DelayLevels) -> DispatchBatch:
    c = batch.cols
    n = len(batch)
    view = batch.mf.view
    topic_cache: dict[bytes, str] = {}
    topics: list[str] = []
    tags_l: list[str] = []
    has_tags = np.zeros(n, dtype=bool)
    keys_l: list[list[str]] = []
    uniq_l: list[str | None] = []
    delay_at: list[tuple[int, str]] = []
    tp, tl = c["topic_pos"].tolist(), c["topic_length"].tolist()
    pp, pl = c["properties_pos"].tolist(), c["properties_length"].tolist()
    for i in range(n):
        tb = bytes(view[tp[i] : tp[i] + tl[i]])
        t = topic_cache.get(tb)
        if t is None:
            t = topic_cache[tb] = tb.decode("utf-8", errors="replace")
        topics.append(t)
        tags, keys, uniq, delay = _props_fields(bytes(view[pp[i] : pp[i] + pl[i]]).decode("utf-8", errors="replace")) if pl[i] > 0 else (None, None, None, None)
        if tags:
            has_tags[i] = True
            tags_l.append(tags)
        keys_l.append([k for k in keys.split(C.KEY_SEPARATOR) if k] if keys else [])
        uniq_l.append(uniq)
        if delay is not None and t == C.SCHEDULE_TOPIC:
            delay_at.append((i, delay))
    tags_code = np.zeros(n, dtype=np.int64)
    if tags_l:
        tags_code[has_tags] = java_hash_many(tags_l).astype(np.int64)
    st = c["store_timestamp"]
    for i, d in delay_at:
        try:
            level = int(d)
        except ValueError:
            continue
        if level > 0:
            tags_code[i] = delays.deliver_time(level, int(st[i]))
    return DispatchBatch(
        phys=batch.phys,
        size=c["total_size"].astype(np.int32),
        topic=topics,
        queue_id=c["queue_id"],
        queue_offset=c["queue_offset"],
        sys_flag=c["sys_flag"],
        store_timestamp=st,
        tags_code=tags_code,
        keys=keys_l,
        uniq_key=uniq_l,
    )


def dispatch(cl: CommitLog, delays: DelayLevels | None = None, *, check_crc: bool = False, **scan_kw) -> Iterator[tuple[Batch, DispatchBatch]]:
    """Scan the CommitLog and give each batch with its dispatch values."""
    delays = delays or DelayLevels.parse()
    for b in cl.scan(check_crc=check_crc, **scan_kw):
        yield b, dispatch_of(b, delays)


# --- Columnar dispatch: the same values as dispatch_of, without a Python loop per record ---
#
# Rebuild and verify need, per record, only numbers: tagsCode, and the Java
# hashCode of every index key "topic#key". Here the properties of a whole
# batch are parsed at once: they are joined into one buffer with a \x02
# after each record (so a property never spans two records), separators are
# found with numpy, and the hashCode of any byte range is read off one
# prefix sum (hashCode is a polynomial in 31, and 31 is invertible mod 2**32).
# Byte ranges that are not ASCII are decoded and hashed one by one, as the
# broker does over UTF-16 (rare: tags like 订单创建).

_P32 = np.uint32
_INV31 = _P32(pow(31, -1, 1 << 32))
_POW_CACHE: dict[str, np.ndarray] = {}
_NAME_CODES = {name: int.from_bytes(name.encode().ljust(8, b"\0"), "big") for name in ("TAGS", "KEYS", "UNIQ_KEY", "DELAY")}


def _powers(n: int) -> tuple[np.ndarray, np.ndarray]:
    """31**i and 31**-i mod 2**32 for i < n (cached, grown by doubling)."""
    have = _POW_CACHE.get("p")
    if have is None or len(have) < n:
        size = max(n, 1 << 16, 2 * (0 if have is None else len(have)))
        exps = np.arange(size, dtype=np.uint64)
        _POW_CACHE["p"] = _pow_mod(31, exps)
        _POW_CACHE["i"] = _pow_mod(int(_INV31), exps)
    return _POW_CACHE["p"], _POW_CACHE["i"]


def _pow_mod(base: int, exps: np.ndarray) -> np.ndarray:
    """base**e mod 2**32 for every e, by square-and-multiply over the bits of e."""
    out = np.ones(len(exps), dtype=np.uint32)
    b = np.uint32(base)
    e = exps.copy()
    with np.errstate(over="ignore"):
        while e.any():
            odd = (e & 1).astype(bool)
            out[odd] *= b
            b = b * b
            e >>= 1
    return out


@dataclass
class DispatchColumns:
    """dispatch_of's values as columns only: what rebuild and verify compute with.

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


class _Hasher:
    """hashCode of byte ranges of one buffer, through a prefix sum of c[i] * 31**(T-1-i)."""

    def __init__(self, arr: np.ndarray):
        self.arr = arr
        n = len(arr)
        pw, ipw = _powers(n + 1)
        self.ipw = ipw
        self.n = n
        with np.errstate(over="ignore"):
            terms = arr.astype(np.uint32) * pw[:n][::-1]
        self.q = np.zeros(n + 1, dtype=np.uint32)
        np.cumsum(terms, dtype=np.uint32, out=self.q[1:])
        nonascii = arr >= 0x80
        self.na = None
        if nonascii.any():
            self.na = np.zeros(n + 1, dtype=np.int64)
            np.cumsum(nonascii, out=self.na[1:])

    def ascii(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Which ranges [a, b) hold only ASCII (their hash is then hash())."""
        if self.na is None:
            return np.ones(len(a), dtype=bool)
        return self.na[b] == self.na[a]

    def hash(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """hashCode of [a, b) read as ASCII, uint32."""
        with np.errstate(over="ignore"):
            return (self.q[b] - self.q[a]) * self.ipw[self.n - b]


def _java_hash_bytes(raw: bytes, cache: dict[bytes, tuple[int, int]]) -> tuple[int, int]:
    """(hashCode, UTF-16 length) of bytes decoded as the broker decodes properties."""
    got = cache.get(raw)
    if got is None:
        s = raw.decode("utf-8", errors="replace")
        got = cache[raw] = (java_hash(s), len(s.encode("utf-16-be", "surrogatepass")) // 2)
    return got


def _last_per_record(rec: np.ndarray, sel: np.ndarray, n: int) -> np.ndarray:
    """For each record, the last selected item (the broker keeps the last value of a repeated name), or -1."""
    out = np.full(n, -1, dtype=np.int64)
    if len(sel):
        r = rec[sel]
        last = np.ones(len(sel), dtype=bool)
        last[:-1] = r[1:] != r[:-1]
        out[r[last]] = sel[last]
    return out


def dispatch_columns(batch: Batch, delays: DelayLevels, *, keys: bool = True) -> DispatchColumns:
    """dispatch_of(batch) as columns (tests prove the two equal on every real record)."""
    c = batch.cols
    n = len(batch)
    mm = batch.mf._mm
    empty_i8 = np.zeros(0, dtype=np.int64)
    if n == 0:
        z = np.zeros(0, dtype=np.int64)
        return DispatchColumns(z, z.astype(np.int32), z.astype(np.int32), [], z, z, z, z, z, z.astype(np.int32), z.astype(np.int32))
    tp, tl = c["topic_pos"].tolist(), c["topic_length"].tolist()
    # topics: one dict lookup per record, on bytes (cheaper than any numpy gather of ~20-200 bytes)
    table: dict[bytes, int] = {}
    raw_topics = [mm[a : a + k] for a, k in zip(tp, tl, strict=True)]
    topic_id = np.fromiter((table.setdefault(t, len(table)) for t in raw_topics), dtype=np.int32, count=n)
    topics = [t.decode("utf-8", errors="replace") for t in table]

    pp, pl = c["properties_pos"], c["properties_length"]
    pl_clip = np.maximum(pl, 0)
    parts = [mm[a : a + k] for a, k in zip(pp.tolist(), pl_clip.tolist(), strict=True)]
    blob = b"\x02".join(parts) + b"\x02" + b"\0" * 8
    arr = np.frombuffer(blob, dtype=np.uint8)
    body_len = len(blob) - 8
    rec_start = np.zeros(n, dtype=np.int64)
    np.cumsum(pl_clip[:-1] + 1, out=rec_start[1:])

    x2 = np.flatnonzero(arr[:body_len] == 2)  # item ends (every record ends with one)
    x1 = np.flatnonzero(arr[:body_len] == 1)
    item_start = np.empty(len(x2), dtype=np.int64)
    item_start[0] = 0
    item_start[1:] = x2[:-1] + 1
    k = np.searchsorted(x1, item_start)
    sep = x1[np.minimum(k, max(len(x1) - 1, 0))] if len(x1) else np.full(len(x2), body_len, dtype=np.int64)
    has = (k < len(x1)) & (sep < x2)
    name_len = sep - item_start
    cand = np.flatnonzero(has & ((name_len == 4) | (name_len == 5) | (name_len == 8)))
    windows = np.ndarray((len(arr) - 7,), dtype=np.dtype((np.void, 8)), buffer=arr, strides=(1,))
    word = windows[item_start[cand]].view(">u8").astype(np.uint64)
    nl = name_len[cand]
    shift = ((8 - nl) * 8).astype(np.uint64)
    word = (word >> shift) << shift
    item_rec = np.searchsorted(rec_start, item_start[cand], side="right") - 1

    def find(name: str, length: int) -> np.ndarray:
        sel = np.flatnonzero((nl == length) & (word == np.uint64(_NAME_CODES[name])))
        last = _last_per_record(item_rec, sel, n)
        out = np.full(n, -1, dtype=np.int64)
        ok = last >= 0
        out[ok] = cand[last[ok]]
        return out  # item index per record, -1 when absent

    tags_item = find("TAGS", 4)
    hasher = _Hasher(arr[:body_len])
    cache: dict[bytes, tuple[int, int]] = {}

    def value_range(items: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return sep[items] + 1, x2[items]

    def hashes(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(hashCode uint32, UTF-16 length) of byte ranges, non-ASCII ones decoded."""
        h = hasher.hash(a, b)
        ln = (b - a).astype(np.int64)
        for i in np.flatnonzero(~hasher.ascii(a, b)).tolist():
            hv, lv = _java_hash_bytes(blob[a[i] : b[i]], cache)
            h[i] = np.uint32(hv & 0xFFFFFFFF)
            ln[i] = lv
        return h, ln

    tags_code = np.zeros(n, dtype=np.int64)
    with_tags = np.flatnonzero(tags_item >= 0)
    if len(with_tags):
        a, b = value_range(tags_item[with_tags])
        nonempty = b > a
        with_tags, a, b = with_tags[nonempty], a[nonempty], b[nonempty]
        tags_code[with_tags] = hashes(a, b)[0].view(np.int32).astype(np.int64)

    sched = [i for i, t in enumerate(topics) if t == C.SCHEDULE_TOPIC]
    if sched:
        delay_item = find("DELAY", 5)
        st = c["store_timestamp"]
        for i in np.flatnonzero(np.isin(topic_id, sched) & (delay_item >= 0)).tolist():
            a, b = value_range(delay_item[i : i + 1])
            d = blob[int(a[0]) : int(b[0])].decode("utf-8", errors="replace")
            try:
                level = int(d)
            except ValueError:
                continue
            if level > 0:
                tags_code[i] = delays.deliver_time(level, int(st[i]))

    sys_flag = c["sys_flag"]
    key_rec, key_hash = np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int32)
    if keys:
        key_rec, key_hash = _index_key_hashes(topics, topic_id, sys_flag, find("UNIQ_KEY", 8), find("KEYS", 4), value_range, hashes, arr, body_len, rec_start)
    del empty_i8
    return DispatchColumns(
        phys=batch.phys,
        size=c["total_size"].astype(np.int32),
        topic_id=topic_id,
        topics=topics,
        queue_id=c["queue_id"],
        queue_offset=c["queue_offset"],
        sys_flag=sys_flag,
        store_timestamp=c["store_timestamp"],
        tags_code=tags_code,
        key_rec=key_rec,
        key_hash=key_hash,
    )


def _index_key_hashes(topics, topic_id, sys_flag, uniq_item, keys_item, value_range, hashes, arr, body_len, rec_start):
    """(record, hashCode("topic#key")) of every index key, in put order: UNIQ_KEY first, then KEYS tokens."""
    indexed = (sys_flag & C.TRANSACTION_MASK) != C.TRANSACTION_ROLLBACK
    prefix = np.array([java_hash(t + C.INDEX_KEY_SEPARATOR) & 0xFFFFFFFF for t in topics], dtype=np.uint32)
    pw, _ = _powers(1)
    recs, starts, ends = [], [], []
    u = np.flatnonzero((uniq_item >= 0) & indexed)
    if len(u):
        a, b = value_range(uniq_item[u])
        recs.append(u)
        starts.append(a)
        ends.append(b)
        order_u = 2 * rec_start[u] - 1  # before every token of the record
    else:
        order_u = np.zeros(0, dtype=np.int64)
    kr = np.flatnonzero((keys_item >= 0) & indexed)
    order_k = np.zeros(0, dtype=np.int64)
    if len(kr):
        a, b = value_range(keys_item[kr])
        sp = np.flatnonzero(arr[:body_len] == 0x20)
        which = np.searchsorted(a, sp, side="right") - 1
        inner = (which >= 0) & (sp < b[np.maximum(which, 0)])
        sp, which = sp[inner], which[inner]
        t_start = np.sort(np.concatenate([a, sp + 1]))
        t_end = np.sort(np.concatenate([sp, b]))
        t_rec = kr[np.searchsorted(a, t_start, side="right") - 1]
        nonempty = t_end > t_start
        recs.append(t_rec[nonempty])
        starts.append(t_start[nonempty])
        ends.append(t_end[nonempty])
        order_k = 2 * t_start[nonempty]
    if not recs:
        return np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int32)
    rec = np.concatenate(recs)
    a = np.concatenate(starts)
    b = np.concatenate(ends)
    order = np.argsort(np.concatenate([order_u, order_k]), kind="stable")
    rec, a, b = rec[order], a[order], b[order]
    h, ln = hashes(a, b)
    if ln.max(initial=0) >= len(pw):
        pw, _ = _powers(int(ln.max()) + 1)
    with np.errstate(over="ignore"):
        full = prefix[topic_id[rec]] * pw[ln] + h
    return rec.astype(np.int32), full.view(np.int32)
