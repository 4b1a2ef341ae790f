"""The store model: discovery of every part of a real store root, read-only, with layout problems named."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from conftest import HEALTHY, REAL, SETTINGS, STORES, copy_store, manifest, store_root

from rmqdump.common.problems import InputError
from rmqdump.readers.checkpoint import read_checkpoint
from rmqdump.readers.consumequeue import UNIT_DTYPE, ConsumeQueue, read_units
from rmqdump.readers.fastpath import numpy_dtype
from rmqdump.readers.store import Store
from rmqdump.schemas import ConsumeQueueUnit

CRASH = json.loads((REAL / "rmq4-crash" / "crash.json").read_text())


def queued(m: dict) -> bool:
    return m["sysFlag"] & 0xC in (0, 0x8)


def test_unit_dtype_is_derived_from_the_schema():
    assert numpy_dtype(ConsumeQueueUnit) == UNIT_DTYPE and UNIT_DTYPE.itemsize == ConsumeQueueUnit.sizeof() == 20


@pytest.mark.parametrize("name", STORES)
def test_discovers_every_part(name):
    st = Store.open(store_root(name))
    s = SETTINGS[name]
    assert st.problems == [] and st.unsupported == []
    assert st.commitlog.file_size == s["commitlog"] and st.cq_file_size == s["cq_units"] * 20
    assert all(f.size == 40 + 4 * s["hash_slots"] + 20 * s["index_entries"] for f in st.index_files)
    assert [f.name for f in st.index_files] == sorted(os.listdir(store_root(name) / "index"))
    assert st.abort is (name == "rmq4-crash") and st.lock
    assert st.checkpoint_path is not None
    assert [os.path.basename(c) for c in st.configs] == sorted(os.listdir(store_root(name) / "config"))


@pytest.mark.parametrize("name", HEALTHY)
def test_queues_hold_one_unit_per_manifest_message(name):
    st = Store.open(store_root(name))
    m = [x for x in manifest(name) if queued(x)]
    assert set(st.queues) == {(x["topic"], x["queueId"]) for x in m}
    for (topic, qid), q in st.queues.items():
        units = q.units()
        recs = sorted((x for x in m if x["topic"] == topic and x["queueId"] == qid), key=lambda x: x["logicsOffset"])
        n = len(recs)
        assert units.index[:n].tolist() == [x["logicsOffset"] for x in recs]
        assert units.offset[:n].tolist() == [x["wroteOffset"] for x in recs]
        assert units.size[:n].tolist() == [x["wroteBytes"] for x in recs]
        assert not units.valid_mask()[n:].any()  # the rest is the zero tail
        assert q.bounds() == (0, n) and q.last_valid_index() == n - 1
        assert q.unit_at(n - 1) == (recs[-1]["wroteOffset"], recs[-1]["wroteBytes"], int(units.tags_code[n - 1]))


def test_read_units_is_a_structured_array_of_the_file():
    st = Store.open(store_root("rmq4-basic"))
    f = st.queue("orders", 0).files[0]
    arr = read_units(f)
    assert arr.dtype == UNIT_DTYPE and len(arr) == f.size // 20
    raw = (store_root("rmq4-basic") / "consumequeue" / "orders" / "0" / f.name).read_bytes()
    assert int.from_bytes(raw[20:28], "big") == int(arr["commit_log_offset"][1])


def test_checkpoint_and_index_headers_of_the_crash():
    st = Store.open(store_root("rmq4-crash"))
    ck = read_checkpoint(st.checkpoint_path)
    f = CRASH["store"]["checkpointFile"]
    assert (ck.physic_msg_timestamp, ck.logics_msg_timestamp, ck.index_msg_timestamp) == (
        f["physicMsgTimestamp"],
        f["logicsMsgTimestamp"],
        f["indexMsgTimestamp"],
    )
    assert ck.min_timestamp == min(f["physicMsgTimestamp"], f["logicsMsgTimestamp"]) - 3000
    assert [(i.name, i.header["index_count"], i.header["end_phy_offset"]) for i in st.index_files] == [
        (x["file"], x["indexCount"], x["endPhyOffset"]) for x in CRASH["store"]["indexFilesOnDisk"]
    ]


def test_store_is_opened_read_only(tmp_path):
    root = copy_store("rmq4-basic", tmp_path)
    for dirpath, _, files in os.walk(root):
        for n in files:
            os.chmod(os.path.join(dirpath, n), 0o444)
    before = {os.path.join(d, n): os.stat(os.path.join(d, n)).st_mtime_ns for d, _, fs in os.walk(root) for n in fs}
    st = Store.open(root)
    for q in st.select_queues():
        q.units()
    after = {os.path.join(d, n): os.stat(os.path.join(d, n)).st_mtime_ns for d, _, fs in os.walk(root) for n in fs}
    assert before == after


def test_layout_problems_are_named(tmp_path):
    root = copy_store("rmq4-basic", tmp_path)
    qdir = root / "consumequeue" / "orders" / "0"
    (qdir / "junk.txt").write_text("x")
    os.rename(qdir / f"{2400:020d}", qdir / f"{2401:020d}")
    (root / "consumequeue" / "orders" / "zz").mkdir()
    st = Store.open(root)
    codes = sorted(p.code for p in st.problems)
    assert codes == ["cq_bad_dir", "cq_bad_file_name", "cq_bad_file_name", "cq_hole"]
    hole = next(p for p in st.problems if p.code == "cq_hole")
    assert hole.extra["unit_index"] == 120 and hole.extra["topic"] == "orders" and hole.extra["queue_id"] == 0


@pytest.mark.parametrize(("name", "tree"), [("rmq4-basic", "consumequeue"), ("rmq53-batchcq", "batchconsumequeue"), ("rmq53-cqext", "consumequeue_ext")])
def test_every_queue_tree_names_its_bad_queue_directories_the_same_way(tmp_path, name, tree):
    """consumequeue, batchconsumequeue and consumequeue_ext are walked alike; a name that is no queue id never crashes."""
    root = copy_store(name, tmp_path)
    topic = sorted(p for p in (root / tree).iterdir() if p.is_dir())[0]
    before = Store.open(root)
    for bad in ("zz", "--1", "1-", "\u00b2"):  # "²" passes str.isdigit but is no queue id
        (topic / bad).mkdir()
    st = Store.open(root)
    queues = {"consumequeue": "queues", "batchconsumequeue": "batch_queues", "consumequeue_ext": "ext_queues"}[tree]
    assert sorted(getattr(st, queues)) == sorted(getattr(before, queues))
    bad_dirs = sorted(p.file for p in st.problems if p.code == "cq_bad_dir")
    if tree == "consumequeue_ext":  # the ext files only follow their ConsumeQueue: nothing to report
        assert bad_dirs == []
    else:
        assert bad_dirs == sorted(str(topic / b) for b in ("zz", "--1", "1-", "\u00b2"))
    assert [p for p in st.problems if p.code != "cq_bad_dir"] == before.problems


def test_not_a_store(tmp_path):
    with pytest.raises(InputError) as e:
        Store.open(tmp_path / "missing")
    assert e.value.code == "not_found"
    with pytest.raises(InputError) as e:
        Store.open(store_root("rmq4-basic") / "commitlog")
    assert e.value.code == "not_a_store" and "parent" in e.value.detail
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError):
        Store.open(tmp_path / "empty")


def test_queue_without_files_and_odd_sizes(tmp_path):
    root = copy_store("rmq5-basic", tmp_path)
    q = ConsumeQueue.open(str(root / "consumequeue" / "orders" / "1"), "orders", 1, 2400)
    assert q.problems == [] and len(q.files) == 1
    os.truncate(q.files[0].path, 2400 - 13)
    q = ConsumeQueue.open(str(root / "consumequeue" / "orders" / "1"), "orders", 1, 2400)
    assert [p.code for p in q.problems] == ["cq_file_size"] and q.problems[0].file_offset == (2400 - 13) // 20 * 20
    assert len(q.units()) == (2400 - 13) // 20
    empty = root / "consumequeue" / "orders" / "5"
    empty.mkdir()
    q = ConsumeQueue.open(str(empty), "orders", 5, 2400)
    assert q.bounds() == (0, 0) and len(q.units()) == 0 and q.last_valid_index() == -1
    assert np.array_equal(q.units().offset, np.zeros(0, np.int64))
