"""Every CommitLog-wide pass reads its byte ranges one way (rmqdump.scan.ranges), so `-j1` and `-jN` agree.

The damaged stores here are copies of real stores changed by the test: which
problems the scan must report, and where, follows from the bytes the test
changed and the manifest (the model); the same answer is required from one
worker, from two, and from ranges that cut files and records.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pyarrow.dataset as ds
import pytest
from conftest import SETTINGS, copy_store, jsonl, manifest, patch, run, store_root

from rmqdump.checks.cqverify import verify as cq_verify
from rmqdump.checks.indexverify import verify as index_verify
from rmqdump.engines.local import LocalMap, default_workers, usable_cores
from rmqdump.readers.commitlog import CommitLog, commitlog_path
from rmqdump.readers.store import Store
from rmqdump.scan.splits import commitlog_splits

NAME = "rmq4-basic"  # written by RocketMQ 4.9.7
FILE = SETTINGS[NAME]["commitlog"]
APPENDED = 264
SCAN_CODES = {"bad_magic", "commitlog_file_size", "bad_blank_marker", "record_past_end", "trailing_garbage", "size_mismatch", "zeroed_range"}


def _damaged(tmp_path: Path) -> tuple[Path, set[tuple[str, int]]]:
    """A copy of rmq4-basic with three records' magic overwritten and 264 bytes appended to a file that ends in a BLANK
    marker; and the scan problems this must give, as (code, physical offset)."""
    root = copy_store(NAME, tmp_path)
    msgs = sorted(manifest(NAME), key=lambda m: m["wroteOffset"])
    files = sorted({m["wroteOffset"] // FILE for m in msgs})
    picks = []
    for fno in (files[2], files[9], files[15]):  # the third record of three files
        in_file = [m for m in msgs if m["wroteOffset"] // FILE == fno]
        picks.append(in_file[2])
    for m in picks:
        off = m["wroteOffset"]
        patch(root / "commitlog" / f"{off // FILE * FILE:020d}", off % FILE + 4, b"\xde\xad\xbe\xef")
    grown = files[5] * FILE
    with open(root / "commitlog" / f"{grown:020d}", "ab") as f:
        f.write(b"\xab" * APPENDED)
    expected = {("bad_magic", m["wroteOffset"]) for m in picks} | {("commitlog_file_size", grown + FILE + APPENDED)}
    return root, expected


def _scan_findings(lines: list[dict]) -> set[tuple[str, int]]:
    return {(d["code"], d["phys_offset"]) for d in lines if d.get("kind") == "problem" and d["code"] in SCAN_CODES}


def test_cq_verify_on_odd_layout_gives_the_planted_damage_with_any_workers(tmp_path):
    """The issue's case: three damaged records and 264 bytes appended to one file: one worker and two say the same, and
    what they say is the damage planted (no bad_blank_marker read from past the configured file size)."""
    root, expected = _damaged(tmp_path)
    outs = {}
    for j in ("1", "2"):
        r = run("cq", "verify", "-s", root, "-f", "jsonl", "-j", j)
        assert r.exit_code == 1, r.stderr
        outs[j] = r.stdout
    assert outs["1"] == outs["2"]
    lines = jsonl(outs["1"])
    assert _scan_findings(lines) == expected
    lost = {m["wroteOffset"] for m in manifest(NAME)} & {p for _, p in expected}
    assert {d["phys_offset"] for d in lines if d.get("code") == "cq_not_message_start"} == lost  # each damaged record's unit


@pytest.mark.parametrize("range_bytes", [FILE, 5000, 70_001])
def test_ranges_that_cut_files_and_records_change_nothing(tmp_path, range_bytes):
    """The library with ranges smaller than a file (edges inside records and inside the damage) on one and three workers."""
    root, expected = _damaged(tmp_path)

    def cq(mapper):
        return [p.to_dict() for p in cq_verify(Store.open(root), mapper=mapper, range_bytes=range_bytes)]

    def ix(mapper):
        return [p.to_dict() for p in index_verify(str(root), mapper=mapper, range_bytes=range_bytes)]

    one = cq(map)
    assert cq(LocalMap(3)) == one
    assert _scan_findings([{"kind": "problem", **d} for d in one]) == expected
    first = ix(map)
    assert ix(LocalMap(3)) == first
    assert {(d["code"], d["phys_offset"]) for d in first if d["code"] in SCAN_CODES} == expected


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*")) if p.is_file()}


def test_rebuild_and_export_on_odd_layout_are_the_same_with_any_workers(tmp_path):
    root, expected = _damaged(tmp_path)
    trees, rows = {}, {}
    for j in ("1", "2"):
        out = tmp_path / f"rebuilt-{j}"
        r = run("rebuild", root, "--out", out, "-f", "jsonl", "-j", j, "--cq-units-per-file", SETTINGS[NAME]["cq_units"], "--no-sync")
        assert r.exit_code == 1, r.stderr
        lines = jsonl(r.stdout)
        assert _scan_findings(lines) == expected
        trees[j] = {k: v for k, v in _tree(out).items() if not k.startswith("index/")} | {
            "index": sorted(v for k, v in _tree(out).items() if k.startswith("index/"))  # names are wall-clock times
        }
        ex = tmp_path / f"export-{j}"
        r = run("export", "-s", root, "-o", ex, "-j", j)
        assert r.exit_code == 1, r.stderr
        rows[j] = sorted(ds.dataset(ex, format="parquet", partitioning="hive").to_table(columns=["phys_offset", "uniq_key"]).to_pylist(), key=str)
    assert trees["1"] == trees["2"]
    assert rows["1"] == rows["2"]
    damaged = {p for _, p in expected}
    assert {r["phys_offset"] for r in rows["1"]} == {m["wroteOffset"] for m in manifest(NAME)} - damaged  # every intact record, nothing else


@pytest.mark.parametrize("name", ["rmq4-basic", "rmq4-crash", "rmq5-basic", "rmq53-v2", "rmq53-batchcq", "rmq53-lmq", "rmq53-cqext"])
def test_real_stores_same_output_for_any_workers(name):
    outs = [run("cq", "verify", "-s", store_root(name), "-f", "jsonl", "-j", j).stdout for j in ("1", "2")]
    assert outs[0] == outs[1]
    rows = manifest(name)
    records = [m for m in rows if m.get("kind") == "commitlog_msg"] or [m for m in rows if m.get("kind") is None]  # 5.3 manifests list records
    assert jsonl(outs[0])[-1]["messages"] == len(records)


def test_planner_stops_a_long_file_at_the_configured_size(tmp_path):
    root, _ = _damaged(tmp_path)
    cl = CommitLog.open(commitlog_path(str(root)))
    assert cl.file_size == FILE
    splits = commitlog_splits(cl, 4096)
    assert max(sp.end for sp in splits) == FILE and all(sp.size == FILE for sp in splits)
    grown = [f for f in cl.files if f.size == FILE + APPENDED]
    assert len(grown) == 1 and os.path.getsize(grown[0].path) == FILE + APPENDED


def test_default_workers_follow_the_machine():
    assert default_workers(1 << 40) == min(usable_cores(), default_workers(1 << 40, per_worker=1))
    assert default_workers(1 << 10) == 1  # a small CommitLog is read by one worker
    assert default_workers(1 << 40, per_worker=1 << 50) == 1  # no memory for more


def test_salvage_on_odd_layout_is_the_same_with_any_workers(tmp_path):
    """salvage's survey is a pass over the planner's ranges too: one worker and two write the same records, and the
    damaged records are among them only given back with their magic restored (nothing else of them was touched)."""
    import pyarrow.parquet as pq

    root, expected = _damaged(tmp_path)
    got = {}
    for j in ("1", "2"):
        out = tmp_path / f"salvaged-{j}"
        r = run("salvage", root, "--out", out, "-j", j)
        assert r.exit_code in (0, 1), r.stderr
        got[j] = sorted(pq.read_table(out / "messages.parquet", columns=["phys_offset", "reason"]).to_pylist(), key=str)
    assert got["1"] == got["2"]
    given_back = {r["phys_offset"] for r in got["1"] if r["reason"] == "header_damaged"}
    assert given_back == {p for c, p in expected if c == "bad_magic"}


def test_repair_on_odd_layout_is_the_same_with_any_workers(tmp_path):
    """repair's one scan is a pass over the planner's ranges too: one worker and two write the same repaired store,
    each damaged record (a bad magic code, nothing else touched) written back with its magic restored, at its length."""
    root, expected = _damaged(tmp_path)
    sizes = {m["wroteOffset"]: m["wroteBytes"] for m in manifest(NAME)}
    trees = {}
    for j in ("1", "2"):
        out = tmp_path / f"repaired-{j}"
        r = run("repair", root, "--out", out, "-f", "jsonl", "-j", j, "--cq-units-per-file", SETTINGS[NAME]["cq_units"], "--no-sync")
        assert r.exit_code == 1, r.stderr
        ranges = [(d["phys_offset"], d["length"], d["action"]) for d in jsonl(r.stdout) if d.get("kind") == "range"]
        assert ranges == sorted((p, sizes[p], "header_restored") for c, p in expected if c == "bad_magic")
        tree = _tree(out)
        trees[j] = {k: v for k, v in tree.items() if not k.startswith("index/") and k != "rmqdump-repair/report.json"} | {
            "index": sorted(v for k, v in tree.items() if k.startswith("index/"))  # names are wall-clock times
        }
    assert trees["1"] == trees["2"]
