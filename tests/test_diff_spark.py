"""`rmqdump diff --engine spark` on a real SparkSession (local[2]): the same answers as truth.json.

The records past the common prefix are decoded by Spark tasks, one per range of the planner; the ranges are made
64 KiB here so that the fixtures' 256 KiB CommitLog files are cut into several, and a range starts at the prefix
(a record boundary) and others inside records (resynced by the proof rule). Truth: rmq53-ha-failover's and
rmq53-ha-lag's truth.json, checked by test_diff.test_pair_equals_truth.
"""

from __future__ import annotations

import itertools

import pytest
import test_diff
from conftest import REAL, need_pyspark

need_pyspark()

from rmqdump.engines.spark import diffdecode  # noqa: E402  (after the check: it needs pyspark)
from rmqdump.readers.commitlog import CommitLog  # noqa: E402


@pytest.mark.slow
@pytest.mark.parametrize("pair", ["rmq53-ha-failover", "rmq53-ha-lag"])
def test_spark_pair_equals_truth(pair, spark, monkeypatch):
    local = test_diff._diff
    monkeypatch.setattr(test_diff, "_diff", lambda a, b, *x: local(a, b, *x, "--engine", "spark", "--master", "local[2]"))
    monkeypatch.setattr(diffdecode, "RANGE_BYTES", 64 << 10)
    calls = []
    real = diffdecode.splits_past
    monkeypatch.setattr(diffdecode, "splits_past", lambda *a, **k: calls.append(real(*a, **k)) or calls[-1])
    test_diff.test_pair_equals_truth(pair)
    assert calls and max(len(c) for c in calls) >= 2  # the side past the prefix went to several tasks


def test_ranges_past_the_prefix_start_there():
    cl = CommitLog.open(str(REAL / "rmq53-ha-failover" / "master" / "store" / "commitlog"))
    start = 918288  # truth.json's identicalUpTo
    got = diffdecode.splits_past(cl, start, 64 << 10)
    assert got[0].base + got[0].start == start
    assert all(a.base + a.end == b.base + b.start or b.start == 0 for a, b in itertools.pairwise(got))
    assert got[-1].base + got[-1].end == cl.files[-1].base + min(cl.files[-1].size, cl.file_size or cl.files[-1].size)
