"""A Batch ConsumeQueue (5.x `batchconsumequeue/TOPIC/QUEUE_ID/`): its files read as unit columns.

A topic with queue.type=BatchCQ gets 46-byte units (schemas.BatchConsumeQueueUnit)
appended one after the other: a unit's position says nothing about queue
offsets, its msgBaseOffset does, and it covers batchSize queue offsets (an
inner-batch record is one unit for INNER_NUM messages). Files are named by
their byte offset in the queue, like ConsumeQueue files; a file size that is
not a multiple of 46 leaves its tail unused (the broker never splits a unit).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from rmqdump.common.problems import Problem
from rmqdump.readers.consumequeue import CQ_BAD_FILE_NAME, CQ_FILE_SIZE, CQ_HOLE, common_file_size, queue_dirs, queue_files, usual_size, whole_units
from rmqdump.readers.fastpath import numpy_dtype
from rmqdump.readers.mapped import OFFSET_NAME_RE, OffsetFile
from rmqdump.schemas import BatchConsumeQueueUnit

BATCH_DIR = "batchconsumequeue"
BCQ_DTYPE = numpy_dtype(BatchConsumeQueueUnit)
BCQ_UNIT_SIZE = BCQ_DTYPE.itemsize

_COLUMNS = ("pos", "offset", "size", "tags_code", "store_time", "base_offset", "batch_size", "compacted_offset", "reserved")


class BCQFile(OffsetFile):
    """One Batch ConsumeQueue file."""


@dataclass
class BatchUnits:
    """Units of one file as native columns; `pos` is the unit's byte offset in its file."""

    file: BCQFile
    pos: np.ndarray  # int64
    offset: np.ndarray  # int64 commitLogOffset
    size: np.ndarray  # int32
    tags_code: np.ndarray  # int64
    store_time: np.ndarray  # int64
    base_offset: np.ndarray  # int64 msgBaseOffset
    batch_size: np.ndarray  # int32 (a Java short)
    compacted_offset: np.ndarray  # int32
    reserved: np.ndarray  # int32

    def __len__(self) -> int:
        return len(self.pos)

    @classmethod
    def from_array(cls, f: BCQFile, arr: np.ndarray) -> BatchUnits:
        return cls(
            f,
            np.arange(len(arr), dtype=np.int64) * BCQ_UNIT_SIZE,
            arr["commit_log_offset"].astype(np.int64),
            arr["size"].astype(np.int32),
            arr["tags_code"].astype(np.int64),
            arr["store_time"].astype(np.int64),
            arr["msg_base_offset"].astype(np.int64),
            arr["batch_size"].astype(np.int32),
            arr["compacted_offset"].astype(np.int32),
            arr["reserved"].astype(np.int32),
        )

    def valid_mask(self) -> np.ndarray:
        """What BatchConsumeQueue.recover accepts: offset >= 0, size > 0, msgBaseOffset >= 0, batchSize > 0."""
        return (self.offset >= 0) & (self.size > 0) & (self.base_offset >= 0) & (self.batch_size > 0)

    def zero_mask(self) -> np.ndarray:
        """Units all of whose 46 bytes are zero (compactedOffset and reserved too)."""
        z = (self.offset == 0) & (self.size == 0) & (self.tags_code == 0) & (self.store_time == 0) & (self.base_offset == 0) & (self.batch_size == 0)
        return z & (self.compacted_offset == 0) & (self.reserved == 0)

    def row(self, i: int) -> dict:
        return {k: int(getattr(self, k)[i]) for k in _COLUMNS}


def read_batch_units(f: BCQFile) -> np.ndarray:
    """The whole units of one file as a structured (big-endian) array."""
    return whole_units(f, BCQ_DTYPE)


@dataclass
class BatchConsumeQueue:
    """One batchconsumequeue/TOPIC/QUEUE_ID directory: its files in order and their layout problems."""

    topic: str
    queue_id: int
    path: str
    files: list[BCQFile]
    file_size: int | None
    problems: list[Problem] = field(default_factory=list)
    _firsts: list[int | None] | None = field(default=None, repr=False)

    @classmethod
    def open(cls, path: str, topic: str, queue_id: int, file_size: int | None = None) -> BatchConsumeQueue:
        files, probs = queue_files(path, BCQFile, lambda p: {"topic": topic, "queue_id": queue_id, "unit_index": None, "cq_file": p})
        if file_size is None:
            file_size = common_file_size([f.size for f in files])
        q = cls(topic, queue_id, path, files, file_size, probs)
        q._check_layout()
        return q

    def _problem(self, code: str, path: str, pos: int | None, detail: str) -> Problem:
        return Problem(code, path, pos, detail, extra={"topic": self.topic, "queue_id": self.queue_id, "cq_file": path, "unit_index": None})

    def _check_layout(self) -> None:
        fs = self.file_size
        for i, f in enumerate(self.files):
            if fs and f.size != fs:
                self.problems.append(
                    self._problem(CQ_FILE_SIZE, f.path, f.size, f"file is {f.size} bytes, the queue's files are {fs} (the broker refuses to load it)")
                )
            if fs and f.base % fs:
                self.problems.append(self._problem(CQ_BAD_FILE_NAME, f.path, None, f"name {f.base} is not a multiple of the file size {fs}"))
            if i and fs and f.base > self.files[i - 1].base + fs:
                gap = self.files[i - 1].base + fs
                self.problems.append(
                    self._problem(CQ_HOLE, os.path.join(self.path, f"{gap:020d}"), None, f"no file for bytes {gap}..{f.base - 1} of the queue")
                )

    def chunks(self) -> Iterator[BatchUnits]:
        """The units file by file."""
        for f in self.files:
            yield BatchUnits.from_array(f, read_batch_units(f))

    def last_valid(self) -> tuple[int, int]:
        """(file index, unit index in it) of the queue's last valid unit, reading files from the end; (-1, -1) if none."""
        for fi in range(len(self.files) - 1, -1, -1):
            u = BatchUnits.from_array(self.files[fi], read_batch_units(self.files[fi]))
            v = np.flatnonzero(u.valid_mask())
            if v.size:
                return fi, int(v[-1])
        return -1, -1

    def bounds(self) -> tuple[int, int]:
        """(min offset, max offset): the first valid unit's msgBaseOffset, the last one's msgBaseOffset + batchSize."""
        lo = hi = None
        for u in self.chunks():
            v = np.flatnonzero(u.valid_mask())
            if v.size:
                if lo is None:
                    lo = int(u.base_offset[v[0]])
                hi = int(u.base_offset[v[-1]]) + int(u.batch_size[v[-1]])
        return (lo or 0, hi or 0) if lo is not None else (0, 0)

    def expected_path(self, queue_offset: int) -> str:
        """The file whose units cover `queue_offset` (the last file that starts at or before it; the first file when none)."""
        if self._firsts is None:  # msgBaseOffset of each file's first valid unit, read once
            self._firsts = []
            for u in self.chunks():
                v = np.flatnonzero(u.valid_mask())
                self._firsts.append(int(u.base_offset[v[0]]) if v.size else None)
        best = None
        for f, first in zip(self.files, self._firsts, strict=True):
            if first is not None and first <= queue_offset:
                best = f.path
        if best is None:
            return self.files[0].path if self.files else os.path.join(self.path, f"{0:020d}")
        return best


def find_batch_queues(root: str) -> tuple[list[BatchConsumeQueue], list[Problem]]:
    """Every batchconsumequeue/TOPIC/QUEUE_ID under a store root (the file size most of them share)."""
    dirs, probs = queue_dirs(os.path.join(root, BATCH_DIR))
    sizes = [os.path.getsize(os.path.join(d, n)) for _, _, d in dirs for n in os.listdir(d) if OFFSET_NAME_RE.match(n)]
    fs = usual_size(sizes)
    queues = [BatchConsumeQueue.open(d, t, qid, fs) for t, qid, d in dirs]
    for q in queues:
        probs.extend(q.problems)
    return queues, probs
