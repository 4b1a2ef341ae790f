"""Properties of single CommitLog records at known physical offsets, each file mapped once.

The 5.x queue kinds keep part of their truth in record properties the
columnar dispatch does not carry (INNER_NUM / INNER_BASE of an inner batch,
INNER_MULTI_DISPATCH / INNER_MULTI_QUEUE_OFFSET of an LMQ message): the few
records a check needs them for are decoded here, one by one.
"""

from __future__ import annotations

import os

from rmqdump.readers.commitlog import CommitLog, read_record
from rmqdump.readers.mapped import MappedFile
from rmqdump.readers.message import Message
from schemas import constants as C

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
    def __init__(self, cl: CommitLog):
        self.cl = cl
        self._open: dict[str, MappedFile] = {}
        self._cache: dict[int, dict[str, str] | None] = {}

    def mapped(self, path: str) -> MappedFile:
        mf = self._open.get(path)
        if mf is None:
            mf = self._open[path] = MappedFile(path, limit=self.cl.file_size)
        return mf

    def message(self, phys: int) -> Message | None:
        seg = self.cl.file_for(phys)
        if seg is None:
            return None
        m = read_record(seg, self.mapped(seg.path), phys - seg.base, check_crc=False)
        return m if isinstance(m, Message) else None

    def get(self, phys: int) -> dict[str, str] | None:
        """The properties of the record at `phys`, None when no readable record starts there."""
        if phys not in self._cache:
            if len(self._cache) > 100_000:
                self._cache.clear()
            m = self.message(phys)
            self._cache[phys] = m.properties if m is not None else None
        return self._cache[phys]

    def close(self) -> None:
        for mf in self._open.values():
            mf.close()
        self._open.clear()

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
