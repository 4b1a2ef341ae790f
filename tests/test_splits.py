"""Byte ranges over CommitLog files, planned in one place (rmqdump.scan.splits) for the local scan, rebuild and Spark."""

from __future__ import annotations

import itertools

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
