"""Copies of store files (rmqdump.builders.sparsecopy): the source's bytes, its holes kept, whichever way they are written.

A repair copies the whole CommitLog with O_DIRECT where the file system takes it; the model here is the source file
itself: every byte equal, and a hole of the source that spans whole blocks still a hole in the copy.
"""

from __future__ import annotations

import errno
import itertools
import os

import pytest

from rmqdump.builders import sparsecopy
from rmqdump.builders.sparsecopy import DIRECT_ALIGN, direct_copy_range

SIZE = (1 << 20) + 123  # the last block partial
DATA = [(0, 10_000), (300_001, 300_500), (SIZE - 50, SIZE)]  # unaligned stretches; the rest never written: holes
HOLE = (16 << 10, 296 << 10)  # whole blocks inside the source's first hole


def _source(tmp_path) -> str:
    path = str(tmp_path / "00000000000000000000")
    with open(path, "wb") as f:
        f.truncate(SIZE)
        for a, b in DATA:
            f.seek(a)
            f.write(bytes((a + i) % 251 + 1 for i in range(b - a)))
    return path


def _copy(src: str, tmp_path, cuts=(0, 150_001, SIZE)) -> str:
    """The copy a repair makes: a file of the source's size, then its ranges written one after the other."""
    dst = str(tmp_path / "copy")
    fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    os.ftruncate(fd, SIZE)
    os.close(fd)
    for a, b in itertools.pairwise(cuts):
        direct_copy_range(src, dst, a, b)
    return dst


def _is_hole(path: str, a: int, b: int) -> bool:
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.lseek(fd, a, os.SEEK_DATA) >= b
    except OSError as e:
        return e.errno == errno.ENXIO
    finally:
        os.close(fd)


def _check(src: str, dst: str) -> None:
    with open(src, "rb") as f, open(dst, "rb") as g:
        assert f.read() == g.read()
    if _is_hole(src, *HOLE):  # the file system keeps holes (it does on ext4, xfs, btrfs, tmpfs)
        assert _is_hole(dst, *HOLE)


def test_direct_copy_is_the_source_with_its_holes(tmp_path):
    src = _source(tmp_path)
    _check(src, _copy(src, tmp_path))
    assert SIZE % DIRECT_ALIGN and DATA[1][0] % DIRECT_ALIGN  # the cases the alignment must handle


def test_direct_copy_where_o_direct_is_refused_at_open(tmp_path, monkeypatch):
    src = _source(tmp_path)
    real = os.open

    def no_direct(path, flags, *a):
        if flags & os.O_DIRECT:
            raise OSError(errno.EINVAL, "O_DIRECT not supported")
        return real(path, flags, *a)

    monkeypatch.setattr(sparsecopy.os, "open", no_direct)
    _check(src, _copy(src, tmp_path))


def test_direct_copy_where_a_write_is_refused_midway(tmp_path, monkeypatch):
    """A file system that opens with O_DIRECT but refuses a write (EINVAL): the rest of that stretch is copied the other way."""
    src = _source(tmp_path)
    real = os.pwrite
    calls = []

    def refuse_second(fd, data, offset):
        calls.append(offset)
        if len(calls) == 2:
            raise OSError(errno.EINVAL, "refused")
        return real(fd, data, offset)

    monkeypatch.setattr(sparsecopy.os, "pwrite", refuse_second)
    _check(src, _copy(src, tmp_path, cuts=(0, SIZE)))
    assert len(calls) >= 2


@pytest.mark.parametrize("cuts", [(0, 4096, SIZE), (0, 300_100, 300_200, SIZE), (0, SIZE - 10, SIZE)])
def test_direct_copy_of_ranges_cut_anywhere(tmp_path, cuts):
    """Ranges cut inside a block or inside a stretch of data (two workers write a block each side of the cut)."""
    src = _source(tmp_path)
    _check(src, _copy(src, tmp_path, cuts))
