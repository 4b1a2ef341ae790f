"""Damage to the store's shape that used to pass without a word: exits and findings checked against what the test did.

Found by a sweep of every command over damaged copies of real stores: a salvage or a repair that found damage and
exited 0, an index file cut short or with impossible header counts that `info` and `report` passed over, a part of the
store of the wrong kind (a directory where the checkpoint file belongs, a file where index/ belongs) taken for one
that is absent, a store without its CommitLog described as if nothing were wrong, and a CommitLog entry that cannot
be opened reported by `index lookup` and `index verify` as an internal error.
"""

from __future__ import annotations

import json
import os
import random
import shutil

import pytest
from codes import produces
from conftest import copy_store, manifest, run, run_proc

STORE = "rmq4-basic"
INDEX_HEADER = 40  # the IndexFile header, slots of 4 bytes, entries of 20 (the broker's IndexHeader/IndexFile layout)


def _one_line_unreadable(r, path) -> None:
    assert r.exit_code == 2, (r.exit_code, r.stdout[-300:], r.stderr[-300:])
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"rmqdump: unreadable: {path}@0: "), r.stderr
    assert "internal_error" not in r.stderr and "Traceback" not in r.stdout + r.stderr


def test_salvage_exits_1_when_damage_leaves_nothing_to_give_back(tmp_path):
    """A middle CommitLog file of random bytes: its records are destroyed (nothing intact to give back) and the rest
    is still served, yet damage was found: exit 1, the damage in the manifest at the file's first byte."""
    s = copy_store(STORE, tmp_path)
    victim = sorted((s / "commitlog").iterdir())[2]
    victim.write_bytes(random.Random(7).randbytes(victim.stat().st_size))
    out = tmp_path / "out"
    r = run("salvage", s, "--out", out, "-f", "jsonl")
    assert r.exit_code == 1, r.stdout
    m = json.loads((out / "manifest.json").read_text())
    assert sum(m["salvaged"].values()) == 0  # every record outside the victim is intact and still reached
    base = int(victim.name)
    destroyed = [x for x in manifest(STORE) if base <= x["wroteOffset"] < base + victim.stat().st_size]
    assert destroyed  # the model: the victim held records
    assert m["damage_count"] >= 1
    assert m["damage"][0]["file"] == str(victim) and m["damage"][0]["file_offset"] == 0


@produces("commitlog_gap")
def test_repair_exits_1_for_a_missing_commitlog_file(tmp_path):
    """A CommitLog file gone from the middle: a layout problem repair does not repair (the offsets are in no file),
    and the queue units pointing there become holes: exit 1, the gap named with its offsets."""
    s = copy_store(STORE, tmp_path)
    files = sorted((s / "commitlog").iterdir())
    gone = files[3]
    size = gone.stat().st_size
    gone.unlink()
    r = run("repair", s, "--out", tmp_path / "out", "-f", "jsonl")
    assert r.exit_code == 1, r.stdout[-500:]
    summary = next(d for d in map(json.loads, r.stdout.splitlines()) if d.get("kind") == "summary")
    gaps = [p for p in summary["layout_problems"] if p.startswith("commitlog_gap")]
    assert len(gaps) == 1 and f"{int(gone.name)}..{int(gone.name) + size}" in gaps[0], summary["layout_problems"]
    lost = [x for x in manifest(STORE) if int(gone.name) <= x["wroteOffset"] < int(gone.name) + size]
    assert summary["queue_holes"] == len(lost)  # every message of the missing file is a hole in its queue


def _fits_some_sizing(size: int) -> bool:
    body = size - INDEX_HEADER
    return body > 0 and body % 4 == 0 and body // 4 >= 1 + 5  # at least one slot (4 bytes) and one entry (20)


@produces("index_file_size")
@pytest.mark.parametrize("command", ["info", "report"])
def test_an_index_file_cut_short_is_a_finding(tmp_path, command):
    s = copy_store(STORE, tmp_path)
    victim = sorted((s / "index").iterdir())[1]
    cut = 30001
    assert not _fits_some_sizing(cut) and _fits_some_sizing(victim.stat().st_size)
    os.truncate(victim, cut)
    args = ["info", "-s", s, "-f", "jsonl"] if command == "info" else ["report", "-s", s, "--out", tmp_path / "r.html", "--problems-out", tmp_path / "p.jsonl"]
    r = run(*args)
    assert r.exit_code == 1, r.stdout[-500:]
    text = r.stdout if command == "info" else (tmp_path / "p.jsonl").read_text()
    found = [d for d in map(json.loads, text.splitlines()) if d.get("code") == "index_file_size"]
    assert [(d["file"], d["file_offset"]) for d in found] == [(str(victim), cut)]


@produces("index_header_count", "index_header_slot_count")
def test_index_header_counts_no_file_of_its_size_holds(tmp_path):
    s = copy_store(STORE, tmp_path)
    victim = sorted((s / "index").iterdir())[1]
    size = victim.stat().st_size
    with open(victim, "r+b") as f:  # IndexHeader: begin/end timestamp, begin/end phy offset (8 each), then two int32s
        f.seek(32)
        f.write((0x7FFFFFFF).to_bytes(4, "big") + (-3).to_bytes(4, "big", signed=True))
    r = run("info", "-s", s, "-f", "jsonl")
    assert r.exit_code == 1
    found = {d["code"]: d for d in map(json.loads, r.stdout.splitlines()) if d.get("code", "").startswith("index_header")}
    assert set(found) == {"index_header_count", "index_header_slot_count"}
    most_entries = (size - INDEX_HEADER - 4) // 20
    most_slots = (size - INDEX_HEADER - 20) // 4
    assert f"-3 is outside 0..{most_entries}" in found["index_header_count"]["detail"]
    assert f"2147483647 is outside 0..{most_slots}" in found["index_header_slot_count"]["detail"]
    assert all(d["file"] == str(victim) and d["file_offset"] == 0 for d in found.values())


@pytest.mark.parametrize(
    ("name", "make", "what"),
    [
        ("checkpoint", "dir", "not a regular file"),
        ("index", "file", "not a directory"),
        ("consumequeue", "file", "not a directory"),
        ("commitlog", "file", "not a directory"),
    ],
)
@pytest.mark.parametrize("command", ["info", "report", "cq verify"])
def test_a_part_of_the_wrong_kind_is_unreadable_not_absent(tmp_path, name, make, what, command):
    s = copy_store(STORE, tmp_path)
    p = s / name
    if p.is_dir():
        shutil.rmtree(p)
    else:
        p.unlink()
    if make == "dir":
        p.mkdir()
    else:
        p.write_bytes(b"x")
    args = {"info": ["info", "-s", s], "report": ["report", "-s", s, "--out", tmp_path / "r.html"], "cq verify": ["cq", "verify", "-s", s]}[command]
    r = run(*args)
    _one_line_unreadable(r, p)
    assert r.stderr.strip().endswith(what)
    assert not (tmp_path / "r.html").exists()


@produces("no_commitlog")
def test_info_of_a_store_without_its_commitlog_says_so(tmp_path):
    s = copy_store(STORE, tmp_path)
    shutil.rmtree(s / "commitlog")
    r = run("info", "-s", s, "-f", "jsonl")
    assert r.exit_code == 1
    found = [d for d in map(json.loads, r.stdout.splitlines()) if d.get("code") == "no_commitlog"]
    assert [d["file"] for d in found] == [str(s / "commitlog")]


@pytest.mark.parametrize("args", [["index", "verify"], ["index", "lookup", "k1_0"]])
def test_a_dangling_commitlog_entry_is_unreadable_for_the_index_commands(tmp_path, args):
    s = copy_store(STORE, tmp_path)
    files = sorted((s / "commitlog").iterdir())
    link = s / "commitlog" / f"{int(files[-1].name) + files[-1].stat().st_size:020d}"
    link.symlink_to("nowhere")
    r = run_proc(*args, "-s", s)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == [f"rmqdump: unreadable: {link}@0: No such file or directory"]


@pytest.mark.parametrize("command", ["info", "report"])
@pytest.mark.parametrize("content", [b"[" * 100000 + b"]" * 100000, b'{"offsetTable":'])
def test_a_config_file_no_broker_could_load_is_a_finding(tmp_path, command, content):
    """Nested past any parser's depth, or cut short: `info` listed it as not JSON and exited 0, `report` said "no problems"."""
    s = copy_store(STORE, tmp_path)
    path = s / "config" / "consumerOffset.json"
    path.write_bytes(content)
    args = ["info", "-s", s, "-f", "jsonl"] if command == "info" else ["report", "-s", s, "--out", tmp_path / "r.html", "--problems-out", tmp_path / "p.jsonl"]
    r = run(*args)
    assert r.exit_code == 1, r.stdout[-300:]
    text = r.stdout if command == "info" else (tmp_path / "p.jsonl").read_text()
    found = [d for d in map(json.loads, text.splitlines()) if d.get("code") == "bad_config"]
    assert [d["file"] for d in found] == [str(path)]
    assert found[0]["detail"].startswith("not JSON")
