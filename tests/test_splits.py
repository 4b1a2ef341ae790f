"""Byte ranges over CommitLog files, planned in one place (rmqdump.scan.splits) for the local scan, rebuild and Spark."""

from __future__ import annotations

import itertools
import os

import pytest
from conftest import store_root
from hypothesis import example, given, settings
from hypothesis import strategies as st

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


def _lpt(costs: list[float], workers: int) -> float:
    """When the last worker ends, handing each task in turn to the first free worker (the model of the mapper)."""
    import heapq

    ends = [0.0] * workers
    for c in costs:
        heapq.heappush(ends, heapq.heappop(ends) + c)
    return max(ends)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(1, 300), min_size=1, max_size=40), st.integers(1, 5), st.data())
@example([128] * 9, 2, None)  # the 1M-message export that left one core idle for a whole task
def test_guided_tasks_cover_the_ranges_and_end_together(mib, workers, draw):
    """Model (a range costs its length): the pieces, in CommitLog order, are exactly the tasks' ranges; they are handed
    out dearest first, a permutation of all; a task of several ranges is never cut; and, each taken by the first free
    worker, they end no later than the whole tasks would."""
    from rmqdump.scan.splits import guided

    size = sum(mib) << 20
    cuts = list(itertools.accumulate([0, *(m << 20 for m in mib)]))
    groups = [[Split("", "f", 0, a, b, size)] for a, b in itertools.pairwise(cuts)]
    if draw is not None and len(groups) > 2 and draw.draw(st.booleans()):
        groups = [groups[0] + groups[1], *groups[2:]]  # a task of two ranges
    tasks, order = guided(groups, workers, lambda sp: sp.length)
    assert sorted(order) == list(range(len(tasks)))
    flat = [(sp.start, sp.end) for t in tasks for sp in t]
    assert flat[0][0] == 0 and flat[-1][1] == size and all(a[1] == b[0] for a, b in itertools.pairwise(flat))
    assert [t for t in tasks if len(t) > 1] == [g for g in groups if len(g) > 1]
    cost = [sum(sp.length for sp in t) for t in tasks]
    assert all(cost[a] >= cost[b] for a, b in itertools.pairwise(order))
    if workers == 1:
        assert len(tasks) == len(groups)
    whole = _lpt(sorted((sum(sp.length for sp in g) for g in groups), reverse=True), workers)
    got = _lpt([cost[j] for j in order], workers)
    assert got <= whole
    if draw is None:  # nine equal tasks on two workers: halves and quarters at the end, both end at once
        assert got == sum(cost) / workers and len(tasks) > len(groups)


def test_holes_cost_nothing(tmp_path):
    """A range that is all hole costs 0 (the scan skips it unread), one of data its data, with SEEK_DATA."""
    from rmqdump.scan.splits import data_bytes

    path = tmp_path / "f"
    with open(path, "wb") as f:
        f.write(b"x" * (1 << 20))
        f.truncate(64 << 20)
    if not hasattr(os, "SEEK_DATA"):
        pytest.skip("no SEEK_DATA here: every byte counts as data") if not os.environ.get("CI") else pytest.fail("no SEEK_DATA")
    assert data_bytes(Split("", str(path), 0, 0, 1 << 20, 64 << 20)) == 1 << 20
    assert data_bytes(Split("", str(path), 0, 32 << 20, 64 << 20, 64 << 20)) == 0
    assert data_bytes(Split("", str(path / "missing"), 0, 0, 4096, 4096)) == 4096
