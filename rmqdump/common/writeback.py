"""Ask the kernel to start writing a file's new pages to the disk now, without waiting for it.

An output is fsynced before it is published (common.publish). Left to the
kernel, a gigabyte of new pages waits in memory until that fsync, which then
waits for all of it. Started as the file grows, the disk writes while the
command computes and the fsync waits only for the last pages: the way
PostgreSQL flushes its writes ahead of a checkpoint. Linux's
sync_file_range(SYNC_FILE_RANGE_WRITE) neither waits for the writes nor makes
them durable; elsewhere (or if the call is refused) nothing is done here and
the fsync does it all.
"""

from __future__ import annotations

import contextlib
import os
import sys

SYNC_FILE_RANGE_WRITE = 2  # <linux/fs.h>: start writeback of the range's dirty pages, do not wait
EVERY = 32 << 20  # a growing file's pages are handed to the disk each time this many more bytes were written

_call = None


def _sync_file_range():
    global _call
    if _call is None:
        _call = False
        if sys.platform.startswith("linux"):
            import ctypes  # only when a file is written: not at start-up

            with contextlib.suppress(OSError, AttributeError):
                f = ctypes.CDLL(None, use_errno=True).sync_file_range
                f.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
                f.restype = ctypes.c_int
                _call = f
    return _call


def start(fd: int, offset: int = 0, length: int = 0) -> bool:
    """Start writing bytes [offset, offset + length) of the open file `fd` back (length 0: to its end); whether the
    kernel took the request."""
    f = _sync_file_range()
    return bool(f) and f(fd, offset, length, SYNC_FILE_RANGE_WRITE) == 0


def start_path(path: str) -> bool:
    """start() for a whole file by its path. Advice only: a file that cannot be opened (gone, or no descriptor left)
    is left to the fsync, which says why, and the command goes on."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        return start(fd)
    finally:
        os.close(fd)


class Growing:
    """A file written from the start in order: its pages are started on their way every EVERY bytes."""

    def __init__(self, fd: int):
        self.fd, self.written, self.started = fd, 0, 0

    def wrote(self, n: int) -> None:
        self.written += n
        if self.written - self.started >= EVERY:
            start(self.fd, self.started, self.written - self.started)
            self.started = self.written
