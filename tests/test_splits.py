"""Byte ranges over CommitLog files, planned in one place (rmqdump.scan.splits) for the local scan, rebuild and Spark."""

from __future__ import annotations

import itertools
import os

import pytest
from conftest import store_root

from rmqdump.readers.commitlog import CommitLog, commitlog_path
from rmqdump.scan.splits import Split, commitlog_splits, partition_count


@pytest.mark.parametrize("size", [4096, 10_000, 1 << 20])
def test_ranges_cover_every_byte_once_and_stop_at_to_offset(size):
    cl = CommitLog.open(commitlog_path(str(store_root("rmq4-basic"))))
    files = [(f.path, f.base, f.size) for f in cl.files]
    assert len(files) > 1
    spans = [(sp.path, sp.start, sp.end) for sp in commitlog_splits(cl, size)]
    for path, _, fsize in files:
        mine = [(a, b) for p, a, b in spans if p == path]
        assert mine[0][0] == 0 and mine[-1][1] == fsize
        assert all(b1 == a2 for (_, b1), (a2, _) in itertools.pairwise(mine))
        assert all(0 < b - a <= size for a, b in mine)
    stop = files[1][1] + 5000  # inside the second file
    cut = commitlog_splits(cl, size, to_offset=stop)
    assert cut[-1].base + cut[-1].end == stop and all(sp.base + sp.end <= stop for sp in cut)
    assert {sp.path for sp in cut} == {files[0][0], files[1][0]}


def _splits(n: int, length: int) -> list[Split]:
    return [Split("", "f", 0, i * length, (i + 1) * length, n * length) for i in range(n)]


def test_partition_count():
    assert partition_count(_splits(16, 100), parallelism=3, target=400) == 6  # two per core, more than 1600 / 400
    assert partition_count(_splits(16, 100), parallelism=2, target=100) == 16  # about `target` bytes each
    assert partition_count(_splits(16, 100), parallelism=2, target=150) == 11  # ceil(1600 / 150)
    assert partition_count(_splits(3, 100), parallelism=4) == 3  # never more than one per range
    assert partition_count(_splits(16, 100), parallelism=2, wanted=7) == 7
    assert partition_count([], parallelism=2) == 1


@pytest.mark.parametrize(("workers", "min_bytes"), [(1, 250), (2, 10_000), (8, 1)])
def test_group_splits_are_consecutive_and_each_just_reaches_its_share(workers, min_bytes):
    """Export's tasks: the ranges in order, each task (but the last) the fewest ranges that reach the target."""
    from rmqdump.scan.splits import group_splits

    splits = [Split("", "f", 0, a, b, 5000) for a, b in itertools.pairwise([0, 10, 130, 700, 710, 2000, 2100, 4000, 5000])]
    groups = group_splits(splits, workers, min_bytes)
    assert [s for g in groups for s in g] == splits
    target = max(1, min(min_bytes, 5000 // (4 * workers)))  # the model: at least min_bytes, or a quarter of a worker's share
    for g in groups[:-1]:
        assert sum(s.length for s in g) >= target > sum(s.length for s in g[:-1])


def test_stream_cuts_cut_at_every_file_edge_and_hole_edge(tmp_path):
    """diff's ranges over two byte streams: contiguous, at most range_bytes each, cut where either side's files start
    and end and where a sparse file's data turns into a hole or back (found here with SEEK_DATA/SEEK_HOLE)."""
    from rmqdump.scan.splits import stream_cuts

    sparse = tmp_path / "a"
    with open(sparse, "wb") as f:
        f.write(b"x" * 4096)
        f.seek(1 << 20)
        f.write(b"y" * 4096)
        f.truncate(2 << 20)
    other = tmp_path / "b"
    other.write_bytes(b"z" * 300_000)
    a = [(0, 2 << 20, str(sparse))]
    b = [(0, 300_000, str(other)), (300_000, 300_000, str(other))]  # the second file named at a base of its own
    fd = os.open(sparse, os.O_RDONLY)
    try:
        edges, pos = set(), 0
        while pos < 2 << 20:
            try:
                data = os.lseek(fd, pos, os.SEEK_DATA)
            except OSError:
                break
            hole = os.lseek(fd, data, os.SEEK_HOLE)
            edges |= {data, hole}
            pos = hole
    finally:
        os.close(fd)
    lo, hi, step = 1000, (2 << 20) - 7, 100_000
    cuts = stream_cuts(a + b, lo, hi, step)
    assert cuts[0][0] == lo and cuts[-1][1] == hi
    assert all(x[1] == y[0] for x, y in itertools.pairwise(cuts)) and all(0 < e - s <= step for s, e in cuts)
    starts = {s for s, _ in cuts}
    must = {x for x in (300_000, 600_000, *edges) if lo < x < hi}
    assert must <= starts and (len(edges) > 2 or must == {300_000, 600_000})  # holes found where the filesystem has them
