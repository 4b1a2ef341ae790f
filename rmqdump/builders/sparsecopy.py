"""Byte copies of store files that keep the holes of sparse preallocated files, in the kernel (copy_file_range)."""

from __future__ import annotations

import os
import shutil

from rmqdump.readers.mapped import next_data

COPY_CHUNK = 8 << 20


def copy_range(src: str, dst: str, start: int, end: int) -> None:
    """Copy bytes [start, end) of a store file into its (pre-sized) copy, in the kernel (copy_file_range).

    Only the stretches the file system says hold data are copied: the holes of
    a sparse preallocated file (the broker's setLength) stay holes.
    """
    fin = os.open(src, os.O_RDONLY)
    try:
        fout = os.open(dst, os.O_WRONLY)
        try:
            pos = start
            while pos < end:
                pos, data_end = next_data(fin, pos, end)
                while pos < data_end:
                    n = _chunk(fin, fout, pos, min(COPY_CHUNK, data_end - pos))
                    if n <= 0:
                        return  # the source ended early (it shrank meanwhile): the rest stays zeros
                    pos += n
        finally:
            os.close(fout)
    finally:
        os.close(fin)


def _chunk(fin: int, fout: int, pos: int, n: int) -> int:
    try:
        return os.copy_file_range(fin, fout, n, pos, pos)
    except OSError:  # no in-kernel copy between these files: through user space
        chunk = os.pread(fin, n, pos)
        return os.pwrite(fout, chunk, pos) if chunk else 0


def copy_file(src: str, dst: str) -> None:
    """A new file `dst` with the bytes of `src`, its holes kept (shutil.copytree's copy_function)."""
    size = os.path.getsize(src)
    fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.ftruncate(fd, size)
    finally:
        os.close(fd)
    copy_range(src, dst, 0, size)
    shutil.copystat(src, dst)
