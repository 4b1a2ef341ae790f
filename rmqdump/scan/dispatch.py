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

from rmqdump.common.javahash import java_hash
from rmqdump.readers.commitlog import Batch, CommitLog
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


def dispatch_of(batch: Batch, delays: DelayLevels) -> DispatchBatch:
    """The dispatch values of a batch: the columns of dispatch_columns, plus KEYS and UNIQ_KEY as strings.

    Only the property values that become strings are decoded one by one
    (tests prove the values equal a plain per-record parse on every real record).
    """
    n = len(batch)
    cols, groups = _columns(batch, delays, keys=False)
    if n == 0:
        z = np.zeros(0, dtype=np.int64)
        return DispatchBatch(z, z.astype(np.int32), [], z, z, z, z, z, [], [])
    keys_l: list[list[str]] = [[] for _ in range(n)]
    uniq_l: list[str | None] = [None] * n
    for recs, props in groups:
        raw = props.buf.tobytes()
        r, a, b = props.find("UNIQ_KEY")
        for i, x, y in zip(recs[r].tolist(), a.tolist(), b.tolist(), strict=True):
            uniq_l[i] = raw[x:y].decode("utf-8", errors="replace")
        r, a, b = props.find("KEYS")
        for i, x, y in zip(recs[r].tolist(), a.tolist(), b.tolist(), strict=True):
            if y > x:
                keys_l[i] = [k for k in raw[x:y].decode("utf-8", errors="replace").split(C.KEY_SEPARATOR) if k]
    table = np.empty(len(cols.topics), dtype=object)
    table[:] = cols.topics
    return DispatchBatch(
        phys=cols.phys,
        size=cols.size,
        topic=table[cols.topic_id].tolist(),
        queue_id=cols.queue_id,
        queue_offset=cols.queue_offset,
        sys_flag=cols.sys_flag,
        store_timestamp=cols.store_timestamp,
        tags_code=cols.tags_code,
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
# hashCode of every index key "topic#key". Here a whole batch is parsed at
# once. Each record's properties are copied into one row of a matrix (one
# memcpy per record through an overlapping-window view of the mapped file;
# longer ones are joined into a side buffer), separators are found with
# numpy, and the hashCode of each wanted byte range (TAGS, UNIQ_KEY, each
# KEYS token) is computed column by column (Horner) over a matrix of those
# ranges. hashCode("topic#key") = hashCode("topic#") * 31**len(key) +
# hashCode(key), so keys are never built as strings. Ranges that are not ASCII
# are decoded and hashed one by one, as the broker does over UTF-16 (rare:
# tags like 订单创建); topics are grouped by a fingerprint, each group checked
# byte for byte.

_PAD = 256  # bytes before the first row: right-aligned windows may start before it
_ROW = 128  # properties up to this long go into the matrix
_HASH_WIDTHS = (8, 16, 24, 32, 48, 64, 128, 256)
_NAME_CODES = {name: int.from_bytes(name.encode().ljust(8, b"\0"), "big") for name in ("TAGS", "KEYS", "UNIQ_KEY", "DELAY")}
_PACK_MAX_RECORDS = 1 << 15  # records of a batch whose keys are put in order by one packed int64 sort
_K1, _K2, _K3 = np.uint64(0x9E3779B97F4A7C15), np.uint64(0xC2B2AE3D27D4EB4F), np.uint64(0x165667B19E3779F9)


def _pow31(n: int) -> np.ndarray:
    """31**i mod 2**32 for i < n (a running product wraps exactly like Java int arithmetic)."""
    out = np.full(max(n, 1), 31, dtype=np.uint32)
    out[0] = 1
    np.cumprod(out, out=out)
    return out


_POW31 = _pow31(1 << 16)


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


def _windows(buf: np.ndarray, width: int) -> np.ndarray:
    """Every `width`-byte window of buf as one void array (stride 1): a gather is one memcpy per position."""
    return np.ndarray((len(buf) - width + 1,), dtype=np.dtype((np.void, width)), buffer=buf, strides=(1,))


def _gather_rows(buf: np.ndarray, pos: np.ndarray, width: int) -> np.ndarray:
    return _windows(buf, width)[pos].view(np.uint8).reshape(len(pos), width)


def _java_hash_bytes(raw: bytes, cache: dict[bytes, tuple[int, int]]) -> tuple[int, int]:
    """(hashCode, UTF-16 length) of bytes decoded as the broker decodes properties."""
    got = cache.get(raw)
    if got is None:
        s = raw.decode("utf-8", errors="replace")
        got = cache[raw] = (java_hash(s), len(s.encode("utf-16-be", "surrogatepass")) // 2)
    return got


_HIGH_BITS = np.uint64(0x8080808080808080)
_MASKS: dict[int, np.ndarray] = {}


def _lead_masks(w: int) -> np.ndarray:
    """For each lead 0..w, the row of native uint64 words that zeroes the first `lead` bytes of a w-byte row."""
    got = _MASKS.get(w)
    if got is None:
        keep = (np.arange(w)[None, :] >= np.arange(w + 1)[:, None]).astype(np.uint8) * np.uint8(0xFF)
        got = _MASKS[w] = np.ascontiguousarray(keep).view(np.uint64)
    return got


def _horner(m: np.ndarray) -> np.ndarray:
    """hashCode of each row of a uint8 matrix whose leading unused bytes are 0."""
    cols = np.ascontiguousarray(m.T)
    h = np.zeros(m.shape[0], dtype=np.uint32)
    with np.errstate(over="ignore"):
        for col in cols:
            h *= np.uint32(31)
            h += col
    return h


def _range_hashes(buf: np.ndarray, a: np.ndarray, b: np.ndarray, cache: dict) -> tuple[np.ndarray, np.ndarray]:
    """(hashCode as uint32, UTF-16 length) of the byte ranges [a, b) of buf (buf has _PAD bytes before any range)."""
    k = len(a)
    h = np.zeros(k, dtype=np.uint32)
    ln = (b - a).astype(np.int64)
    slow = []
    lo = 0
    for w in _HASH_WIDTHS:
        sel = np.flatnonzero((ln > lo) & (ln <= w))
        lo = w
        if not len(sel):
            continue
        m = _gather_rows(buf, b[sel] - w, w)
        words = m.view(np.uint64)  # rows of w // 8 native words: masks work 8 bytes at a time
        lead = w - ln[sel]
        if (lead > 0).any():
            words = words & _lead_masks(w)[lead]
            m = words.view(np.uint8)
        h[sel] = _horner(m)
        nonascii = (words & _HIGH_BITS).any(axis=1)
        if nonascii.any():
            slow.extend(sel[nonascii].tolist())
    if slow:
        _decode_hashes(buf, a, b, np.array(slow, dtype=np.int64), h, ln, cache)
    longer = np.flatnonzero(ln > _HASH_WIDTHS[-1])
    for i in longer.tolist():
        hv, lv = _java_hash_bytes(buf[a[i] : b[i]].tobytes(), cache)
        h[i] = np.uint32(hv & 0xFFFFFFFF)
        ln[i] = lv
    return h, ln


def _decode_hashes(buf, a, b, idx, h, ln, cache) -> None:
    """Non-ASCII ranges: decoded and hashed once per distinct byte string (grouped by byte hash and length, checked byte for byte)."""
    key = (h[idx].astype(np.uint64) << np.uint64(32)) | ln[idx].astype(np.uint64)
    _, rep, inv = np.unique(key, return_index=True, return_inverse=True)
    for g, r in enumerate(rep.tolist()):
        i = int(idx[r])
        members = idx[inv == g]
        width = int(ln[i])
        win = _windows(buf, width)
        same = win[a[members]] == win[a[i]] if len(members) > 1 else np.ones(1, dtype=bool)
        hv, lv = _java_hash_bytes(buf[a[i] : b[i]].tobytes(), cache)
        ok = members[same]
        h[ok] = np.uint32(hv & 0xFFFFFFFF)
        ln[ok] = lv
        for j in members[~same].tolist():
            hv, lv = _java_hash_bytes(buf[a[j] : b[j]].tobytes(), cache)
            h[j] = np.uint32(hv & 0xFFFFFFFF)
            ln[j] = lv


class _Props:
    """Property items of some records, laid out in one buffer: record r is buf[start[r]:end[r]].

    An item NAME\x01VALUE is found from its \x01: NAME is the bytes right
    before it, and must begin at the record's start or right after a \x02
    (so it is the item's first \x01, as the broker splits); VALUE runs to the
    next \x02 or the record's end. Rows of a fixed `width` (start[r] =
    start[0] + r * width) find their record by division, other layouts by
    search. Bytes outside the records are never read as separators, and
    buf has at least 8 bytes before the first record and after the last.
    """

    _CODES = {name: int.from_bytes(name.encode(), "big") for name in ("TAGS", "KEYS", "UNIQ_KEY", "DELAY")}

    def __init__(self, buf: np.ndarray, start: np.ndarray, end: np.ndarray, width: int | None = None):
        self.buf = buf
        self.n = n = len(start)
        self.start, self.end = start, end
        body = buf[: len(buf) - 8]
        hits = np.flatnonzero((body - np.uint8(1)) < np.uint8(2))  # \x01 and \x02
        if width:
            q = hits - int(start[0])
            r = q // width
            keep = (q >= 0) & (r < n)
            hits, q, r = hits[keep], q[keep], r[keep]
            keep = q - r * width < (end[r] - start[r])
        else:
            r = np.maximum(np.searchsorted(start, hits, side="right") - 1, 0)
            keep = (hits >= start[r]) & (hits < end[r])
        hits, r = hits[keep], r[keep]
        kind = body[hits]
        is1 = kind == 1
        self.x2 = hits[kind == 2]
        x1, r1 = hits[is1], r[is1]
        word = _windows(buf, 8)[x1 - 8].view(">u8").astype(np.uint64)
        w4 = word & np.uint64(0xFFFFFFFF)
        codes = self._CODES
        cand = (w4 == np.uint64(codes["TAGS"])) | (w4 == np.uint64(codes["KEYS"])) | (word == np.uint64(codes["UNIQ_KEY"]))
        cand |= (word & np.uint64(0xFFFFFFFFFF)) == np.uint64(codes["DELAY"])
        c = np.flatnonzero(cand)
        self.x1, self.r1, self.word = x1[c], r1[c], word[c]

    def find(self, name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(records, value starts, value ends) of the records that have this property (its last value)."""
        length = len(name)
        mask = np.uint64((1 << (8 * length)) - 1)
        sel = np.flatnonzero((self.word & mask) == np.uint64(self._CODES[name]))
        x1, r = self.x1[sel], self.r1[sel]
        p = x1 - length  # where the name begins
        st = self.start[r]
        ok = (p == st) | ((p > st) & (self.buf[p - 1] == 2))
        x1, r = x1[ok], r[ok]
        if len(r) > 1:  # the last value of a repeated name wins
            last = np.ones(len(r), dtype=bool)
            last[:-1] = r[1:] != r[:-1]
            x1, r = x1[last], r[last]
        j = np.searchsorted(self.x2, x1)
        nxt = self.x2[np.minimum(j, len(self.x2) - 1)] if len(self.x2) else self.end[r]
        b = np.where((j < len(self.x2)) & (nxt < self.end[r]), nxt, self.end[r])
        return r, x1 + 1, b


def _matrix_props(data: np.ndarray, pp: np.ndarray, pl: np.ndarray) -> _Props:
    """Properties of records up to _ROW bytes, one row each, copied straight from the mapped file.

    A row is wider than its record (the rest is whatever followed in the
    file, never read as a separator); dummy rows before and after give the
    windows of the hashing and the name test room to read.
    """
    n = len(pp)
    width = -(-(int(pl.max()) + 1) // 8) * 8
    lead = -(-_PAD // width)
    pos = np.concatenate([np.repeat(pp[:1], lead), pp, np.repeat(pp[-1:], 2)])
    buf = _windows(data, width)[pos].view(np.uint8)
    start = (lead + np.arange(n, dtype=np.int64)) * width
    return _Props(buf, start, start + pl, width)


def _joined_props(view, pp: np.ndarray, pl: np.ndarray) -> _Props:
    """Properties of any length, joined one after the other."""
    parts = [view[a : a + k] for a, k in zip(pp.tolist(), pl.tolist(), strict=True)]
    raw = bytes(_PAD) + b"\x00".join(parts) + bytes(8 + 1)
    buf = np.frombuffer(raw, dtype=np.uint8)
    start = np.zeros(len(pp), dtype=np.int64)
    if len(pp) > 1:
        np.cumsum(pl[:-1] + 1, out=start[1:])
    start += _PAD
    return _Props(buf, start, start + pl)


def _topic_ids(data: np.ndarray, view, tp: np.ndarray, tl: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """Topic id per record: grouped by a fingerprint of (first 8 bytes, last 8 bytes, length), each group checked whole."""
    n = len(tp)
    if n >= 64 and tl.max() <= 4096 and (tp >= 0).all() and int(tp.max()) + 8 <= len(data) and tl.min() > 0:
        w8 = _windows(data, 8)
        first = w8[tp].view(">u8").astype(np.uint64)
        last = w8[np.maximum(tp + tl - 8, 0)].view(">u8").astype(np.uint64)
        short = np.minimum(tl, 8).astype(np.uint64) * np.uint64(8)
        with np.errstate(over="ignore"):
            first = np.where(short < 64, (first >> (np.uint64(64) - short)), first)
            last = np.where(short < 64, last & ((np.uint64(1) << short) - np.uint64(1)), last)
            fp = first * _K1 + last * _K2 + tl.astype(np.uint64) * _K3
        _, rep, inv = np.unique(fp, return_index=True, return_inverse=True)
        ok = bool((tl == tl[rep][inv]).all() and (first == first[rep][inv]).all() and (last == last[rep][inv]).all())
        for g in range(len(rep)) if ok else ():
            width = int(tl[rep[g]])
            if width <= 16:
                continue  # first and last 8 bytes cover it
            members = np.flatnonzero(inv == g)
            win = _windows(data, width)
            if not (win[tp[members]] == win[tp[rep[g]]]).all():
                ok = False
                break
        if ok:
            topics = [bytes(view[int(tp[r]) : int(tp[r]) + int(tl[r])]).decode("utf-8", errors="replace") for r in rep]
            return inv.astype(np.int32), topics
    table: dict[bytes, int] = {}
    ids = np.fromiter((table.setdefault(bytes(view[a : a + k]), len(table)) for a, k in zip(tp.tolist(), tl.tolist(), strict=True)), dtype=np.int32, count=n)
    return ids, [t.decode("utf-8", errors="replace") for t in table]


def dispatch_columns(batch: Batch, delays: DelayLevels, *, keys: bool = True) -> DispatchColumns:
    """dispatch_of(batch) as columns (tests prove the two equal on every real record)."""
    return _columns(batch, delays, keys)[0]


def _columns(batch: Batch, delays: DelayLevels, keys: bool) -> tuple[DispatchColumns, list]:
    """The columns, and the parsed properties of each group of records (for dispatch_of's strings)."""
    c = batch.cols
    n = len(batch)
    if n == 0:
        z = np.zeros(0, dtype=np.int64)
        return DispatchColumns(z, z.astype(np.int32), z.astype(np.int32), [], z, z, z, z, z, z.astype(np.int32), z.astype(np.int32)), []
    data, view = batch.mf.data, batch.mf.view
    topic_id, topics = _topic_ids(data, view, c["topic_pos"], c["topic_length"])
    pp = c["properties_pos"]
    pl = np.maximum(c["properties_length"], 0)
    small = (pl < _ROW) & (pp + _ROW <= len(data))
    groups = []  # (record indices, _Props)
    idx = np.flatnonzero(small)
    if len(idx):
        groups.append((idx, _matrix_props(data, pp[idx], pl[idx])))
    idx = np.flatnonzero(~small)
    if len(idx):
        groups.append((idx, _joined_props(view, pp[idx], pl[idx])))

    cache: dict[bytes, tuple[int, int]] = {}
    tags_code = np.zeros(n, dtype=np.int64)
    sched = [i for i, t in enumerate(topics) if t == C.SCHEDULE_TOPIC]
    st = c["store_timestamp"]
    sys_flag = c["sys_flag"]
    indexed = (sys_flag & C.TRANSACTION_MASK) != C.TRANSACTION_ROLLBACK
    key_parts = []  # (record, order within the record's keys, hash, UTF-16 length)
    for recs, props in groups:
        r, a, b = props.find("TAGS")
        nonempty = b > a
        r, a, b = r[nonempty], a[nonempty], b[nonempty]
        if len(r):
            tags_code[recs[r]] = _range_hashes(props.buf, a, b, cache)[0].view(np.int32).astype(np.int64)
        if sched:
            r, a, b = props.find("DELAY")
            for j in np.flatnonzero(np.isin(topic_id[recs[r]], sched)).tolist():
                d = props.buf[int(a[j]) : int(b[j])].tobytes().decode("utf-8", errors="replace")
                try:
                    level = int(d)
                except ValueError:
                    continue
                if level > 0:
                    i = int(recs[r[j]])
                    tags_code[i] = delays.deliver_time(level, int(st[i]))
        if keys:
            key_parts.append(_key_ranges(props, recs, indexed[recs], cache))

    key_rec, key_hash = np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int32)
    if keys and key_parts:
        rec = np.concatenate([k[0] for k in key_parts])
        order = np.concatenate([k[1] for k in key_parts])
        h = np.concatenate([k[2] for k in key_parts])
        ln = np.concatenate([k[3] for k in key_parts])
        if len(key_parts) > 1:
            o = np.lexsort((order, rec))
            rec, h, ln = rec[o], h[o], ln[o]
        prefix = np.array([java_hash(t + C.INDEX_KEY_SEPARATOR) & 0xFFFFFFFF for t in topics], dtype=np.uint32)
        pw = _POW31 if ln.max(initial=0) < len(_POW31) else _pow31(int(ln.max()) + 1)
        with np.errstate(over="ignore"):
            full = prefix[topic_id[rec]] * pw[ln] + h
        key_rec, key_hash = rec.astype(np.int32), full.view(np.int32)
    cols = DispatchColumns(
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
    return cols, groups


def _key_ranges(props: _Props, recs: np.ndarray, indexed: np.ndarray, cache: dict):
    """(record, order, hash, UTF-16 length) of UNIQ_KEY and each non-empty KEYS token, in put order."""
    n = props.n
    ur, ua, ub = props.find("UNIQ_KEY")
    keep = indexed[ur]
    ur, ua, ub = ur[keep], ua[keep], ub[keep]
    kr, a, b = props.find("KEYS")
    keep = indexed[kr] & (b > a)
    kr, a, b = kr[keep], a[keep], b[keep]
    # spaces inside the KEYS values split them into tokens
    sp = np.flatnonzero(props.buf == 0x20) if len(kr) else np.zeros(0, dtype=np.int64)
    w = np.searchsorted(a, sp, side="right") - 1
    sp = sp[(w >= 0) & (sp < b[np.maximum(w, 0)])]
    t_start = np.sort(np.concatenate([a, sp + 1]), kind="stable")
    t_end = np.sort(np.concatenate([sp, b]), kind="stable")
    nonempty = t_end > t_start
    t_start, t_end = t_start[nonempty], t_end[nonempty]
    t_rec = kr[np.searchsorted(a, t_start, side="right") - 1]
    # put order: a record's UNIQ_KEY, then its tokens in place order; records in order
    rr = np.concatenate([ur, t_rec])
    place = np.concatenate([np.zeros(len(ur), dtype=np.int64), t_start - props.start[t_rec] + 1])  # UNIQ_KEY first
    total = len(rr)
    if n <= _PACK_MAX_RECORDS and total < 1 << 32 and (total == 0 or int(place.max()) < 1 << 16):
        # (record, place, position) packed in one int64: a plain sort, no indirection
        packed = np.sort((rr.astype(np.int64) << 48) | (place << 32) | np.arange(total, dtype=np.int64))
        order = packed & 0xFFFFFFFF
    else:
        order = np.lexsort((place, rr))
    ra = np.concatenate([ua, t_start])[order]
    rb = np.concatenate([ub, t_end])[order]
    rr = rr[order]
    h, ln = _range_hashes(props.buf, ra, rb, cache)
    return recs[rr], np.arange(total, dtype=np.int64), h, ln
