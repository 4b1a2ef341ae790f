"""`rmqdump rebuild` on damaged copies: the same bytes as from the healthy store, safe output, untouched source."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import REAL, SETTINGS, copy_store, jsonl, manifest, run, store_root

from rmqdump.builders.rebuild import filler_holes
from rmqdump.builders.settings import resolve
from rmqdump.common.publish import TMP_MARK
from rmqdump.readers.fastpath import numpy_dtype
from rmqdump.schemas import ConsumeQueueUnit
from rmqdump.schemas import constants as C

UNIT = numpy_dtype(ConsumeQueueUnit)


def flags(name: str) -> list[str]:
    s = SETTINGS[name]
    return ["--cq-units-per-file", str(s["cq_units"]), "--hash-slots", str(s["hash_slots"]), "--index-entries", str(s["index_entries"])]


def tree(root: Path, part: str) -> dict[str, bytes]:
    base = root / part
    return {str(p.relative_to(base)): p.read_bytes() for p in sorted(base.rglob("*")) if p.is_file()}


def index_bytes(root: Path) -> list[bytes]:
    return [p.read_bytes() for p in sorted((root / "index").iterdir())]


def snapshot(root: Path) -> dict[str, tuple[str, int, int]]:
    """Every file's sha256, size and mtime: the evidence must come out as it went in."""
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file():
            st = p.stat()
            out[str(p.relative_to(root))] = (hashlib.sha256(p.read_bytes()).hexdigest(), st.st_size, st.st_mtime_ns)
    return out


def rebuild_ok(store: Path, out: Path, *extra: str):
    r = run("rebuild", store, "--out", out, "--no-sync", "-f", "jsonl", *extra)
    return r.exit_code, jsonl(r.stdout) if r.stdout.strip() else [], r.stderr


@pytest.mark.parametrize("name", ["rmq4-basic", "rmq53-v2"])
def test_deleted_queues_and_index_give_the_healthy_bytes(tmp_path, name):
    src = copy_store(name, tmp_path)
    shutil.rmtree(src / "consumequeue")
    shutil.rmtree(src / "index")
    code, rows, err = rebuild_ok(src, tmp_path / "out", *flags(name))
    assert code == 0, err
    assert tree(tmp_path / "out", "consumequeue") == tree(store_root(name), "consumequeue")
    assert index_bytes(tmp_path / "out") == index_bytes(store_root(name))
    assert rows[-1]["settings"]["source"]["cq_units_per_file"] == "--cq-units-per-file"


def test_damaged_queues_and_index_give_the_healthy_bytes(tmp_path):
    name = "rmq4-basic"
    src = copy_store(name, tmp_path)
    cq = sorted((src / "consumequeue").rglob("0000*"))
    with open(cq[0], "r+b") as f:  # truncated
        f.truncate(1000)
    with open(cq[1], "r+b") as f:  # garbage in the middle
        f.seek(400)
        f.write(b"\xde\xad\xbe\xef" * 50)
    shutil.rmtree(cq[5].parent)  # a whole queue gone
    ix = sorted((src / "index").iterdir())
    with open(ix[0], "r+b") as f:
        f.write(bytes(40))  # header zeroed
    with open(ix[1], "r+b") as f:
        f.seek(5000)
        f.write(os.urandom(3000))
    ix[2].unlink()
    # the damaged files no longer say how big a ConsumeQueue file is: the error names the flag
    r = run("rebuild", src, "--out", tmp_path / "nope")
    assert r.exit_code == 2
    assert r.stderr.count("\n") == 1 and "settings_ambiguous" in r.stderr and "--cq-units-per-file" in r.stderr
    assert not (tmp_path / "nope").exists()
    code, _, err = rebuild_ok(src, tmp_path / "out", *flags(name))
    assert code == 0, err
    assert tree(tmp_path / "out", "consumequeue") == tree(store_root(name), "consumequeue")
    assert index_bytes(tmp_path / "out") == index_bytes(store_root(name))


def test_full_index_files_whose_slots_do_not_hash_back_prove_no_sizing(tmp_path):
    """The full files' indexCount gives the sizing only if the oldest file's slots point at entries hashing to them."""
    name = "rmq4-basic"
    s = SETTINGS[name]
    src = copy_store(name, tmp_path)
    oldest = sorted((src / "index").iterdir())[0]
    raw = bytearray(oldest.read_bytes())
    slots = np.frombuffer(bytes(raw[C.INDEX_HEADER_SIZE : C.INDEX_HEADER_SIZE + 4 * s["hash_slots"]]), dtype=">i4")
    a, b = np.flatnonzero(slots)[:2]  # two used slots swap their chain heads: each now names an entry of the other's hash
    for slot, head in ((a, slots[b]), (b, slots[a])):
        raw[C.INDEX_HEADER_SIZE + 4 * slot : C.INDEX_HEADER_SIZE + 4 * slot + 4] = int(head).to_bytes(4, "big")
    oldest.write_bytes(bytes(raw))
    r = run("rebuild", src, "--out", tmp_path / "out", "--cq-units-per-file", str(s["cq_units"]))
    assert r.exit_code == 2 and r.stderr.count("\n") == 1
    assert "settings_ambiguous" in r.stderr and f"indexCount {s['index_entries']} do not fit any slot count" in r.stderr
    st = resolve(str(store_root(name)), cq_units=s["cq_units"])  # the undamaged store proves it
    assert (st.hash_slots, st.index_entries) == (s["hash_slots"], s["index_entries"])


def test_lone_partial_index_file_needs_the_flags(tmp_path):
    name = "rmq5-basic"
    src = copy_store(name, tmp_path)
    for p in sorted((src / "index").iterdir())[:-1]:
        p.unlink()
    r = run("rebuild", src, "--out", tmp_path / "out")
    assert r.exit_code == 2
    assert "settings_ambiguous" in r.stderr and "--hash-slots and --index-entries" in r.stderr
    code, _, err = rebuild_ok(src, tmp_path / "out", "--hash-slots", "500", "--index-entries", "2000")
    assert code == 0, err
    assert index_bytes(tmp_path / "out") == index_bytes(store_root(name))


def test_no_queue_or_index_files_means_broker_defaults(tmp_path):
    src = copy_store("rmq4-flags", tmp_path)
    shutil.rmtree(src / "consumequeue")
    shutil.rmtree(src / "index")
    st = resolve(str(src))
    assert (st.cq_units_per_file, st.hash_slots, st.index_entries) == (C.DEFAULT_CQ_UNITS_PER_FILE, C.DEFAULT_HASH_SLOTS, C.DEFAULT_INDEX_ENTRIES)
    assert "broker default" in st.source["cq_units_per_file"] and "broker default" in st.source["hash_slots"]


def test_damaged_commitlog_region_is_skipped_and_listed(tmp_path):
    name = "rmq4-basic"
    src = copy_store(name, tmp_path)
    m = manifest(name)
    lost = m[1234]
    size = SETTINGS[name]["commitlog"]
    seg = src / "commitlog" / f"{lost['wroteOffset'] // size * size:020d}"
    at = lost["wroteOffset"] % size
    with open(seg, "r+b") as f:
        f.seek(at + 4)
        f.write(b"\xde\xad\xbe\xef")
    code, rows, err = rebuild_ok(src, tmp_path / "out", *flags(name))
    assert code == 1, err
    probs = [r for r in rows if r["kind"] == "problem"]
    assert probs[0]["code"] == "bad_magic" and probs[0]["file"].endswith(seg.name) and probs[0]["file_offset"] == at
    assert probs[0]["skipped"] == lost["wroteBytes"]
    summary = rows[-1]
    assert summary["damaged_regions"] == 1 and summary["skipped_bytes"] == lost["wroteBytes"]
    assert summary["verify"]["ok"] is True  # the verifiers find nothing but the damage and the filler put in its place
    assert summary["records"] == len(m) - 1
    # every other unit is the broker's; the lost message's unit is a filler, reported as a hole
    ours, theirs = tree(tmp_path / "out", "consumequeue"), tree(store_root(name), "consumequeue")
    assert sorted(ours) == sorted(theirs)
    units = SETTINGS[name]["cq_units"]
    qfile = f"{lost['topic']}/{lost['queueId']}/{lost['logicsOffset'] // units * units * 20:020d}"
    for rel in theirs:
        if rel != qfile:
            assert ours[rel] == theirs[rel], rel
    a = np.frombuffer(ours[qfile], dtype=UNIT)
    b = np.frombuffer(theirs[qfile], dtype=UNIT)
    i = lost["logicsOffset"] % units
    assert tuple(a[i].tolist()) == (0, C.CQ_FILLER_SIZE, 0)
    assert int(b[i]["commit_log_offset"]) == lost["wroteOffset"]
    assert np.array_equal(np.delete(a, i), np.delete(b, i))
    gap = [r for r in probs if r["code"] == "cq_queue_offset_gap"]
    assert len(gap) == 1 and gap[0]["topic"] == lost["topic"] and gap[0]["units"] == 1
    assert gap[0]["file"] == str(tmp_path / "out" / "consumequeue" / qfile) and gap[0]["file_offset"] == i * 20
    # the holes read back from the files are the builder's (verify uses them when only the files are at hand)
    assert filler_holes(str(tmp_path / "out")) == {(lost["topic"], lost["queueId"]): [(lost["logicsOffset"], lost["logicsOffset"] + 1)]}
    n_keys = (lost["uniqKey"] is not None) + len([k for k in lost["keys"] or [] if k])
    assert summary["index_entries"] == sum((x["uniqKey"] is not None) + len([k for k in x["keys"] or [] if k]) for x in m) - n_keys


def _popen(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "rmqdump", *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _tmp_dirs(parent: Path) -> list[str]:
    return [n for n in os.listdir(parent) if TMP_MARK in n]


def test_killed_rebuild_leaves_output_absent_or_complete(tmp_path):
    name = "rmq4-basic"
    src = copy_store(name, tmp_path)
    before = snapshot(src)
    ref_cq, ref_ix = tree(store_root(name), "consumequeue"), index_bytes(store_root(name))
    parent = tmp_path / "outs"
    parent.mkdir()
    outcomes = []
    for delay in (0.0, 0.0, 0.02, 0.05, 0.1, 0.2, 0.4, 0.8):
        out = parent / "out"
        shutil.rmtree(out, ignore_errors=True)
        p = _popen("rebuild", src, "--out", out, *flags(name), "--workers", "1")
        deadline = time.monotonic() + 60
        while not _tmp_dirs(parent) and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.001)
        time.sleep(delay)
        p.send_signal(signal.SIGKILL)
        p.communicate()
        if out.exists():
            assert tree(out, "consumequeue") == ref_cq and index_bytes(out) == ref_ix
            outcomes.append("complete")
        else:
            outcomes.append("absent")
    assert "absent" in outcomes
    # a later run clears what killed runs left and writes the store
    code, _, err = rebuild_ok(src, parent / "out", *flags(name), "--force")
    assert code == 0, err
    assert _tmp_dirs(parent) == []
    assert tree(parent / "out", "consumequeue") == ref_cq
    assert snapshot(src) == before


def test_terminated_rebuild_cleans_up_and_keeps_a_replaced_output(tmp_path):
    name = "rmq4-basic"
    src = copy_store(name, tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    (out / "old.txt").write_text("previous rebuild")
    p = _popen("rebuild", src, "--out", out, *flags(name), "--force", "--workers", "1")
    while not _tmp_dirs(tmp_path) and p.poll() is None:
        time.sleep(0.001)
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate()
    if p.returncode == 2:
        assert "interrupted" in err and err.count("\n") == 1
        assert (out / "old.txt").read_text() == "previous rebuild"
    else:  # it had already finished
        assert p.returncode == 0 and not (out / "old.txt").exists()
    assert _tmp_dirs(tmp_path) == []


def test_output_rules_and_untouched_source(tmp_path):
    name = "rmq4-flags"
    src = copy_store(name, tmp_path)
    before = snapshot(src)
    real_before = snapshot(store_root(name))
    r = run("rebuild", src, "--out", src / "rebuilt")
    assert r.exit_code == 2 and "output_inside_store" in r.stderr
    r = run("rebuild", src, "--out", tmp_path)
    assert r.exit_code == 2 and "store_inside_output" in r.stderr
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "x").write_text("keep")
    r = run("rebuild", src, "--out", busy)
    assert r.exit_code == 2 and "output_exists" in r.stderr and "--force" in r.stderr
    assert (busy / "x").read_text() == "keep"
    r = run("rebuild", tmp_path / "missing", "--out", tmp_path / "o")
    assert r.exit_code == 2 and r.stderr.startswith("rmqdump: not_a_store")
    empty = tmp_path / "empty"
    empty.mkdir()
    code, _, err = rebuild_ok(src, empty, *flags(name))
    assert code == 0, err
    code, _, err = rebuild_ok(src, busy, *flags(name), "--force")
    assert code == 0, err
    assert not (busy / "x").exists() and tree(busy, "consumequeue") == tree(store_root(name), "consumequeue")
    code, _, err = rebuild_ok(store_root(name), tmp_path / "from-real", *flags(name))
    assert code == 0, err
    assert snapshot(src) == before
    assert snapshot(store_root(name)) == real_before
    assert not any(TMP_MARK in str(p) for p in tmp_path.rglob("*"))
    assert not (REAL / name / "store" / "rebuilt").exists()


def test_commitlog_head_deleted_gives_pre_blank_fillers(tmp_path):
    """Queues that no longer start at offset 0 begin with fillPreBlank units, the rest as the broker wrote them."""
    name = "rmq4-basic"
    src = copy_store(name, tmp_path)
    files = sorted((src / "commitlog").iterdir())
    for p in files[:5]:
        p.unlink()
    first_phys = int(files[5].name)
    code, rows, err = rebuild_ok(src, tmp_path / "out", *flags(name), "--no-verify")
    assert code == 0, err
    units = SETTINGS[name]["cq_units"]
    m = [x for x in manifest(name) if x["wroteOffset"] >= first_phys]
    ours, theirs = tree(tmp_path / "out", "consumequeue"), tree(store_root(name), "consumequeue")
    queues = {q["topic"] + "/" + str(q["queue_id"]): q for q in rows if q["kind"] == "queue"}
    for key, q in queues.items():
        topic, qid = key.rsplit("/", 1)
        first = min(x["logicsOffset"] for x in m if x["topic"] == topic and x["queueId"] == int(qid))
        assert q["first_offset"] == first and q["pre_blank"] == first % units
        base = first // units * units
        rel = f"{topic}/{qid}/{base * 20:020d}"
        a = np.frombuffer(ours[rel], dtype=UNIT)
        b = np.frombuffer(theirs[rel], dtype=UNIT)
        fill = a[: first - base]
        assert (fill["commit_log_offset"] == 0).all() and (fill["size"] == C.CQ_FILLER_SIZE).all() and (fill["tags_code"] == 0).all()
        assert np.array_equal(a[first - base :], b[first - base :])
        for r in theirs:  # later files of the queue: the broker's bytes; earlier ones: not written
            if r.startswith(f"{topic}/{qid}/"):
                assert (r in ours) == (int(r.rsplit("/", 1)[1]) >= base * 20)
                if int(r.rsplit("/", 1)[1]) > base * 20:
                    assert ours[r] == theirs[r]


def test_body_bit_flip_is_reported_with_check_crc_and_changes_nothing(tmp_path):
    name = "rmq5-basic"
    src = copy_store(name, tmp_path)
    m = manifest(name)[500]
    assert m["body_len"] > 0
    size = SETTINGS[name]["commitlog"]
    seg = src / "commitlog" / f"{m['wroteOffset'] // size * size:020d}"
    with open(seg, "r+b") as f:  # the body ends right before the topic length byte, topic and properties
        at = m["wroteOffset"] % size + m["wroteBytes"] - 2 - m["propertiesStringUtf8Len"] - len(m["topic"]) - 1 - 1
        f.seek(at)
        byte = f.read(1)
        f.seek(at)
        f.write(bytes([byte[0] ^ 0xFF]))
    code, rows, err = rebuild_ok(src, tmp_path / "a", *flags(name), "--crc")
    assert code == 1, err
    probs = [r for r in rows if r["kind"] == "problem"]
    assert [p["code"] for p in probs] == ["body_crc_mismatch"] and probs[0]["phys_offset"] == m["wroteOffset"]
    assert rows[-1]["flagged_records"] == 1 and rows[-1]["damaged_regions"] == 0 and rows[-1]["records"] == len(manifest(name))
    code, _, err = rebuild_ok(src, tmp_path / "b", *flags(name))
    assert code == 0, err
    for out in (tmp_path / "a", tmp_path / "b"):
        assert tree(out, "consumequeue") == tree(store_root(name), "consumequeue")
        assert index_bytes(out) == index_bytes(store_root(name))


def test_reading_commands_leave_the_source_untouched(tmp_path):
    """Bytes and modification times of every source file, before and after the commands an operator runs around a rebuild."""
    src = copy_store("rmq4-crash", tmp_path)
    before = snapshot(src)
    for args in (
        ("commitlog", src / "commitlog", "-f", "jsonl"),
        ("info", "-s", src),
        ("cq", "verify", "-s", src, "-f", "jsonl"),
        ("index", "verify", "-s", src, "-f", "jsonl"),
        ("rebuild", src, "--out", tmp_path / "out", "--no-sync"),
        ("rebuild", src, "--out", tmp_path / "out", "--force", "--only", "index"),
    ):
        r = run(*args)
        assert r.exit_code in (0, 1), (args, r.stderr)
    assert snapshot(src) == before
    assert (src / "abort").exists()  # a crashed store stays a crashed store
