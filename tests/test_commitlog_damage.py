"""A corpus of damaged CommitLogs made from the real ones.

Each damage is reported with its code at the exact byte, the scan resyncs,
and every record outside the damage still decodes; never a traceback.
"""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

import pytest
from conftest import flip, jsonl, manifest, patch, run, run_proc, store_root
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmqdump.readers.commitlog import CommitLog
from rmqdump.readers.fastpath import field_offset
from rmqdump.schemas import message_header

HDR = message_header()


def _copy(name: str, tmp: Path) -> Path:
    out = tmp / "commitlog"
    shutil.copytree(store_root(name) / "commitlog", out)
    return out


def _locate(name: str, seq: int) -> tuple[str, int, dict]:
    """(file name, file offset, manifest row) of message `seq`."""
    m = manifest(name)[seq]
    size = os.path.getsize(next((store_root(name) / "commitlog").iterdir()))
    base = m["wroteOffset"] // size * size
    return f"{base:020d}", m["wroteOffset"] - base, m


def _flip(path: Path, offset: int, bit: int = 0) -> None:
    flip(path, offset, 1 << bit)


def _dump(cl_dir: Path):
    r = run("commitlog", cl_dir, "-f", "jsonl")
    rows = jsonl(r.stdout)
    assert rows[-1]["kind"] == "summary"
    return r.exit_code, [x for x in rows if x["kind"] == "message"], [x for x in rows if x["kind"] == "problem"]


def _offsets(name: str, *, skip=()) -> list[int]:
    return sorted(m["wroteOffset"] for m in manifest(name) if m["seq"] not in skip)


SEQ = 500  # a message in the middle of rmq4-basic


@pytest.mark.parametrize(
    "field,code",
    [("magic", "bad_magic"), ("total_size", "size_mismatch"), ("body_length", "size_mismatch"), ("topic_length", "size_mismatch")],
)
def test_header_damage_resyncs(tmp_path, field, code):
    cl = _copy("rmq4-basic", tmp_path)
    fname, off, m = _locate("rmq4-basic", SEQ)
    at = off + (field_offset(HDR, field) if field != "topic_length" else HDR.sizeof() + manifest("rmq4-basic")[SEQ]["body_len"])
    _flip(cl / fname, at + (3 if field in ("total_size", "body_length") else 0), 2)
    rc, msgs, probs = _dump(cl)
    assert rc == 1
    assert [(p["code"], p["file_offset"], p["phys_offset"]) for p in probs] == [(code, off, m["wroteOffset"])]
    assert probs[0]["skipped"] == m["wroteBytes"]
    assert [x["phys_offset"] for x in msgs] == _offsets("rmq4-basic", skip={SEQ})


def test_overwritten_magic(tmp_path):
    cl = _copy("rmq4-basic", tmp_path)
    fname, off, _m = _locate("rmq4-basic", SEQ)
    patch(cl / fname, off + 4, b"\xde\xad\xbe\xef")
    rc, msgs, probs = _dump(cl)
    assert rc == 1 and [(p["code"], p["file_offset"]) for p in probs] == [("bad_magic", off)]
    assert "0xDEADBEEF" in probs[0]["detail"]
    assert len(msgs) == len(manifest("rmq4-basic")) - 1


def test_body_bit_flip_keeps_record(tmp_path):
    cl = _copy("rmq4-basic", tmp_path)
    fname, off, m = _locate("rmq4-basic", SEQ)
    assert m["body_len"] > 10
    _flip(cl / fname, off + HDR.sizeof() + 5)
    rc, msgs, probs = _dump(cl)
    assert rc == 1
    assert [(p["code"], p["phys_offset"]) for p in probs] == [("body_crc_mismatch", m["wroteOffset"])]
    assert probs[0]["file_offset"] == off + HDR.sizeof()
    bad = [x for x in msgs if not x["crc_ok"]]
    assert [x["phys_offset"] for x in bad] == [m["wroteOffset"]]
    assert len(msgs) == len(manifest("rmq4-basic"))


def test_property_bit_flip_caught_by_property_crc(tmp_path):
    cl = _copy("rmq53-v2", tmp_path)
    fname, off, m = _locate("rmq53-v2", 100)
    _flip(cl / fname, off + m["wroteBytes"] - 30, 1)  # inside the properties, before __CRC32#
    rc, msgs, probs = _dump(cl)
    assert rc == 1
    assert [(p["code"], p["file_offset"]) for p in probs] == [("prop_crc_mismatch", off)]
    assert [x["phys_offset"] for x in msgs if x["prop_crc_ok"] is False] == [m["wroteOffset"]]


def test_property_separator_damage_reported(tmp_path):
    cl = _copy("rmq4-basic", tmp_path)
    fname, off, m = _locate("rmq4-basic", SEQ)
    props_at = off + m["wroteBytes"] - m["propertiesStringUtf8Len"]
    sep = m["propertiesString"].encode().index(b"\x01")
    patch(cl / fname, props_at + sep, b"\xff")
    rc, _msgs, probs = _dump(cl)
    assert rc == 1
    assert [(p["code"], p["file_offset"], p["phys_offset"]) for p in probs] == [("bad_properties", props_at, m["wroteOffset"])]


def test_physical_offset_field_damage(tmp_path):
    cl = _copy("rmq4-basic", tmp_path)
    fname, off, _m = _locate("rmq4-basic", SEQ)
    _flip(cl / fname, off + field_offset(HDR, "phys_offset") + 7, 4)
    rc, msgs, probs = _dump(cl)
    assert rc == 1
    assert [(p["code"], p["file_offset"]) for p in probs] == [("phys_offset_mismatch", off)]
    assert len(msgs) == len(manifest("rmq4-basic"))


def test_zeroed_range(tmp_path):
    cl = _copy("rmq4-basic", tmp_path)
    fname, off, m = _locate("rmq4-basic", SEQ)
    nxt = manifest("rmq4-basic")[SEQ + 1]
    assert nxt["wroteOffset"] == m["wroteOffset"] + m["wroteBytes"], "consecutive records"
    length = m["wroteBytes"] + nxt["wroteBytes"]
    patch(cl / fname, off, b"\0" * length)
    rc, msgs, probs = _dump(cl)
    assert rc == 1
    assert [(p["code"], p["file_offset"], p["skipped"]) for p in probs] == [("zeroed_range", off, length)]
    assert [x["phys_offset"] for x in msgs] == _offsets("rmq4-basic", skip={SEQ, SEQ + 1})


def test_truncated_mid_record(tmp_path):
    cl = _copy("rmq4-basic", tmp_path)
    fname, off, m = _locate("rmq4-basic", SEQ)
    with open(cl / fname, "r+b") as f:
        f.truncate(off + 50)
    rc, msgs, probs = _dump(cl)
    assert rc == 1
    codes = [(p["code"], p["file"].endswith(fname), p["file_offset"]) for p in probs]
    assert ("commitlog_file_size", True, off + 50) in codes
    assert ("truncated_tail" if 50 < 8 else "record_past_end", True, off) in codes
    lost = {x["seq"] for x in manifest("rmq4-basic") if x["wroteOffset"] >= m["wroteOffset"] and x["wroteOffset"] < m["wroteOffset"] - off + 131072}
    assert [x["phys_offset"] for x in msgs] == _offsets("rmq4-basic", skip=lost)


def test_garbage_in_zero_tail(tmp_path):
    cl = _copy("rmq4-basic", tmp_path)
    last = sorted(cl.iterdir())[-1]
    end = max(x["wroteOffset"] + x["wroteBytes"] for x in manifest("rmq4-basic")) - int(last.name)
    patch(last, end, random.Random(7).randbytes(300))
    rc, msgs, probs = _dump(cl)
    assert rc == 1
    assert [(p["code"], p["file_offset"]) for p in probs] == [("trailing_garbage", end)]
    assert probs[0]["skipped"] == 131072 - end
    assert len(msgs) == len(manifest("rmq4-basic"))


def test_garbage_appended_past_file_size(tmp_path):
    cl = _copy("rmq4-flags", tmp_path)
    files = sorted(cl.iterdir())
    with open(files[0], "ab") as f:
        f.write(b"\x13\x37" * 40)
    rc, msgs, probs = _dump(cl)
    assert rc == 1
    assert ("commitlog_file_size", 65536 + 80) in [(p["code"], p["file_offset"]) for p in probs]
    assert len(msgs) == len(manifest("rmq4-flags"))


def test_commitlog_directory_layout_problems(tmp_path):
    cl = _copy("rmq4-basic", tmp_path)
    files = sorted(cl.iterdir())
    files[5].unlink()
    (cl / "notes.txt").write_text("x")
    rc, msgs, probs = _dump(cl)
    assert rc == 1
    codes = {p["code"] for p in probs}
    assert {"commitlog_gap", "commitlog_bad_file_name"} <= codes
    lost = {x["seq"] for x in manifest("rmq4-basic") if 5 * 131072 <= x["wroteOffset"] < 6 * 131072}
    assert [x["phys_offset"] for x in msgs] == _offsets("rmq4-basic", skip=lost)


def test_wrong_input_is_one_line_exit_2(tmp_path):
    for args in (["commitlog", tmp_path / "missing"], ["commitlog", store_root("rmq4-basic") / "checkpoint"], ["commitlog", tmp_path]):
        r = run_proc(*args)
        assert r.returncode == 2, (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    r = run_proc("commitlog", store_root("rmq4-basic") / "commitlog", "--since", "yesterday-ish")
    assert r.returncode == 2 and "Traceback" not in r.stderr


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    damages=st.lists(st.tuples(st.integers(0, 65536 * 3 - 1), st.integers(1, 400), st.sampled_from(["zero", "flip", "random"])), min_size=1, max_size=4),
    seed=st.integers(0, 2**32 - 1),
)
def test_random_damage_never_loses_undamaged_records(tmp_path_factory, damages, seed):
    """Whatever is damaged, every record that does not overlap the damage is still decoded."""
    tmp = tmp_path_factory.mktemp("fuzz")
    cl = _copy("rmq4-flags", tmp)
    rnd = random.Random(seed)
    touched = []
    for phys, length, how in damages:
        fname = f"{phys // 65536 * 65536:020d}"
        off = phys % 65536
        length = min(length, 65536 - off)
        if how == "zero":
            data = b"\0" * length
        elif how == "random":
            data = rnd.randbytes(length)
        else:
            data = None
            _flip(cl / fname, off, rnd.randrange(8))
            length = 1
        if data is not None:
            patch(cl / fname, off, data)
        touched.append((phys, phys + length))
    _rc, rows, probs = _dump(cl)
    msgs = [x["phys_offset"] for x in rows]
    intact = [m["wroteOffset"] for m in manifest("rmq4-flags") if not any(a < m["wroteOffset"] + m["wroteBytes"] and m["wroteOffset"] < b for a, b in touched)]
    assert set(intact) <= set(msgs)
    assert len(msgs) == len(set(msgs))
    for p in probs:
        assert p["code"] and p["file"] and p["detail"]


def _ranged(cl_dir: Path, step: int):
    """Scan every file in byte ranges of `step`, as the parallel engines do."""
    from rmqdump.readers.mapped import MappedFile
    from rmqdump.scan import scanner

    msgs, events = [], []
    cl = CommitLog.open(cl_dir)
    for seg in cl.files:
        with MappedFile(seg.path, limit=cl.file_size) as mf:
            for start in range(0, mf.size, step):
                for b in scanner.file_batches_from(seg, mf, start=start, end=min(start + step, mf.size)):
                    msgs += b.phys.tolist()
                    for i in sorted(b.record_problems):
                        events += [(p.code, p.phys_offset) for p in b.record_problems[i]]
                    events += [(getattr(e, "code", "blank"), e.phys_offset) for e in b.events]
    return msgs, events


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    damages=st.lists(st.tuples(st.integers(0, 65536 * 3 - 1), st.integers(1, 600), st.sampled_from(["zero", "random"])), min_size=1, max_size=3),
    step=st.sampled_from([1000, 4096, 20000]),
    seed=st.integers(0, 2**32 - 1),
)
def test_byte_ranges_report_exactly_what_one_scan_reports(tmp_path_factory, damages, step, seed):
    """Ranges own the records starting in them and the damage right after their last record: no loss, no duplicate."""
    cl = _copy("rmq4-flags", tmp_path_factory.mktemp("ranges"))
    rnd = random.Random(seed)
    for phys, length, how in damages:
        off = phys % 65536
        length = min(length, 65536 - off)
        patch(cl / f"{phys // 65536 * 65536:020d}", off, b"\0" * length if how == "zero" else rnd.randbytes(length))
    whole = _ranged(cl, 1 << 30)
    assert _ranged(cl, step) == whole


def test_zero_stretches_are_skipped_exactly(tmp_path):
    """resync jumps a zero stretch in one read and still finds the first record after it."""
    from rmqdump.readers.mapped import MappedFile
    from rmqdump.scan.resync import first_nonzero, resync

    cl = _copy("rmq4-crash", tmp_path)
    files = sorted(cl.iterdir())
    empty = files[-1]  # the broker's preallocated next file: all zeros
    seg = CommitLog.open(cl).files[-1]
    with MappedFile(empty) as mf:
        assert first_nonzero(mf, 0, mf.size) is None
        assert resync(seg, mf, 0) is None and resync(seg, mf, 5000) is None
    fname, off, m = _locate("rmq4-crash", 300)
    nxt = manifest("rmq4-crash")[301]
    patch(cl / fname, off, b"\0" * m["wroteBytes"])
    seg = next(s for s in CommitLog.open(cl).files if s.name == fname)
    with MappedFile(cl / fname) as mf:
        lead = next(i for i, b in enumerate(nxt["wroteBytes"].to_bytes(4, "big")) if b)  # totalSize's zero high bytes
        assert first_nonzero(mf, off, mf.size) == off + m["wroteBytes"] + lead
        assert resync(seg, mf, off) == nxt["wroteOffset"] - seg.base


def test_zero_search_skips_holes_of_a_sparse_file(tmp_path):
    """A sparse copy of a real CommitLog file: holes are zeros without being read, data after a hole is found."""
    from rmqdump.readers.mapped import MappedFile
    from rmqdump.scan.resync import first_nonzero

    src = sorted(_copy("rmq4-crash", tmp_path).iterdir())[0]
    body = src.read_bytes()
    sparse = tmp_path / "sparse" / src.name
    sparse.parent.mkdir()
    size = len(body) + (8 << 20)
    with open(sparse, "wb") as f:  # a hole, the record bytes at 4 MiB, a hole to the end
        f.truncate(size)
        f.seek(4 << 20)
        f.write(body)
    first = next(i for i, b in enumerate(body) if b)
    with MappedFile(sparse) as mf:
        assert first_nonzero(mf, 0, mf.size) == (4 << 20) + first
        assert first_nonzero(mf, 0, 4 << 20) is None
        last = len(body) - len(body.rstrip(b"\0"))
        assert first_nonzero(mf, (4 << 20) + len(body) - last, mf.size) is None
        assert first_nonzero(mf, (4 << 20) + len(body) - last - 1, mf.size) == (4 << 20) + len(body) - last - 1


def test_resync_steps_over_a_zeroed_stretch_longer_than_its_search_window(tmp_path):
    """A record of rmq4-basic's first file zeroed from its 10th byte to the next record more than 64 KiB on (the
    first search window): the resync from inside it finds that next record at its exact offset (the manifest's)."""
    from rmqdump.readers.commitlog import CommitLog
    from rmqdump.readers.mapped import MappedFile
    from rmqdump.scan.resync import resync

    root = tmp_path / "s"
    shutil.copytree(store_root("rmq4-basic"), root)
    puts = sorted((m for m in manifest("rmq4-basic") if m["wroteOffset"] < 131072), key=lambda m: m["wroteOffset"])
    a = puts[3]["wroteOffset"]
    b = next(m["wroteOffset"] for m in puts if m["wroteOffset"] >= a + (100 << 10))
    patch(root / "commitlog" / f"{0:020d}", a + 10, bytes(b - a - 10))
    seg = CommitLog.open(str(root / "commitlog")).files[0]
    with MappedFile(seg.path) as mf:
        assert resync(seg, mf, a + 1) == b
