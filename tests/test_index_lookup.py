"""index lookup: every key and UNIQ_KEY of every manifest finds exactly its messages."""

from __future__ import annotations

import json
import shutil
from collections import defaultdict
from functools import cache

import pytest
from conftest import REAL, SETTINGS, STORES, copy_store, jsonl, manifest, run, store_root

from rmqdump.query.lookup import Index, store_topics
from rmqdump.readers.fastpath import field_offset
from rmqdump.readers.indexfile import IndexFile, key_hash, list_index_files
from rmqdump.schemas import IndexEntry

ROLLBACK = 0xC


def _keys(m: dict) -> list[str]:
    return [k for k in m["keys"] if k] + ([m["uniqKey"]] if m.get("uniqKey") else [])


@cache
def indexed_seqs(store: str) -> frozenset[int] | None:
    """Seqs whose keys reached the index: all but ROLLBACK, and for the crashed store only the dispatched ones."""
    if store == "rmq4-crash":
        return frozenset(json.loads((REAL / store / "crash.json").read_text())["dispatchedSeqs"])
    return None


@cache
def expected(store: str, recovered: bool = True) -> tuple[dict, dict]:
    """(topic, key) -> physical offsets, and key -> offsets over all topics, from the manifest (recovered=False: only
    what the index holds, the dispatched messages of the crashed store)."""
    disp = None if recovered else indexed_seqs(store)
    scoped: dict = defaultdict(set)
    unscoped: dict = defaultdict(set)
    for m in manifest(store):
        if (m["sysFlag"] & ROLLBACK) == ROLLBACK or (disp is not None and m["seq"] not in disp):
            continue
        for k in _keys(m):
            scoped[(m["topic"], k)].add(m["wroteOffset"])
            unscoped[k].add(m["wroteOffset"])
    return dict(scoped), dict(unscoped)


def all_keys(store: str) -> set[tuple[str, str]]:
    return {(m["topic"], k) for m in manifest(store) for k in _keys(m)}


@pytest.mark.parametrize("store", STORES)
def test_every_manifest_key_topic_scoped(store):
    scoped, _ = expected(store)
    with Index(store_root(store)) as idx:
        for topic, key in sorted(all_keys(store)):
            got = idx.lookup(key, [topic])
            assert {m.phys_offset for m in got.messages} == scoped.get((topic, key), set()), (topic, key)
            assert all(m.topic == topic and (key in m.keys or m.uniq_key == key) for m in got.messages)


@pytest.mark.parametrize("store", STORES)
def test_every_manifest_key_unscoped(store):
    _, unscoped = expected(store)
    with Index(store_root(store)) as idx:
        # Every topic the manifest indexes is one the store knows.
        assert {t for t, _ in expected(store)[0]} <= set(idx.topics)
        for key in sorted({k for _, k in all_keys(store)}):
            got = idx.lookup(key)
            assert {m.phys_offset for m in got.messages} == unscoped.get(key, set()), key


def test_crash_store_finds_only_what_was_dispatched_and_recovered_finds_all():
    store = "rmq4-crash"
    disp = indexed_seqs(store)
    undispatched = [m for m in manifest(store) if m["seq"] not in disp and _keys(m)]
    assert undispatched
    recovered_scoped, _ = expected(store, recovered=True)
    with Index(store_root(store), tail=False) as crashed, Index(REAL / store / "recovered") as rec:
        for m in undispatched[:200]:
            for k in _keys(m):
                assert m["wroteOffset"] not in {x.phys_offset for x in crashed.lookup(k, [m["topic"]]).messages}
        for (topic, key), want in recovered_scoped.items():
            # After recovery one key may have two entries for one message: still one message.
            got = [x.phys_offset for x in rec.lookup(key, [topic]).messages]
            assert sorted(got) == sorted(want), (topic, key)


@pytest.mark.parametrize("store", STORES)
def test_sizing_inferred_from_the_files(store):
    for p in list_index_files(store_root(store)):
        with IndexFile(p) as f:
            assert (f.layout.hash_slots, f.layout.index_entries) == (SETTINGS[store]["hash_slots"], SETTINGS[store]["index_entries"])


def _multi_key(store: str) -> tuple[str, str, list[dict]]:
    """A key with several messages in one topic, with their manifest records in store order."""
    by = defaultdict(list)
    for m in manifest(store):
        for k in m["keys"]:
            by[(m["topic"], k)].append(m)
    (topic, key), ms = max(by.items(), key=lambda kv: (len({m["wroteOffset"] for m in kv[1]}), kv[0]))
    return topic, key, sorted({m["wroteOffset"]: m for m in ms}.values(), key=lambda m: m["wroteOffset"])


def test_cli_lookup_outputs_commitlog_message_objects():
    store = "rmq53-v2"
    topic, key, ms = _multi_key(store)
    r = run("index", "lookup", key, "--store", store_root(store), "--topic", topic, "-f", "jsonl")
    assert r.exit_code == 0, r.stderr
    out = jsonl(r.stdout)
    msgs = [o for o in out if o["kind"] == "message"]
    assert [o["phys_offset"] for o in msgs] == [m["wroteOffset"] for m in ms]
    summary = out[-1]
    assert summary["kind"] == "summary" and summary["found"] == len(ms)
    # The same objects `rmqdump commitlog` prints for those records, plus where the index had them.
    first = ms[0]
    c = run("commitlog", store_root(store) / "commitlog", "--from-offset", first["wroteOffset"], "--limit", 1, "-f", "jsonl")
    cl_msg = next(o for o in jsonl(c.stdout) if o["kind"] == "message")
    assert msgs[0]["source"] == "index"
    assert {k: v for k, v in msgs[0].items() if k not in ("index_file", "index_entry", "source")} == cl_msg
    assert msgs[0]["uniq_key"] == first["uniqKey"] and msgs[0]["store_timestamp"] == first["storeTimestamp"]


def test_cli_time_window_max_and_explain():
    store = "rmq4-basic"
    topic, key, ms = _multi_key(store)
    assert len(ms) >= 3
    mid = ms[len(ms) // 2]["storeTimestamp"]
    want = [m["wroteOffset"] for m in ms if m["storeTimestamp"] >= mid]
    r = run("index", "lookup", key, "-s", store_root(store), "-t", topic, "--since", mid, "-f", "jsonl")
    assert [o["phys_offset"] for o in jsonl(r.stdout) if o["kind"] == "message"] == want
    want = [m["wroteOffset"] for m in ms if m["storeTimestamp"] < mid]
    r = run("index", "lookup", key, "-s", store_root(store), "-t", topic, "--until", mid, "-f", "jsonl")
    assert [o["phys_offset"] for o in jsonl(r.stdout) if o["kind"] == "message"] == want
    r = run("index", "lookup", key, "-s", store_root(store), "-t", topic, "--limit", 1, "-f", "jsonl")
    out = jsonl(r.stdout)
    assert len([o for o in out if o["kind"] == "message"]) == 1 and out[-1]["truncated"]
    r = run("index", "lookup", key, "-s", store_root(store), "-t", topic, "--explain", "-f", "jsonl")
    walks = [o for o in jsonl(r.stdout) if o["kind"] == "explain"]
    assert len(walks) == len(list_index_files(store_root(store)))
    matches = [c for w in walks for c in w["candidates"] if c["verdict"] == "match"]
    assert sorted(c["phys_offset"] for c in matches) == [m["wroteOffset"] for m in ms]
    # Index time is the store time rounded down to the second (entry 1 of a file may read later).
    assert all(0 <= c["time_delta_ms"] < 1000 for c in matches if c["entry"] != 1)
    t = run("index", "lookup", key, "-s", store_root(store), "-t", topic, "--explain")
    assert t.exit_code == 0 and f"'{topic}#{key}'" in t.stdout and "slot" in t.stdout


def test_cli_not_found_and_bad_input(tmp_path):
    s = store_root("rmq4-basic")
    r = run("index", "lookup", "no-such-key-anywhere", "-s", s)
    assert r.exit_code == 1 and "0 messages" in r.stderr
    assert run("index", "lookup", "-s", s).exit_code == 2
    assert run("index", "lookup", "k", "--id", "x", "-s", s).exit_code == 2
    r = run("index", "lookup", "k", "-s", tmp_path)
    assert r.exit_code == 2 and "index_no_files" in r.stderr
    r = run("index", "lookup", "k", "-s", s, "--hash-slots", 499)
    assert r.exit_code == 2 and "index_file_size" in r.stderr and "--hash-slots" in r.stderr
    assert run("index", "lookup", "user_1", "-s", s, "--hash-slots", 500, "-t", "orders").exit_code in (0, 1)


def test_cli_offset_msgid_and_flags():
    store = "rmq4-flags"
    m = manifest(store)[70]
    r = run("index", "lookup", "--id", m["msgId"], "-s", store_root(store), "-f", "jsonl", "--hash-slots", 64)
    out = jsonl(r.stdout)
    assert r.exit_code == 0 and out[0]["type"] == "offset"
    assert [o["phys_offset"] for o in out if o["kind"] == "message"] == [m["wroteOffset"]]


def test_ambiguous_sizing_names_the_flag(tmp_path):
    root = copy_store("rmq4-flags", tmp_path)
    for p in list_index_files(root):
        (root / "index" / p.rsplit("/", 1)[1]).unlink()
    # An empty index file of a size that fits several sizings and not the broker's 1:4 ratio.
    (root / "index" / "20261122000000000").write_bytes(bytes(40 + 4 * 10 + 20 * 10))
    r = run("index", "lookup", "k", "-s", root)
    assert r.exit_code == 2 and "index_layout_ambiguous" in r.stderr and "--hash-slots" in r.stderr
    r = run("index", "lookup", "k", "-s", root, "--index-entries", 10)
    assert r.exit_code == 1


def test_truncated_index_file_is_refused(tmp_path):
    root = copy_store("rmq5-basic", tmp_path)
    p = list_index_files(root)[-1]
    with open(p, "r+b") as f:
        f.truncate(1001)
    r = run("index", "lookup", "k", "-s", root)
    assert r.exit_code == 2 and "index_file_size" in r.stderr and p.rsplit("/", 1)[1] in r.stderr


def test_store_topics_tolerates_bad_config(tmp_path):
    root = copy_store("rmq4-basic", tmp_path)
    assert "orders" in store_topics(root)
    (root / "config" / "topics.json").write_text("{not json")
    shutil.rmtree(root / "consumequeue" / "orders")
    assert "orders" not in store_topics(root) and "TopicTest" in store_topics(root)


def test_damaged_chain_cannot_loop_the_walk(tmp_path):
    """A prevIndex pointing at itself or forward ends the walk (the broker would spin until maxNum)."""
    store = "rmq4-basic"
    topic, key, ms = _multi_key(store)
    root = copy_store(store, tmp_path)
    path = list_index_files(root)[-1]
    with IndexFile(path) as f:
        w = f.walk(key_hash(topic, key))
        head = w.head
    with open(path, "r+b") as fh:
        fh.seek(f.entry_offset(head) + field_offset(IndexEntry, "prev_index"))
        fh.write(head.to_bytes(4, "big"))
    with Index(root) as idx:
        res = idx.lookup(key, [topic])
        walk = next(x for x in res.walks if x.index_file == path.rsplit("/", 1)[1])
        assert walk.stop == "loop" and walk.steps == 1
        # Everything in the other files is still found.
        assert {m.phys_offset for m in res.messages} <= {m["wroteOffset"] for m in ms}
    r = run("index", "verify", "-s", root, "-f", "jsonl")
    bad = [p for p in jsonl(r.stdout) if p["kind"] == "problem" and p["code"] == "index_chain_not_backwards"]
    assert r.exit_code == 1 and [p["entry"] for p in bad] == [head]


# --- past the index's end: what a crash left undispatched, and stores without IndexFiles ---

# Message.to_dict key -> manifest key: every field a lookup prints that the broker's put recorded.
MANIFEST_FIELDS = {
    "phys_offset": "wroteOffset",
    "total_size": "wroteBytes",
    "topic": "topic",
    "queue_id": "queueId",
    "queue_offset": "logicsOffset",
    "sys_flag": "sysFlag",
    "flag": "flag",
    "born_timestamp": "bornTimestamp",
    "store_timestamp": "storeTimestamp",
    "born_host": "bornHost",
    "store_host": "storeHost",
    "reconsume_times": "reconsumeTimes",
    "prepared_transaction_offset": "preparedTransactionOffset",
    "body_crc": "bodyCRC",
    "body_length": "body_len",
    "tags": "tags",
    "keys": "keys",
    "uniq_key": "uniqKey",
    "properties": "properties",
    "msg_id": "msgId",
}


def _same_as_manifest(got: dict, m: dict) -> None:
    for ours, theirs in MANIFEST_FIELDS.items():
        assert got[ours] == m[theirs], (ours, got[ours], m[theirs])
    assert got["crc_ok"] is True


def _by_offset(store: str) -> dict[int, dict]:
    return {m["wroteOffset"]: m for m in manifest(store)}


def test_crash_store_keys_past_the_index_are_found_and_marked():
    """Every key and UNIQ_KEY of every message the crash left out of the index is found, as the manifest says."""
    store = "rmq4-crash"
    disp = indexed_seqs(store)
    scoped, _ = expected(store)
    tail = {m["wroteOffset"] for m in manifest(store) if m["seq"] not in disp}
    with Index(store_root(store)) as idx:
        t = idx.tail
        # The index's last entry is the last dispatched message; everything after it is scanned.
        assert t.after == max(m["wroteOffset"] for m in manifest(store) if m["seq"] in disp)
        assert t.records == len(tail)
        for m in (m for m in manifest(store) if m["seq"] not in disp):
            for k in _keys(m):
                got = idx.lookup(k, [m["topic"]])
                assert {x.phys_offset for x in got.messages} == scoped[(m["topic"], k)], (m["seq"], k)
                for x in got.messages:
                    assert x.extra["source"] == ("unindexed_tail" if x.phys_offset in tail else "index")
                assert got.found_in_tail == len(scoped[(m["topic"], k)] & tail)


def test_cli_crash_store_lookup_is_complete():
    store = "rmq4-crash"
    disp = indexed_seqs(store)
    byoff = _by_offset(store)
    tail = {m["wroteOffset"] for m in manifest(store) if m["seq"] not in disp}
    _, unscoped = expected(store)
    key = max(unscoped, key=lambda k: (len(unscoped[k] & tail), len(unscoped[k]), k))  # the key most often past the index
    assert unscoped[key] & tail and unscoped[key] - tail
    r = run("index", "lookup", key, "-s", store_root(store), "-f", "jsonl")
    assert r.exit_code == 0, r.stderr
    out = jsonl(r.stdout)
    msgs = [o for o in out if o["kind"] == "message"]
    assert [o["phys_offset"] for o in msgs] == sorted(unscoped[key])
    for o in msgs:
        _same_as_manifest(o, byoff[o["phys_offset"]])
        assert o["source"] == ("unindexed_tail" if o["phys_offset"] in tail else "index")
    s = out[-1]
    assert s["kind"] == "summary" and s["found"] == len(unscoped[key])
    last_indexed = max(o for o in byoff if byoff[o]["seq"] in disp)
    end = sum(p.stat().st_size for p in (store_root(store) / "commitlog").iterdir())  # the files follow each other from 0
    assert s["unindexed_tail"] == {
        "from_offset": last_indexed,
        "to_offset": end,
        "bytes": end - last_indexed,
        "records": len(tail),
        "found": len(unscoped[key] & tail),
        "problems": 0,
        "why": f"the index ends at offset {last_indexed}",
    }
    t = run("index", "lookup", key, "-s", store_root(store))
    assert t.exit_code == 0 and f"{len(unscoped[key] & tail)} of them past the index (the index ends at offset" in t.stderr and "unindexed_tail" in t.stdout
    # A UNIQ_KEY written after the index's end: `msgid` and `index lookup --id` find it; its offset msgId is read directly.
    last = manifest(store)[-1]
    for args in (("msgid", last["uniqKey"]), ("index", "lookup", "--id", last["uniqKey"])):
        r = run(*args, "-s", store_root(store), "-f", "jsonl")
        assert r.exit_code == 0, r.stderr
        out = jsonl(r.stdout)
        msgs = [o for o in out if o["kind"] == "message"]
        assert [o["source"] for o in msgs] == ["unindexed_tail"]
        _same_as_manifest(msgs[0], last)
        assert out[-1]["unindexed_tail"]["found"] == 1
    out = jsonl(run("msgid", last["msgId"], "-s", store_root(store), "-f", "jsonl").stdout)
    assert [o["phys_offset"] for o in out if o["kind"] == "message"] == [last["wroteOffset"]]
    assert not any(o["kind"] == "summary" for o in out)  # a direct read: no index walk, no scan


def test_store_without_index_files_is_scanned_whole(tmp_path):
    store = "rmq4-basic"
    root = copy_store(store, tmp_path)
    for p in list_index_files(root):
        (root / "index" / p.rsplit("/", 1)[1]).unlink()
    scoped, unscoped = expected(store)
    byoff = _by_offset(store)
    with Index(root) as idx:
        assert (idx.tail.after, idx.tail.from_offset, idx.tail.records) == (-1, 0, len(byoff))
        for topic, key in sorted(all_keys(store)):
            got = idx.lookup(key, [topic])
            assert {m.phys_offset for m in got.messages} == scoped.get((topic, key), set()), (topic, key)
            assert all(m.extra["source"] == "unindexed_tail" for m in got.messages)
    key = max(unscoped, key=lambda k: (len(unscoped[k]), k))
    r = run("index", "lookup", key, "-s", root, "-f", "jsonl")
    assert r.exit_code == 0, r.stderr
    out = jsonl(r.stdout)
    msgs = [o for o in out if o["kind"] == "message"]
    assert [o["phys_offset"] for o in msgs] == sorted(unscoped[key])
    for o in msgs:
        _same_as_manifest(o, byoff[o["phys_offset"]])
    assert out[-1]["unindexed_tail"]["why"] == "no index entries: the whole CommitLog was scanned"
    assert out[-1]["unindexed_tail"]["from_offset"] == 0
    m = next(m for m in manifest(store) if m.get("uniqKey"))
    r = run("msgid", m["uniqKey"], "-s", root, "-f", "jsonl")
    assert r.exit_code == 0 and {o["phys_offset"] for o in jsonl(r.stdout) if o["kind"] == "message"} == unscoped[m["uniqKey"]]
    r = run("index", "lookup", "no-such-key-anywhere", "-s", root)
    assert r.exit_code == 1 and "0 messages" in r.stderr and "whole CommitLog was scanned" in r.stderr


def test_fleet_lookup_scans_each_store_past_its_index():
    last = manifest("rmq4-crash")[-1]
    r = run("index", "lookup", last["uniqKey"], "-s", store_root("rmq4-crash"), "-s", store_root("rmq4-basic"), "-t", last["topic"], "-f", "jsonl")
    assert r.exit_code == 0, r.stderr
    out = jsonl(r.stdout)
    assert [(o["broker"], o["phys_offset"], o["source"]) for o in out if o["kind"] == "message"] == [("rmq4-crash", last["wroteOffset"], "unindexed_tail")]
    summaries = {o["broker"]: o for o in out if o["kind"] == "summary"}
    assert summaries["rmq4-crash"]["unindexed_tail"]["found"] == 1 and summaries["rmq4-basic"]["unindexed_tail"]["found"] == 0
