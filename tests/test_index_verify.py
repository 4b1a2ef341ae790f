"""index verify on the real stores, and on damaged copies: each damage reported at the exact entry."""

from __future__ import annotations

import json
import os

import pytest
from conftest import HEALTHY, REAL, copy_store, jsonl, manifest, run, store_root

from rmqdump.checks import indexverify as iv
from rmqdump.checks.indexverify import IndexVerifySummary, verify
from rmqdump.engines.local import LocalMap
from rmqdump.readers.fastpath import field_offset
from rmqdump.readers.indexfile import IndexFile, list_index_files
from rmqdump.schemas import IndexEntry, IndexHeader

ROLLBACK = 0xC


def _keys(m: dict) -> list[str]:
    return [k for k in m["keys"] if k] + ([m["uniqKey"]] if m.get("uniqKey") else [])


def _indexed_key_count(store: str) -> int:
    return sum(len(_keys(m)) for m in manifest(store) if (m["sysFlag"] & ROLLBACK) != ROLLBACK)


def _verify(root) -> tuple[list[dict], dict]:
    r = run("index", "verify", "--store", root, "-f", "jsonl")
    out = jsonl(r.stdout)
    assert out[-1]["kind"] == "summary"
    assert r.exit_code == (1 if out[-1]["problems"] else 0), r.stderr
    return out[:-1], out[-1]


@pytest.mark.parametrize("store", HEALTHY)
def test_healthy_stores_have_no_problems(store):
    problems, summary = _verify(store_root(store))
    assert problems == []
    assert summary["messages"] == len(manifest(store))
    assert summary["indexed_keys"] == summary["entries"] == _indexed_key_count(store)
    assert summary["index_files"] == len(list_index_files(store_root(store)))


def test_recovered_store_duplicate_is_not_damage():
    """After the broker's abnormal recovery, one message is indexed twice (store-format.md): not a problem."""
    root = REAL / "rmq4-crash" / "recovered"
    problems, summary = _verify(root)
    assert problems == []
    assert summary["entries"] == summary["indexed_keys"] + 3  # the recovery's duplicate entries (README)


def test_crashed_store_reports_exactly_the_undispatched_messages():
    store = "rmq4-crash"
    dispatched = set(json.loads((REAL / store / "crash.json").read_text())["dispatchedSeqs"])
    want = {m["wroteOffset"]: m for m in manifest(store) if m["seq"] not in dispatched and _keys(m)}
    problems, summary = _verify(store_root(store))
    missing = [p for p in problems if p["code"] == "index_missing_entry"]
    assert {p["phys_offset"] for p in missing} == set(want)
    for p in missing:
        m = want[p["phys_offset"]]
        assert sorted(p["keys"]) == sorted(f"{m['topic']}#{k}" for k in _keys(m))
    behind = [p for p in problems if p["code"] == "index_behind"]
    assert len(behind) == 1 and "abort" in behind[0]["detail"]
    assert len(problems) == len(missing) + 1
    assert summary["entries"] == sum(len(_keys(m)) for m in manifest(store) if m["seq"] in dispatched)


def _put(path: str, offset: int, value: int, width: int = 4) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(value.to_bytes(width, "big", signed=True))


def _codes(problems: list[dict]) -> dict[str, int]:
    out: dict[str, int] = {}
    for p in problems:
        out[p["code"]] = out.get(p["code"], 0) + 1
    return out


def test_broken_chain(tmp_path):
    root = copy_store("rmq4-basic", tmp_path)
    path = list_index_files(root)[1]
    with IndexFile(path) as f:
        k = next(k for k in range(f.count - 1, 1, -1) if f.step(k).prev_index > 0)
        old_prev = f.step(k).prev_index
        other = next(q for q in range(1, k) if f.slot_of(f.step(q).key_hash) != f.slot_of(f.step(k).key_hash))
        at = f.entry_offset(k) + field_offset(IndexEntry, "prev_index")
    _put(path, at, other)
    problems, _ = _verify(root)
    assert _codes(problems) == {"index_chain_broken": 1, "index_entry_unreachable": 1}
    broken = next(p for p in problems if p["code"] == "index_chain_broken")
    assert (broken["index_file"], broken["entry"], broken["file_offset"]) == (path.rsplit("/", 1)[1], k, at - field_offset(IndexEntry, "prev_index"))
    cut = next(p for p in problems if p["code"] == "index_entry_unreachable")
    assert cut["entry"] == old_prev  # the rest of the chain, cut off below the broken link


def test_slot_past_the_count(tmp_path):
    root = copy_store("rmq4-basic", tmp_path)
    path = list_index_files(root)[-1]
    with IndexFile(path) as f:
        slot = int(f.used_slots()[10])
        head = int(f.slots[slot])
        bad = f.header.index_count + 5
        at = f.slot_offset(slot)
    _put(path, at, bad)
    problems, _ = _verify(root)
    assert _codes(problems) == {"index_slot_past_count": 1, "index_entry_unreachable": 1}
    p = next(p for p in problems if p["code"] == "index_slot_past_count")
    assert (p["slot"], p["entry"], p["file_offset"]) == (slot, bad, at)
    assert next(p for p in problems if p["code"] == "index_entry_unreachable")["entry"] == head


def test_entry_into_the_middle_of_a_record(tmp_path):
    root = copy_store("rmq53-v2", tmp_path)
    path = list_index_files(root)[0]
    with IndexFile(path) as f:
        k = 777
        phys = f.step(k).phys_offset
        at = f.entry_offset(k) + field_offset(IndexEntry, "phys_offset")
    _put(path, at, phys + 7, 8)
    problems, _ = _verify(root)
    assert _codes(problems) == {"index_entry_not_record": 1, "index_missing_entry": 1}
    p = next(p for p in problems if p["code"] == "index_entry_not_record")
    assert (p["entry"], p["phys_offset"]) == (k, phys + 7) and f"middle of the record at {phys}" in p["detail"]
    # The key that entry held is now missing for its message.
    assert next(p for p in problems if p["code"] == "index_missing_entry")["phys_offset"] == phys


@pytest.mark.parametrize("delta", [-100, +50])
def test_wrong_header_count(tmp_path, delta):
    root = copy_store("rmq4-basic", tmp_path)
    path = list_index_files(root)[-1]
    with IndexFile(path) as f:
        count = f.header.index_count
    _put(path, field_offset(IndexHeader, "index_count"), count + delta)
    problems, _ = _verify(root)
    assert _codes(problems) == {"index_header_count": 1}
    # Too small: the first entry written past the count; too large: the first counted entry that is empty.
    assert problems[0]["entry"] == (count + delta if delta < 0 else count)
    assert problems[0]["index_file"] == path.rsplit("/", 1)[1]


def test_deleted_index_file(tmp_path):
    root = copy_store("rmq4-basic", tmp_path)
    files = list_index_files(root)
    gone = files[1]
    with IndexFile(gone) as f:
        lost = {f.step(k).phys_offset for k in range(1, f.count)}
    with IndexFile(files[0]) as f:
        kept_end = f.header.end_phy_offset
    os.unlink(gone)
    problems, _ = _verify(root)
    assert set(_codes(problems)) == {"index_missing_entry", "index_file_gap"}
    # Every message that had an entry in the deleted file is reported (the first file's last one only if
    # some of its keys went to the deleted file), and nothing else.
    missing = {p["phys_offset"] for p in problems if p["code"] == "index_missing_entry"}
    assert missing == lost or missing == lost - {kept_end}
    gap = next(p for p in problems if p["code"] == "index_file_gap")
    assert (gap["index_file"], gap["entry"]) == (files[2].rsplit("/", 1)[1], 1)
    assert gap["phys_offset"] == min(missing - {kept_end})


def test_deleted_newest_file_after_a_clean_shutdown(tmp_path):
    root = copy_store("rmq5-basic", tmp_path)
    files = list_index_files(root)
    os.unlink(files[-1])
    problems, _ = _verify(root)
    behind = [p for p in problems if p["code"] == "index_behind"]
    assert len(behind) == 1 and "no abort file" in behind[0]["detail"] and behind[0]["index_file"] == files[-2].rsplit("/", 1)[1]


def test_library_and_table_output_agree():
    s = IndexVerifySummary()
    assert list(verify(store_root("rmq4-flags"), summary=s)) == []
    r = run("index", "verify", "-s", store_root("rmq4-flags"))
    assert r.exit_code == 0 and f"0 problems in {s.index_files} index files" in r.stderr


def test_dump_matches_the_manifest():
    store = "rmq4-flags"
    offsets = {m["wroteOffset"] for m in manifest(store)}
    total = 0
    for path in list_index_files(store_root(store)):
        r = run("index", "dump", path, "-f", "jsonl")
        assert r.exit_code == 0, r.stderr
        out = jsonl(r.stdout)
        head = out[0]
        slots = [o for o in out if o["kind"] == "slot"]
        entries = [o for o in out if o["kind"] == "entry"]
        assert head["kind"] == "header" and (head["hash_slots"], head["index_entries"]) == (64, 256)
        assert len(slots) == head["hash_slot_count"] and len(entries) == head["index_count"] - 1
        assert {e["phys_offset"] for e in entries} <= offsets
        assert entries[0]["phys_offset"] == head["begin_phy_offset"] and entries[-1]["phys_offset"] == head["end_phy_offset"]
        total += len(entries)
    assert total == _indexed_key_count(store)
    t = run("index", "dump", list_index_files(store_root(store))[0], "--limit", 3, "--no-slots")
    assert t.exit_code == 0 and "begin_phy_offset" in t.stdout and "prev_index" in t.stdout


def test_not_a_store(tmp_path):
    r = run("index", "verify", "-s", tmp_path)
    assert r.exit_code == 2 and "no_commitlog" in r.stderr
    r = run("index", "verify", "-s", tmp_path / "nope")
    assert r.exit_code == 2 and "not_found" in r.stderr


def test_wrong_time_diff_and_slot_into_another_chain(tmp_path):
    root = copy_store("rmq5-basic", tmp_path)
    path = list_index_files(root)[0]
    with IndexFile(path) as f:
        k = f.count // 2
        diff = f.step(k).time_diff
        at_diff = f.entry_offset(k) + field_offset(IndexEntry, "time_diff")
        slot = int(f.used_slots()[3])
        head = int(f.slots[slot])
        stranger = next(q for q in range(f.count - 1, 0, -1) if f.slot_of(f.step(q).key_hash) != slot)
        at_slot = f.slot_offset(slot)
    _put(path, at_diff, diff + 3600)
    _put(path, at_slot, stranger)
    problems, _ = _verify(root)
    assert _codes(problems) == {"index_time_diff_mismatch": 1, "index_slot_wrong_hash": 1, "index_entry_unreachable": 1}
    t = next(p for p in problems if p["code"] == "index_time_diff_mismatch")
    assert (t["entry"], t["file_offset"]) == (k, at_diff - field_offset(IndexEntry, "time_diff"))
    w = next(p for p in problems if p["code"] == "index_slot_wrong_hash")
    assert (w["slot"], w["entry"], w["file_offset"]) == (slot, stranger, at_slot)
    assert next(p for p in problems if p["code"] == "index_entry_unreachable")["entry"] == head


def test_truncated_index_file_is_reported_and_the_rest_checked(tmp_path):
    root = copy_store("rmq4-basic", tmp_path)
    files = list_index_files(root)
    with open(files[-1], "r+b") as fh:
        fh.truncate(30_001)
    problems, summary = _verify(root)
    size = [p for p in problems if p["code"] == "index_file_size"]
    assert len(size) == 1 and size[0]["index_file"] == files[-1].rsplit("/", 1)[1]
    assert summary["index_files"] == len(files) - 1
    # Its keys are now missing from the index: after the last readable file's end.
    assert {p["code"] for p in problems} == {"index_file_size", "index_missing_entry", "index_behind"}


@pytest.mark.parametrize("store", ["rmq53-v2", "rmq4-crash"])
def test_small_commitlog_windows_give_the_same_findings(store, monkeypatch, tmp_path):
    """Verify holds one window of CommitLog records at a time; cutting it finer must change nothing."""
    root = copy_store(store, tmp_path)
    path = list_index_files(root)[0]
    with IndexFile(path) as f:
        k = 301
        phys = f.step(k).phys_offset
        at = f.entry_offset(k) + field_offset(IndexEntry, "phys_offset")
    _put(path, at, phys + 3, 8)

    def run_verify(**kw):
        s = IndexVerifySummary()
        return sorted((p.code, p.extra.get("entry"), p.phys_offset, p.detail) for p in iv.verify(root, summary=s, **kw)), s.to_dict()

    whole = run_verify()
    assert run_verify(range_bytes=4096) == whole
    assert run_verify(range_bytes=4096, mapper=LocalMap(2)) == whole
    assert ("index_entry_not_record", k, phys + 3) in {x[:3] for x in whole[0]}


@pytest.mark.parametrize("stretch", [7, 1 << 20])
def test_index_sizing_is_inferred_a_stretch_of_entries_at_a_time(monkeypatch, stretch):
    """A whole index file is checked a stretch of entries at a time (pages given back after each, for 20M-entry files):
    with stretches of 7 entries every file of the real stores still gives the sizing its README names, file by file
    (infer_layout, which scores every entry of these small files) and store-wide (infer_store_sizing)."""
    from conftest import SETTINGS

    from rmqdump.readers import indexfile
    from rmqdump.readers.mapped import MappedFile

    monkeypatch.setattr(indexfile, "STRETCH_ENTRIES", stretch)
    for name in HEALTHY:
        want = (SETTINGS[name]["hash_slots"], SETTINGS[name]["index_entries"])
        paths = list_index_files(str(store_root(name)))
        for p in paths:
            with MappedFile(p) as mf:
                header = indexfile.read_header(mf)
                lay = indexfile.infer_layout(mf, header)
                linked, seen = indexfile._score(mf, header, *want, None)
            assert (lay.hash_slots, lay.index_entries) == want, (name, p)
            assert linked == seen == header.index_count - 1  # the broker's own file: every entry links into its chain
        if len(paths) > 1:
            assert indexfile.infer_store_sizing(paths)[0] == want, name


def test_a_slot_head_in_the_wrong_slot_disproves_the_sizing_in_any_stretch(monkeypatch, tmp_path):
    """The oldest index file of rmq4-basic with one slot's head entry given a keyHash of another slot (the layout
    written out here: 40-byte header, 4-byte slots, 20-byte entries, keyHash first): infer_store_sizing refuses the
    sizing, whichever stretch of entries that head falls in (it starts one)."""
    import struct

    from conftest import SETTINGS

    from rmqdump.readers import indexfile

    root = copy_store("rmq4-basic", tmp_path)
    slots = SETTINGS["rmq4-basic"]["hash_slots"]
    paths = list_index_files(str(root))
    with open(paths[0], "rb") as f:
        data = bytearray(f.read())
    table = struct.unpack_from(f">{slots}i", data, 40)
    head = next(h for h in table if h > 1)
    at = 40 + 4 * slots + 20 * head
    struct.pack_into(">i", data, at, (struct.unpack_from(">i", data, at)[0] + 1) % (1 << 31))  # now in slot + 1
    with open(paths[0], "wb") as f:
        f.write(data)
    monkeypatch.setattr(indexfile, "STRETCH_ENTRIES", head)  # the head starts the second stretch
    assert indexfile.infer_store_sizing(paths)[0] is None
