"""`rmqdump export -f jsonl`, line for line: each message the listing's object as the manifest says it (the model of
tests/test_cli_records.py), then the export's own fields, each line in its topic's directory, in CommitLog order
within a part file. Exact bytes, so the compiled spelling, the tail written by the kernel, the rows finished in
Python (bodies, DLedger entries) and the rows the kernels leave to Python (IPv6 hosts in rmq4-flags, rmq53-v2's
long topics) are all held to the same text."""

from __future__ import annotations

import base64
import hashlib
import json
import urllib.parse
from pathlib import Path

import pytest
from conftest import STORES, manifest, run, store_root, text_calls, unpack_store
from test_cli_records import ENCODE, message_row

from rmqdump.export import jsonlines
from rmqdump.export.dataset import export_ranges
from rmqdump.scan.splits import StoreRef


def model_rows(name: str, broker: str) -> dict[str, list[dict]]:
    """Each topic's rows in CommitLog order, from the manifest: the listing's row, then dledger_*, broker,
    compaction_* (null: no DLedger CommitLog, no compaction topic in these stores)."""
    cl = store_root(name).resolve() / "commitlog"
    out: dict[str, list[dict]] = {}
    for m in sorted(manifest(name), key=lambda m: m["wroteOffset"]):
        row = message_row(cl, m)
        row |= {"dledger_index": None, "dledger_term": None, "broker": broker, "compaction_part": None, "compaction_log_offset": None}
        out.setdefault(m["topic"], []).append((row, m))
    return out


def check_lines(got: dict[str, list[str]], name: str, broker: str, body: bool) -> None:
    """Every topic's lines are the model's rows, byte for byte; with `body`, each ends with the body the broker
    wrote (its sha256 and length in the manifest) in base64, and `body_encoding`."""
    want = model_rows(name, broker)
    assert sorted(got) == sorted(want)
    for topic, rows in want.items():
        lines = got[topic]
        assert len(lines) == len(rows), topic
        for line, (row, m) in zip(lines, rows, strict=True):
            if body:
                b64 = json.loads(line)["body"]
                raw = base64.b64decode(b64, validate=True)
                assert (len(raw), hashlib.sha256(raw).hexdigest()) == (m["body_len"], m["body_sha256"])
                row = row | {"body": b64, "body_encoding": "base64"}
            assert line == ENCODE(row) + "\n"


def exported_lines(out: Path) -> dict[str, list[str]]:
    """Each topic directory's lines: its part files in task order, each file's lines as written (checked in order)."""
    got: dict[str, list[str]] = {}
    for d in sorted(out.iterdir()):
        assert d.name.startswith("topic="), d
        topic = urllib.parse.unquote(d.name[len("topic=") :])
        for f in sorted(d.iterdir(), key=lambda p: int(p.stem.split("-")[1])):
            text = f.read_bytes().decode("utf-8")
            assert text.endswith("\n")
            got.setdefault(topic, []).extend(line + "\n" for line in text[:-1].split("\n"))
    return got


@pytest.mark.parametrize("body", ["none", "raw"])
@pytest.mark.parametrize("name", STORES)
def test_every_line_is_the_manifest_row(name, body, tmp_path):
    out = tmp_path / "j"
    # 32 KiB ranges over two workers: many tasks, records cut at range ends, several part files per topic
    r = run("export", "-s", f"b1={store_root(name)}", "-o", out, "-f", "jsonl", "--body", body, "--range-bytes", "32K", "-j", "2")
    assert r.exit_code == 0, r.stderr
    check_lines(exported_lines(out), name, "b1", body == "raw")


@pytest.mark.parametrize("name", ["rmq4-flags", "rmq53-v2"])
def test_small_kernel_calls_and_rows_left_to_python(name, tmp_path, monkeypatch):
    """Kernel calls of 5 records: the rows spelled from Arrow (rmq4-flags' IPv6 hosts, rmq53-v2's long topics) fall
    at every place in a call, first, last and alone."""
    monkeypatch.setattr(jsonlines, "SUB_ROWS", 5)
    left = []
    real = jsonlines.arrow_lines

    def spy(rb, *a):
        lines = real(rb, *a)
        if "kind" in rb.schema.names:  # whole lines, not a line's own fields
            left.extend(lines)
        return lines

    monkeypatch.setattr(jsonlines, "arrow_lines", spy)
    for body in (False, True):
        out = tmp_path / f"j{body}"
        export_ranges([StoreRef("b1", str(store_root(name)))], str(out), fmt="jsonl", with_body=body, sync=False)
        check_lines(exported_lines(out), name, "b1", body)
    assert left, "no row was left to Python: the test does not reach that path"


def test_dledger_lines_hold_each_entry(tmp_path):
    """A DLedger CommitLog: each line finished with its entry's index (the put's sequence number in the manifest)
    and term (0: one leader throughout), in the export's key order."""
    root = unpack_store("rmq53-dledger", tmp_path)
    out = tmp_path / "j"
    export_ranges([StoreRef("d", str(root))], str(out), fmt="jsonl", sync=False)
    puts = {p["wroteOffset"]: p for p in manifest("rmq53-dledger") if p.get("kind") == "put"}
    got = exported_lines(out)
    assert sum(map(len, got.values())) == len(puts)
    keys = [*message_row(store_root("rmq4-basic") / "commitlog", manifest("rmq4-basic")[0]), "dledger_index", "dledger_term", "broker", "compaction_part", "compaction_log_offset"]
    for topic, lines in got.items():
        rows = [json.loads(line) for line in lines]
        assert [r["phys_offset"] for r in rows] == sorted(r["phys_offset"] for r in rows)
        for line, r in zip(lines, rows, strict=True):
            p = puts[r["phys_offset"]]
            assert list(r) == keys and line == ENCODE(r) + "\n"
            assert (r["topic"], r["total_size"], r["msg_id"], r["dledger_index"], r["dledger_term"], r["broker"]) == (topic, p["wroteBytes"], p["msgId"], p["seq"], 0, "d")
            assert (r["compaction_part"], r["compaction_log_offset"]) == (None, None)


def test_a_kernel_call_holds_at_most_text_bytes_of_records(tmp_path, monkeypatch):
    """Bodies are spelled into the kernel's buffer: a call takes TEXT_BYTES of records at most (one record alone
    when it is bigger); the lines are the model's."""
    calls = text_calls(monkeypatch, jsonlines)
    monkeypatch.setattr(jsonlines, "TEXT_BYTES", 3000)
    export_ranges([StoreRef("b1", str(store_root("rmq4-flags")))], str(tmp_path / "j"), fmt="jsonl", with_body=True, sync=False)
    check_lines(exported_lines(tmp_path / "j"), "rmq4-flags", "b1", True)
    assert calls and all(sum(c) <= 3000 or len(c) == 1 for c in calls) and max(map(len, calls)) > 1
