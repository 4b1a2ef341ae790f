"""Read-only memory maps of store files.

The store is evidence: files are opened O_RDONLY (open_readonly, the one way
a store file is opened: what cannot be read is the input error `unreadable`
naming it, never a file passed over) and mapped ACCESS_READ.
Long scans give pages back with MADV_DONTNEED as they go, so resident memory
stays bounded however large the file is (the pages stay in the page cache).
Also how the store's logs and queues name their files (OffsetFile,
offset_files): by the byte offset of their first byte.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from rmqdump.common.closing import Closing
from rmqdump.common.problems import InputError
from rmqdump.schemas import constants as C

_PAGE = mmap.ALLOCATIONGRANULARITY

OFFSET_NAME_RE = re.compile(rf"^\d{{{C.COMMITLOG_NAME_DIGITS}}}$")  # CommitLog, ConsumeQueue and timer log files: the 20-digit offset


@dataclass(frozen=True)
class OffsetFile:
    """One file of a log or queue directory, named by the 20-digit byte offset of its first byte in the whole."""

    path: str
    base: int  # byte offset, from the name
    size: int

    @property
    def name(self) -> str:
        return os.path.basename(self.path)


def open_readonly(path: str) -> int:
    """A store file opened read-only (a descriptor), or the input error `unreadable` naming it, at byte 0.

    Every reader opens store files here, so a file that cannot be read (no
    permission, an I/O error, a directory or FIFO where a file should be) stops
    the command with one line, whichever reader meets it first. O_NONBLOCK: a
    FIFO in a file's place must not hang the open (regular files ignore it).
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise InputError("unreadable", str(path), e.strerror or str(e), 0) from None
    try:
        regular = stat.S_ISREG(os.fstat(fd).st_mode)
    except OSError as e:
        os.close(fd)
        raise InputError("unreadable", str(path), e.strerror or str(e), 0) from None
    if not regular:
        os.close(fd)
        raise InputError("unreadable", str(path), "not a regular file", 0)
    return fd


def open_binary(path: str):
    """A store file as a binary file object (open_readonly's checks)."""
    return os.fdopen(open_readonly(path), "rb")


def readable_size(path: str) -> int:
    """The size of a store file that open_readonly accepts (it is opened once to prove it can be read)."""
    fd = open_readonly(path)
    try:
        return os.fstat(fd).st_size
    finally:
        os.close(fd)


def offset_files(path: str, kind: type[OffsetFile] = OffsetFile) -> tuple[list, list[str]]:
    """The files of a directory named by their offset, in offset order, and the paths of its other files (in name order).

    Each offset-named entry is proven readable (InputError `unreadable` otherwise: a file that cannot be read
    is never silently left out). An unreadable directory raises OSError: each reader reports that its own way.
    """
    files, others = [], []
    for n in sorted(os.listdir(path)):
        full = os.path.join(path, n)
        if OFFSET_NAME_RE.match(n):
            files.append(kind(full, int(n), readable_size(full)))
        elif os.path.isfile(full):
            others.append(full)
    files.sort(key=lambda f: f.base)
    return files, others


class MappedFile(Closing):
    """One file mapped read-only; `data` is a numpy uint8 view, `view` a memoryview."""

    def __init__(self, path: str, limit: int | None = None):
        """`limit`: treat the file as this long (the configured CommitLog file size); bytes past it are not data."""
        self.path = str(path)
        fd = open_readonly(self.path)
        try:
            self.size = os.fstat(fd).st_size
            self._mm = mmap.mmap(fd, self.size, access=mmap.ACCESS_READ) if self.size else None
        except OSError as e:
            raise InputError("unreadable", self.path, e.strerror or str(e), 0) from None
        finally:
            os.close(fd)
        if limit is not None:
            self.size = min(self.size, limit)
        if self._mm is not None:
            self.view = memoryview(self._mm)
            self.data = np.frombuffer(self._mm, dtype=np.uint8)
        else:
            self.view = memoryview(b"")
            self.data = np.zeros(0, dtype=np.uint8)

    def release(self, start: int, end: int) -> None:
        """Drop the resident pages of [start, end) from this process (page-aligned inward)."""
        if self._mm is None:
            return
        lo = -(-start // _PAGE) * _PAGE
        hi = min(end, self.size) // _PAGE * _PAGE
        if hi > lo:
            self._mm.madvise(mmap.MADV_DONTNEED, lo, hi - lo)

    def find(self, needle: bytes, start: int, stop: int) -> int:
        """Offset of the first `needle` in [start, stop), or -1 (the map's own search: no copy)."""
        if self._mm is None:
            return -1
        return self._mm.find(needle, start, stop)

    def find_each(self, needles: tuple[bytes, ...], start: int, stop: int) -> Iterator[tuple[int, int]]:
        """(offset, needle number) of every occurrence of any of the needles in [start, stop), in offset order.

        One search per needle and hit, so a caller that stops at the first hit it
        accepts reads no further than that.
        """
        hits = [self.find(nd, start, stop) for nd in needles]
        while True:
            at = min((h for h in hits if h >= 0), default=-1)
            if at < 0:
                return
            for j, h in enumerate(hits):
                if h == at:
                    yield at, j
                    hits[j] = self.find(needles[j], at + 1, stop)

    def close(self) -> None:
        if self._mm is not None:
            self.view.release()
            self.data = None
            with contextlib.suppress(BufferError):  # a caller still holds a view; freed with it
                self._mm.close()
            self._mm = None


def next_data(fd: int, pos: int, stop: int) -> tuple[int, int]:
    """The next stretch [data, data_end) of [pos, stop) that may hold bytes other than zero.

    A hole of a sparse file (a preallocated CommitLog copied with its holes
    kept) reads as zeros by definition, so it is skipped without reading it;
    where the file system cannot say (no SEEK_DATA), the whole rest is data.
    """
    if not hasattr(os, "SEEK_DATA"):
        return pos, stop
    try:
        data = os.lseek(fd, pos, os.SEEK_DATA)
    except OSError as e:
        if e.errno == errno.ENXIO:  # holes only, up to the end of the file
            return stop, stop
        return pos, stop
    if data >= stop:
        return stop, stop
    try:
        hole = os.lseek(fd, data, os.SEEK_HOLE)
    except OSError:
        hole = stop
    return data, min(max(hole, data + 1), stop)


class PreadFiles:
    """Store files read with pread, each opened once (open_readonly) and kept open until close()."""

    def __init__(self):
        self.fds: dict[str, int] = {}

    def fd(self, path: str) -> int:
        fd = self.fds.get(path)
        if fd is None:
            fd = self.fds[path] = open_readonly(path)  # a file that cannot be read: the input error `unreadable`
        return fd

    def pread(self, path: str, pos: int, n: int) -> bytes:
        return os.pread(self.fd(path), n, pos)

    def close(self) -> None:
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()
