"""Properties of single CommitLog records at known physical offsets, each file mapped once.

The 5.x queue kinds keep part of their truth in record properties the
columnar dispatch does not carry (INNER_NUM / INNER_BASE of an inner batch,
INNER_MULTI_DISPATCH / INNER_MULTI_QUEUE_OFFSET of an LMQ message): the few
records a check needs them for are decoded here, one by one.
"""

from __future__ import annotations

import os

import numpy as np

from rmqdump.common.closing import Closing
from rmqdump.readers.commitlog import CommitLog
from rmqdump.readers.fastpath import ColumnarParser, gather, numpy_dtype
from rmqdump.readers.mapped import open_readonly
from rmqdump.schemas import MessageRecord, RecordPrefix
from rmqdump.schemas import constants as C
from rmqdump.schemas.commitlog import MIN_RECORD_SIZE

_PARSER = ColumnarParser(MessageRecord)
_PREFIX = numpy_dtype(RecordPrefix)  # totalSize, magic

FIND_CHUNK = 16 << 20  # bytes read at a time by find_all: memory stays bounded whatever the file size


def find_all(path: str, needle: bytes, start: int, stop: int) -> list[int]:
    """Offsets of every occurrence of `needle` in bytes [start, stop) of a file (read in chunks, never mapped whole)."""
    out: list[int] = []
    k = len(needle)
    fd = open_readonly(path)
    try:
        pos = start
        while pos < stop:
            n = min(FIND_CHUNK, stop - pos)
            buf = os.pread(fd, n + k - 1, pos)  # k - 1 bytes more: a needle across the chunk's end is found once
            if not buf:
                break
            p = buf.find(needle)
            while 0 <= p < n:  # occurrences starting in this chunk's own n bytes
                out.append(pos + p)
                p = buf.find(needle, p + 1)
            pos += n
    finally:
        os.close(fd)
    return out


READ_BYTES = 16 << 20  # record bytes read and parsed at a time


def _read_total(fd: int, at: int) -> int:
    raw = os.pread(fd, 4, at)
    return int.from_bytes(raw, "big", signed=True) if len(raw) == 4 else 0


WANTED = (C.PROPERTY_INNER_NUM, C.PROPERTY_INNER_BASE, C.PROPERTY_INNER_MULTI_DISPATCH, C.PROPERTY_INNER_MULTI_QUEUE_OFFSET)
_WANTED = [(name, (name + C.NAME_VALUE_SEPARATOR).encode()) for name in WANTED]


def pick(raw: bytes, wanted=_WANTED) -> dict[str, str]:
    """The wanted properties of a raw `name\x01value\x02...` string, split as the broker splits (the last value wins)."""
    out: dict[str, str] = {}
    for name, key in wanted:
        p = raw.rfind(key)
        while p > 0 and raw[p - 1] != 2:  # a match inside another item's value or name: look further back
            p = raw.rfind(key, 0, p)
        if p < 0:
            continue
        e = raw.find(b"\x02", p)
        out[name] = raw[p + len(key) : e if e >= 0 else len(raw)].decode("utf-8", errors="replace")
    return out


class RecordProps(Closing):
    """The WANTED properties of records by physical offset, parsed many at a time.

    `load()` reads a set of records per CommitLog file and parses them with
    the columnar parser derived from schemas.MessageRecord (one numpy pass,
    then a few bytes searches per record for the wanted names). `get()` answers from what was loaded
    (loading one record when asked for one that was not).
    """

    MAX_CACHED = 200_000

    def __init__(self, cl: CommitLog):
        self.cl = cl
        self._cache: dict[int, dict[str, str] | None] = {}

    def load(self, phys: np.ndarray, size: np.ndarray | None = None) -> None:
        """Parse the records starting at these physical offsets (`size`: their totalSize when known).

        Records are read with pread into one buffer (at most READ_BYTES at a
        time) and parsed there: nothing is mapped, so memory is that buffer.
        """
        phys = np.asarray(phys, dtype=np.int64)
        size = None if size is None else np.asarray(size, dtype=np.int64)
        keep = np.array([int(p) not in self._cache for p in phys.tolist()], dtype=bool) if len(self._cache) else np.ones(len(phys), dtype=bool)
        phys = phys[keep]
        size = None if size is None else size[keep]
        if not len(phys):
            return
        if len(self._cache) + len(phys) > self.MAX_CACHED:
            self._cache.clear()
        for seg in self.cl.files:
            inside = (phys >= seg.base) & (phys < seg.base + seg.size)
            if not inside.any():
                continue
            fd = open_readonly(seg.path)
            try:
                starts = phys[inside] - seg.base
                sizes = size[inside] if size is not None else np.array([_read_total(fd, int(a)) for a in starts.tolist()], dtype=np.int64)
                fits = (sizes >= MIN_RECORD_SIZE) & (starts + sizes <= seg.size)
                self._parse(fd, seg.base, starts[fits], sizes[fits])
            finally:
                os.close(fd)
        for p in phys.tolist():
            self._cache.setdefault(int(p), None)

    def _parse(self, fd: int, base: int, starts: np.ndarray, sizes: np.ndarray) -> None:
        order = np.argsort(starts, kind="stable")
        starts, sizes = starts[order], sizes[order]
        ends = starts + sizes
        at = 0
        while at < len(starts):
            k = max(1, int(np.searchsorted(ends[at:], starts[at] + READ_BYTES, side="right")))
            a, n = starts[at : at + k], sizes[at : at + k]
            lo, hi = int(a[0]), int(ends[at : at + k].max())
            if hi - lo <= max(4 * int(n.sum()), 1 << 20):  # dense enough: one read of the whole span
                raw = os.pread(fd, hi - lo, lo)
                off = a - lo
            else:
                raw = b"".join(os.pread(fd, int(m), int(x)) for x, m in zip(a.tolist(), n.tolist(), strict=True))
                off = np.zeros(k, dtype=np.int64)
                np.cumsum(n[:-1], out=off[1:])
            buf = np.frombuffer(raw, dtype=np.uint8)
            pre = gather(buf, off, _PREFIX)
            good = (off + n <= len(buf)) & np.isin(pre["magic"].astype(np.int64) & 0xFFFFFFFF, C.MESSAGE_MAGICS) & (pre["total_size"].astype(np.int64) == n)
            g = np.flatnonzero(good)
            cols, ok = _PARSER.parse(buf, off[g], off[g] + n[g])
            pp, pl = cols["properties_pos"].tolist(), cols["properties_length"].tolist()
            for j, i in enumerate(g.tolist()):
                if ok[j]:
                    self._cache[base + int(a[i])] = pick(raw[pp[j] : pp[j] + pl[j]])
            at += k

    def each(self, phys: np.ndarray, size: np.ndarray, chunk: int = 16384):
        """(position in `phys`, properties) for each record, loaded `chunk` at a time and then forgotten (memory stays bounded)."""
        for at in range(0, len(phys), chunk):
            p, z = phys[at : at + chunk], size[at : at + chunk]
            self.load(p, z)
            for k, x in enumerate(p.tolist()):
                yield at + k, self._cache.get(int(x))
            self._cache.clear()

    def get(self, phys: int) -> dict[str, str] | None:
        """The properties of the record at `phys`, None when no readable record starts there."""
        if phys not in self._cache:
            self.load(np.array([phys], dtype=np.int64))
        return self._cache.get(phys)

    def close(self) -> None:
        self._cache.clear()


def is_lmq(topic: str) -> bool:
    return topic.startswith(C.LMQ_PREFIX)


def multi_dispatch(topic: str, props: dict[str, str] | None) -> list[tuple[str, int]]:
    """(LMQ queue, queue offset) pairs the dispatcher writes units for, from a record's properties."""
    if not props or topic.startswith((C.RETRY_GROUP_TOPIC_PREFIX, C.SYSTEM_TOPIC_PREFIX)) or topic == C.SCHEDULE_TOPIC:
        return []
    names = props.get(C.PROPERTY_INNER_MULTI_DISPATCH, "")
    offsets = props.get(C.PROPERTY_INNER_MULTI_QUEUE_OFFSET, "")
    if not names.strip() or not offsets.strip():
        return []
    n, o = names.split(C.LMQ_DISPATCH_SEPARATOR), offsets.split(C.LMQ_DISPATCH_SEPARATOR)
    if len(n) != len(o):
        return []
    out = []
    for name, off in zip(n, o, strict=True):
        if not is_lmq(name) or os.sep in name:
            continue
        try:
            out.append((name, int(off)))
        except ValueError:
            continue
    return out
