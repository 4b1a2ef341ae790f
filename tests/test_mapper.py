"""The mapper protocol (rmqdump.scan.ranges.Mapper) and the one plan -> map -> fold entry, map_ranges: results in
range order whatever order the workers finish in, and progress told of each range once the caller has taken it."""

from __future__ import annotations

import os
import time

import pytest
from conftest import store_root

from rmqdump.engines.local import LocalMap
from rmqdump.readers.commitlog import CommitLog, commitlog_path
from rmqdump.scan.ranges import SERIAL, Mapper, map_ranges
from rmqdump.scan.splits import commitlog_splits


@pytest.mark.parametrize(("mapper", "workers"), [(SERIAL, 1), (LocalMap(1), 1), (LocalMap(3), 3)], ids=["serial", "local1", "local3"])
def test_engines_satisfy_the_protocol(mapper, workers):
    assert isinstance(mapper, Mapper)
    assert mapper.on_driver is mapper  # their workers are in this process: work that is not a range runs on them
    assert mapper.workers == workers
    items = list(range(20))
    assert list(mapper(lambda x: x * x, items)) == [x * x for x in items]
    assert sorted(mapper.unordered(lambda x: -x, items)) == [(i, -x) for i, x in enumerate(items)]


def test_builtin_map_is_not_a_mapper():
    assert not isinstance(map, Mapper)  # what the code used to guess around with getattr/hasattr


@pytest.mark.parametrize("mapper", [SERIAL, LocalMap(3)], ids=["serial", "local3"])
def test_map_ranges_in_range_order_with_progress_after_each_fold(mapper):
    cl = CommitLog.open(commitlog_path(str(store_root("rmq4-basic"))))
    ranges = commitlog_splits(cl, 70_001)
    assert len(ranges) > 6
    events = []

    def fn(sp):
        time.sleep(0.002 * (len(ranges) - ranges.index(sp)) / len(ranges))  # earlier ranges finish later on threads
        return (sp.path, sp.start)

    for sp, got in map_ranges(ranges, fn, mapper, progress=lambda n: events.append(("progress", n))):
        events.append(("fold", got))
        assert got == (sp.path, sp.start)
    # the model: each range folded in order, then its bytes told; the bytes add up to the files' data
    want = [e for sp in ranges for e in (("fold", (sp.path, sp.start)), ("progress", sp.length))]
    assert events == want
    assert sum(n for k, n in events if k == "progress") == sum(min(os.stat(f.path).st_size, cl.file_size) for f in cl.files)
