"""`rmqdump diff` keeps the records past the common prefix on disk: split aggregations, the temporary directory.

Truth: fixtures/real/rmq53-ha-failover's truth.json (see test_diff.py). The aggregations that pair the two sides
are split by a hash of their key into parts of about GROUPS_PER_PART rows; on a 1M-message divergence that is
8 parts, on the fixtures one, so here the part size is made tiny and the answers must still equal truth.json.
"""

from __future__ import annotations

import json
import os

import pytest
from conftest import REAL, run, store_root
from test_diff import _diff, test_pair_equals_truth

from rmqdump.checks import diffspill

FAILOVER = REAL / "rmq53-ha-failover"


@pytest.mark.parametrize("part", [7, 100])
@pytest.mark.parametrize("pair", ["rmq53-ha-failover", "rmq53-ha-lag"])
def test_split_aggregations_equal_truth(pair, part, monkeypatch):
    monkeypatch.setattr(diffspill, "GROUPS_PER_PART", part)  # 550 records past the prefix: 79 or 6 parts
    test_pair_equals_truth(pair)


def test_temp_dir_is_used_and_removed(tmp_path):
    spill = tmp_path / "spill"
    spill.mkdir()
    seen = []
    orig = diffspill.Spill.close

    def close(self):
        seen.append((os.path.dirname(self.dir), sorted(os.listdir(self.dir))))
        orig(self)

    diffspill.Spill.close = close
    try:
        res, k = _diff(FAILOVER / "master" / "store", FAILOVER / "slave" / "store", "--temp-dir", spill)
    finally:
        diffspill.Spill.close = orig
    truth = json.loads((FAILOVER / "truth.json").read_text(encoding="utf-8"))
    assert res.exit_code == 1 and k["summary"][0]["only_a"] == truth["counts"]["onlyMaster"] == len(truth["onlyOnMaster"])
    assert seen and seen[0][0] == str(spill) and "rec_a.parquet" in seen[0][1]
    assert os.listdir(spill) == []  # removed on close


def test_temp_dir_beside_out(tmp_path):
    out = tmp_path / "only"
    seen = []
    orig = diffspill.Spill.__init__

    def init(self, parent, stores, **kw):
        seen.append(parent)
        orig(self, parent, stores, **kw)

    diffspill.Spill.__init__ = init
    try:
        res = run("diff", FAILOVER / "master" / "store", FAILOVER / "slave" / "store", "-f", "jsonl", "--out", out)
    finally:
        diffspill.Spill.__init__ = orig
    assert res.exit_code == 1 and seen == [str(tmp_path)]
    assert sorted(os.listdir(tmp_path)) == ["only"]


def test_temp_dir_inside_a_store_is_refused(tmp_path):
    store = FAILOVER / "master" / "store"
    res = run("diff", store, FAILOVER / "slave" / "store", "--temp-dir", store / "commitlog")
    assert res.exit_code == 2 and "output_inside_store" in res.stderr and "Traceback" not in res.stderr
    assert not [p for p in os.listdir(store / "commitlog") if p.startswith(".rmqdump-diff-")]


def test_identical_stores_leave_nothing(tmp_path):
    store = store_root("rmq4-basic")
    res, k = _diff(store, store, "--temp-dir", tmp_path)
    assert res.exit_code == 0 and k["summary"][0]["identical"] and os.listdir(tmp_path) == []
