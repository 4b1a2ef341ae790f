"""rebuild on the real 5.3.3 stores: Batch ConsumeQueue and LMQ queues byte for byte, ConsumeQueue ext as far as it can be proven."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from conftest import jsonl, manifest, run, store_root

from rmqdump.readers.cqext import EXT_HEADER_SIZE, find_ext_queues

SIZING = ["--hash-slots", "500", "--index-entries", "2000"]  # the README's maxHashSlotNum / maxIndexNum


def rebuild(name: str, out: Path, *args: str) -> dict:
    r = run("rebuild", store_root(name), "--out", out, "-f", "jsonl", "--no-sync", *SIZING, *args)
    rows = jsonl(r.stdout)
    summary = rows[-1]
    assert r.exit_code == 0, rows
    assert summary["verify"]["ok"]
    return summary


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_batch_cq_store_rebuilds_byte_identical(tmp_path):
    s = rebuild("rmq53-batchcq", tmp_path / "out")
    src = store_root("rmq53-batchcq")
    for part in ("batchconsumequeue", "consumequeue"):
        assert tree(tmp_path / "out" / part) == tree(src / part), part
    assert s["settings"]["bcq_file_size"] == 2300 and "inferred" in s["settings"]["source"]["bcq_file_size"]
    assert s["cq_units"] == sum(1 for x in manifest("rmq53-batchcq") if x["kind"] == "cq_unit")


def test_batch_cq_file_size_from_the_flag_cuts_the_same_units_differently(tmp_path):
    rebuild("rmq53-batchcq", tmp_path / "out", "--bcq-file-size", "500")  # 10 units and 40 unused bytes per file
    src = store_root("rmq53-batchcq") / "batchconsumequeue"
    for qdir in sorted(p for p in src.glob("*/*") if p.is_dir()):
        units = b"".join(f.read_bytes() for f in sorted(qdir.iterdir())).rstrip(b"\0")
        n = -(-len(units) // 46)
        files = sorted((tmp_path / "out" / "batchconsumequeue" / qdir.relative_to(src)).iterdir())
        assert [f.name for f in files] == [f"{i * 500:020d}" for i in range(-(-n // 10))]
        got = b"".join(f.read_bytes()[:460] for f in files)
        assert got.rstrip(b"\0") == units
        assert all(f.read_bytes()[460:] == bytes(40) for f in files)


def test_lmq_store_rebuilds_byte_identical(tmp_path):
    rebuild("rmq53-lmq", tmp_path / "out")
    assert tree(tmp_path / "out" / "consumequeue") == tree(store_root("rmq53-lmq") / "consumequeue")


def test_ext_store_with_the_bitmap_length_rebuilds_the_queues_byte_identical_and_claims_no_filter_bits(tmp_path):
    s = rebuild("rmq53-cqext", tmp_path / "out", "--ext-bitmap-bits", "112")
    src = store_root("rmq53-cqext")
    assert tree(tmp_path / "out" / "consumequeue") == tree(src / "consumequeue")
    assert any("all ones" in n for n in s["notes"])
    want = find_ext_queues(str(src))
    got = find_ext_queues(str(tmp_path / "out"))
    assert sorted(got) == sorted(want)
    for key, wq in want.items():
        gq = got[key]
        wu, gu = wq.units(), gq.units()
        assert len(gu) == len(wu) == sum(1 for x in manifest("rmq53-cqext") if x["kind"] == "cq_unit" and (x["topic"], x["queueId"]) == key)
        for name in ("address", "pos", "size", "tags_code", "store_time", "bitmap_size"):
            assert np.array_equal(getattr(gu, name), getattr(wu, name)), name
        wraw, graw = Path(wq.files[0].path).read_bytes(), Path(gq.files[0].path).read_bytes()
        assert len(graw) == len(wraw)
        for p, size in zip(wu.pos.tolist(), wu.size.tolist(), strict=True):
            assert graw[p : p + EXT_HEADER_SIZE] == wraw[p : p + EXT_HEADER_SIZE]  # size, tagsCode, store time, bitmap size
            assert graw[p + EXT_HEADER_SIZE : p + size] == b"\xff" * (size - EXT_HEADER_SIZE)
        end = int(wu.pos[-1] + wu.size[-1])
        assert graw[end:] == wraw[end:] == bytes(len(wraw) - end)


def test_ext_store_without_the_bitmap_length_writes_plain_tags_codes_and_says_so(tmp_path):
    s = rebuild("rmq53-cqext", tmp_path / "out")
    assert not (tmp_path / "out" / "consumequeue_ext").exists()
    assert any("--ext-bitmap-bits" in n for n in s["notes"])
    units = [x for x in manifest("rmq53-cqext") if x["kind"] == "cq_unit"]
    os.symlink(store_root("rmq53-cqext") / "commitlog", tmp_path / "out" / "commitlog")
    got = [x for x in jsonl(run("cq", "dump", "-s", tmp_path / "out", "-t", "ExtTopicB", "-q", 1, "-f", "jsonl").stdout) if x["kind"] == "unit" and x["valid"]]
    want = [x for x in units if (x["topic"], x["queueId"]) == ("ExtTopicB", 1)]
    assert [(g["phys_offset"], g["tags_code"]) for g in got] == [(w["commitLogOffset"], w["tagsCode"]) for w in want]
    assert all("ext_address" not in g for g in got)
