"""Properties of single CommitLog records at known physical offsets, each file mapped once.

The 5.x queue kinds keep part of their truth in record properties the
columnar dispatch does not carry (INNER_NUM / INNER_BASE of an inner batch,
INNER_MULTI_DISPATCH / INNER_MULTI_QUEUE_OFFSET of an LMQ message): the few
records a check needs them for are decoded here, one by one.
"""

from __future__ import annotations

import os

import numpy as np

from rmqdump.readers.commitlog import MIN_RECORD_SIZE, CommitLog
from rmqdump.readers.fastpath import ColumnarParser, gather, numpy_dtype
from rmqdump.readers.mapped import MappedFile
from rmqdump.readers.message import decode_properties
from schemas import MessageRecord, RecordPrefix
from schemas import constants as C

_PARSER = ColumnarParser(MessageRecord)
_PREFIX = numpy_dtype(RecordPrefix)  # totalSize, magic

FIND_CHUNK = 16 << 20  # bytes read at a time by find_all: memory stays bounded whatever the file size


def find_all(path: str, needle: bytes, start: int, stop: int) -> list[int]:
    """Offsets of every occurrence of `needle` in bytes [start, stop) of a file (read in chunks, never mapped whole)."""
    out: list[int] = []
    k = len(needle)
    fd = os.open(path, os.O_RDONLY)
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


class RecordProps:
    """Properties of records by physical offset, parsed many at a time.

    `load()` parses a set of records per CommitLog file with the columnar
    parser derived from schemas.MessageRecord (one numpy pass, then one
    bytes decode per record), mapping each file only for that call, so the
    pages read are given back and memory stays bounded. `get()` answers from
    what was loaded (loading one record when asked for one that was not).
    """

    MAX_CACHED = 200_000

    def __init__(self, cl: CommitLog):
        self.cl = cl
        self._cache: dict[int, dict[str, str] | None] = {}

    def load(self, phys: np.ndarray) -> None:
        """Parse the records starting at these physical offsets (each must be a record start to give properties)."""
        phys = np.unique(np.asarray(phys, dtype=np.int64))
        phys = phys[[int(p) not in self._cache for p in phys.tolist()]] if len(self._cache) else phys
        if not len(phys):
            return
        if len(self._cache) + len(phys) > self.MAX_CACHED:
            self._cache.clear()
        for seg in self.cl.files:
            sel = phys[(phys >= seg.base) & (phys < seg.base + seg.size)]
            if not len(sel):
                continue
            with MappedFile(seg.path, limit=self.cl.file_size) as mf:
                starts = sel - seg.base
                pre = gather(mf.data, starts, _PREFIX)
                total = pre["total_size"].astype(np.int64)
                magic = pre["magic"].astype(np.int64) & 0xFFFFFFFF
                fits = (starts + 8 <= mf.size) & np.isin(magic, C.MESSAGE_MAGICS) & (total >= MIN_RECORD_SIZE) & (starts + total <= mf.size)
                cols, ok = _PARSER.parse(mf.data, starts[fits], starts[fits] + total[fits])
                good = np.flatnonzero(fits)
                view = mf.view
                for k, i in enumerate(good.tolist()):
                    if not ok[k]:
                        continue
                    a, n = int(cols["properties_pos"][k]), int(cols["properties_length"][k])
                    self._cache[int(sel[i])] = decode_properties(bytes(view[a : a + n]))[0]
                del view, cols
            for p in sel.tolist():
                self._cache.setdefault(int(p), None)

    def get(self, phys: int) -> dict[str, str] | None:
        """The properties of the record at `phys`, None when no readable record starts there."""
        if phys not in self._cache:
            self.load(np.array([phys], dtype=np.int64))
        return self._cache.get(phys)

    def close(self) -> None:
        self._cache.clear()

    def __enter__(self) -> RecordProps:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


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
