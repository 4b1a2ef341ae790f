"""Byte copies of store files that keep the holes of sparse preallocated files, in the kernel (copy_file_range),
or straight from a map of the source to the disk (O_DIRECT) where the file system takes it."""

from __future__ import annotations

import errno
import mmap
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


DIRECT_ALIGN = 4096  # O_DIRECT wants offsets and lengths in whole blocks: 4 KiB suits the common devices


def direct_copy_range(src: str, dst: str, start: int, end: int) -> None:
    """copy_range, written with O_DIRECT from a map of the source: the bytes go from the source's page cache to the
    disk, with no second copy in the page cache to allocate, fill and write back (a repair copies the whole
    CommitLog). Block-aligned stretches only: a file's last partial block, or a file system that refuses O_DIRECT
    (tmpfs), goes through copy_range. A block on either side of [start, end) may be written too, with its own bytes."""
    try:
        fout = os.open(dst, os.O_WRONLY | os.O_DIRECT)
    except (OSError, AttributeError):  # no O_DIRECT here
        copy_range(src, dst, start, end)
        return
    try:
        fin = os.open(src, os.O_RDONLY)
        try:
            size = min(os.fstat(fin).st_size, os.fstat(fout).st_size)  # never past the copy's own end (a source grown past its size)
            pos, end = start, min(end, size)
            while pos < end:
                pos, data_end = next_data(fin, pos, end)
                a = pos - pos % DIRECT_ALIGN
                b = min(data_end + (-data_end) % DIRECT_ALIGN, size)
                done = _direct(fin, fout, a, b - b % DIRECT_ALIGN)
                if done < b:
                    copy_range(src, dst, done, b)
                pos = data_end
        finally:
            os.close(fin)
    finally:
        os.close(fout)


def _direct(fin: int, fout: int, a: int, b: int) -> int:
    """Write [a, b) (block-aligned) of fin to fout with O_DIRECT, a mapped chunk at a time; where it got to (b, or
    the offset at which the file system refused it)."""
    while a < b:
        n = min(COPY_CHUNK, b - a)
        m = mmap.mmap(fin, n, offset=a, prot=mmap.PROT_READ)
        done = 0
        try:
            with memoryview(m) as view:
                while done < n:
                    done += os.pwrite(fout, view[done:], a + done)
        except OSError as e:
            if e.errno != errno.EINVAL:
                raise
            return a + done - done % DIRECT_ALIGN
        finally:
            m.close()
        a += n
    return a


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
