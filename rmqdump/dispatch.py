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
from rmqdump.javahash import java_hash_many
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
