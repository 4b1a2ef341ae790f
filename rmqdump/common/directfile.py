"""A new file written from its start in order, past the page cache where the filesystem allows it (O_DIRECT).

Salvage writes gigabytes that the command never reads again. Through the page cache, the kernel first copies each
byte into a fresh page of its own: at 4M messages (1.66 GB given back) that copy was the command's largest cost
after the scan, 17% of its CPU samples. With O_DIRECT the disk takes the bytes from the command's buffer and the
copy is gone, as in PostgreSQL's direct I/O or RocksDB's direct writes for flushes. O_DIRECT wants the buffer,
the file offset and the length aligned, so the bytes are gathered into one page-aligned buffer and written a whole
buffer at a time; what is left at the end (less than a buffer) is written through the page cache, with O_DIRECT
cleared, so the file holds exactly its bytes and no padding. Where O_DIRECT is refused (tmpfs on older kernels, some
FUSE filesystems, not Linux), at the start or at any write, the rest of the file goes through the page cache, its
pages started on their way to the disk as it grows (common.writeback). Durability is still the fsync's:
common.publish fsyncs every file before the rename, and after direct writes it has little left to wait for.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import mmap
import os

from rmqdump.common import writeback

O_DIRECT = getattr(os, "O_DIRECT", 0)
BUFFER = 8 << 20  # bytes gathered before a direct write: a multiple of every block size O_DIRECT may ask for


def _set_direct(fd: int, on: bool) -> bool:
    """O_DIRECT set or cleared on an open descriptor (Linux takes it with F_SETFL); whether the kernel took it."""
    if not O_DIRECT:
        return False
    flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    try:
        fcntl.fcntl(fd, fcntl.F_SETFL, (flags | O_DIRECT) if on else (flags & ~O_DIRECT))
    except OSError as e:
        if e.errno != errno.EINVAL:
            raise
        return False
    return True


class DirectFile:
    """A file created at `path` and written in order; `direct` says whether its writes still bypass the page cache.
    Bytes are gathered in a `buffer`-byte buffer (a multiple of the page size; BUFFER unless given) and written a whole buffer at a time.
    `direct=False`: through the page cache from the start. `sync`: in the page cache's case, start the file's pages
    on their way to the disk as it grows (the publish fsyncs)."""

    def __init__(self, path: str, sync: bool = True, buffer: int | None = None, direct: bool = True):
        self.path, self.size = path, 0
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o666)
        self._sync = sync
        self.direct = direct and _set_direct(self.fd, True)
        self._buf = mmap.mmap(-1, buffer or BUFFER)  # anonymous: page-aligned, as O_DIRECT wants
        self._view = memoryview(self._buf)
        self._fill = 0
        self._grow = None if self.direct or not sync else writeback.Growing(self.fd)

    def write(self, data) -> int:
        """All of `data` (bytes-like) appended; its length."""
        n = len(data)
        with memoryview(data) as m, m.cast("B") as src:
            at = 0
            while at < n:
                k = min(n - at, len(self._view) - self._fill)
                self._view[self._fill : self._fill + k] = src[at : at + k]
                self._fill, at = self._fill + k, at + k
                if self._fill == len(self._view):
                    self._drain()
        self.size += n
        return n

    def _drain(self) -> None:
        """The buffer's bytes written: with O_DIRECT while the kernel takes it, else (or from the first refusal on)
        through the page cache."""
        with self._view[: self._fill] as view:
            done = 0
            if self.direct:
                try:
                    while done < len(view):
                        done += os.write(self.fd, view[done:])
                except OSError as e:
                    if e.errno != errno.EINVAL:
                        raise
                    self._to_page_cache()
            if not self.direct:
                first = done
                while done < len(view):
                    done += os.write(self.fd, view[done:])
                if self._grow is not None:
                    self._grow.wrote(done - first)
        self._fill = 0

    def _to_page_cache(self) -> None:
        self.direct = False
        _set_direct(self.fd, False)
        if self._sync:  # the bytes written directly need no start
            self._grow = writeback.Growing(self.fd)
            self._grow.started = self._grow.written = os.lseek(self.fd, 0, os.SEEK_CUR)

    @property
    def closed(self) -> bool:
        return self.fd < 0

    def close(self) -> None:
        """The buffer's last bytes written through the page cache and the file closed (idempotent)."""
        if self.fd < 0:
            return
        try:
            if self._fill:
                if self.direct:  # less than a buffer: its length is not aligned
                    self._to_page_cache()
                self._drain()
        finally:
            fd, self.fd = self.fd, -1
            buf, self._view, self._buf = self._buf, None, None
            with contextlib.suppress(BufferError):  # a view still held (an error's traceback): freed with it
                buf.close()
            os.close(fd)

    def __enter__(self) -> DirectFile:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
