"""5.x queue kinds on the real 5.3.3 stores: Batch ConsumeQueue, ConsumeQueue ext, LMQ.

Truth is each store's manifest.jsonl (every unit as RocketMQ's own
ConsumeQueueInterface read it back, ext units included); damage is one
flipped byte in a copy, which must be reported at its unit.
"""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter

import pytest
from conftest import flip, jsonl, manifest, run, store_root

KINDS = ["rmq53-batchcq", "rmq53-cqext", "rmq53-lmq"]


def verify(root, *args):
    r = run("cq", "verify", "-s", root, "-f", "jsonl", *args)
    rows = jsonl(r.stdout)
    return r.exit_code, [x for x in rows if x["kind"] == "problem"], rows[-1]


def units_of(name: str) -> list[dict]:
    return [x for x in manifest(name) if x["kind"] == "cq_unit"]


def expected_summary(name: str) -> dict:
    m = manifest(name)
    units = units_of(name)
    return {
        "kind": "summary",
        "queues": len({(x["topic"], x["queueId"]) for x in units}),
        "units": len(units),
        "messages": sum(1 for x in m if x["kind"] == "commitlog_msg"),
        "problems": 0,
        "filler_units": 0,  # no repair by rmqdump
    }


@pytest.mark.parametrize("name", KINDS)
def test_5x_stores_verify_clean_with_exactly_the_manifest_units(name):
    code, probs, summary = verify(store_root(name))
    assert probs == [] and code == 0
    assert summary == expected_summary(name)


def _writable_copy(name: str, dest) -> str:
    out = dest / f"renamed-{name}-copy"
    shutil.copytree(store_root(name), out)
    for d, _, files in os.walk(out):
        os.chmod(d, 0o755)
        for f in files:
            os.chmod(os.path.join(d, f), 0o644)
    return out


def _repack(qdir, file_size: int) -> None:
    """Re-cut one queue directory's files into files of `file_size` bytes (the same bytes, as a broker with that size writes them)."""
    names = sorted(n for n in os.listdir(qdir) if n.isdigit())
    data = b"".join((qdir / n).read_bytes() for n in names)
    data = data.rstrip(b"\0")
    for n in names:
        os.remove(os.path.join(qdir, n))
    for at in range(0, max(len(data), 1), file_size):
        chunk = data[at : at + file_size]
        with open(os.path.join(qdir, f"{at:020d}"), "wb") as f:
            f.write(chunk + bytes(file_size - len(chunk)))


@pytest.mark.parametrize("name", KINDS)
def test_renamed_copies_with_other_file_sizes_verify_clean(name, tmp_path):
    root = _writable_copy(name, tmp_path)
    # 10 batch units (460 bytes), 50 units (1000 bytes) per file: sizes the broker could have been configured with
    for kind, size in (("batchconsumequeue", 460), ("consumequeue", 1000)):
        base = root / kind
        if base.is_dir():
            for t in os.listdir(base):
                for q in os.listdir(base / t):
                    _repack(base / t / q, size)
    code, probs, summary = verify(root)
    assert probs == [] and code == 0
    assert summary == expected_summary(name)
    if name == "rmq53-batchcq":
        n = sum(1 for x in units_of(name) if x["cqType"] == "BatchCQ" and x["queueId"] == 0)
        assert len(os.listdir(root / "batchconsumequeue" / "BatchTopicBCQ" / "0")) == -(-n // 10)


def dump(name: str, topic: str, qid: int) -> list[dict]:
    r = run("cq", "dump", "-s", store_root(name), "-t", topic, "-q", qid, "-f", "jsonl")
    assert r.exit_code == 0
    return [x for x in jsonl(r.stdout) if x["kind"] == "unit" and x["valid"]]


def test_batch_cq_dump_is_the_manifest_field_by_field():
    want = units_of("rmq53-batchcq")
    for topic, qid in sorted({(x["topic"], x["queueId"]) for x in want}):
        got = dump("rmq53-batchcq", topic, qid)
        mine = [x for x in want if (x["topic"], x["queueId"]) == (topic, qid)]
        assert len(got) == len(mine)
        for g, m in zip(got, mine, strict=True):
            assert (g["topic"], g["queue_id"], g["queue_offset"], g["phys_offset"], g["size"], g["tags_code"]) == (
                m["topic"],
                m["queueId"],
                m["queueOffset"],
                m["commitLogOffset"],
                m["size"],
                m["tagsCode"],
            )
            if m["cqType"] == "BatchCQ":
                assert (g["store_time"], g["batch_size"], g["compacted_offset"]) == (m["storeTime"], m["batchNum"], m["compactedOffset"])
            else:
                assert "batch_size" not in g
    assert sum(x["batchNum"] for x in want if x["cqType"] == "BatchCQ") == 516 + 40  # the README's inner messages + singles


def test_ext_dump_resolves_every_address_to_the_manifest_ext_unit():
    want = units_of("rmq53-cqext")
    for topic, qid in sorted({(x["topic"], x["queueId"]) for x in want}):
        got = dump("rmq53-cqext", topic, qid)
        mine = [x for x in want if (x["topic"], x["queueId"]) == (topic, qid)]
        assert len(got) == len(mine)
        for g, m in zip(got, mine, strict=True):
            assert m["raw"]["isExtAddr"]
            assert g["ext_address"] == m["raw"]["tagsCodeOrExtAddr"]
            assert (g["queue_offset"], g["phys_offset"], g["size"]) == (m["queueOffset"], m["commitLogOffset"], m["size"])
            assert g["tags_code"] == m["tagsCode"] == m["extUnit"]["tagsCode"]
            assert g["store_time"] == m["extUnit"]["msgStoreTime"]
            assert g["filter_bitmap"] == m["extUnit"]["filterBitMapHex"].lower()
    first = min(x["raw"]["tagsCodeOrExtAddr"] for x in want)
    assert first == -(1 << 63)  # the first ext unit is at exactly Long.MIN_VALUE


def test_lmq_dump_is_the_manifest_and_resolve_finds_the_parent_record():
    want = units_of("rmq53-lmq")
    puts = {p["wroteOffset"]: p for p in manifest("rmq53-lmq") if p["kind"] == "put"}
    for topic in ("%LMQ%order_1", "%LMQ%order_2", "%LMQ%order_3"):
        got = dump("rmq53-lmq", topic, 0)
        mine = [x for x in want if x["topic"] == topic]
        assert [(g["queue_offset"], g["phys_offset"], g["size"], g["tags_code"]) for g in got] == [
            (m["queueOffset"], m["commitLogOffset"], m["size"], m["raw"]["tagsCodeOrExtAddr"]) for m in mine
        ]
        for g in got:
            p = puts[g["phys_offset"]]
            assert topic in p["lmqQueues"]
            assert int(p["INNER_MULTI_QUEUE_OFFSET"].split(",")[p["lmqQueues"].index(topic)]) == g["queue_offset"]
    r = run("cq", "dump", "-s", store_root("rmq53-lmq"), "-t", "%LMQ%order_2", "-q", 0, "--resolve", "-f", "jsonl")
    rows = [x for x in jsonl(r.stdout) if x["kind"] == "unit" and x["valid"]]
    assert len(rows) == sum(1 for x in want if x["topic"] == "%LMQ%order_2")
    assert all(x["record"]["topic"] == "LmqParentTopic" and x["queue_offset"] in x["record"]["lmq_offsets"] for x in rows)


BCQ0 = "batchconsumequeue/BatchTopicBCQ/0/00000000000000000000"
EXT_A0 = "consumequeue_ext/ExtTopicA/0/00000000000000000000"
LMQ1 = "consumequeue/%LMQ%order_1/0/00000000000000000000"

# (store, file, byte flipped, code expected, unit_index, file reported, its offset): the second unit of each file kind
DAMAGE = [
    ("rmq53-batchcq", BCQ0, 46 + 7, "cq_not_message_start", 1, BCQ0, 46),  # commitLogOffset
    ("rmq53-batchcq", BCQ0, 46 + 11, "cq_size_mismatch", 1, BCQ0, 46),
    ("rmq53-batchcq", BCQ0, 46 + 19, "cq_tags_code_mismatch", 1, BCQ0, 46),
    ("rmq53-batchcq", BCQ0, 46 + 27, "cq_store_time_mismatch", 1, BCQ0, 46),
    ("rmq53-batchcq", BCQ0, 46 + 35, "cq_queue_offset_mismatch", 0, BCQ0, 46),  # msgBaseOffset 1 -> 0
    ("rmq53-batchcq", BCQ0, 46 + 37, "cq_batch_size_mismatch", 1, BCQ0, 46),
    ("rmq53-batchcq", BCQ0, 46 + 41, "cq_batch_field_invalid", 1, BCQ0, 46),  # compactedOffset
    ("rmq53-batchcq", BCQ0, 46 + 45, "cq_batch_field_invalid", 1, BCQ0, 46),  # reserved
    ("rmq53-cqext", EXT_A0, 34 + 1, "cq_ext_bad_unit", None, EXT_A0, 34),  # size
    ("rmq53-cqext", EXT_A0, 34 + 9, "cq_ext_tags_code_mismatch", 1, EXT_A0, 34),
    ("rmq53-cqext", EXT_A0, 34 + 17, "cq_ext_store_time_mismatch", 1, EXT_A0, 34),
    ("rmq53-cqext", EXT_A0, 34 + 19, "cq_ext_bad_unit", None, EXT_A0, 34),  # bitMapSize
    ("rmq53-cqext", "consumequeue/ExtTopicA/0/00000000000000000000", 20 + 19, "cq_ext_bad_address", 1, "consumequeue/ExtTopicA/0/00000000000000000000", 20),
    ("rmq53-lmq", LMQ1, 20 + 7, "cq_not_message_start", 1, LMQ1, 20),
    ("rmq53-lmq", LMQ1, 20 + 11, "cq_size_mismatch", 1, LMQ1, 20),
    ("rmq53-lmq", LMQ1, 20 + 19, "cq_tags_code_mismatch", 1, LMQ1, 20),
]


@pytest.mark.parametrize(("name", "rel", "pos", "code", "unit", "where", "offset"), DAMAGE)
def test_a_flipped_byte_is_found_at_its_unit(tmp_path, name, rel, pos, code, unit, where, offset):
    root = _writable_copy(name, tmp_path)
    flip(root / rel, pos)
    rc, probs, _ = verify(root)
    assert rc == 1
    hits = [p for p in probs if p["code"] == code]
    assert hits, Counter(p["code"] for p in probs)
    p = hits[0]
    assert (p["unit_index"], p["file"], p["file_offset"]) == (unit, str(root / where), offset)
    # nothing else in the store is blamed: every finding is about this one unit (its record may then lack a right unit)
    assert {x["file"] for x in probs} <= {str(root / where), p.get("cq_file")}


def test_lmq_record_without_its_unit_is_missing_at_the_named_offset(tmp_path):
    root = _writable_copy("rmq53-lmq", tmp_path)
    # unit 1 of %LMQ%order_1 zeroed: a hole in that queue, and the record naming it there has no unit
    path = root / LMQ1
    data = bytearray(path.read_bytes())
    data[20:40] = bytes(20)
    path.write_bytes(bytes(data))
    rc, probs, _ = verify(root)
    assert rc == 1
    assert sorted((p["code"], p["topic"], p["unit_index"]) for p in probs) == [
        ("cq_hole", "%LMQ%order_1", 1),
        ("cq_missing_unit", "%LMQ%order_1", 1),
    ]
    assert verify(root, "-t", "LmqParentTopic")[:2] == (0, [])  # the parent's own queues are whole
    assert [(p["code"], p["unit_index"]) for p in verify(root, "-t", "%LMQ%order_1")[1]] == [("cq_hole", 1), ("cq_missing_unit", 1)]
    miss = next(p for p in probs if p["code"] == "cq_missing_unit")
    assert miss["phys_offset"] == next(x["commitLogOffset"] for x in units_of("rmq53-lmq") if x["topic"] == "%LMQ%order_1" and x["queueOffset"] == 1)
    assert miss["cq_file"] == str(path)


def test_batch_topic_record_without_a_unit_is_missing_in_the_batch_queue(tmp_path):
    root = _writable_copy("rmq53-batchcq", tmp_path)
    qdir = root / "batchconsumequeue" / "BatchTopicBCQ" / "1"
    last = sorted(os.listdir(qdir))[-1]
    data = bytearray((qdir / last).read_bytes())
    n = len(data.rstrip(b"\0")) // 46 * 46 + (46 if len(data.rstrip(b"\0")) % 46 else 0)
    data[n - 46 : n] = bytes(46)  # the queue's last unit gone, as after a crash before it was written
    (qdir / last).write_bytes(bytes(data))
    rc, probs, summary = verify(root)
    last_unit = [x for x in units_of("rmq53-batchcq") if x["topic"] == "BatchTopicBCQ" and x["queueId"] == 1][-1]
    assert rc == 1
    assert [(p["code"], p["unit_index"], p["phys_offset"], p["cq_file"]) for p in probs] == [
        ("cq_missing_unit", last_unit["queueOffset"], last_unit["commitLogOffset"], str(qdir / last))
    ]
    assert summary["units"] == len(units_of("rmq53-batchcq")) - 1


def readme_summary(name: str) -> dict:
    """The driver's summary in the store's README.txt (the broker's own min/max offsets per queue)."""
    text = (store_root(name).parent / "README.txt").read_text()
    block = text.split("Counts / results (summary written by the driver)")[1].split("\n{", 1)[1]
    return json.loads("{" + block.split("\n}\n", 1)[0] + "\n}")


@pytest.mark.parametrize("name", KINDS)
def test_info_lists_every_queue_with_the_brokers_own_offsets(name):
    r = run("info", "-s", store_root(name), "--no-recovery", "-f", "jsonl")
    assert r.exit_code == 0
    got = {f"{x['topic']}/{x['queue_id']}": x for x in jsonl(r.stdout) if x["kind"] == "queue"}
    want = readme_summary(name)["queues"]
    assert sorted(got) == sorted(want)
    for key, w in want.items():
        g = got[key]
        assert (g["min_offset"], g["max_offset"], g["queue_type"]) == (w["minOffset"], w["maxOffset"], w["cqType"])
        assert g["lmq"] == key.startswith("%LMQ%")
        assert g["ext"] == (name == "rmq53-cqext")


def test_cq_verify_reports_a_batch_queue_file_of_the_wrong_size(tmp_path):
    """A Batch ConsumeQueue file one byte longer than its queue's other files: cq verify names it (its layout problem was dropped)."""

    root = tmp_path / "store"
    shutil.copytree(store_root("rmq53-batchcq"), root)
    qdir = root / "batchconsumequeue" / "BatchTopicBCQ" / "0"
    f = sorted(qdir.iterdir())[0]
    size = f.stat().st_size
    with open(f, "ab") as fh:
        fh.write(b"x")
    r = run("cq", "verify", "-s", root, "-f", "jsonl")
    probs = [d for d in jsonl(r.stdout) if d.get("kind") == "problem"]
    assert [(d["code"], d["topic"], d["queue_id"], os.path.basename(d["cq_file"])) for d in probs] == [("cq_file_size", "BatchTopicBCQ", 0, f.name)]
    assert str(size + 1) in probs[0]["detail"] and r.exit_code == 1
