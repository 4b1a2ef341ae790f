"""A Problem's JSON Lines object is written by Problem.to_dict alone, and read back by Problem.from_dict."""

from __future__ import annotations

import json

from conftest import copy_store, jsonl, manifest, run

from rmqdump.checks import cqunits, cqverify, indexverify
from rmqdump.common.problems import Problem
from rmqdump.readers.store import Store


def _damaged(tmp_path):
    """rmq4-crash with a record's magic overwritten, one ConsumeQueue unit pointing far away and one index entry moved."""
    root = copy_store("rmq4-crash", tmp_path)
    m = manifest("rmq4-crash")[10]
    cl = sorted((root / "commitlog").iterdir())[0]
    with open(cl, "r+b") as fh:
        fh.seek(m["wroteOffset"] - int(cl.name) + 4)
        fh.write(b"\xde\xad\xbe\xef")
    cq = sorted((root / "consumequeue").glob("*/*/*"))[0]
    with open(cq, "r+b") as fh:
        fh.seek(3 * 20)
        fh.write((10**9).to_bytes(8, "big"))
    return root


def test_verify_lines_are_to_dict_of_the_problems_with_the_command_columns(tmp_path):
    root = _damaged(tmp_path)
    res = run("cq", "verify", "-s", root, "-f", "jsonl")
    lines = [d for d in jsonl(res.stdout) if d["kind"] == "problem"]
    probs = list(cqverify.verify(Store.open(str(root))))
    assert {"bad_magic", "cq_dangling"} <= {p.code for p in probs}
    assert lines == [p.to_dict(cqunits.PROBLEM_COLUMNS) for p in probs]
    for d in lines:  # every column on every line, file and file_offset last
        assert list(d)[: 2 + len(cqunits.PROBLEM_COLUMNS)] == ["kind", "code", *cqunits.PROBLEM_COLUMNS]
        assert list(d)[-2:] == ["file", "file_offset"]
    commitlog_line = next(d for d in lines if d["code"] == "bad_magic")
    assert all(commitlog_line[c] is None for c in cqunits.PROBLEM_COLUMNS)
    assert commitlog_line["phys_offset"] == manifest("rmq4-crash")[10]["wroteOffset"]


def test_index_columns_are_present_on_commitlog_problems(tmp_path):
    root = _damaged(tmp_path)
    probs = list(indexverify.verify(str(root)))
    bad = next(p for p in probs if p.code == "bad_magic")
    d = bad.to_dict(indexverify.PROBLEM_COLUMNS)
    assert list(d)[:5] == ["kind", "code", "index_file", "entry", "slot"] and d["index_file"] is None
    assert d["file"] == str(sorted((root / "commitlog").iterdir())[0])


def test_from_dict_reads_back_what_to_dict_wrote(tmp_path):
    root = _damaged(tmp_path)
    probs = list(cqverify.verify(Store.open(str(root)))) + list(indexverify.verify(str(root)))
    assert len(probs) >= 3
    for p in probs:
        assert Problem.from_dict(json.loads(json.dumps(p.to_dict()))) == p


def test_more_keys_come_last():
    p = Problem("bad_magic", "/s/commitlog/0", 8, "magic 0x0", phys_offset=8, extra={"skipped": 4})
    assert list(p.to_dict(broker="b1")) == ["kind", "code", "file", "file_offset", "phys_offset", "detail", "skipped", "broker"]
