"""Compaction topics on fixtures/real/rmq53-compaction, a store written and compacted by RocketMQ 5.3.3's own CompactionStore.

What is read (every compaction-log record, SparseConsumeQueue unit and checkpoint entry) and what a consumer
gets is compared with the store's truth.json; damage is planted in copies of the store and each problem is
expected at the byte its file kind puts it, computed here with struct from truth.json's positions.
"""

from __future__ import annotations

import json
import os
import struct
from functools import cache

import pytest
from conftest import REAL, copy_store, flip, jsonl, patch, run, store_root

from rmqdump.common.javahash import java_hash
from rmqdump.readers.commitlog import CommitLog
from rmqdump.readers.compaction import find_compaction, read_checkpoint, split_queue_key
from rmqdump.readers.fastpath import field_offset
from rmqdump.scan import scanner
from rmqdump.schemas import SparseConsumeQueueUnit, message_header

NAME = "rmq53-compaction"
TOPIC = "CompactKV"
HEADER = message_header()
BODY_AT = HEADER.sizeof()  # IPv4 hosts: the body follows the fixed head
UNIT = SparseConsumeQueueUnit.sizeof()


@cache
def manifest_puts() -> tuple[dict, ...]:
    """The manifest's puts to the compaction topic."""
    with open(REAL / NAME / "manifest.jsonl", encoding="utf-8") as f:
        return tuple(p for p in map(json.loads, f) if p["kind"] == "put" and p["topic"] == TOPIC)


@cache
def truth() -> dict:
    with open(REAL / NAME / "truth.json", encoding="utf-8") as f:
        return json.load(f)


def tq(qid: int) -> dict:
    return truth()["queues"][str(qid)]


def records(qid: int) -> list[dict]:
    """Truth's compaction-log records of a queue (messages only), with their file."""
    return [{**r, "file": f["file"]} for f in tq(qid)["compactionLogFiles"] for r in f["records"] if "queueOffset" in r]


def units(qid: int) -> list[dict]:
    return [{**u, "file": f["file"]} for f in tq(qid)["compactionCqFiles"] for u in f["units"]]


def field_at(name: str) -> int:
    return field_offset(HEADER, name)


def unit_field(name: str) -> int:
    return field_offset(SparseConsumeQueueUnit, name)


def problems(res) -> list[tuple]:
    return sorted((p["code"], p["file"], p["file_offset"], p["phys_offset"]) for p in jsonl(res.stdout) if p["kind"] == "problem")


def verify(root) -> tuple[int, list[tuple]]:
    res = run("compaction", "verify", "-s", root, "-f", "jsonl")
    return res.exit_code, problems(res)


def commitlog_file(phys: int) -> tuple[str, int]:
    size = truth()["nonDefaultMessageStoreConfig"]["mappedFileSizeCommitLog"]
    return f"commitlog/{phys // size * size:020d}", phys % size


# --- what is read equals truth.json --------------------------------------------------------------


def test_every_record_equals_truth():
    for qid in (0, 1):
        res = run("compaction", "log", "-s", store_root(NAME), "-t", TOPIC, "-q", qid, "-f", "jsonl")
        assert res.exit_code == 0
        got = [
            {
                "file": os.path.relpath(r["file"], store_root(NAME)),
                "pos": r["file_offset"],
                "offset": r["compaction_log_offset"],
                "totalSize": r["total_size"],
                "queueId": r["queue_id"],
                "queueOffset": r["queue_offset"],
                "keys": r["compaction_key"],
                "uniqKey": r["uniq_key"],
                "bodyLength": r["body_length"],
                "bodyCRC": r["body_crc"],
                "storeTimestamp": r["store_timestamp"],
                "tags": r["tags"],
                "commitLogWroteOffset": r["phys_offset"],
            }
            for r in jsonl(res.stdout)
        ]
        drop = ("putSeq", "magic", "physicalOffsetField")  # every record is a V1 message whose offset field is its own offset:
        assert {(r["magic"], r["physicalOffsetField"] - r["offset"]) for r in records(qid)} == {("0xDAA320A7", 0)}
        assert all(r["magic_version"] == 1 and r["crc_ok"] for r in jsonl(res.stdout))
        assert got == [{k: v for k, v in r.items() if k not in drop} for r in records(qid)]


def test_file_ends_equal_truth():
    """A full file ends in a BLANK record, a rewritten one in zeros, the active one in its unwritten tail."""
    cf = find_compaction(str(store_root(NAME)))
    for q in cf.queues:
        ends = {}
        for b in scanner.batches(q.log):
            for e in b.events:
                ends[os.path.relpath(e.file, store_root(NAME))] = (e.file_offset, e.length, e.marker)
        want = {}
        for f in tq(q.queue_id)["compactionLogFiles"]:
            last = f["records"][-1]
            if last.get("blank"):
                want[f["file"]] = (last["pos"], last["totalSize"], "blank")
            elif last.get("zeroTail"):
                want[f["file"]] = (last["pos"], last["length"], "zeros")
            else:  # the active file: zeros from its write position
                want[f["file"]] = (f["wrotePosition"], f["fileSize"] - f["wrotePosition"], "zeros")
        assert ends == want


def test_every_unit_equals_truth():
    for qid in (0, 1):
        res = run("compaction", "units", "-s", store_root(NAME), "-t", TOPIC, "-q", qid, "-f", "jsonl")
        assert res.exit_code == 0
        got = []
        for r in jsonl(res.stdout):
            d = {
                "pos": r["file_offset"],
                "compactionLogOffset": r["compaction_log_offset"],
                "size": r["size"],
                "tagsCode": r["tags_code"],
                "storeTime": r["store_time"],
                "queueOffset": r["queue_offset"],
                "batchNum": r["batch_num"],
                "compactedOffset": r["compacted_offset"],
                "reserved": r["reserved"],
            }
            if r["end"]:
                d["endMarker"] = True
            assert r["valid"] != r["end"]
            got.append({**d, "file": os.path.relpath(r["cq_file"], store_root(NAME))})
        assert got == units(qid)


def test_checkpoint_equals_truth(tmp_path):
    ck = read_checkpoint(str(store_root(NAME) / "compaction"))
    assert ck.entries == truth()["positionCheckpoint"]["parsed"]["queueOffsetMap"]
    assert ck.problems == []
    want = truth()["positionCheckpoint"]["parsed"]["queueOffsetMap"]
    assert want and {k: ck.offset(*split_queue_key(k)) for k in want} == want  # each queue's offset, by (topic, queue id)
    # topics contain `_`: the queue id follows the last one
    (tmp_path / "position-checkpoint").write_text('{"queueOffsetMap":{"My_Topic_12":7,"a_b_0":3}}')
    assert read_checkpoint(str(tmp_path)).offsets == {("My_Topic", 12): 7, ("a_b", 0): 3}
    # an entry the broker never looks up (it asks for topic + "_" + queueId) is reported, not read as that queue's
    (tmp_path / "position-checkpoint").write_text('{"queueOffsetMap":{"T_0":7,"T_00":9,"T_x":1,"T_1":true}}')
    ck = read_checkpoint(str(tmp_path))
    assert ck.offsets == {("T", 0): 7}
    assert [(p.code, p.file) for p in ck.problems] == [("compaction_checkpoint_unreadable", str(tmp_path / "position-checkpoint"))] * 3


def test_consumer_view_equals_truth():
    for qid in (0, 1):
        res = run("compaction", "view", "-s", store_root(NAME), "-t", TOPIC, "-q", qid, "-f", "jsonl")
        assert res.exit_code == 0
        rows = jsonl(res.stdout)
        cp = tq(qid)["checkpointOffset"]
        got = [(r["kind"], r["queue_id"], r["queue_offset"], r["keys"], r["uniq_key"], r["phys_offset"], r["compaction_log_offset"], r["part"]) for r in rows]
        want = [
            (
                "message",
                qid,
                v["queueOffset"],
                v["keys"],
                v["uniqKey"],
                v["commitLogWroteOffset"],
                v["compactionLogOffset"],
                "compacted" if v["queueOffset"] <= cp else "after_checkpoint",
            )
            for v in tq(qid)["consumerView"]
        ]
        assert got == want
        assert sum(r["part"] == "compacted" for r in rows) == tq(qid)["consumerViewCompactedPart"]
        assert sum(r["part"] == "after_checkpoint" for r in rows) == tq(qid)["consumerViewActivePart"]


def test_key_history_equals_truth():
    """Every put of every key is listed; those served are truth's survivors, and the others say the rule's reason."""
    puts = [p for p in manifest_puts() if p.get("keys")]
    from rmqdump.query.compaction import key_history

    cf = find_compaction(str(store_root(NAME)))
    cl = CommitLog.open(str(store_root(NAME) / "commitlog"))
    for qid in (0, 1):
        cp = tq(qid)["checkpointOffset"]
        for key, survivors in [*tq(qid)["survivorsByKey"].items(), *((k, []) for k in tq(qid)["keysWithNoSurvivor"])]:
            rows = key_history(cf, cl, TOPIC, key, qid)
            mine = sorted((p for p in puts if p["keys"] == key and p["queueId"] == qid), key=lambda p: p["queueOffset"])
            assert [(r["queue_offset"], r["phys_offset"], r["tombstone"]) for r in rows] == [(p["queueOffset"], p["wroteOffset"], p["tombstone"]) for p in mine]
            served = [(r["queue_offset"], r["phys_offset"], r["compaction_log_offset"]) for r in rows if r["served"]]
            assert served == [(s["queueOffset"], s["wroteOffset"], s["compactionLogOffset"]) for s in survivors]
            newest = max((p["queueOffset"] for p in mine if p["queueOffset"] <= cp), default=None)
            for r in rows:
                if r["served"]:
                    continue
                assert r["queue_offset"] <= cp  # after the checkpoint every put is served
                if r["tombstone"]:
                    assert r["why"].startswith("dropped: a tombstone")
                else:
                    assert r["why"] == f"dropped: superseded by the put at queue offset {newest}"
    res = run("compaction", "view", "-s", store_root(NAME), "-t", TOPIC, "--key", "no-such-key", "-f", "jsonl")
    assert (res.exit_code, res.stdout) == (1, "")


def test_clean_store_verifies_clean():
    code, probs = verify(store_root(NAME))
    assert (code, probs) == (0, [])
    res = run("compaction", "verify", "-s", store_root(NAME), "-f", "jsonl")
    s = jsonl(res.stdout)[-1]
    assert (s["queues"], s["records"], s["units"], s["commitlog_compared"]) == (2, len(records(0)) + len(records(1)), len(records(0)) + len(records(1)), True)
    res = run("cq", "verify", "-s", store_root(NAME), "-f", "jsonl")
    assert res.exit_code == 0 and jsonl(res.stdout)[-1]["problems"] == 0


def test_info_shows_compaction_queues():
    res = run("info", "-s", store_root(NAME), "--no-recovery", "-f", "jsonl")
    rows = [r for r in jsonl(res.stdout) if r["kind"].startswith("compaction")]
    for qid in (0, 1):
        (row,) = [r for r in rows if r["kind"] == "compaction_queue" and r["queue_id"] == qid]
        logs = [f["name"] for f in tq(qid)["compactionLogFiles"]]
        assert row["log_files"] == logs and row["cq_files"] == [f["name"] for f in tq(qid)["compactionCqFiles"]]
        assert row["log_bytes"] == sum(f["fileSize"] for f in tq(qid)["compactionLogFiles"])
        assert row["log_file_size"] == tq(qid)["compactionLogMappedFileSize"] and row["cq_file_size"] == tq(qid)["compactionCqMappedFileSize"]
        assert (row["units"], row["min_offset"], row["max_offset"]) == (
            len(tq(qid)["consumerView"]),
            tq(qid)["compactionCqMinOffset"],
            tq(qid)["compactionCqMaxOffset"],
        )
        assert row["checkpoint"] == tq(qid)["checkpointOffset"]
    (ck,) = [r for r in rows if r["kind"] == "compaction_checkpoint"]
    assert ck["queue_offsets"] == {"CompactKV_0": 964, "CompactKV_1": 961}


def test_store_without_compaction(tmp_path):
    res = run("compaction", "verify", "-s", store_root("rmq4-basic"))
    assert res.exit_code == 2 and res.stderr.startswith("rmqdump: no_compaction: ") and len(res.stderr.splitlines()) == 1
    # a 5.x store without compaction topics has an empty compaction/ (and checkpoint): nothing to show, nothing wrong
    assert (store_root("rmq53-v2") / "compaction" / "position-checkpoint").is_file()
    res = run("info", "-s", store_root("rmq53-v2"), "--no-recovery", "-f", "jsonl")
    assert res.exit_code == 0 and not [r for r in jsonl(res.stdout) if r["kind"].startswith("compaction")]
    assert verify(store_root("rmq53-v2")) == (0, [])
    res = run("compaction", "log", "-s", store_root(NAME), "-t", "NormalTopicC")
    assert res.exit_code == 2 and res.stderr.startswith("rmqdump: no_queue: ")


# --- damage: each problem where its bytes are -------------------------------------------------------


def _rec(root, qid: int, i: int) -> tuple[dict, str]:
    r = records(qid)[i]
    return r, str(root / r["file"])


def _unit_of(qid: int, qo: int) -> tuple[dict, str]:
    (u,) = [u for u in units(qid) if u["queueOffset"] == qo and not u.get("endMarker")]
    return u, u["file"]


def test_record_body_flip(tmp_path):
    root = copy_store(NAME, tmp_path)
    r, path = _rec(root, 0, 10)
    flip(path, r["pos"] + BODY_AT + 3)
    code, probs = verify(root)
    assert code == 1
    assert probs == sorted(
        [
            ("body_crc_mismatch", path, r["pos"] + BODY_AT, r["offset"]),
            ("compaction_record_differs", path, r["pos"] + BODY_AT + 3, r["offset"]),
        ]
    )


def test_record_store_time_flip_found_both_ways(tmp_path):
    """A field no CRC covers: the record differs from its CommitLog original, and its unit no longer matches it."""
    root = copy_store(NAME, tmp_path)
    r, path = _rec(root, 1, 5)
    at = field_at("store_timestamp") + 7
    flip(path, r["pos"] + at)
    u, ufile = _unit_of(1, r["queueOffset"])
    _, probs = verify(root)
    assert probs == sorted(
        [
            ("compaction_record_differs", path, r["pos"] + at, r["offset"]),
            ("compaction_cq_store_time_mismatch", str(root / ufile), u["pos"], u["compactionLogOffset"]),
        ]
    )
    # cq verify reports the same
    res = run("cq", "verify", "-s", root, "-f", "jsonl")
    assert res.exit_code == 1 and problems(res) == probs


@pytest.mark.parametrize(
    ("field", "code"),
    [
        ("size", "compaction_cq_size_mismatch"),
        ("tags_code", "compaction_cq_tags_mismatch"),
        ("store_time", "compaction_cq_store_time_mismatch"),
        ("msg_base_offset", "compaction_cq_queue_offset_mismatch"),
        ("batch_size", "compaction_cq_invalid_unit"),
        ("reserved", "compaction_cq_invalid_unit"),
    ],
)
def test_unit_field_flip(tmp_path, field, code):
    """The queue's last unit (so a changed queue offset has no unit after it to be out of order with)."""
    root = copy_store(NAME, tmp_path)
    u = [u for u in units(0) if not u.get("endMarker")][-1]
    path = str(root / u["file"])
    size = SparseConsumeQueueUnit.subcons[[s.name for s in SparseConsumeQueueUnit.subcons].index(field)].sizeof()
    flip(path, u["pos"] + unit_field(field) + size - 1, 0x10)  # low byte: the value stays positive
    code_, probs = verify(root)
    assert (code_, probs) == (1, [(code, path, u["pos"], u["compactionLogOffset"])])


def test_unit_offset_flip(tmp_path):
    """A unit pointing at no record start: the unit is wrong, and its record has no unit."""
    root = copy_store(NAME, tmp_path)
    u = units(0)[5]
    path = str(root / u["file"])
    flip(path, u["pos"] + unit_field("commit_log_offset") + 7, 0x01)
    (r,) = [r for r in records(0) if r["offset"] == u["compactionLogOffset"]]
    _, probs = verify(root)
    assert probs == sorted(
        [
            ("compaction_cq_bad_pointer", path, u["pos"], u["compactionLogOffset"] ^ 1),
            ("compaction_record_no_unit", str(root / r["file"]), r["pos"], r["offset"]),
        ]
    )


def test_unit_out_of_order(tmp_path):
    root = copy_store(NAME, tmp_path)
    u0, u1 = units(1)[3], units(1)[4]
    path = str(root / u1["file"])
    patch(path, u1["pos"] + unit_field("msg_base_offset"), struct.pack(">q", u0["queueOffset"]))
    _, probs = verify(root)
    assert probs == sorted(
        [
            ("compaction_cq_order", path, u1["pos"], u1["compactionLogOffset"]),
            ("compaction_cq_queue_offset_mismatch", path, u1["pos"], u1["compactionLogOffset"]),
        ]
    )


def test_invalid_unit_before_the_last(tmp_path):
    root = copy_store(NAME, tmp_path)
    u = units(0)[7]
    path = str(root / u["file"])
    patch(path, u["pos"], bytes(UNIT))  # a hole among the units
    (r,) = [r for r in records(0) if r["offset"] == u["compactionLogOffset"]]
    _, probs = verify(root)
    assert probs == sorted([("compaction_cq_invalid_unit", path, u["pos"], 0), ("compaction_record_no_unit", str(root / r["file"]), r["pos"], r["offset"])])


def test_record_moved_to_another_queue(tmp_path):
    """A record whose queue id says 1 in queue 0's log: misplaced, and the put it was a copy of is now missing."""
    root = copy_store(NAME, tmp_path)
    r, path = _rec(root, 0, len(records(0)) - 3)  # after the checkpoint
    patch(path, r["pos"] + field_at("queue_id"), struct.pack(">i", 1))
    cl_file, cl_pos = commitlog_file(r["commitLogWroteOffset"])
    _, probs = verify(root)
    assert probs == sorted(
        [
            ("compaction_record_wrong_queue", path, r["pos"], r["offset"]),
            ("compaction_record_missing", str(root / cl_file), cl_pos, r["commitLogWroteOffset"]),
        ]
    )


def test_record_with_no_original(tmp_path):
    root = copy_store(NAME, tmp_path)
    r, path = _rec(root, 0, len(records(0)) - 1)
    patch(path, r["pos"] + field_at("queue_offset"), struct.pack(">q", r["queueOffset"] + 100))  # the CommitLog ends at 1229
    u, ufile = _unit_of(0, r["queueOffset"])
    cl_file, cl_pos = commitlog_file(r["commitLogWroteOffset"])
    _, probs = verify(root)
    assert probs == sorted(
        [
            ("compaction_record_no_original", path, r["pos"], r["offset"]),
            ("compaction_cq_queue_offset_mismatch", str(root / ufile), u["pos"], u["compactionLogOffset"]),
            ("compaction_record_missing", str(root / cl_file), cl_pos, r["commitLogWroteOffset"]),
        ]
    )


def test_stale_survivor(tmp_path):
    """A compacted survivor rewritten to an older put of its key: it differs from that put, is stale, and the newest is lost."""
    root = copy_store(NAME, tmp_path)
    cp = tq(0)["checkpointOffset"]
    puts = manifest_puts()
    for i, r in enumerate(records(0)):  # noqa: B007 (i: the record found)
        older = [
            p
            for p in puts
            if p["kind"] == "put" and p["topic"] == TOPIC and p["queueId"] == 0 and p["keys"] == r["keys"] and p["queueOffset"] < r["queueOffset"]
        ]
        if r["queueOffset"] <= cp and older:
            break
    r, path = _rec(root, 0, i)
    old = older[-1]
    patch(path, r["pos"] + field_at("queue_offset"), struct.pack(">q", old["queueOffset"]))
    u, ufile = _unit_of(0, r["queueOffset"])
    cl_file, cl_pos = commitlog_file(r["commitLogWroteOffset"])
    _, probs = verify(root)
    # the first byte differing from the older put: its bodyCRC (unless equal) or its queue offset
    theirs = (root / commitlog_file(old["wroteOffset"])[0]).read_bytes()[commitlog_file(old["wroteOffset"])[1] :][: old["wroteBytes"]]
    mine = (root / r["file"]).read_bytes()[r["pos"] : r["pos"] + r["totalSize"]]
    first = next(k for k in range(min(len(mine), len(theirs))) if mine[k] != theirs[k] and not field_at("phys_offset") <= k < field_at("phys_offset") + 8)
    assert probs == sorted(
        [
            ("compaction_record_differs", path, r["pos"] + first, r["offset"]),
            ("compaction_stale_survivor", path, r["pos"], r["offset"]),
            ("compaction_survivor_lost", str(root / cl_file), cl_pos, r["commitLogWroteOffset"]),
            ("compaction_cq_queue_offset_mismatch", str(root / ufile), u["pos"], u["compactionLogOffset"]),
        ]
    )


def _write_checkpoint(root, entries: dict) -> tuple[str, str]:
    text = json.dumps({"empty": False, "queueOffsetMap": entries}, indent="\t")
    path = root / "compaction" / "position-checkpoint"
    path.write_text(text)
    return str(path), text


def rule_model(root, qid: int, cp: int) -> list[tuple]:
    """What the retention rule and the file layout say of queue qid's log under checkpoint cp (the log's records all kept).

    Up to cp a key keeps one record and no tombstone; compacted files come first and are the only ones named apart.
    """
    recs = records(qid)
    compacted = [r for r in recs if r["queueOffset"] <= cp]
    newest: dict[str, int] = {}
    for r in compacted:
        newest[r["keys"]] = max(newest.get(r["keys"], -1), r["queueOffset"])
    want = [("compaction_duplicate_survivor", str(root / r["file"]), r["pos"], r["offset"]) for r in compacted if r["queueOffset"] < newest[r["keys"]]]
    want += [("compaction_tombstone_kept", str(root / r["file"]), r["pos"], r["offset"]) for r in compacted if r["bodyLength"] == 0]
    files = tq(qid)["compactionLogFiles"]
    done = [max(r["queueOffset"] for r in recs if r["file"] == f["file"]) <= cp for f in files]
    for i in range(1, len(files)):
        if files[i]["fileFromOffset"] > files[i - 1]["fileFromOffset"] + files[i - 1]["fileSize"] and not (done[i - 1] and not done[i]):
            end = files[i - 1]["fileFromOffset"] + files[i - 1]["fileSize"]
            want.append(("compaction_log_gap", str(root / files[i]["file"]), None, end))
    return want


def test_checkpoint_past_compacted_files(tmp_path):
    """Checkpoint moved to the end of the second file: its duplicates and tombstones count as compacted and break the rule."""
    root = copy_store(NAME, tmp_path)
    cp = max(r["queueOffset"] for r in records(0) if r["file"].endswith("534336"))
    _write_checkpoint(root, {"CompactKV_0": cp, "CompactKV_1": 961})
    want = rule_model(root, 0, cp)
    assert {w[0] for w in want} == {"compaction_tombstone_kept", "compaction_duplicate_survivor", "compaction_log_gap"}
    _, probs = verify(root)
    assert probs == sorted(want)


def test_checkpoint_digit_flip(tmp_path):
    """964 -> 965: the first record after the checkpoint now lies inside a file that holds both sides of it, and its key's older survivor is a duplicate."""
    root = copy_store(NAME, tmp_path)
    ck = root / "compaction" / "position-checkpoint"
    text = ck.read_text()
    flip(ck, text.index('"CompactKV_0":964') + len('"CompactKV_0":96'), 0x01)
    r965 = next(r for r in records(0) if r["queueOffset"] == 965)
    second = [r for r in records(0) if r["file"] == r965["file"]][1]
    older = [r for r in records(0) if r["keys"] == r965["keys"] and r["queueOffset"] <= 964]
    _, probs = verify(root)
    want = [("compaction_checkpoint_mismatch", str(root / second["file"]), second["pos"], second["offset"])]
    want += [("compaction_duplicate_survivor", str(root / r["file"]), r["pos"], r["offset"]) for r in older]
    assert older and probs == sorted(want)


def test_checkpoint_entries_without_files_or_past_the_log(tmp_path):
    root = copy_store(NAME, tmp_path)
    path, text = _write_checkpoint(root, {"CompactKV_0": 964, "CompactKV_1": 5000, "Other_Topic_7": 3})
    _, probs = verify(root)
    want = [
        ("compaction_checkpoint_mismatch", path, text.index('"CompactKV_1"'), None),
        ("compaction_checkpoint_mismatch", path, text.index('"Other_Topic_7"'), None),
    ]
    assert probs == sorted(want + rule_model(root, 1, 5000))
    res = run("compaction", "verify", "-s", root, "-f", "jsonl")
    orphan = [p for p in jsonl(res.stdout) if p.get("topic") == "Other_Topic"]
    assert [(p["topic"], p["queue_id"]) for p in orphan] == [("Other_Topic", 7)]


def test_checkpoint_unreadable(tmp_path):
    """A flipped brace: the broker loads the .bak instead; the damage is reported at its byte."""
    root = copy_store(NAME, tmp_path)
    ck = root / "compaction" / "position-checkpoint"
    at = ck.read_text().index("{", 1)
    flip(ck, at, 0x01)
    code, probs = verify(root)
    assert (code, probs) == (1, [("compaction_checkpoint_unreadable", str(ck), at, None)])
    assert read_checkpoint(str(root / "compaction")).used == str(ck) + ".bak"


def test_missing_files(tmp_path):
    """The last log file gone (with its units): its puts are missing, at their CommitLog records."""
    root = copy_store(NAME, tmp_path)
    last = tq(0)["compactionLogFiles"][-1]["file"]
    os.remove(root / last)
    os.remove(root / last.replace("compactionLog", "compactionCq"))
    want = []
    for r in records(0):
        if r["file"] == last:
            f, pos = commitlog_file(r["commitLogWroteOffset"])
            want.append(("compaction_record_missing", str(root / f), pos, r["commitLogWroteOffset"]))
    _, probs = verify(root)
    assert want and probs == sorted(want)


def test_gap_and_unpaired_files(tmp_path):
    """A middle log file gone: a gap where no compaction round explains one, its puts missing, and its units unpaired."""
    root = copy_store(NAME, tmp_path)
    files = tq(0)["compactionLogFiles"]
    mid, after = files[2]["file"], files[3]["file"]
    os.remove(root / mid)
    want = [("compaction_log_gap", str(root / after), None, files[2]["fileFromOffset"])]
    want.append(("compaction_file_unpaired", str(root / mid.replace("compactionLog", "compactionCq")), None, None))
    for u in units(0):
        if u["file"] == mid.replace("compactionLog", "compactionCq") and not u.get("endMarker"):
            want.append(("compaction_cq_bad_pointer", str(root / u["file"]), u["pos"], u["compactionLogOffset"]))
    for r in records(0):
        if r["file"] == mid:
            f, pos = commitlog_file(r["commitLogWroteOffset"])
            want.append(("compaction_record_missing", str(root / f), pos, r["commitLogWroteOffset"]))
    _, probs = verify(root)
    assert probs == sorted(want)


def test_file_size_and_names(tmp_path):
    root = copy_store(NAME, tmp_path)
    cq, log = tq(1)["compactionCqFiles"][-1], tq(1)["compactionLogFiles"][-1]
    cq_cut, log_cut = cq["wrotePosition"] + 10, log["wrotePosition"] + 8  # past the written units and records
    os.truncate(root / cq["file"], cq_cut)
    os.truncate(root / log["file"], log_cut)
    junk = root / "compaction" / "compactionCq" / TOPIC / "1" / "junk"
    junk.write_bytes(b"x")
    _, probs = verify(root)
    assert probs == sorted(
        [
            ("compaction_file_size", str(root / cq["file"]), cq_cut, None),
            ("compaction_file_size", str(root / log["file"]), log_cut, None),
            ("compaction_bad_file_name", str(junk), None, None),
        ]
    )


def test_tags_code_is_the_java_hash():
    """The units' tagsCode is String.hashCode of TAGS (MessageExtBrokerInner.tagsString2tagsCode)."""
    tags = {r["queueOffset"]: r["tags"] for r in records(0)}
    assert {u["tagsCode"] for u in units(0) if not u.get("endMarker") and tags[u["queueOffset"]] == "Upsert"} == {java_hash("Upsert")}


# --- rebuild: the compaction queue files again from the compaction logs ----------------------------


def test_rebuild_writes_the_compaction_cq_byte_identical(tmp_path):
    out = tmp_path / "out"
    # the store's README gives the index sizing and the ConsumeQueue file size (12000 bytes = 600 units)
    res = run("rebuild", store_root(NAME), "--out", out, "--hash-slots", 500, "--index-entries", 6000, "--cq-units-per-file", 600, "-f", "jsonl")
    assert res.exit_code == 0
    src = store_root(NAME) / "compaction" / "compactionCq"
    want = sorted(p.relative_to(src) for p in src.rglob("*") if p.is_file())
    got = sorted(p.relative_to(out / "compaction" / "compactionCq") for p in (out / "compaction" / "compactionCq").rglob("*") if p.is_file())
    assert got == want and len(want) == 7
    for rel in want:
        assert (out / "compaction" / "compactionCq" / rel).read_bytes() == (src / rel).read_bytes(), rel
    rows = [r for r in jsonl(res.stdout) if r["kind"] == "compaction_cq"]
    assert sorted((r["queue_id"], r["units"], r["end_units"]) for r in rows) == [
        (q, len(records(q)), sum(1 for u in units(q) if u.get("endMarker"))) for q in (0, 1)
    ]
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no temporary left beside it
    only_normal = run(
        "rebuild", store_root(NAME), "--out", tmp_path / "n", "--hash-slots", 500, "--index-entries", 6000, "--cq-units-per-file", 600, "-t", "NormalTopicC"
    )
    assert only_normal.exit_code == 0 and not (tmp_path / "n" / "compaction").exists()


def test_rebuild_compaction_cq_too_small(tmp_path):
    """Queue files too small for a log file's records: the records without room are named, at their log bytes."""
    from rmqdump.builders.compactioncqbuild import rebuild_compaction_cq

    size = 2 * UNIT
    res = rebuild_compaction_cq(str(store_root(NAME)), str(tmp_path / "out"), force=False, sync=False, cq_file_size=size, topics=frozenset({TOPIC}))
    want = []
    for q in (0, 1):
        for f in tq(q)["compactionLogFiles"]:
            recs = [r for r in f["records"] if "queueOffset" in r]
            want += [("compaction_cq_overflow", str(store_root(NAME) / f["file"]), r["pos"]) for r in recs[2:]]
    assert sorted((p.code, p.file, p.file_offset) for p in res.problems) == sorted(want)
    for q in (0, 1):
        for f in tq(q)["compactionCqFiles"]:
            data = (tmp_path / "out" / f["file"]).read_bytes()
            assert data == (store_root(NAME) / f["file"]).read_bytes()[:size]  # the first two units, as the broker wrote them


def test_view_names_an_unreadable_record(tmp_path):
    """A unit whose record was zeroed: the consumer view says so at the record's bytes (exit 1) and serves the others."""
    root = copy_store(NAME, tmp_path)
    r, path = _rec(root, 1, 4)
    patch(path, r["pos"], bytes(8))  # totalSize and magic: zeros where the record starts
    res = run("compaction", "view", "-s", root, "-t", TOPIC, "-q", 1, "-f", "jsonl")
    assert res.exit_code == 1
    rows = jsonl(res.stdout)
    assert [(x["code"], x["file"], x["file_offset"], x["phys_offset"], x["queue_id"], x["unit_index"]) for x in rows if x["kind"] == "problem"] == [
        ("zeroed_range", path, r["pos"], r["offset"], 1, r["queueOffset"])
    ]
    assert [x["queue_offset"] for x in rows if x["kind"] == "message"] == [
        v["queueOffset"] for v in tq(1)["consumerView"] if v["queueOffset"] != r["queueOffset"]
    ]


def test_verify_without_the_commitlog(tmp_path):
    """The CommitLog gone: the compaction files are still checked against each other, and the summary says what was not."""
    root = copy_store(NAME, tmp_path)
    for f in (root / "commitlog").iterdir():
        f.unlink()
    res = run("compaction", "verify", "-s", root, "-f", "jsonl")
    assert res.exit_code == 0
    assert jsonl(res.stdout) == [
        {
            "kind": "summary",
            "queues": 2,
            "records": len(records(0)) + len(records(1)),
            "units": len(records(0)) + len(records(1)),
            "problems": 0,
            "codes": {},
            "commitlog_compared": False,
        }
    ]


def test_sql_compacted_table_and_problems(tmp_path):
    """`sql` offers the consumer view as the `compacted` table, and the compaction findings in `problems`."""
    q = "SELECT topic, queue_id, queue_offset, keys, uniq_key, phys_offset, compaction_log_offset, part FROM compacted ORDER BY queue_id, queue_offset"
    res = run("sql", "-s", store_root(NAME), "-f", "jsonl", q)
    assert res.exit_code == 0
    want = [
        {
            "topic": TOPIC,
            "queue_id": qid,
            "queue_offset": v["queueOffset"],
            "keys": v["keys"],
            "uniq_key": v["uniqKey"],
            "phys_offset": v["commitLogWroteOffset"],
            "compaction_log_offset": v["compactionLogOffset"],
            "part": "compacted" if v["queueOffset"] <= tq(qid)["checkpointOffset"] else "after_checkpoint",
        }
        for qid in (0, 1)
        for v in tq(qid)["consumerView"]
    ]
    assert jsonl(res.stdout) == want
    root = copy_store(NAME, tmp_path)
    r, path = _rec(root, 1, 5)
    flip(path, r["pos"] + field_at("store_timestamp") + 7)
    res = run("sql", "-s", root, "-f", "jsonl", "SELECT code, file, file_offset FROM problems ORDER BY code")
    u, ufile = _unit_of(1, r["queueOffset"])
    assert jsonl(res.stdout) == [
        {"code": "compaction_cq_store_time_mismatch", "file": str(root / ufile), "file_offset": u["pos"]},
        {"code": "compaction_record_differs", "file": path, "file_offset": r["pos"] + field_at("store_timestamp") + 7},
    ]
    res = run("sql", "-s", root, "-f", "jsonl", "SELECT count(*) AS n FROM units WHERE status <> 'ok'")
    assert jsonl(res.stdout) == [{"n": 0}]  # the plain ConsumeQueue units are not the compaction queue's
