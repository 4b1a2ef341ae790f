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


def _pid_and_square(x: int) -> tuple[int, int]:
    time.sleep(0.01)
    return os.getpid(), x * x


def test_process_map_gives_item_order_from_other_processes_and_stops_them():
    """ProcessMap (the report's plots): results in item order, computed in processes that are not this one (more than
    one of them), which stop at the block's end; one worker, or one item, runs here."""
    from rmqdump.engines.local import ProcessMap

    items = list(range(24))
    with ProcessMap(2) as m:
        assert isinstance(m, Mapper) and m.workers == 2
        got = list(m(_pid_and_square, items))
        procs = list(m._pool._processes.values())
    assert [sq for _, sq in got] == [x * x for x in items]
    pids = {pid for pid, _ in got}
    assert os.getpid() not in pids and len(pids) == 2
    assert all(not p.is_alive() for p in procs)
    with ProcessMap(1) as one:
        assert {pid for pid, _ in one(_pid_and_square, items)} == {os.getpid()}
    with ProcessMap(2) as m:
        assert [pid for pid, _ in m(_pid_and_square, [3])] == [os.getpid()]


def test_queued_plots_are_drawn_in_place_and_store_text_cannot_forge_a_place():
    """A page built under drawn_later() gets each plot where it was placed (or the empty note where a plot draws
    nothing); text that looks like a place token, as a topic name could, stays as it is."""
    from rmqdump.report import plots

    @plots._styled
    def fake(n):
        return None if n == 0 else f"<svg>{n}</svg>"

    with plots.drawn_later() as d:
        a, b, c = fake(1), fake(0), fake(2)
        forged = "\x00" + d.nonce[::-1] + ":0\x00"  # another nonce's token
        page = f"[{plots.placed(c, 'none')}|{plots.placed(a, 'none')}|{plots.placed(b, 'empty')}|{forged}]"
    assert isinstance(a, plots.Pending) and len(d.jobs) == 3
    want = f'[<div class="plot"><svg>2</svg></div>|<div class="plot"><svg>1</svg></div>|empty|{forged}]'
    assert d.fill(page) == want
    assert plots.placed(fake(3), "x") == '<div class="plot"><svg>3</svg></div>'  # outside the block: drawn at once


def test_the_dearest_plots_are_drawn_first_and_land_in_place():
    """Drawing.fill hands the mapper the index plot, then the rate plot, then the rest in page order (a worker that
    took the dearest last would finish the page alone); each drawing still lands where it was placed."""
    from rmqdump.report import plots

    @plots._styled
    def cheap(n):
        return f"<svg>c{n}</svg>"

    @plots._styled
    def rate_plot(n):
        return f"<svg>r{n}</svg>"

    @plots._styled
    def index_plot(n):
        return f"<svg>i{n}</svg>"

    seen: list = []

    def mapper(fn, items):
        seen.extend((job[0].__name__, job[1][0]) for job in items)
        return map(fn, items)

    with plots.drawn_later() as d:
        page = "".join(plots.placed(f(n), "-") for f, n in ((cheap, 1), (rate_plot, 2), (cheap, 3), (index_plot, 4)))
    assert d.fill(page, mapper) == "".join(f'<div class="plot"><svg>{k}</svg></div>' for k in ("c1", "r2", "c3", "i4"))
    assert seen == [("index_plot", 4), ("rate_plot", 2), ("cheap", 1), ("cheap", 3)]


def _dies_in_a_worker(parent: int, x: int) -> tuple[int, int]:
    if os.getpid() != parent:
        os._exit(3)  # a worker killed (out of memory, a signal)
    return os.getpid(), x + 1


def test_process_map_falls_back_to_this_process_when_its_workers_die():
    import functools

    from rmqdump.engines.local import ProcessMap

    here = os.getpid()
    with ProcessMap(2) as m:
        got = list(m(functools.partial(_dies_in_a_worker, here), range(5)))
        assert m.workers == 1  # and later work runs here too
    assert got == [(here, x + 1) for x in range(5)]
