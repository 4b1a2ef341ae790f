"""The dispatch columns computed from the CommitLog equal what the broker put in its ConsumeQueues."""

from __future__ import annotations

import os

import numpy as np
import pytest
from conftest import STORES, manifest, store_root

from rmqdump.readers.commitlog import CommitLog
from rmqdump.readers.fastpath import numpy_dtype
from rmqdump.scan import scanner
from rmqdump.scan.dispatch import DelayLevels, dispatch_columns
from rmqdump.schemas import ConsumeQueueUnit

UNIT = numpy_dtype(ConsumeQueueUnit)


def _broker_units(name: str) -> dict[tuple[str, int, int], tuple[int, int, int]]:
    out = {}
    root = store_root(name) / "consumequeue"
    for topic in os.listdir(root):
        for qid in os.listdir(root / topic):
            for fn in os.listdir(root / topic / qid):
                arr = np.frombuffer((root / topic / qid / fn).read_bytes(), dtype=UNIT)
                first = int(fn) // UNIT.itemsize
                for i, u in enumerate(arr):
                    if int(u["size"]) > 0 and int(u["size"]) != 0x7FFFFFFF:
                        out[(topic, int(qid), first + i)] = (int(u["commit_log_offset"]), int(u["size"]), int(u["tags_code"]))
    return out


@pytest.mark.parametrize("name", STORES)
def test_dispatch_equals_broker_consumequeue(name):
    units = _broker_units(name)
    got = {}
    delays = DelayLevels.parse()
    for b in scanner.batches(CommitLog.open(store_root(name) / "commitlog"), check_crc=False):
        d = dispatch_columns(b, delays, keys=False)
        for i in np.flatnonzero(d.queued).tolist():
            got[(d.topics[d.topic_id[i]], int(d.queue_id[i]), int(d.queue_offset[i]))] = (int(d.phys[i]), int(d.size[i]), int(d.tags_code[i]))
    if name == "rmq4-crash":  # its dispatch stopped after 1500 messages: the CQ holds exactly those
        assert len(got) == len(manifest(name)) == 2000
        assert len(units) == 1500
        assert all(got[k] == v for k, v in units.items())
    else:
        assert got == units


def test_delay_levels():
    d = DelayLevels.parse()
    assert d.deliver_time(1, 1000) == 2000
    assert d.deliver_time(18, 0) == 2 * 3600 * 1000
    assert d.deliver_time(99, 0) == 2 * 3600 * 1000  # capped at the highest level
    with pytest.raises(ValueError):
        DelayLevels.parse("1s 5x")
