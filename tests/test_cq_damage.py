"""`cq verify` on damaged copies of a real store: each damage with the right code at the exact unit or byte.

Every expected value is derived from the store's manifest (what the broker
returned for each put) and the store's settings; the rest of the store must
still verify clean, which shows the damage does not stop the other checks.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import SETTINGS, copy_store, flip, jsonl, manifest, patch, run

from rmqdump.engines.local import LocalMap
from rmqdump.readers.fastpath import field_offset
from rmqdump.schemas import message_header

NAME = "rmq4-basic"
CQ_FILE = SETTINGS[NAME]["cq_units"] * 20
CL_FILE = SETTINGS[NAME]["commitlog"]
M = manifest(NAME)
DATA_END = max(m["wroteOffset"] + m["wroteBytes"] for m in M)


def rec(topic: str, q: int, qoff: int) -> dict:
    return next(m for m in M if m["topic"] == topic and m["queueId"] == q and m["logicsOffset"] == qoff)


def queue_len(topic: str, q: int) -> int:
    return sum(1 for m in M if m["topic"] == topic and m["queueId"] == q)


def unit_loc(root: Path, topic: str, q: int, idx: int) -> tuple[Path, int]:
    base = idx * 20 // CQ_FILE * CQ_FILE
    return root / "consumequeue" / topic / str(q) / f"{base:020d}", idx * 20 - base


def cl_file(root: Path, phys: int) -> tuple[Path, int]:
    base = phys // CL_FILE * CL_FILE
    return root / "commitlog" / f"{base:020d}", phys - base


def verify(root: Path, *args):
    r = run("cq", "verify", "-s", root, "-f", "jsonl", *args)
    rows = jsonl(r.stdout)
    assert rows[-1]["kind"] == "summary"
    return r.exit_code, [x for x in rows if x["kind"] == "problem"], rows[-1]


def keyset(problems: list[dict]) -> set[tuple]:
    return {(p["code"], p["topic"], p["queue_id"], p["unit_index"], p["phys_offset"]) for p in problems}


@pytest.fixture
def store(tmp_path) -> Path:
    return copy_store(NAME, tmp_path)


def test_flipped_byte_in_unit_offset(store):
    r = rec("TopicTest", 0, 5)
    path, pos = unit_loc(store, "TopicTest", 0, 5)
    flip(path, pos + 7)  # low byte of commitLogOffset
    code, probs, _ = verify(store)
    assert code == 1
    assert keyset(probs) == {
        ("cq_not_message_start", "TopicTest", 0, 5, r["wroteOffset"] ^ 1),
        ("cq_missing_unit", "TopicTest", 0, 5, r["wroteOffset"]),
    }
    bad = next(p for p in probs if p["code"] == "cq_not_message_start")
    assert bad["cq_file"] == str(path) and bad["file_offset"] == pos


def test_flipped_byte_in_unit_size(store):
    r = rec("orders", 2, 130)
    path, pos = unit_loc(store, "orders", 2, 130)
    flip(path, pos + 11, 0x04)  # low byte of size
    code, probs, _ = verify(store)
    assert code == 1
    assert keyset(probs) == {("cq_size_mismatch", "orders", 2, 130, r["wroteOffset"])}
    assert probs[0]["file_offset"] == pos and str(r["wroteBytes"]) in probs[0]["detail"]


def test_flipped_byte_in_unit_tags_code(store):
    r = rec("TopicTest", 3, 200)
    path, pos = unit_loc(store, "TopicTest", 3, 200)
    flip(path, pos + 19, 0x80)  # low byte of tagsCode
    code, probs, _ = verify(store)
    assert code == 1
    assert keyset(probs) == {("cq_tags_code_mismatch", "TopicTest", 3, 200, r["wroteOffset"])}


def test_zeroed_unit_mid_queue_is_a_hole(store):
    r = rec("orders", 1, 7)
    path, pos = unit_loc(store, "orders", 1, 7)
    patch(path, pos, bytes(20))
    code, probs, _ = verify(store)
    assert code == 1
    assert keyset(probs) == {("cq_hole", "orders", 1, 7, None), ("cq_missing_unit", "orders", 1, 7, r["wroteOffset"])}
    hole = next(p for p in probs if p["code"] == "cq_hole")
    assert hole["cq_file"] == str(path) and hole["file_offset"] == pos


def test_deleted_middle_cq_file(store):
    topic, q = "TopicTest", 1
    path, _ = unit_loc(store, topic, q, 120)
    os.remove(path)
    code, probs, _ = verify(store)
    assert code == 1
    holes = [p for p in probs if p["code"] == "cq_hole"]
    assert len(holes) == 1 and holes[0]["unit_index"] == 120 and holes[0]["cq_file"] == str(path)
    missing = [p for p in probs if p["code"] == "cq_missing_unit"]
    assert sorted(p["unit_index"] for p in missing) == list(range(120, 240))
    assert {p["phys_offset"] for p in missing} == {rec(topic, q, i)["wroteOffset"] for i in range(120, 240)}
    assert len(probs) == 1 + 120


def test_truncated_last_cq_file(store):
    topic, q = "TopicTest", 2
    n = queue_len(topic, q)
    last = (n - 1) * 20 // CQ_FILE * CQ_FILE
    path = store / "consumequeue" / topic / str(q) / f"{last:020d}"
    keep_units = 3
    os.truncate(path, keep_units * 20 + 7)
    code, probs, _ = verify(store)
    assert code == 1
    first_lost = last // 20 + keep_units
    size = [p for p in probs if p["code"] == "cq_file_size"]
    assert len(size) == 1 and size[0]["unit_index"] == first_lost and size[0]["file_offset"] == keep_units * 20
    missing = [p for p in probs if p["code"] == "cq_missing_unit"]
    assert sorted(p["unit_index"] for p in missing) == list(range(first_lost, n))
    assert len(probs) == 1 + len(missing)


def test_units_beyond_commitlog_end_are_dangling(store):
    topic, q = "TopicTest", 3
    n = queue_len(topic, q)
    path, pos = unit_loc(store, topic, q, n)  # first unit after the queue's end (zero tail)
    unit = (DATA_END + 4096).to_bytes(8, "big") + (300).to_bytes(4, "big") + (0).to_bytes(8, "big")
    patch(path, pos, unit + unit.replace((DATA_END + 4096).to_bytes(8, "big"), (DATA_END + 8192).to_bytes(8, "big")))
    code, probs, _ = verify(store)
    assert code == 1
    assert keyset(probs) == {("cq_dangling", topic, q, n, DATA_END + 4096), ("cq_dangling", topic, q, n + 1, DATA_END + 8192)}


def test_truncated_commitlog(store):
    last = max(M, key=lambda m: m["wroteOffset"])
    path, pos = cl_file(store, last["wroteOffset"])
    os.truncate(path, pos + 50)
    code, probs, _ = verify(store)
    assert code == 1
    codes = {p["code"] for p in probs}
    assert "commitlog_file_size" in codes
    torn = [p for p in probs if p["code"] in ("record_past_end", "truncated_tail")]
    assert len(torn) == 1 and torn[0]["file_offset"] == pos and torn[0]["phys_offset"] == last["wroteOffset"]
    dangling = [p for p in probs if p["code"] == "cq_dangling"]
    assert [(p["topic"], p["queue_id"], p["unit_index"]) for p in dangling] == [(last["topic"], last["queueId"], last["logicsOffset"])]
    assert len(probs) == 3


def test_bit_flip_in_a_body(store):
    m = next(m for m in M[100:] if m["body_len"] > 10)
    body_at = m["wroteOffset"] + field_offset(message_header(), "body_length") + 4
    path, pos = cl_file(store, body_at + 5)
    flip(path, pos)
    code, probs, _ = verify(store)
    assert code == 1
    assert [(p["code"], p["phys_offset"], p["file_offset"]) for p in probs] == [("body_crc_mismatch", m["wroteOffset"], pos - 5)]  # the body's first byte
    code, probs, summary = verify(store, "--no-crc")
    assert code == 0 and probs == [] and summary["messages"] == len(M)


def test_swapped_units(store):
    topic, q = "orders", 0
    a_path, a_pos = unit_loc(store, topic, q, 10)
    b_path, b_pos = unit_loc(store, topic, q, 11)
    with open(a_path, "rb") as f:
        data = f.read()
    ua, ub = data[a_pos : a_pos + 20], data[b_pos : b_pos + 20]
    patch(a_path, a_pos, ub)
    patch(b_path, b_pos, ua)
    code, probs, _ = verify(store)
    assert code == 1
    r10, r11 = rec(topic, q, 10), rec(topic, q, 11)
    assert keyset(probs) == {
        ("cq_queue_offset_mismatch", topic, q, 10, r11["wroteOffset"]),
        ("cq_queue_offset_mismatch", topic, q, 11, r10["wroteOffset"]),
        ("cq_non_monotonic", topic, q, 11, r10["wroteOffset"]),
    }


def test_wrong_queue_directory(store):
    src = store / "consumequeue" / "orders" / "3"
    src.rename(store / "consumequeue" / "orders" / "9")
    code, probs, summary = verify(store)
    assert code == 1
    n = queue_len("orders", 3)
    wrong = [p for p in probs if p["code"] == "cq_queue_mismatch"]
    assert sorted(p["unit_index"] for p in wrong) == list(range(n)) and {p["queue_id"] for p in wrong} == {9}
    missing = [p for p in probs if p["code"] == "cq_missing_unit"]
    assert {(p["queue_id"], p["unit_index"]) for p in missing} == {(3, i) for i in range(n)}
    assert len(probs) == 2 * n and summary["queues"] == 12


def test_wrong_topic_directory(store):
    (store / "consumequeue" / "TopicTest").rename(store / "consumequeue" / "TopicTestX")
    code, probs, _ = verify(store, "--topic", "TopicTestX", "--queue", "0")
    n = queue_len("TopicTest", 0)
    assert code == 1
    assert [p["unit_index"] for p in probs if p["code"] == "cq_topic_mismatch"] == list(range(n))
    assert {p["code"] for p in probs} == {"cq_topic_mismatch"}


def test_commitlog_file_renamed_to_a_wrong_offset(store):
    wrong = CL_FILE + 20000
    (store / "commitlog" / f"{CL_FILE:020d}").rename(store / "commitlog" / f"{wrong:020d}")
    code, probs, _ = verify(store)
    assert code == 1
    gap = [p for p in probs if p["code"] == "commitlog_gap"]
    assert len(gap) == 1 and gap[0]["phys_offset"] == CL_FILE and gap[0]["file"].endswith(f"{wrong:020d}")
    assert any(p["code"] == "phys_offset_mismatch" and p["file"].endswith(f"{wrong:020d}") for p in probs)
    in_gap = {m["wroteOffset"] for m in M if CL_FILE <= m["wroteOffset"] < wrong}
    out = {p["phys_offset"] for p in probs if p["code"] == "cq_offset_out_of_range"}
    assert out == in_gap
    # units into the files before it are untouched
    assert not any(p["phys_offset"] is not None and p["phys_offset"] < CL_FILE for p in probs if p["code"].startswith("cq_"))


def test_missing_middle_commitlog_file(store):
    base = 3 * CL_FILE
    os.remove(store / "commitlog" / f"{base:020d}")
    code, probs, summary = verify(store)
    assert code == 1
    gap = [p for p in probs if p["code"] == "commitlog_gap"]
    assert len(gap) == 1 and gap[0]["phys_offset"] == base
    lost = [m for m in M if base <= m["wroteOffset"] < base + CL_FILE]
    out = [p for p in probs if p["code"] == "cq_offset_out_of_range"]
    assert {(p["topic"], p["queue_id"], p["unit_index"], p["phys_offset"]) for p in out} == {
        (m["topic"], m["queueId"], m["logicsOffset"], m["wroteOffset"]) for m in lost
    }
    assert len(probs) == 1 + len(lost)
    assert summary["messages"] == len(M) - len(lost)


def test_damaged_record_header_resyncs_and_flags_its_unit(store):
    m = M[1500]
    path, pos = cl_file(store, m["wroteOffset"])
    flip(path, pos + 4, 0xFF)  # magic
    code, probs, _ = verify(store)
    assert code == 1
    bad = [p for p in probs if p["code"] == "bad_magic"]
    assert len(bad) == 1 and bad[0]["phys_offset"] == m["wroteOffset"] and bad[0]["file_offset"] == pos
    assert keyset([p for p in probs if p["code"].startswith("cq_")]) == {
        ("cq_not_message_start", m["topic"], m["queueId"], m["logicsOffset"], m["wroteOffset"])
    }
    assert len(probs) == 2


def test_filler_units_are_padding_not_damage(store):
    topic, q = "orders", 0
    path, _ = unit_loc(store, topic, q, 0)
    filler = (0).to_bytes(8, "big") + (0x7FFFFFFF).to_bytes(4, "big") + (0).to_bytes(8, "big")
    patch(path, 0, filler * 4)
    code, probs, _ = verify(store)
    assert code == 1
    # the padding itself is fine; the four records it replaced have lost their units
    assert keyset(probs) == {("cq_missing_unit", topic, q, i, rec(topic, q, i)["wroteOffset"]) for i in range(4)}


def test_windowed_join_gives_the_same_findings(store):
    """Memory is bounded by joining a window of records at a time; the findings must not depend on it."""
    from rmqdump.checks.cqverify import verify as verify_lib
    from rmqdump.readers.store import Store

    # several kinds of damage at once
    a_path, a_pos = unit_loc(store, "orders", 0, 10)
    with open(a_path, "rb") as f:
        data = f.read()
    patch(a_path, a_pos, data[a_pos + 20 : a_pos + 40] + data[a_pos : a_pos + 20])
    path, pos = unit_loc(store, "orders", 1, 7)
    patch(path, pos, bytes(20))
    os.remove(store / "commitlog" / f"{3 * CL_FILE:020d}")
    n = queue_len("TopicTest", 3)
    path, pos = unit_loc(store, "TopicTest", 3, n)
    patch(path, pos, (DATA_END + 4096).to_bytes(8, "big") + (300).to_bytes(4, "big") + bytes(8))
    last = max(M, key=lambda m: m["wroteOffset"])
    path, pos = cl_file(store, last["wroteOffset"])
    os.truncate(path, pos + 50)

    def findings(window: int, workers: int = 1) -> list[tuple]:
        got = [
            (p.code, p.extra.get("topic"), p.extra.get("queue_id"), p.extra.get("unit_index"), p.phys_offset, p.file_offset)
            for p in verify_lib(Store.open(store), window_records=window, mapper=LocalMap(workers))
        ]
        return sorted(got, key=repr)

    whole = findings(1 << 40)
    assert {c for c, *_ in whole} >= {
        "cq_queue_offset_mismatch",
        "cq_non_monotonic",
        "cq_hole",
        "cq_missing_unit",
        "commitlog_gap",
        "cq_offset_out_of_range",
        "cq_dangling",
    }
    for w in (1, 97, 1000, len(M) - 1, len(M)):
        assert findings(w) == whole, w
    assert findings(1 << 40, workers=2) == whole  # files scanned by two processes
    assert findings(500, workers=2) == whole
    r = run("cq", "verify", "-s", store, "-f", "jsonl", "--window", "500")
    assert r.exit_code == 1 and jsonl(r.stdout)[-1]["problems"] == len(whole)
