"""A ConsumeQueue: the files of one topic/queue directory, read as unit arrays.

File names are the byte offset of their first unit in the queue (20 digits),
so unit index = (file name + position) / 20 = the message's queue offset. The
unit layout comes from schemas.ConsumeQueueUnit; arrays are converted to native
int64/int32 columns so checks can run on them directly (and on other engines).
"""

from __future__ import annotations

import collections
import contextlib
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from rmqdump.common.problems import InputError, Problem
from rmqdump.readers.fastpath import numpy_dtype
from rmqdump.readers.mapped import OffsetFile, next_data, offset_files, open_binary, open_readonly
from rmqdump.schemas import ConsumeQueueUnit
from rmqdump.schemas import constants as C

CONSUMEQUEUE_DIR = "consumequeue"  # under the store root
UNIT_DTYPE = numpy_dtype(ConsumeQueueUnit)
UNIT_SIZE = UNIT_DTYPE.itemsize
QUEUE_ID_RE = re.compile(r"-?[0-9]+")

# Layout problems of a queue directory (stable codes).
CQ_BAD_DIR = "cq_bad_dir"
CQ_BAD_FILE_NAME = "cq_bad_file_name"
CQ_FILE_SIZE = "cq_file_size"
CQ_HOLE = "cq_hole"


def queue_dirs(base: str) -> tuple[list[tuple[str, int, str]], list[Problem]]:
    """(topic, queue id, path) of every base/TOPIC/QUEUE_ID directory, in name order.

    The layout every per-queue directory tree shares (consumequeue, batchconsumequeue,
    consumequeue_ext). A directory whose name is not a queue id is left out, with a cq_bad_dir problem.
    """
    dirs: list[tuple[str, int, str]] = []
    probs: list[Problem] = []
    if not os.path.isdir(base):
        return dirs, probs
    for topic in sorted(os.listdir(base)):
        tdir = os.path.join(base, topic)
        if not os.path.isdir(tdir):
            continue
        for q in sorted(os.listdir(tdir)):
            qdir = os.path.join(tdir, q)
            if not os.path.isdir(qdir):
                continue
            if not QUEUE_ID_RE.fullmatch(q):
                extra = {"topic": topic, "queue_id": None, "cq_file": qdir, "unit_index": None}
                probs.append(Problem(CQ_BAD_DIR, qdir, None, "queue directory name is not a queue id: ignored", extra=extra))
                continue
            dirs.append((topic, int(q), qdir))
    return dirs, probs


def queue_files(path: str, kind: type[OffsetFile], extra: Callable[[str], dict]) -> tuple[list, list[Problem]]:
    """A queue directory's files (of type kind), in offset order, and its problems.

    Files not named by a 20-digit offset are left out (cq_bad_file_name); an
    unreadable directory has no files (unreadable). extra(path) gives each
    problem's extra fields.
    """
    try:
        files, others = offset_files(path, kind)
    except OSError as e:
        return [], [Problem("unreadable", path, None, e.strerror or str(e), extra=extra(path))]
    return files, [Problem(CQ_BAD_FILE_NAME, p, None, "not a 20-digit offset name: ignored", extra=extra(p)) for p in others]


class CQFile(OffsetFile):
    """One ConsumeQueue file."""

    @property
    def first_index(self) -> int:
        return self.base // UNIT_SIZE

    @property
    def units(self) -> int:
        return self.size // UNIT_SIZE


@dataclass
class QueueUnits:
    """Units of a stretch of one queue as native columns; `index` is each unit's queue offset."""

    index: np.ndarray  # int64
    offset: np.ndarray  # int64 commitLogOffset
    size: np.ndarray  # int32
    tags_code: np.ndarray  # int64
    written: int | None = None  # units before the all-zero tail of a file (None: not known); every unit after them is zero

    def __len__(self) -> int:
        return len(self.index)

    def head_written(self) -> QueueUnits:
        """The units before the all-zero tail: a zero unit is neither valid nor a filler, so every check answers the
        same over them, without walking a preallocated file's unwritten tail."""
        w = self.written
        if w is None or w >= len(self):
            return self
        return QueueUnits(self.index[:w], self.offset[:w], self.size[:w], self.tags_code[:w], w)

    @classmethod
    def empty(cls) -> QueueUnits:
        return cls(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int32), np.zeros(0, np.int64))

    @classmethod
    def from_array(cls, arr: np.ndarray, first_index: int) -> QueueUnits:
        """From a structured array of schemas.ConsumeQueueUnit (any byte order)."""
        offset, size = unit_places(arr)
        return cls(np.arange(first_index, first_index + len(arr), dtype=np.int64), offset, size, arr["tags_code"].astype(np.int64))

    @classmethod
    def concat(cls, parts: list[QueueUnits]) -> QueueUnits:
        if not parts:
            return cls.empty()
        return cls(*(np.concatenate([getattr(p, f) for p in parts]) for f in ("index", "offset", "size", "tags_code")))

    def valid_mask(self) -> np.ndarray:
        """valid_units of these units."""
        return valid_units(self.offset, self.size)

    def filler_mask(self) -> np.ndarray:
        return (self.offset == 0) & (self.size == C.CQ_FILLER_SIZE) & (self.tags_code == 0)


def valid_units(offset: np.ndarray, size: np.ndarray) -> np.ndarray:
    """What the broker's recovery accepts as a unit: offset >= 0 and size > 0."""
    return (offset >= 0) & (size > 0)


def unit_places(arr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(commitLogOffset as int64, size as int32) of a structured array of schemas.ConsumeQueueUnit: all the recovery's
    rules read of a unit (QueueUnits.from_array converts the queue offsets and tags too: half the time it takes)."""
    return arr["commit_log_offset"].astype(np.int64), arr["size"].astype(np.int32)


def read_units(f: CQFile) -> np.ndarray:
    """The whole units of one file as a structured (big-endian) array; a partial tail unit is left out."""
    own = getattr(f, "read_array", None)
    if own is not None:  # a stretch of a RocksDB ConsumeQueue (readers/rocksdbcq.py)
        return own()
    return whole_units(f, UNIT_DTYPE)


def whole_units(f: OffsetFile, dtype: np.dtype) -> np.ndarray:
    """The whole fixed-size units (of a structured dtype) of one queue file, read into an array of ours; a partial tail unit is left out."""
    return _read_whole(f.path, f.size // dtype.itemsize * dtype.itemsize)[0].view(dtype)


def _read_whole(path: str, length: int) -> tuple[np.ndarray, int]:
    """The first `length` bytes of a file, and where its last non-zero byte ends (0: all zeros).

    Read once with pread, holes skipped: a preallocated queue file is mostly
    an unwritten zero tail, which is left as untouched zero pages of the
    array (never read, copied or made resident).
    """
    buf = np.zeros(length, dtype=np.uint8)  # calloc: pages not written stay shared zero pages
    if not length:
        return buf, 0
    fd = open_readonly(path)
    end = 0
    try:
        mv = memoryview(buf)
        pos = 0
        while pos < length:
            pos, data_end = next_data(fd, pos, length)
            while pos < data_end:
                got = os.preadv(fd, [mv[pos:data_end]], pos)
                if not got:
                    data_end = pos = length
                    break
                pos += got
                end = pos
    except OSError as e:
        raise InputError("unreadable", path, e.strerror or str(e)) from None
    finally:
        os.close(fd)
    return buf, _nonzero_end(buf, end)


def _nonzero_end(buf: np.ndarray, end: int) -> int:
    """Where the last non-zero byte of buf[:end] ends (0: all zeros), searched backwards a window at a time."""
    step = 1 << 16
    while end > 0:
        lo = max(0, end - step)
        nz = np.flatnonzero(buf[lo:end])
        if nz.size:
            return lo + int(nz[-1]) + 1
        end = lo
    return 0


_CACHE: dict[tuple, QueueUnits] | None = None  # during reads_cached(): file identity -> its units
CACHE_BYTES = 96 << 20  # bytes of cached units at most (a verify reads a queue file in its order pass and again per window)
_cached_bytes = 0


@contextlib.contextmanager
def reads_cached():
    """Within it, file_units reads each queue file once (while the files read fit CACHE_BYTES)."""
    global _CACHE, _cached_bytes
    if _CACHE is not None:  # already inside one
        yield
        return
    _CACHE, _cached_bytes = {}, 0
    try:
        yield
    finally:
        _CACHE, _cached_bytes = None, 0


def file_units(f: CQFile) -> QueueUnits:
    """One ConsumeQueue file's whole units as native columns (inside reads_cached(): read once while they fit).

    The arrays are read-only (they are shared by every reader of the file);
    the columns of the zero tail are zero pages never touched.
    """
    global _cached_bytes
    key = None
    if _CACHE is not None:
        try:
            st = os.stat(f.path)
            key = (f.path, f.base, f.size, st.st_ino, st.st_size, st.st_mtime_ns)
        except OSError:
            pass
    hit = _CACHE.get(key) if key else None
    if hit is not None:
        return hit
    n = f.size // UNIT_SIZE
    raw, end = _read_whole(f.path, n * UNIT_SIZE)
    m = -(-end // UNIT_SIZE)  # units up to the last non-zero byte; those after it are all zeros
    arr = raw.view(UNIT_DTYPE)[:m]
    u = QueueUnits(np.arange(f.first_index, f.first_index + n, dtype=np.int64), np.zeros(n, np.int64), np.zeros(n, np.int32), np.zeros(n, np.int64), m)
    u.offset[:m] = arr["commit_log_offset"]
    u.size[:m] = arr["size"]
    u.tags_code[:m] = arr["tags_code"]
    for a in (u.index, u.offset, u.size, u.tags_code):
        a.flags.writeable = False
    if key:
        cost = n * (8 + 8 + 4 + 8)  # as if every page of the columns were resident
        if _cached_bytes + cost <= CACHE_BYTES:  # kept while they fit, never evicted: a run reads the files in the same order each pass
            _CACHE[key] = u
            _cached_bytes += cost
    return u


class UnitChunks:
    """What a queue offers from its `files` (a list) and its `read_file(f)`, whatever holds the units (files, RocksDB)."""

    def chunks(self) -> Iterator[QueueUnits]:
        """The units file by file (bounded memory for long queues)."""
        for f in self.files:
            yield self.read_file(f)

    def units(self) -> QueueUnits:
        """Every unit of the queue, files concatenated (indices jump over missing files)."""
        return QueueUnits.concat(list(self.chunks()))

    def last_valid_index(self) -> int:
        """Index of the queue's last unit with offset >= 0 and size > 0 (-1 if none), reading files from the end."""
        for f in reversed(self.files):
            u = self.read_file(f).head_written()
            v = np.flatnonzero(u.valid_mask())
            if v.size:
                return int(u.index[v[-1]])
        return -1


@dataclass
class ConsumeQueue(UnitChunks):
    """One consumequeue/TOPIC/QUEUE_ID directory: its files in order and their layout problems."""

    topic: str
    queue_id: int
    path: str
    files: list[CQFile]
    file_size: int | None
    problems: list[Problem] = field(default_factory=list)

    @classmethod
    def open(cls, path: str, topic: str, queue_id: int, file_size: int | None = None) -> ConsumeQueue:
        """Read a queue directory; `file_size` is the store's CQ file size (mappedFileSizeConsumeQueue) when known."""
        files, probs = queue_files(path, CQFile, lambda p: {"topic": topic, "queue_id": queue_id, "cq_file": p, "unit_index": None})
        if file_size is None:
            file_size = common_file_size([f.size for f in files])
        q = cls(topic, queue_id, path, files, file_size, probs)
        q._check_layout()
        return q

    def _problem(self, code: str, path: str, pos: int | None, detail: str, unit_index: int) -> Problem:
        return Problem(code, path, pos, detail, extra={"topic": self.topic, "queue_id": self.queue_id, "cq_file": path, "unit_index": unit_index})

    def _check_layout(self) -> None:
        fs = self.file_size
        for i, f in enumerate(self.files):
            if f.size % UNIT_SIZE:
                cut = f.size - f.size % UNIT_SIZE
                detail = f"file is {f.size} bytes, not a whole number of {UNIT_SIZE}-byte units: {f.size % UNIT_SIZE} bytes of a cut unit at its end"
                self.problems.append(self._problem(CQ_FILE_SIZE, f.path, cut, detail, f.first_index + cut // UNIT_SIZE))
            elif fs and f.size != fs:
                detail = f"file is {f.size} bytes, the queue's files are {fs} (the broker refuses to load it)"
                self.problems.append(self._problem(CQ_FILE_SIZE, f.path, f.size, detail, f.first_index + f.size // UNIT_SIZE))
            if f.base % UNIT_SIZE or (fs and f.base % fs):
                detail = f"name {f.base} is not a multiple of the file size {fs or UNIT_SIZE}"
                self.problems.append(self._problem(CQ_BAD_FILE_NAME, f.path, None, detail, f.first_index))
            if i and fs:
                prev = self.files[i - 1]
                expect = prev.base + fs
                if f.base > expect:
                    missing = [f"{b:020d}" for b in range(expect, f.base, fs)][:5]
                    more = " ..." if f.base - expect > 5 * fs else ""
                    detail = f"no file for units {expect // UNIT_SIZE}..{f.base // UNIT_SIZE - 1} (missing {', '.join(missing)}{more})"
                    self.problems.append(self._problem(CQ_HOLE, os.path.join(self.path, missing[0]), None, detail, expect // UNIT_SIZE))

    def file_for_index(self, index: int) -> CQFile | None:
        """The file that holds (or would hold) unit `index`."""
        b = index * UNIT_SIZE
        for f in self.files:
            if f.base <= b < f.base + max(f.size, self.file_size or 0):
                return f
        return None

    def expected_path(self, index: int) -> str:
        """Where unit `index` belongs, whether or not that file exists."""
        f = self.file_for_index(index)
        return f.path if f is not None else unit_path(self.path, self.file_size, index)

    def read_file(self, f: CQFile) -> QueueUnits:
        """One of the queue's files, read (once while it fits the cache: see file_units)."""
        return file_units(f)

    def bounds(self) -> tuple[int, int]:
        """(min offset, max offset) as the broker reports them: first real unit, last valid unit + 1."""
        last = self.last_valid_index()
        if last < 0:
            return (self.files[0].first_index if self.files else 0, self.files[0].first_index if self.files else 0)
        for f in self.files:
            u = self.read_file(f)
            real = np.flatnonzero(u.valid_mask() & ~u.filler_mask())
            if real.size:
                return int(u.index[real[0]]), last + 1
        return last + 1, last + 1

    def unit_at(self, index: int) -> tuple[int, int, int] | None:
        """(commitLogOffset, size, tagsCode) of one unit, or None if no file holds it."""
        f = self.file_for_index(index)
        if f is None:
            return None
        pos = index * UNIT_SIZE - f.base
        if pos + UNIT_SIZE > f.size:
            return None
        with open_binary(f.path) as fh:
            fh.seek(pos)
            raw = fh.read(UNIT_SIZE)
        rec = np.frombuffer(raw, dtype=UNIT_DTYPE)[0]
        return int(rec["commit_log_offset"]), int(rec["size"]), int(rec["tags_code"])


def unit_row(q, index: int, cq_file: str, file_offset, phys_offset, size, tags_code) -> dict:
    """The fields every unit row of `cq dump` starts with, whatever the queue kind (the queue offset is the unit's index;
    a RocksDB ConsumeQueue's unit has no file offset)."""
    return {
        "kind": "unit",
        "topic": q.topic,
        "queue_id": q.queue_id,
        "unit_index": index,
        "queue_offset": index,
        "cq_file": cq_file,
        "file_offset": None if file_offset is None else int(file_offset),
        "phys_offset": int(phys_offset),
        "size": int(size),
        "tags_code": int(tags_code),
    }


def unit_path(queue_dir: str, file_size: int | None, index: int) -> str:
    """The file of a queue directory that unit `index` belongs in by name (a file is named by its first unit's offset)."""
    fs = file_size or C.DEFAULT_CQ_UNITS_PER_FILE * UNIT_SIZE
    return os.path.join(queue_dir, f"{index * UNIT_SIZE // fs * fs:020d}")


def common_file_size(sizes: list[int]) -> int | None:
    """The size most files of a queue share (the last file is ignored when there are others: it may be short)."""
    return usual_size(sizes[:-1] if len(sizes) > 1 else sizes)


def usual_size(sizes: list[int]) -> int | None:
    """The size most of `sizes` are, the larger on a tie; None for none."""
    counts = collections.Counter(sizes)
    return max(counts, key=lambda s: (counts[s], s)) if counts else None
