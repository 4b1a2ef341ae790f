"""Every problem code is produced by a damaged copy of a real store, at the exact place of the damage.

Each test damages one thing in a copy of a store written by RocketMQ's own code (fixtures/real), runs the
command an operator would, and asserts the code and where it points: the file, the byte offset in it and
the physical offset / entry / slot, all derived from the manifest or the broker's own files. At the end of a
whole run, tests/codes.py keeps the list honest: a code documented in the README or declared in the code must
be produced here or by another test, so a code no input can produce cannot stay.
"""

from __future__ import annotations

import os
import re
import shutil
import struct
from collections import namedtuple
from pathlib import Path

import pytest
from codes import declared_codes, produces, readme_codes
from conftest import ROOT, SETTINGS, copy_store, flip, jsonl, manifest, patch, run

from rmqdump.readers.fastpath import field_offset
from rmqdump.schemas import IndexEntry, IndexHeader, message_header

HEADER = message_header()
def _seg(store: str, root: Path, phys: int) -> tuple[Path, int]:
    size = SETTINGS[store]["commitlog"]
    base = phys // size * size
    return root / "commitlog" / f"{base:020d}", base


def _problems(res) -> list[dict]:
    return [x for x in jsonl(res.stdout) if x.get("kind") == "problem"]


def _where(p: dict) -> tuple:
    return p["code"], p["file"], p["file_offset"], p["phys_offset"]


def _file_records(store: str, base: int) -> list[dict]:
    size = SETTINGS[store]["commitlog"]
    return sorted((x for x in manifest(store) if base <= x["wroteOffset"] < base + size), key=lambda x: x["wroteOffset"])


# --- CommitLog records and files: `rmqdump commitlog` -------------------------------------------------


@produces("bad_blank_marker")
def test_bad_blank_marker(tmp_path):
    root = copy_store("rmq4-basic", tmp_path)
    path, base = _seg("rmq4-basic", root, 0)
    recs = _file_records("rmq4-basic", base)
    at = recs[-1]["wroteOffset"] + recs[-1]["wroteBytes"] - base  # the BLANK marker after the file's last record
    patch(path, at, (SETTINGS["rmq4-basic"]["commitlog"] - at - 4).to_bytes(4, "big"))
    res = run("commitlog", path, "-f", "jsonl")
    assert res.exit_code == 1
    assert [_where(p) for p in _problems(res)] == [("bad_blank_marker", str(path), at, base + at)]


@produces("bad_total_size")
def test_bad_total_size(tmp_path):
    root = copy_store("rmq4-basic", tmp_path)
    path, base = _seg("rmq4-basic", root, 131072)
    recs = _file_records("rmq4-basic", base)
    victim, nxt = recs[10], recs[11]
    patch(path, victim["wroteOffset"] - base, (50).to_bytes(4, "big"))  # smaller than the bare header
    res = run("commitlog", path, "-f", "jsonl")
    probs = _problems(res)
    assert [_where(p) for p in probs] == [("bad_total_size", str(path), victim["wroteOffset"] - base, victim["wroteOffset"])]
    assert probs[0]["skipped"] == victim["wroteBytes"]  # resynced at the next record
    listed = [x["phys_offset"] for x in jsonl(res.stdout) if x["kind"] == "message"]
    assert listed == [x["wroteOffset"] for x in recs if x is not victim] and nxt["wroteOffset"] in listed


@produces("truncated_tail")
def test_truncated_tail(tmp_path):
    """A CommitLog file cut short by a copy, 5 bytes into its BLANK marker (totalSize and one magic byte)."""
    root = copy_store("rmq4-basic", tmp_path)
    path, base = _seg("rmq4-basic", root, 131072)
    recs = _file_records("rmq4-basic", base)
    end = recs[-1]["wroteOffset"] + recs[-1]["wroteBytes"] - base
    os.truncate(path, end + 5)
    res = run("commitlog", path, "-f", "jsonl")
    assert res.exit_code == 1
    assert [_where(p) for p in _problems(res)] == [("truncated_tail", str(path), end, base + end)]
    assert sum(1 for x in jsonl(res.stdout) if x["kind"] == "message") == len(recs)


@produces("commitlog_overlap", "commitlog_gap")
def test_commitlog_overlap_and_gap(tmp_path):
    """A file renamed to an offset inside the previous file: it overlaps that one and leaves a gap before the next."""
    root = copy_store("rmq4-basic", tmp_path)
    size = SETTINGS["rmq4-basic"]["commitlog"]
    moved = root / "commitlog" / f"{2 * size - 1000:020d}"
    os.rename(root / "commitlog" / f"{2 * size:020d}", moved)
    res = run("commitlog", root / "commitlog", "-f", "jsonl", "--limit", 1)
    probs = [_where(p) for p in _problems(res) if p["code"].startswith("commitlog_")]
    assert probs == [
        ("commitlog_overlap", str(moved), 0, 2 * size - 1000),
        ("commitlog_gap", str(root / "commitlog" / f"{3 * size:020d}"), 0, 3 * size - 1000),
    ]


@produces("decompress_failed", "body_crc_mismatch")
def test_decompress_failed(tmp_path):
    """A zlib-compressed body whose first byte is damaged: the CRC check and the decompression both fail there."""
    store = "rmq4-flags"
    root = copy_store(store, tmp_path)
    victim = next(x for x in manifest(store) if x["sysFlag"] & 0x701 == 0x1)  # COMPRESSED, zlib
    path, base = _seg(store, root, victim["wroteOffset"])
    body_at = victim["wroteOffset"] - base + HEADER.sizeof()
    flip(path, body_at, 0xFF)
    res = run("commitlog", path, "-f", "jsonl", "--body", "base64", "--decompress")
    assert res.exit_code == 1
    assert sorted(_where(p) for p in _problems(res)) == [
        ("body_crc_mismatch", str(path), body_at, victim["wroteOffset"]),
        ("decompress_failed", str(path), body_at, victim["wroteOffset"]),
    ]


# --- rebuild: messages that cannot get a unit, and where it refuses to write ---------------------------


def _rebuild(root: Path, out: Path, *extra) -> tuple[int, list[dict]]:
    res = run("rebuild", root, "--out", out, "--only", "consumequeue", "--no-verify", "-f", "jsonl", *extra)
    return res.exit_code, _problems(res)


def _patch_queue_offset(root: Path, store: str, rec: dict, value: int) -> None:
    path, base = _seg(store, root, rec["wroteOffset"])
    patch(path, rec["wroteOffset"] - base + field_offset(HEADER, "queue_offset"), value.to_bytes(8, "big", signed=True))


def _queue(store: str, topic: str, qid: int) -> list[dict]:
    return sorted((x for x in manifest(store) if x["topic"] == topic and x["queueId"] == qid), key=lambda x: x["logicsOffset"])


def _cq_file(out: Path, topic: str, qid: int, queue_offset: int, units: int) -> str:
    return str(out / "consumequeue" / topic / str(qid) / f"{queue_offset // units * units * 20:020d}")


@produces("cq_duplicate_queue_offset", "cq_queue_offset_gap")
def test_cq_duplicate_queue_offset(tmp_path):
    """A message whose queueOffset field repeats its predecessor's: the first keeps the unit, its own offset is a gap."""
    store = "rmq4-basic"
    root = copy_store(store, tmp_path)
    q = _queue(store, "orders", 1)
    victim = q[50]
    _patch_queue_offset(root, store, victim, victim["logicsOffset"] - 1)
    out = tmp_path / "out"
    code, probs = _rebuild(root, out)
    units = SETTINGS[store]["cq_units"]
    assert code == 1
    got = {p["code"]: p for p in probs}
    assert set(got) == {"cq_duplicate_queue_offset", "cq_queue_offset_gap"}
    dup, gap = got["cq_duplicate_queue_offset"], got["cq_queue_offset_gap"]
    assert (dup["file"], dup["phys_offset"], dup["topic"], dup["queue_id"], dup["messages"]) == (
        _cq_file(out, "orders", 1, victim["logicsOffset"] - 1, units),
        victim["wroteOffset"],
        "orders",
        1,
        1,
    )
    # the gap is at the victim's own queue offset; the next message is the one that follows it
    assert (gap["file"], gap["file_offset"], gap["phys_offset"], gap["units"]) == (
        _cq_file(out, "orders", 1, victim["logicsOffset"], units),
        victim["logicsOffset"] % units * 20,
        q[51]["wroteOffset"],
        1,
    )


@produces("cq_bad_queue_offset")
def test_cq_bad_queue_offset(tmp_path):
    store = "rmq4-basic"
    root = copy_store(store, tmp_path)
    q = _queue(store, "TopicTest", 2)
    victim = q[-1]  # the queue's last message: no gap after it
    _patch_queue_offset(root, store, victim, -1)
    out = tmp_path / "out"
    code, probs = _rebuild(root, out)
    assert code == 1
    assert [(p["code"], p["file"], p["phys_offset"]) for p in probs] == [
        ("cq_bad_queue_offset", _cq_file(out, "TopicTest", 2, 0, SETTINGS[store]["cq_units"]), victim["wroteOffset"])
    ]


@produces("cq_unsafe_topic_name")
def test_cq_unsafe_topic_name(tmp_path):
    """A topic name with a '/' (same length as the real one): it cannot be a directory, its message gets no unit."""
    store = "rmq4-basic"
    root = copy_store(store, tmp_path)
    victim = _queue(store, "orders", 0)[-1]
    path, base = _seg(store, root, victim["wroteOffset"])
    data = path.read_bytes()
    rec_at = victim["wroteOffset"] - base
    body_len = int.from_bytes(data[rec_at + field_offset(HEADER, "body_length") : rec_at + HEADER.sizeof()], "big")
    topic_at = rec_at + HEADER.sizeof() + body_len + 1
    assert data[topic_at : topic_at + 6] == b"orders"
    patch(path, topic_at, b"or/ers")
    out = tmp_path / "out"
    code, probs = _rebuild(root, out)
    assert code == 1
    assert [(p["code"], p["file"], p["phys_offset"]) for p in probs] == [("cq_unsafe_topic_name", str(out / "consumequeue"), victim["wroteOffset"])]
    assert not (out / "consumequeue" / "or").exists()


@produces("output_not_directory")
def test_output_not_directory(tmp_path):
    target = tmp_path / "a-file"
    target.write_bytes(b"x")
    res = run("rebuild", ROOT / "fixtures" / "real" / "rmq4-basic" / "store", "--out", target)
    assert res.exit_code == 2
    assert res.stderr.strip().splitlines() == [f"rmqdump: output_not_directory: {target}: exists and is not a directory"]
    assert target.read_bytes() == b"x"


# --- index verify: header, entries ---------------------------------------------------------------------


def _put(path: str, offset: int, value: int, width: int = 4) -> None:
    patch(Path(path), offset, value.to_bytes(width, "big", signed=True))


def _iverify(root: Path) -> list[dict]:
    res = run("index", "verify", "--store", root, "-f", "jsonl")
    return [x for x in jsonl(res.stdout) if x["kind"] == "problem"]


def _at(p: dict) -> tuple:
    return p["code"], p["file"], p["file_offset"], p["entry"], p["slot"], p["phys_offset"]


def _missing(problems: list[dict]) -> set[int]:
    return {p["phys_offset"] for p in problems if p["code"] == "index_missing_entry"}


IDX_HEADER = struct.Struct(
    ">qqqqii"
)  # beginTimestamp, endTimestamp, beginPhyOffset, endPhyOffset, hashSlotCount, indexCount (IndexHeader.INDEX_HEADER_SIZE 40)
IDX_ENTRY = struct.Struct(">iqii")  # keyHash, phyOffset, timeDiff, slotValue: the previous entry of the chain (IndexFile.indexSize 20)
Entry = namedtuple("Entry", "key_hash phys_offset time_diff prev_index")


def _index_files(root: Path) -> list[str]:
    """The store's index files in the broker's order: named by their creation time (yyyyMMddHHmmssSSS)."""
    return sorted(str(p) for p in (Path(root) / "index").iterdir() if p.name.isdigit())


class _Index:
    """An index file read here with struct (the broker's layout: header, hashSlotNum 4-byte slots, 20-byte entries)."""

    def __init__(self, path: str, slots: int = SETTINGS["rmq4-basic"]["hash_slots"]):
        self.data = Path(path).read_bytes()
        self.begin_timestamp, self.end_timestamp, self.begin_phy_offset, self.end_phy_offset, self.hash_slot_count, self.count = IDX_HEADER.unpack_from(
            self.data
        )
        self.slots = slots

    def entry_offset(self, k: int) -> int:
        return IDX_HEADER.size + 4 * self.slots + k * IDX_ENTRY.size

    def step(self, k: int) -> Entry:
        return Entry(*IDX_ENTRY.unpack_from(self.data, self.entry_offset(k)))

    def slot_of(self, key_hash: int) -> int:
        return key_hash % self.slots  # the broker's slotPos (keyHash is already abs(hashCode))

    def last_written(self) -> int:
        """The last entry the broker wrote: indexCount counts entry 0, which is never used."""
        assert any(self.data[self.entry_offset(self.count - 1) : self.entry_offset(self.count)]) and not any(self.data[self.entry_offset(self.count) :])
        return self.count - 1


@pytest.fixture
def index_copy(tmp_path):
    root = copy_store("rmq4-basic", tmp_path)
    return root, _index_files(root)[1]


@produces("index_header_slot_count")
def test_index_header_slot_count(index_copy):
    root, path = index_copy
    n = _Index(path).hash_slot_count
    _put(path, field_offset(IndexHeader, "hash_slot_count"), n + 1)
    assert [_at(p) for p in _iverify(root)] == [("index_header_slot_count", path, 0, None, None, None)]


@produces("index_header_begin")
def test_index_header_begin(index_copy):
    root, path = index_copy
    f = _Index(path)
    first, at1 = f.step(1), f.entry_offset(1)
    begin = f.begin_timestamp
    _put(path, field_offset(IndexHeader, "begin_timestamp"), begin - 5000, 8)
    probs = _iverify(root)
    assert [_at(p) for p in probs if p["code"] == "index_header_begin"] == [("index_header_begin", path, at1, 1, None, first.phys_offset)]


@produces("index_header_end")
def test_index_header_end(index_copy):
    root, path = index_copy
    f = _Index(path)
    last = f.last_written()
    final, at = f.step(last), f.entry_offset(last)
    end = f.end_timestamp
    _put(path, field_offset(IndexHeader, "end_timestamp"), end + 1, 8)
    assert [_at(p) for p in _iverify(root)] == [("index_header_end", path, at, last, None, final.phys_offset)]


@produces("index_entry0_written")
def test_index_entry0_written(index_copy):
    root, path = index_copy
    at0 = _Index(path).entry_offset(0)
    _put(path, at0 + field_offset(IndexEntry, "phys_offset"), 1000, 8)
    assert [_at(p) for p in _iverify(root)] == [("index_entry0_written", path, at0, 0, None, None)]


@produces("index_entry_bad_time")
def test_index_entry_bad_time(index_copy):
    """Entry 1 (whose timeDiff the broker counts from the previous file's end, so no store time is expected) made negative."""
    root, path = index_copy
    f = _Index(path)
    at1, phys = f.entry_offset(1), f.step(1).phys_offset
    _put(path, at1 + field_offset(IndexEntry, "time_diff"), -3)
    assert [_at(p) for p in _iverify(root)] == [("index_entry_bad_time", path, at1, 1, None, phys)]


@produces("index_entry_empty")
def test_index_entry_empty(index_copy):
    """An entry inside the written range zeroed: reported there; its key is then missing for its message."""
    root, path = index_copy
    f = _Index(path)
    k = f.count // 2
    at, phys = f.entry_offset(k), f.step(k).phys_offset
    patch(Path(path), at, bytes(IndexEntry.sizeof()))
    probs = _iverify(root)
    assert [_at(p) for p in probs if p["code"] == "index_entry_empty"] == [("index_entry_empty", path, at, k, None, None)]
    assert phys in _missing(probs)


@produces("index_entry_bad_hash")
def test_index_entry_bad_hash(index_copy):
    root, path = index_copy
    f = _Index(path)
    k = f.count // 3
    e = f.step(k)
    at = f.entry_offset(k)
    _put(path, at + field_offset(IndexEntry, "key_hash"), -e.key_hash)
    probs = _iverify(root)
    assert [_at(p) for p in probs if p["code"] == "index_entry_bad_hash"] == [("index_entry_bad_hash", path, at, k, None, e.phys_offset)]
    assert e.phys_offset in _missing(probs)


@produces("index_entry_key_mismatch")
def test_index_entry_key_mismatch(index_copy):
    """A keyHash changed to another hash of the same slot (the chains stay whole): no key of the record has it."""
    root, path = index_copy
    f = _Index(path)
    slots = f.slots
    k = next(k for k in range(f.count // 2, f.count) if f.step(k).key_hash + slots < 2**31)
    e = f.step(k)
    at = f.entry_offset(k)
    _put(path, at + field_offset(IndexEntry, "key_hash"), e.key_hash + slots)
    probs = _iverify(root)
    assert [_at(p) for p in probs if p["code"] != "index_missing_entry"] == [("index_entry_key_mismatch", path, at, k, None, e.phys_offset)]
    assert _missing(probs) == {e.phys_offset}


@produces("index_duplicate_entry")
def test_index_duplicate_entry(index_copy):
    """An entry overwritten with an older entry of the same slot (key, offset, time; its link kept): the key is
    indexed twice, reported at the later entry, and the overwritten key is missing."""
    root, path = index_copy
    f = _Index(path)
    slot_of = f.slot_of
    last = f.last_written()
    k, j = next(
        (k, j)
        for k in range(last - 1, 1, -1)
        for j in [f.step(k).prev_index]
        if j > 0 and slot_of(f.step(j).key_hash) == slot_of(f.step(k).key_hash) and f.step(j).phys_offset != f.step(k).phys_offset
    )
    ek, ej = f.step(k), f.step(j)
    at = f.entry_offset(k)
    _put(path, at + field_offset(IndexEntry, "key_hash"), ej.key_hash)
    _put(path, at + field_offset(IndexEntry, "phys_offset"), ej.phys_offset, 8)
    _put(path, at + field_offset(IndexEntry, "time_diff"), ej.time_diff)
    probs = _iverify(root)
    assert [_at(p) for p in probs if p["code"] != "index_missing_entry"] == [("index_duplicate_entry", path, at, k, None, ej.phys_offset)]
    assert _missing(probs) == {ek.phys_offset}


@produces("index_file_order")
def test_index_file_order(tmp_path):
    """Two index files' names swapped: the older contents now come later and begin before their predecessor ends."""
    root = copy_store("rmq4-basic", tmp_path)
    files = _index_files(root)
    a, b = files[1], files[2]
    os.rename(a, a + ".x")
    os.rename(b, a)
    os.rename(a + ".x", b)
    at1, begin = _Index(b).entry_offset(1), _Index(b).begin_phy_offset
    prev_end = _Index(a).end_phy_offset
    probs = _iverify(root)
    assert [_at(p) for p in probs] == [("index_file_order", b, at1, 1, None, None)]
    assert f"begins at phyOffset {begin}, before the previous file {os.path.basename(a)} ends ({prev_end})" in probs[0]["detail"]


@produces("index_layout_unknown")
def test_index_layout_unknown(tmp_path):
    """Every index file's slot table zeroed: no sizing makes the entries hang from slots, so the sizing must be given."""
    root = copy_store("rmq4-basic", tmp_path)
    files = _index_files(root)
    for p in files:
        patch(Path(p), IndexHeader.sizeof(), bytes(4 * SETTINGS["rmq4-basic"]["hash_slots"]))
    res = run("index", "verify", "--store", root, "-f", "jsonl")
    assert res.exit_code == 2
    line = res.stderr.strip().splitlines()
    assert len(line) == 1 and line[0].startswith(f"rmqdump: index_layout_unknown: {files[0]}: ") and "--hash-slots" in line[0]
    given = run("index", "verify", "--store", root, "-f", "jsonl", "--hash-slots", 500, "--index-entries", 2000)
    assert given.exit_code == 1 and "index_layout_unknown" not in given.stderr


# --- reading one record where a unit, an index entry or a seek points ----------------------------------


@produces("not_a_message", "cq_offset_out_of_range")
def test_units_pointing_at_a_blank_marker_and_past_the_commitlog(tmp_path):
    """Two ConsumeQueue units re-pointed: one at a file's BLANK marker, one past the last CommitLog file."""
    store = "rmq4-basic"
    root = copy_store(store, tmp_path)
    _, base = _seg(store, root, 0)
    recs = _file_records(store, base)
    blank = recs[-1]["wroteOffset"] + recs[-1]["wroteBytes"]
    cq = root / "consumequeue" / "orders" / "1" / f"{0:020d}"
    patch(cq, 0, blank.to_bytes(8, "big"))
    patch(cq, 20, (10**9).to_bytes(8, "big"))
    res = run("cq", "dump", "-s", root, "--topic", "orders", "--queue", 1, "--limit", 2, "--resolve", "-f", "jsonl")
    units = [x for x in jsonl(res.stdout) if x["kind"] == "unit"]
    assert [(u["unit_index"], u["cq_file"], u["file_offset"], u["phys_offset"], u["record"]["code"]) for u in units] == [
        (0, str(cq), 0, blank, "not_a_message"),
        (1, str(cq), 20, 10**9, "cq_offset_out_of_range"),
    ]
    last = max((root / "commitlog").iterdir())
    end = int(last.name) + last.stat().st_size
    assert units[1]["record"]["detail"] == f"offset {10**9} is in no CommitLog file (they hold 0..{end})"


@produces("offset_out_of_range")
def test_index_entry_past_the_commitlog(tmp_path):
    """The entry that indexes orders#k1_0 re-pointed past the CommitLog: the lookup names that entry and why it is unreadable."""
    store = "rmq4-basic"
    root = copy_store(store, tmp_path)
    want = next(x for x in manifest(store) if x["topic"] == "orders" and "k1_0" in x["keys"])
    hit = None
    for path in _index_files(root):
        f = _Index(path)
        for k in range(1, f.count):
            if f.step(k).phys_offset == want["wroteOffset"] and f.step(k).key_hash == abs(_java_hash("orders#k1_0")):
                hit = (path, k, f.entry_offset(k))
    path, k, at = hit
    _put(path, at + field_offset(IndexEntry, "phys_offset"), 10**9, 8)
    res = run("index", "lookup", "k1_0", "-s", root, "--topic", "orders", "--explain", "-f", "jsonl")
    assert res.exit_code == 1
    cands = [c for x in jsonl(res.stdout) if x["kind"] == "explain" for c in x["candidates"]]
    assert [(c["index_file"], c["entry"], c["phys_offset"], c["verdict"], c["detail"].split(":")[0]) for c in cands] == [
        (os.path.basename(path), k, 10**9, "unreadable", "offset_out_of_range")
    ]


def _java_hash(s: str) -> int:
    h = 0
    for ch in s.encode("utf-16-be").decode("utf-16-be"):
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


@produces("seek_record_unreadable")
def test_seek_through_a_zeroed_commitlog(tmp_path):
    """Every CommitLog file zeroed: the first record the seek reads is named, at its file and byte offset, with exit 2."""
    store = "rmq4-basic"
    root = copy_store(store, tmp_path)
    for p in (root / "commitlog").iterdir():
        patch(p, 0, bytes(p.stat().st_size))
    res = run("cq", "seek", "-s", root, "--topic", "orders", "--queue", 1, "--time", "2026-11-21T23:55:52.5Z")
    assert res.exit_code == 2
    (line,) = res.stderr.strip().splitlines()
    m = re.match(r"rmqdump: seek_record_unreadable: (\S+)@(\d+): unit (\d+) points at (\d+): ", line)
    assert m, line
    file, off, unit, phys = m.group(1), int(m.group(2)), int(m.group(3)), int(m.group(4))
    rec = next(x for x in manifest(store) if (x["topic"], x["queueId"], x["logicsOffset"]) == ("orders", 1, unit))
    path, base = _seg(store, root, rec["wroteOffset"])
    assert (file, off, phys) == (str(path), rec["wroteOffset"] - base, rec["wroteOffset"])


# --- store layout and settings -------------------------------------------------------------------------


@produces("index_file_short")
def test_index_file_short(tmp_path):
    root = copy_store("rmq4-basic", tmp_path)
    path = _index_files(root)[-1]
    os.truncate(path, 20)
    res = run("info", "-s", root, "-f", "jsonl", "--no-recovery")
    assert res.exit_code == 1
    assert [_where(p) for p in _problems(res)] == [("index_file_short", path, 20, None)]


@produces("no_topics")
def test_no_topics(tmp_path):
    """consumequeue/ and config/topics.json lost: a lookup cannot tell which topics to hash the key with."""
    root = copy_store("rmq4-basic", tmp_path)
    shutil.rmtree(root / "consumequeue")
    os.unlink(root / "config" / "topics.json")
    res = run("index", "lookup", "k1_0", "-s", root)
    assert res.exit_code == 2
    assert res.stderr.strip().splitlines() == [
        f"rmqdump: no_topics: {root}: the store names no topics (no consumequeue/ directories, no config/topics.json, no records): pass --topic"
    ]
    assert run("index", "lookup", "k1_0", "-s", root, "--topic", "orders").exit_code == 0


@produces("unreadable")
def test_unreadable_input(tmp_path):
    fifo = tmp_path / "00000000000000000000"
    os.mkfifo(fifo)
    res = run("commitlog", fifo)
    assert res.exit_code == 2
    assert res.stderr.strip().splitlines() == [f"rmqdump: unreadable: {fifo}: not a regular file or directory"]


@produces("bad_broker_conf", "bad_setting")
@pytest.mark.parametrize(
    ("conf", "code", "where"),
    [
        ("maxHashSlotNum=many\n", "bad_broker_conf", "broker.conf"),
        ("maxIndexNum=-5\n", "bad_broker_conf", "broker.conf"),
        ("maxIndexNum=1\n", "bad_setting", "index_entries"),
        ("maxHashSlotNum=5000000\nmaxIndexNum=200000000\n", "bad_setting", "index"),
        ("messageDelayLevel=1s 5x\n", "bad_broker_conf", "broker.conf"),
    ],
)
def test_bad_broker_conf_and_settings(tmp_path, conf, code, where):
    cfg = tmp_path / "broker.conf"
    cfg.write_text(conf)
    root = copy_store("rmq4-basic", tmp_path)
    shutil.rmtree(root / "index")  # no index files to infer the index sizing from: the conf's values are taken
    out = tmp_path / "out"
    res = run("rebuild", root, "--out", out, "--broker-conf", cfg)
    assert res.exit_code == 2 and not out.exists()
    (line,) = res.stderr.strip().splitlines()
    assert line.startswith(f"rmqdump: {code}: {cfg if where == 'broker.conf' else where}: ")


@produces("bad_delay_levels")
def test_bad_delay_levels(tmp_path):
    res = run("rebuild", ROOT / "fixtures" / "real" / "rmq4-basic" / "store", "--out", tmp_path / "out", "--delay-levels", "1s 5x")
    assert res.exit_code == 2
    assert res.stderr.strip().splitlines()[0].startswith("rmqdump: bad_delay_levels: --delay-levels: ")


# --- the list is complete (tests/codes.py checks it when the whole run ends) ----------------------------------


def test_declared_codes_include_the_engines_and_the_readme():
    assert {"spark_unsupported", "bad_spark_conf", "executor_module_missing"} <= declared_codes()
    assert {"bad_magic", "cq_hole"} <= readme_codes()
