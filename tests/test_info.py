"""`rmqdump info` agrees with each store's manifest and the crash's own records."""

from __future__ import annotations

import json
import os
from collections import defaultdict

import pytest
from conftest import HEALTHY, REAL, SETTINGS, STORES, jsonl, manifest, run, run_proc, store_root

CRASH = json.loads((REAL / "rmq4-crash" / "crash.json").read_text())


def info_rows(root) -> tuple[int, list[dict]]:
    r = run("info", "-s", root, "-f", "jsonl")
    return r.exit_code, jsonl(r.stdout)


def queued(m: dict) -> bool:
    return m["sysFlag"] & 0xC in (0, 0x8)


@pytest.mark.parametrize("name", HEALTHY)
def test_info_agrees_with_the_manifest(name):
    code, rows = info_rows(store_root(name))
    assert code == 0
    m = manifest(name)
    per: dict[tuple[str, int], list[dict]] = defaultdict(list)
    for x in m:
        if queued(x):
            per[(x["topic"], x["queueId"])].append(x)
    queues = {(q["topic"], q["queue_id"]): q for q in rows if q["kind"] == "queue"}
    assert set(queues) == set(per)
    for key, recs in per.items():
        q = queues[key]
        by_off = sorted(recs, key=lambda x: x["logicsOffset"])
        assert q["units"] == len(recs) and q["min_offset"] == 0 and q["max_offset"] == by_off[-1]["logicsOffset"] + 1
        assert q["first_store_timestamp"] == by_off[0]["storeTimestamp"] and q["last_store_timestamp"] == by_off[-1]["storeTimestamp"]
        assert q["last_phys_offset"] == by_off[-1]["wroteOffset"]
    cl = next(r for r in rows if r["kind"] == "commitlog")
    assert cl["data_end"] == max(x["wroteOffset"] + x["wroteBytes"] for x in m)
    assert cl["file_size"] == SETTINGS[name]["commitlog"] and cl["min_offset"] == 0
    assert cl["files"] * cl["file_size"] == cl["bytes"] == cl["files_end"]
    store = next(r for r in rows if r["kind"] == "store")
    assert store["abort"] is False and store["cq_file_size"] == SETTINGS[name]["cq_units"] * 20
    index = [r for r in rows if r["kind"] == "index"]
    assert index and all(r["size"] == 40 + 4 * SETTINGS[name]["hash_slots"] + 20 * SETTINGS[name]["index_entries"] for r in index)
    assert index[0]["begin_phy_offset"] == 0 and index[-1]["end_phy_offset"] <= cl["data_end"]
    assert not [r for r in rows if r["kind"] in ("problem", "unsupported")]


def test_info_on_the_crash_store_matches_crash_json():
    code, rows = info_rows(store_root("rmq4-crash"))
    assert code == 0  # unclean, but a restart drops nothing
    store = next(r for r in rows if r["kind"] == "store")
    assert store["abort"] is True and store["lock"] is True
    ck = CRASH["store"]["checkpointFile"]
    assert {k: store["checkpoint"][k] for k in ("physic_msg_timestamp", "logics_msg_timestamp", "index_msg_timestamp")} == {
        "physic_msg_timestamp": ck["physicMsgTimestamp"],
        "logics_msg_timestamp": ck["logicsMsgTimestamp"],
        "index_msg_timestamp": ck["indexMsgTimestamp"],
    }
    idx = [r for r in rows if r["kind"] == "index"]
    assert [
        (r["file"], r["begin_timestamp"], r["end_timestamp"], r["begin_phy_offset"], r["end_phy_offset"], r["hash_slot_count"], r["index_count"]) for r in idx
    ] == [
        (f["file"], f["beginTimestamp"], f["endTimestamp"], f["beginPhyOffset"], f["endPhyOffset"], f["hashSlotCount"], f["indexCount"])
        for f in CRASH["store"]["indexFilesOnDisk"]
    ]
    queues = {f"{r['topic']}-{r['queue_id']}": r for r in rows if r["kind"] == "queue"}
    for key, cq in CRASH["store"]["consumeQueues"].items():
        if cq["maxPhysicOffset"] < 0:
            continue  # SCHEDULE_TOPIC queues the broker created in memory only
        q = queues[key]
        assert (q["min_offset"], q["max_offset"]) == (cq["minOffsetInQueue"], cq["maxOffsetInQueue"])
    cl = next(r for r in rows if r["kind"] == "commitlog")
    assert cl["data_end"] == CRASH["store"]["maxPhyOffset"]
    assert cl["files"] == len(CRASH["store"]["commitLogFilesOnDisk"])


@pytest.mark.parametrize("name", STORES)
def test_info_table(name):
    r = run_proc("info", "-s", store_root(name)) if name == "rmq4-crash" else run("info", "-s", store_root(name))
    assert (r.returncode if name == "rmq4-crash" else r.exit_code) == 0, r.stderr
    assert "Recovery preview" in r.stdout and "ConsumeQueues" in r.stdout and "Index files" in r.stdout
    assert ("ABNORMAL" in r.stdout) == (name == "rmq4-crash")


def test_info_lists_config_files_and_notes():
    code, rows = info_rows(store_root("rmq5-basic"))
    assert code == 0
    names = sorted(r["path"].rsplit("/", 1)[1] for r in rows if r["kind"] == "config")
    assert names == ["consumerOffset.json", "topics.json"] and all(r["ok"] for r in rows if r["kind"] == "config")
    store = next(r for r in rows if r["kind"] == "store")
    assert any("abort.bak" in n for n in store["notes"])


def test_info_names_what_it_does_not_decode(tmp_path):
    import shutil

    root = tmp_path / "s"
    shutil.copytree(store_root("rmq4-flags"), root)
    (root / "batchconsumequeue" / "T" / "0").mkdir(parents=True)
    (root / "consumequeue_ext").mkdir()
    (root / "dledger-n0" / "data").mkdir(parents=True)
    rdb = root / "rocksdbstore"
    rdb.mkdir()
    (rdb / "CURRENT").write_text("MANIFEST-000001\n")
    (rdb / "MANIFEST-000001").write_bytes(b"x")
    code, rows = info_rows(root)
    kinds = sorted(r["what"] for r in rows if r["kind"] == "unsupported")
    assert kinds == ["dledger", "rocksdb"]  # timer files are decoded: tests/test_timer.py; batch and ext queues: tests/test_cq5_kinds.py
    assert code == 0  # named, not misread: the plain parts are still fine


def test_info_on_a_wrong_directory_is_one_line_exit_2(tmp_path):
    r = run_proc("info", "-s", store_root("rmq4-basic") / "commitlog")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "not_a_store" in r.stderr and "give its parent" in r.stderr
    (tmp_path / "f").write_text("x")
    r = run("info", "-s", tmp_path / "f")
    assert r.exit_code == 2 and "not_a_store" in r.stderr


def test_short_checkpoint_is_a_problem_not_a_crash(tmp_path):
    from conftest import copy_store

    root = copy_store("rmq4-crash", tmp_path)
    os.truncate(root / "checkpoint", 10)
    code, rows = info_rows(root)
    assert code == 1
    probs = [r for r in rows if r["kind"] == "problem"]
    assert [(p["code"], p["file_offset"]) for p in probs] == [("checkpoint_short", 10)]
    rec = next(r for r in rows if r["kind"] == "recovery")
    assert rec["scan_from"] == 0 and rec["min_timestamp"] is None
