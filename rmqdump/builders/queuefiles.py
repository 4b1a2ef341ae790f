"""The open files of the per-queue builders (ConsumeQueue, Batch ConsumeQueue, ConsumeQueue ext), capped.

A store may hold thousands of queues and the builders write each queue's
units as they come, so they share one cache of write descriptors: at most
MAX_OPEN_FILES are open, the least recently used one is closed (fsynced
first when syncing) to make room, and reopened without truncation when its
file is written again.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from dataclasses import dataclass, field

from rmqdump.common.jsontext import fields_of

MAX_OPEN_FILES = 128


@dataclass
class QueueResult:
    topic: str
    queue_id: int
    first_offset: int = -1  # queueOffset of the first unit
    next_offset: int = 0  # one past the last unit
    units: int = 0
    pre_blank: int = 0  # fillPreBlank units before the first unit
    gap_units: int = 0  # filler units written into holes
    gaps: int = 0
    duplicates: int = 0
    files: list[str] = field(default_factory=list)
    first_gap: tuple[int, int, int] | None = None  # (from offset, to offset, phys of the unit after)
    gap_ranges: list[tuple[int, int]] = field(default_factory=list)  # [from, to) queue offsets filled with fillers
    first_dup: tuple[int, int] | None = None  # (queue offset, phys)

    @property
    def dir(self) -> str:
        return os.path.join(self.topic, str(self.queue_id))

    def to_dict(self) -> dict:
        return {**fields_of(self, omit=("gaps", "files", "first_gap", "gap_ranges", "first_dup")), "files": len(self.files)}


class QueueFiles:
    """Write descriptors of the files under out_dir/TOPIC/QID, each file_size bytes and named by its byte offset."""

    def __init__(self, out_dir: str, file_size: int, *, sync: bool = True):
        self.out_dir = out_dir
        self.file_size = file_size
        self.sync = sync
        self.cap = MAX_OPEN_FILES
        self.evicted = 0  # files closed to make room
        self.reopened = 0  # of those, files opened again
        self._fds: OrderedDict[str, int] = OrderedDict()
        self._created: set[str] = set()

    def fd(self, q: QueueResult, base: int, *, create: bool = True) -> int | None:
        """The file of queue q at byte offset base; created zero-filled (and named in q.files) on first use.

        With create=False a file not created yet gives None.
        """
        name = f"{base:020d}"
        path = os.path.join(self.out_dir, q.topic, str(q.queue_id), name)
        fd = self._fds.get(path)
        if fd is not None:
            self._fds.move_to_end(path)
            return fd
        if path in self._created:
            fd = os.open(path, os.O_WRONLY)
            self.reopened += 1
        elif not create:
            return None
        else:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            os.ftruncate(fd, self.file_size)
            self._created.add(path)
            q.files.append(name)
        self._fds[path] = fd
        while len(self._fds) > self.cap:
            _, old = self._fds.popitem(last=False)
            self._close(old)
            self.evicted += 1
        return fd

    def _close(self, fd: int) -> None:
        if self.sync:
            os.fsync(fd)
        os.close(fd)

    def close(self) -> None:
        """Close every open file, fsynced first when syncing."""
        while self._fds:
            _, fd = self._fds.popitem(last=False)
            self._close(fd)

    def abort(self) -> None:
        """Close every open file without syncing: the output is being thrown away."""
        while self._fds:
            _, fd = self._fds.popitem(last=False)
            os.close(fd)
