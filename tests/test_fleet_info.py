"""`info` over a fleet: one row per broker and the totals, each value the store's truth (manifests, the broker's own
recovery of the damaged store, the files on disk)."""

from __future__ import annotations

import json

import pytest
from conftest import REAL, jsonl, manifest, run, store_root

BROKERS = ["rmq4-basic", "rmq5-basic", "rmq53-v2", "rmq4-crash", "rmq53-damaged-bodycrc"]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    root = tmp_path_factory.mktemp("fleet")
    for name in BROKERS:
        (root / name).mkdir()
        (root / name / "store").symlink_to(store_root(name))
    return root


def puts(name: str) -> list[dict]:
    return [m for m in manifest(name) if m.get("kind") in (None, "put") and "wroteOffset" in m]


def truth(name: str) -> dict:
    root = store_root(name)
    ms = puts(name)
    out = {
        "abort": (root / "abort").exists(),
        "commitlog_files": sum(1 for _ in (root / "commitlog").iterdir()),
        "data_bytes": max(m["wroteOffset"] + m["wroteBytes"] for m in ms),
    }
    rec = REAL / name / "broker-recovery.json"
    if rec.exists():  # what the broker's own recovery kept: everything from its truncation point on is dropped
        end = json.loads(rec.read_text())["afterRecovery"]["maxPhyOffset"]
        out["restart_drops_messages"] = sum(1 for m in ms if m["wroteOffset"] >= end)
    elif not out["abort"]:
        out["restart_drops_messages"] = 0
    return out


def test_one_row_per_broker_with_each_stores_truth(fleet):
    r = run("info", "-s", str(fleet / "*" / "store"), "-f", "jsonl")
    lines = jsonl(r.stdout)
    rows = {d["broker"]: d for d in lines if d["kind"] == "broker"}
    assert sorted(rows) == sorted(BROKERS)
    for name in BROKERS:
        want = truth(name)
        assert {k: rows[name][k] for k in want} == want, name
    total = next(d for d in lines if d["kind"] == "fleet")
    assert total["brokers"] == len(BROKERS) and total["unclean"] == sum(truth(n)["abort"] for n in BROKERS)
    assert total["data_bytes"] == sum(truth(n)["data_bytes"] for n in BROKERS)
    assert r.exit_code == 1  # the damaged store's restart would drop messages


def test_units_are_the_manifests_queued_messages_on_clean_stores(fleet):
    rows = {d["broker"]: d for d in jsonl(run("info", "-s", str(fleet / "*" / "store"), "-f", "jsonl").stdout) if d["kind"] == "broker"}
    for name in ("rmq4-basic", "rmq5-basic", "rmq53-v2"):
        queued = [m for m in puts(name) if m["sysFlag"] & 0xC in (0, 0x8)]
        assert rows[name]["units"] == len(queued), name


def test_table_lists_every_broker_and_the_total(fleet):
    r = run("info", "-s", str(fleet / "*" / "store"))
    first = [line.split()[0] for line in r.stdout.splitlines()[1:] if line.strip()]
    assert first == [*sorted(BROKERS), "total"]


def test_a_store_with_a_layout_problem_counts_it_and_fails_the_fleet(fleet, tmp_path):
    odd = tmp_path / "x" / "store"
    (odd / "commitlog").mkdir(parents=True)
    (odd / "commitlog" / "garbage").write_text("x")  # not a 20-digit offset name: commitlog_bad_file_name
    r = run("info", "-s", str(fleet / "rmq4-basic" / "store"), "-s", f"odd={odd}", "-f", "jsonl")
    rows = {d["broker"]: d for d in jsonl(r.stdout) if d["kind"] == "broker"}
    assert rows["odd"]["problems"] == 1 and rows["odd"]["commitlog_files"] == 0 and rows["rmq4-basic"]["problems"] == 0
    assert r.exit_code == 1
