"""`rmqdump offsets`: fastjson offsets files against the queues; resets and .bak disagreements flagged."""

from __future__ import annotations

import json
import os
from collections import Counter

import pytest
from conftest import copy_store, jsonl, manifest, run, run_proc, store_root

from rmqdump.readers.configfiles import loads_fastjson, quote_integer_keys

WITH_OFFSETS = ["rmq4-basic", "rmq5-basic", "rmq53-v2"]


def offsets(root, *args):
    r = run("offsets", "-s", root, "-f", "jsonl", *args)
    rows = jsonl(r.stdout)
    return r.exit_code, [x for x in rows if x["kind"] == "offset"], rows[-1]


def test_fastjson_integer_keys():
    assert quote_integer_keys('{"t@g":{0:12,1:3}}') == '{"t@g":{"0":12,"1":3}}'
    assert quote_integer_keys("{\n\t0 :1, -2:3}") == '{\n\t"0" :1, "-2":3}'
    assert quote_integer_keys('{"a,1:b":"{2:3}","x":[1,2]}') == '{"a,1:b":"{2:3}","x":[1,2]}'
    assert loads_fastjson('{"k":{7:8},"s":"\\"{9:1}"}') == {"k": {"7": 8}, "s": '"{9:1}'}


@pytest.mark.parametrize("name", WITH_OFFSETS)
def test_offsets_against_the_queues(name):
    code, rows, summary = offsets(store_root(name))
    assert code == 0 and summary["flagged"] == 0
    sizes = Counter((m["topic"], m["queueId"]) for m in manifest(name))
    raw = loads_fastjson((store_root(name) / "config" / "consumerOffset.json").read_text())["offsetTable"]
    want = {(k.split("@")[1], k.split("@")[0], int(q)): v for k, per in raw.items() for q, v in per.items()}
    assert {(r["group"], r["topic"], r["queue_id"]): r["committed"] for r in rows} == want
    for r in rows:
        n = sizes[(r["topic"], r["queue_id"])]
        assert (r["min_offset"], r["max_offset"], r["lag"], r["flags"]) == (0, n, n - r["committed"], ["ok"])
        assert r["committed"] == n // 2  # the README: half of each queue's max offset


def test_resets_and_bak_disagreement_are_flagged(tmp_path):
    root = copy_store("rmq4-basic", tmp_path)
    n = Counter((m["topic"], m["queueId"]) for m in manifest("rmq4-basic"))
    os.remove(root / "consumequeue" / "TopicTest" / "0" / f"{0:020d}")  # queue now starts at 120
    table = {
        "offsetTable": {
            "TopicTest@g1": {0: 50, 1: n[("TopicTest", 1)] + 5, 2: 7},
            "ghost@g1": {0: 1},
        }
    }
    text = json.dumps(table, indent="\t")  # json quotes the keys; write them bare like fastjson
    text = text.replace('"0"', "0").replace('"1"', "1").replace('"2"', "2")
    (root / "config" / "consumerOffset.json").write_text(text)
    bak = {"offsetTable": {"TopicTest@g1": {0: 50, 1: 3}, "orders@g1": {3: 9}}}
    (root / "config" / "consumerOffset.json.bak").write_text(json.dumps(bak))
    code, rows, summary = offsets(root, "--group", "g1")
    assert code == 1
    got = {(r["topic"], r["queue_id"]): r["flags"] for r in rows}
    assert got == {
        ("TopicTest", 0): ["below_min"],
        ("TopicTest", 1): ["bak_differs", "above_max"],
        ("TopicTest", 2): ["not_in_bak"],
        ("ghost", 0): ["not_in_bak", "no_queue"],
        ("orders", 3): ["only_in_bak"],
    }
    by = {(r["topic"], r["queue_id"]): r for r in rows}
    assert by[("TopicTest", 0)]["min_offset"] == 120 and by[("TopicTest", 1)]["bak"] == 3 and summary["flagged"] == 5
    code, rows, _ = offsets(root, "--topic", "orders")
    assert code == 1 and [r["queue_id"] for r in rows] == [3]


def test_table_and_missing_file():
    r = run_proc("offsets", "-s", store_root("rmq4-basic"))
    assert r.returncode == 0 and "groupA" in r.stdout and "0 flagged" in r.stderr
    r = run("offsets", "-s", store_root("rmq4-flags"))
    assert r.exit_code == 2 and r.stderr.count("\n") == 1 and "consumerOffset.json" in r.stderr
    r = run("offsets", "-s", store_root("rmq4-basic"), "--group", "nobody")
    assert r.exit_code == 1


def test_unparseable_offsets_file_is_exit_2(tmp_path):
    root = copy_store("rmq5-basic", tmp_path)
    (root / "config" / "consumerOffset.json").write_text('{"offsetTable":{')
    r = run("offsets", "-s", root)
    assert r.exit_code == 2 and "bad_config" in r.stderr and "byte" in r.stderr


def test_one_unreadable_file_is_named_and_the_other_listed(tmp_path):
    """consumerOffset.json cut short while its .bak is whole: the .bak's offsets are listed and the main file named (bad_config,
    the byte where its JSON stops), exit 1; before, the damaged file was passed over without a word."""
    root = copy_store("rmq5-basic", tmp_path)
    main = root / "config" / "consumerOffset.json"
    text = '{"offsetTable":{"orders@g":{0:1,1:2}'  # the closing brace lost: JSON ends at its last byte
    main.write_text(text)
    (root / "config" / "consumerOffset.json.bak").write_text('{"offsetTable":{"orders@g":{0:3}}}')
    r = run("offsets", "-s", root, "-f", "jsonl")
    rows = jsonl(r.stdout)
    assert r.exit_code == 1
    assert [(x["code"], x["file"], x["detail"]) for x in rows if x["kind"] == "problem"] == [
        ("bad_config", str(main), f"not JSON: Expecting ',' delimiter at byte {len(text)}")
    ]
    assert [(x["group"], x["topic"], x["queue_id"], x["committed"], x["bak"]) for x in rows if x["kind"] == "offset"] == [("g", "orders", 0, None, 3)]


def test_config_error_names_the_files_byte(tmp_path):
    """The byte offset of a JSON error counts the file's bytes (UTF-8), not the characters of the text with its keys quoted."""
    from rmqdump.readers.configfiles import read_config

    raw = '{\n\t0:"é",\n\t1:x}'.encode()  # fastjson's bare integer keys; a 2-byte character; the error at the x
    (tmp_path / "t.json").write_bytes(raw)
    assert read_config(str(tmp_path / "t.json")).error == f"not JSON: Expecting value at byte {raw.index(b'x')}"
