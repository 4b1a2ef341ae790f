"""`rmqdump commitlog` output, compiled per batch, is exactly the reference listing's, line for line.

The reference is rmqdump.query.listing.list_commitlog: one Message (or Blank, Problem)
at a time, printed with json.dumps of to_dict(), itself pinned to the broker's manifests by
test_commitlog_decode.py. Compared on every real store, on damaged copies and with filters.
"""

from __future__ import annotations

import json

import pytest
from conftest import STORES, copy_store, flip, manifest, patch, run, store_root
from test_export import check_intact

from rmqdump.cli import records
from rmqdump.common.timeutil import iso
from rmqdump.query.listing import Filter, list_commitlog
from rmqdump.readers.commitlog import Blank, CommitLog
from rmqdump.readers.message import Message
from rmqdump.scan import scanner

ENCODE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def _reference(cl_dir, flt: Filter, check_crc=True) -> tuple[list[str], int]:
    out, problems = [], 0
    for e in list_commitlog(CommitLog.open(str(cl_dir)), flt, check_crc=check_crc):
        out.append(ENCODE(e.to_dict()))
        problems += not isinstance(e, (Message, Blank))
    return out, problems


def _lines(cl_dir, *args) -> list[str]:
    r = run("commitlog", cl_dir, "-f", "jsonl", *args)
    assert r.exit_code in (0, 1), r.stderr
    lines = r.stdout.splitlines()
    assert json.loads(lines[-1])["kind"] == "summary"
    return lines[:-1]


@pytest.mark.parametrize("name", STORES)
def test_every_record_of_every_real_store(name, monkeypatch):
    cl = store_root(name) / "commitlog"
    assert _lines(cl) == _reference(cl, Filter())[0]
    monkeypatch.setattr(records, "PARALLEL_ROWS", 2)  # batches split between two threads
    monkeypatch.setattr(records, "SUB_ROWS", 7)  # and cut into small kernel calls
    assert _lines(cl, "--no-crc") == _reference(cl, Filter(), check_crc=False)[0]


def test_filters_and_limit_cut_where_the_reference_does():
    cl = store_root("rmq4-basic") / "commitlog"
    man = manifest("rmq4-basic")
    key = next(k for x in man for k in x["keys"] if k.startswith("dup-key"))
    t0 = man[100]["storeTimestamp"]
    cases = [
        (["--topic", "orders"], Filter(topic="orders")),
        (["--tag", "订单创建"], Filter(tag="订单创建")),
        (["--key", key], Filter(key=key)),
        (["--key", man[42]["uniqKey"]], Filter(key=man[42]["uniqKey"])),
        (["--queue", "2", "--since", str(t0)], Filter(queue=2, since=t0)),
        (["--limit", "7"], Filter(limit=7)),
        (["--topic", "orders", "--limit", "100"], Filter(topic="orders", limit=100)),
    ]
    for args, flt in cases:
        assert _lines(cl, *args) == _reference(cl, flt)[0], args


def test_damaged_store_problems_interleave_as_in_the_reference(tmp_path, monkeypatch):
    monkeypatch.setattr(records, "PARALLEL_ROWS", 2)
    root = copy_store("rmq4-basic", tmp_path)
    cl = root / "commitlog"
    first = cl / "00000000000000000000"
    b = next(iter(scanner.batches(CommitLog.open(str(cl)))))
    body_pos, props_pos, pos = (b.cols[k].tolist() for k in ("body_pos", "properties_pos", "_pos"))
    flip(first, body_pos[3] + 5)  # a body byte: body_crc_mismatch, the record still listed
    patch(first, props_pos[5] + 1, b"\xff")  # invalid UTF-8 in the properties: bad_properties
    patch(first, props_pos[7] + 2, b"\x05")  # a control character JSON escapes: the Python way, same text
    patch(first, pos[9] + 4, b"\xde\xad\xbe\xef")  # a record's magic: bad_magic, resync
    damaged = [(body_pos[3] + 5, body_pos[3] + 6), (props_pos[5] + 1, props_pos[5] + 2), (props_pos[7] + 2, props_pos[7] + 3), (pos[9] + 4, pos[9] + 8)]
    del b
    want, problems = _reference(cl, Filter())
    assert problems >= 3
    got = _lines(cl)
    assert got == want
    # the broker's truth: every record the damage left alone, exactly; the others are records 3, 5 and 7 (9 lost its magic)
    messages = [d for d in map(json.loads, got) if d["kind"] == "message"]
    touched = check_intact("rmq4-basic", messages, damaged, broker=False)
    assert [(d["phys_offset"], d["crc_ok"]) for d in touched] == [(pos[3], False), (pos[5], True), (pos[7], True)]
    assert _lines(cl, "--limit", "6") == _reference(cl, Filter(limit=6))[0]
    monkeypatch.setattr(records, "SUB_ROWS", 3)  # the limit reached inside a kernel's sub-batch
    assert _lines(cl, "--limit", "6") == _reference(cl, Filter(limit=6))[0]
    assert _lines(cl, "--limit", "40") == _reference(cl, Filter(limit=40))[0]


def test_body_modes_match_the_reference():
    cl = store_root("rmq4-flags") / "commitlog"
    for how in ("hex", "base64", "text"):
        r = run("commitlog", cl, "-f", "jsonl", "--body", how, "--decompress")
        got = [json.loads(x) for x in r.stdout.splitlines()[:-1]]
        ref = []
        from rmqdump.cli.render import encode_body

        for e in list_commitlog(CommitLog.open(str(cl)), Filter(), with_body=True, uncompress=True):
            d = e.to_dict()
            if isinstance(e, Message):
                d["body"] = encode_body(e.body, how)
                d["body_encoding"] = "utf-8" if how == "text" else how
            ref.append(d)
        assert got == ref, how


def test_table_lines_hold_the_reference_values(monkeypatch):
    """Lines align under the header printed last (printed again when a column widens)."""
    monkeypatch.setattr(records, "PARALLEL_ROWS", 2)  # cells written by two threads
    cl = store_root("rmq4-flags") / "commitlog"
    r = run("commitlog", cl)
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["offset", "size", "topic", "q", "qoffset", "stored", "(UTC)", "tags", "keys", "uniq_key", "tx", "crc"]
    msgs = [e for e in list_commitlog(CommitLog.open(str(cl)), Filter()) if isinstance(e, Message)]
    rows, start = [], None
    for line in lines:
        if line.startswith("offset "):
            start = line.index("stored (UTC)")
        elif "<end of file" not in line:
            rows.append((line, start))
    assert len(rows) == len(msgs)
    for (line, at), m in zip(rows, msgs, strict=True):
        assert line.startswith(f"{m.phys_offset} ") and line[at:].startswith(iso(m.store_timestamp))
        assert m.topic in line and (m.tags or "") in line and " ".join(m.keys) in line
        assert not line.endswith(" ")


@pytest.mark.parametrize("name", ["rmq4-basic", "rmq4-flags", "rmq53-v2"])
def test_csv_equals_csv_writer_of_the_reference(name):
    import csv
    import io

    cl = store_root(name) / "commitlog"
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(records.CSV_COLUMNS)
    for e in list_commitlog(CommitLog.open(str(cl)), Filter()):
        d = e.to_dict()
        w.writerow(
            [json.dumps(d[k], ensure_ascii=False) if isinstance(d.get(k), (dict, list)) else ("" if d.get(k) is None else d[k]) for k in records.CSV_COLUMNS]
        )
    r = run("commitlog", cl, "-f", "csv")
    assert r.stdout == buf.getvalue()
