"""common.directfile: a file written in order holds exactly the bytes given, written past the page cache in whole
aligned buffers where the filesystem takes O_DIRECT, and through the page cache (its writeback started as it grows)
wherever O_DIRECT is refused, at the start or at any write.

The model is the concatenation of the pieces written; the writes themselves are watched through os.write and
fcntl(F_GETFL), so "past the page cache" means: made on a descriptor with O_DIRECT set.
"""

from __future__ import annotations

import errno
import fcntl
import os

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from rmqdump.common import directfile, writeback
from rmqdump.common.directfile import DirectFile

BUF = 16 << 10  # small buffers: many drains per example
SIZES = st.lists(st.integers(0, 3 * BUF + 7), max_size=24)


def _pieces(sizes: list[int]) -> list[bytes]:
    return [bytes((i * 131 + k) & 0xFF for k in range(n)) for i, n in enumerate(sizes)]


def _need_direct(path) -> None:
    """The tests of the direct path need a filesystem that takes O_DIRECT (ext4, xfs, btrfs): fail under CI, skip
    elsewhere."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        took = directfile._set_direct(fd, True)
    finally:
        os.close(fd)
        os.unlink(path)
    if not took:
        if os.environ.get("CI"):
            pytest.fail(f"the filesystem of {path} refuses O_DIRECT: the direct writes are not tested", pytrace=False)
        pytest.skip("the temporary directory's filesystem refuses O_DIRECT")


def _watch_writes(monkeypatch) -> list[tuple[str, int, bool]]:
    """(the file's path, length, O_DIRECT set) of every os.write, in order (Linux's /proc names the file behind a
    descriptor when the write is made: descriptors are reused)."""
    seen: list[tuple[str, int, bool]] = []
    real = os.write

    def write(fd, data):
        n = real(fd, data)
        seen.append((os.readlink(f"/proc/self/fd/{fd}"), n, bool(fcntl.fcntl(fd, fcntl.F_GETFL) & directfile.O_DIRECT)))
        return n

    monkeypatch.setattr(os, "write", write)
    return seen


@settings(max_examples=60, deadline=None)
@given(sizes=SIZES, refused=st.booleans())
@example(sizes=[BUF - 1, 1, BUF, 0, 2 * BUF + 5], refused=False)
@example(sizes=[3 * BUF], refused=False)
@example(sizes=[], refused=False)
def test_the_file_holds_exactly_the_pieces(tmp_path_factory, sizes, refused):
    path = tmp_path_factory.mktemp("d") / "f"
    pieces = _pieces(sizes)
    real = directfile._set_direct
    directfile._set_direct = (lambda fd, on: False if on else real(fd, on)) if refused else real
    try:
        with DirectFile(str(path), buffer=BUF) as f:
            for p in pieces:
                assert f.write(p) == len(p)
            assert f.size == sum(sizes)
    finally:
        directfile._set_direct = real
    assert path.read_bytes() == b"".join(pieces)


def test_whole_buffers_go_past_the_page_cache_and_only_the_tail_through_it(tmp_path, monkeypatch):
    _need_direct(tmp_path / "probe")
    seen = _watch_writes(monkeypatch)
    pieces = _pieces([5, BUF, 3 * BUF + 11, 100])
    with DirectFile(str(tmp_path / "f"), buffer=BUF) as f:
        assert f.direct
        for p in pieces:
            f.write(p)
    total = sum(map(len, pieces))
    mine = [(n, d) for x, n, d in seen if x == str(tmp_path / "f")]
    assert mine == [(BUF, True)] * (total // BUF) + [(total % BUF, False)]
    assert (tmp_path / "f").read_bytes() == b"".join(pieces)


def test_a_write_refused_midway_goes_on_through_the_page_cache(tmp_path, monkeypatch):
    """EINVAL on the second direct write: that buffer and the rest through the page cache, the writeback started
    from where the direct bytes end, and not one byte lost, doubled or padded."""
    _need_direct(tmp_path / "probe")
    real = os.write
    direct_writes = []

    def write(fd, data):
        if fcntl.fcntl(fd, fcntl.F_GETFL) & directfile.O_DIRECT:
            direct_writes.append(len(data))
            if len(direct_writes) == 2:
                raise OSError(errno.EINVAL, "refused")
        return real(fd, data)

    started = []
    monkeypatch.setattr(os, "write", write)
    monkeypatch.setattr(writeback, "EVERY", BUF)
    monkeypatch.setattr(writeback, "start", lambda fd, off, n: started.append((off, n)) or True)
    pieces = _pieces([4 * BUF + 3, 9])
    with DirectFile(str(tmp_path / "f"), buffer=BUF) as f:
        for p in pieces:
            f.write(p)
        assert not f.direct
    assert (tmp_path / "f").read_bytes() == b"".join(pieces)
    assert direct_writes == [BUF, BUF]
    assert started and started[0][0] == BUF  # the first buffer went past the cache: nothing to start there
    pos = BUF
    for off, n in started:
        assert off == pos and n >= BUF
        pos += n


def test_other_write_errors_are_the_callers(tmp_path, monkeypatch):
    """A full disk is not a refusal of O_DIRECT: it is raised, not retried another way."""

    def write(fd, data):
        raise OSError(errno.ENOSPC, "full")

    monkeypatch.setattr(os, "write", write)
    f = DirectFile(str(tmp_path / "f"), buffer=BUF)
    with pytest.raises(OSError) as e:
        f.write(bytes(BUF)) if f.direct else f.write(b"x")
    assert e.value.errno == errno.ENOSPC
    monkeypatch.undo()
    f.close()
    f.close()  # idempotent
