"""`rmqdump commitlog` output, compiled per batch, holds exactly what the broker wrote, line for line.

The expected lines are a model written here from each store's manifest (what the
broker's own code wrote, field by field) and the store's bytes where the manifest
is silent (the end-of-file markers): every key of every JSON Lines row in its
order, every CSV cell, the table's cells. Compared on every real store, on a
damaged copy and with filters, limits, body modes and small kernel batches.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import os
from datetime import datetime, timezone

import pytest
from conftest import STORES, copy_store, flip, manifest, patch, run, store_root, text_calls
from test_export import check_intact

from rmqdump.cli import records
from rmqdump.schemas import constants as C
from rmqdump.schemas import message_header

ENCODE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
HDR = message_header()


def _props(text: str) -> dict:
    """The properties string the broker stored, as name -> value in its order."""
    return dict(p.split("\x01", 1) for p in text.split("\x02") if p)


def _flag_names(sys_flag: int) -> list[str]:
    names = [n for bit, n in C.FLAG_NAMES.items() if sys_flag & bit]
    if sys_flag & C.FLAG_COMPRESSED:
        names.append("COMPRESSION_" + C.COMPRESSION_NAMES[(sys_flag & C.COMPRESSION_MASK) >> C.COMPRESSION_SHIFT].upper())
    return names


def _file(cl, m: dict) -> str:
    size = os.path.getsize(next(cl.iterdir()))
    return os.path.join(str(cl), f"{m['wroteOffset'] // size * size:020d}")


def message_row(cl, m: dict, *, crc: bool = True) -> dict:
    """The JSON Lines row of the put `m` (a manifest row) read from the CommitLog directory `cl`."""
    props = _props(m["propertiesString"])
    if "storedPropCRC32" in m:
        props[C.PROPERTY_CRC32] = m["storedPropCRC32"]
    return {
        "kind": "message", "file": _file(cl, m), "phys_offset": m["wroteOffset"], "total_size": m["wroteBytes"],
        "magic_version": 2 if m.get("messageVersion") == "MESSAGE_VERSION_V2" else 1, "body_crc": m["bodyCRC"],
        "crc_ok": True if crc else None, "prop_crc_ok": (True if "storedPropCRC32" in m else None) if crc else None,
        "queue_id": m["queueId"], "flag": m["flag"], "queue_offset": m["logicsOffset"], "sys_flag": m["sysFlag"],
        "sys_flag_names": _flag_names(m["sysFlag"]), "transaction": C.TRANSACTION_NAMES[m["sysFlag"] & C.TRANSACTION_MASK],
        "born_timestamp": m["bornTimestamp"], "born_host": m["bornHost"], "store_timestamp": m["storeTimestamp"],
        "store_host": m["storeHost"], "reconsume_times": m["reconsumeTimes"], "prepared_transaction_offset": m["preparedTransactionOffset"],
        "body_length": m["body_len"], "topic": m["topic"], "properties": props, "tags": m["tags"], "keys": m["keys"],
        "uniq_key": m["uniqKey"], "msg_id": m["msgId"],
    }  # fmt: skip


def blank_rows(cl, puts: list[dict]) -> list[dict]:
    """Each file's end past its last record: the BLANK marker the broker wrote there, or the zeros it never wrote."""
    rows = []
    for f in sorted(cl.iterdir()):
        base, size = int(f.name), f.stat().st_size
        end = max((m["wroteOffset"] + m["wroteBytes"] for m in puts if base <= m["wroteOffset"] < base + size), default=base)
        if end < base + size:
            head = f.read_bytes()[end - base : end - base + 8]
            marker = "blank" if int.from_bytes(head[4:8], "big") == C.MAGIC_BLANK else "zeros"
            rows.append({"kind": "blank", "file": str(f), "phys_offset": end, "length": base + size - end, "marker": marker})
    return rows


def listing(name: str, cl, *, crc: bool = True) -> list[dict]:
    """Every row of the store's whole listing, in offset order."""
    puts = sorted(manifest(name), key=lambda m: m["wroteOffset"])
    return sorted([message_row(cl, m, crc=crc) for m in puts] + blank_rows(cl, puts), key=lambda r: r["phys_offset"])


def summary(name: str, cl, rows: list[dict]) -> dict:
    kinds = [r["kind"] for r in rows]
    n = len(list(cl.iterdir()))
    return {"kind": "summary", "files": n, "messages": kinds.count("message"), "blanks": kinds.count("blank"), "problems": kinds.count("problem")}


def upto(rows: list[dict], limit: int) -> list[dict]:
    """The rows a listing cut after its `limit`-th message prints: that message's own problems still follow it."""
    seen = 0
    for i, r in enumerate(rows):
        if r["kind"] == "message":
            if seen == limit:
                return rows[:i]
            seen += 1
        elif r["kind"] == "blank" and seen == limit:
            return rows[:i]
    return rows


def _lines(cl, *args) -> list[str]:
    r = run("commitlog", cl, "-f", "jsonl", *args)
    assert r.exit_code in (0, 1), r.stderr
    return r.stdout.splitlines()


@pytest.mark.parametrize("name", STORES)
def test_every_record_of_every_real_store(name, monkeypatch):
    cl = store_root(name) / "commitlog"
    want = listing(name, cl)
    assert _lines(cl) == [ENCODE(r) for r in [*want, summary(name, cl, want)]]
    monkeypatch.setattr(records, "PARALLEL_ROWS", 2)  # batches split between two threads
    monkeypatch.setattr(records, "SUB_ROWS", 7)  # and cut into small kernel calls
    want = listing(name, cl, crc=False)
    assert _lines(cl, "--no-crc") == [ENCODE(r) for r in [*want, summary(name, cl, want)]]


def test_filters_and_limit_cut_where_the_manifest_says():
    cl = store_root("rmq4-basic") / "commitlog"
    man = manifest("rmq4-basic")
    key = next(k for x in man for k in x["keys"] if k.startswith("dup-key"))
    t0 = man[100]["storeTimestamp"]
    whole = listing("rmq4-basic", cl)
    cases = [
        (["--topic", "orders"], lambda m: m["topic"] == "orders", None),
        (["--tag", "订单创建"], lambda m: m["tags"] == "订单创建", None),
        (["--key", key], lambda m: key in m["keys"] or m["uniq_key"] == key, None),
        (["--key", man[42]["uniqKey"]], lambda m: man[42]["uniqKey"] in m["keys"] or m["uniq_key"] == man[42]["uniqKey"], None),
        (["--queue", "2", "--since", str(t0)], lambda m: m["queue_id"] == 2 and m["store_timestamp"] >= t0, None),
        (["--limit", "7"], None, 7),
        (["--topic", "orders", "--limit", "100"], lambda m: m["topic"] == "orders", 100),
    ]
    for args, pick, limit in cases:
        want = whole if pick is None else [r for r in whole if r["kind"] == "message" and pick(r)]  # selective: no markers
        want = upto(want, limit) if limit else want
        assert want, args
        assert _lines(cl, *args)[:-1] == [ENCODE(r) for r in want], args


def test_damaged_store_problems_interleave_where_the_damage_is(tmp_path, monkeypatch):
    monkeypatch.setattr(records, "PARALLEL_ROWS", 2)
    root = copy_store("rmq4-basic", tmp_path)
    cl = root / "commitlog"
    first = cl / "00000000000000000000"
    puts = sorted((m for m in manifest("rmq4-basic") if m["wroteOffset"] < 131072), key=lambda m: m["wroteOffset"])
    pos = [m["wroteOffset"] for m in puts]  # the first file's base is 0: file offsets are physical offsets
    body_pos = [p + HDR.sizeof() for p in pos]  # IPv4 hosts throughout
    props_pos = [m["wroteOffset"] + m["wroteBytes"] - m["propertiesStringUtf8Len"] for m in puts]
    flip(first, body_pos[3] + 5)  # a body byte: body_crc_mismatch, the record still listed
    patch(first, props_pos[5] + 1, b"\xff")  # invalid UTF-8 in the properties: bad_properties
    patch(first, props_pos[7] + 2, b"\x05")  # a control character JSON escapes: the Python way, same text
    patch(first, pos[9] + 4, b"\xde\xad\xbe\xef")  # a record's magic: bad_magic, resync
    damaged = [(body_pos[3] + 5, body_pos[3] + 6), (props_pos[5] + 1, props_pos[5] + 2), (props_pos[7] + 2, props_pos[7] + 3), (pos[9] + 4, pos[9] + 8)]
    # the model: the whole listing, record 3 with a bad CRC and its problem after it, record 5 with its problem after
    # it, record 7 with its changed properties, record 9 replaced by bad_magic
    want = []
    for r in listing("rmq4-basic", cl):
        at = pos.index(r["phys_offset"]) if r["kind"] == "message" and r["phys_offset"] in pos[:10] else None
        if at == 9:
            want.append({"kind": "problem", "code": "bad_magic", "phys_offset": pos[9], "file_offset": pos[9]})
            continue
        if at == 3:
            r = dict(r, crc_ok=False)
        if at == 7:
            s = bytearray(puts[7]["propertiesString"].encode())
            s[2] = 5
            props = _props(s.decode())
            keys = props.get(C.PROPERTY_KEYS)
            r = dict(r, properties=props, tags=props.get(C.PROPERTY_TAGS), keys=keys.split(" ") if keys else [], uniq_key=props.get(C.PROPERTY_UNIQ_KEY))
        want.append(r)
        if at == 3:
            want.append({"kind": "problem", "code": "body_crc_mismatch", "phys_offset": pos[3], "file_offset": body_pos[3]})
        if at == 5:
            want.append({"kind": "problem", "code": "bad_properties", "phys_offset": pos[5], "file_offset": props_pos[5]})

    def same(got: list[str], want: list[dict]) -> None:
        rows = [json.loads(x) for x in got[:-1]]
        assert [(r["kind"], r["phys_offset"], r.get("code")) for r in rows] == [(r["kind"], r["phys_offset"], r.get("code")) for r in want]
        for g, w in zip(rows, want, strict=True):
            if w["kind"] == "problem":
                assert (g["file"], g["file_offset"]) == (str(first), w["file_offset"])
            elif w["phys_offset"] != pos[5]:  # record 5's properties do not decode: its row is the broker's elsewhere
                assert g == w
        assert json.loads(got[-1]) == summary("rmq4-basic", cl, want)

    got = _lines(cl)
    same(got, want)
    # the broker's truth: every record the damage left alone, exactly; the others are records 3, 5 and 7 (9 lost its magic)
    messages = [d for d in map(json.loads, got) if d["kind"] == "message"]
    touched = check_intact("rmq4-basic", messages, damaged, broker=False)
    assert [(d["phys_offset"], d["crc_ok"]) for d in touched] == [(pos[3], False), (pos[5], True), (pos[7], True)]
    same(_lines(cl, "--limit", "6"), upto(want, 6))
    monkeypatch.setattr(records, "SUB_ROWS", 3)  # the limit reached inside a kernel's sub-batch
    same(_lines(cl, "--limit", "6"), upto(want, 6))
    same(_lines(cl, "--limit", "40"), upto(want, 40))


def test_body_modes_hold_the_bodies_the_broker_wrote():
    name = "rmq4-flags"
    cl = store_root(name) / "commitlog"
    want = [r for r in listing(name, cl) if r["kind"] == "message"]
    puts = sorted(manifest(name), key=lambda m: m["wroteOffset"])
    bodies = []
    for how in ("base64", "hex", "text"):
        got = [json.loads(x) for x in _lines(cl, "--body", how, "--decompress")[:-1]]
        got = [r for r in got if r["kind"] == "message"]
        assert len(got) == len(want) == len(puts)
        for i, (g, w, m) in enumerate(zip(got, want, puts, strict=True)):
            compressed = "uncompressed_body_sha256" in m
            assert g == dict(w, **({"decompressed": True} if compressed else {}), body=g["body"], body_encoding="utf-8" if how == "text" else how), how
            if how == "text":  # the bytes the other modes proved the broker's, as UTF-8 text
                assert g["body"] == bodies[i].decode("utf-8", errors="replace")
                continue
            body = base64.b64decode(g["body"]) if how == "base64" else bytes.fromhex(g["body"])
            assert hashlib.sha256(body).hexdigest() == m["uncompressed_body_sha256" if compressed else "body_sha256"], how
            if how == "base64":
                bodies.append(body)


def test_table_lines_hold_the_manifest_values(monkeypatch):
    """Lines align under the header printed last (printed again when a column widens)."""
    monkeypatch.setattr(records, "PARALLEL_ROWS", 2)  # cells written by two threads
    cl = store_root("rmq4-flags") / "commitlog"
    r = run("commitlog", cl)
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["offset", "size", "topic", "q", "qoffset", "stored", "(UTC)", "tags", "keys", "uniq_key", "tx", "crc"]
    msgs = sorted(manifest("rmq4-flags"), key=lambda m: m["wroteOffset"])
    rows, start = [], None
    for line in lines:
        if line.startswith("offset "):
            start = line.index("stored (UTC)")
        elif "<end of file" not in line:
            rows.append((line, start))
    assert len(rows) == len(msgs)
    for (line, at), m in zip(rows, msgs, strict=True):
        stored = datetime.fromtimestamp(m["storeTimestamp"] / 1000, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
        assert line.startswith(f"{m['wroteOffset']} ") and line[at:].startswith(stored)
        assert m["topic"] in line and (m["tags"] or "") in line and " ".join(m["keys"]) in line
        assert not line.endswith(" ")


@pytest.mark.parametrize("name", ["rmq4-basic", "rmq4-flags", "rmq53-v2"])
def test_csv_is_csv_writer_of_the_manifest_rows(name):
    cl = store_root(name) / "commitlog"
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(records.CSV_COLUMNS)
    for d in listing(name, cl):
        w.writerow([json.dumps(d[k], ensure_ascii=False) if isinstance(d.get(k), (dict, list)) else ("" if d.get(k) is None else d[k]) for k in records.CSV_COLUMNS])
    r = run("commitlog", cl, "-f", "csv")
    assert r.stdout == buf.getvalue()


@pytest.mark.parametrize(
    ("fallback", "problems"),
    [([], []), ([3, 9], []), ([], [0, 4, 4]), ([1, 5, 8], [0, 5, 9]), ([2, 7], [2, 7]), ([6], [1, 1, 6, 12])],
)
def test_the_rows_a_listing_stops_at_are_each_listed_once_in_order(fallback, problems):
    """Rows the kernel left to Python and rows with problems: each once, sorted (a model of set union here), so a
    record that is both is never written twice."""
    import numpy as np

    got = records._union(np.array(fallback, dtype=np.int64), np.array(problems, dtype=np.int64))
    assert got.tolist() == sorted(set(fallback) | set(problems))


@pytest.mark.parametrize("name", STORES)
def test_base64_bodies_line_for_line(name):
    """`--body base64`, spelled by the kernel: each message line the model's row, then the body the broker wrote (its
    sha256 in the manifest) in base64 and `body_encoding`, byte for byte; bodies of every length modulo 3 (every
    padding) among them."""
    cl = store_root(name) / "commitlog"
    want = listing(name, cl)
    puts = {m["wroteOffset"]: m for m in manifest(name)}
    lines = _lines(cl, "--body", "base64")[:-1]
    assert len(lines) == len(want)
    pads = set()
    for line, w in zip(lines, want, strict=True):
        if w["kind"] != "message":
            assert line == ENCODE(w)
            continue
        b64 = json.loads(line)["body"]
        body = base64.b64decode(b64, validate=True)
        assert hashlib.sha256(body).hexdigest() == puts[w["phys_offset"]]["body_sha256"]
        assert line == ENCODE(dict(w, body=b64, body_encoding="base64"))
        pads.add(len(body) % 3)
    assert pads == {0, 1, 2}


def test_a_kernel_call_holds_at_most_text_bytes_of_records(monkeypatch):
    """Bodies are spelled into the kernel's buffer: a call takes TEXT_BYTES of records at most (one record alone when
    it is bigger), and the lines are the same as ever."""
    name = "rmq4-flags"
    cl = store_root(name) / "commitlog"
    calls = text_calls(monkeypatch, records)
    monkeypatch.setattr(records, "TEXT_BYTES", 3000)
    want = [ENCODE(r) for r in listing(name, cl)]
    lines = records_text(cl, "none")
    assert lines == want
    assert calls and all(sum(c) <= 3000 or len(c) == 1 for c in calls) and max(map(len, calls)) > 1


def records_text(cl, body: str) -> list[str]:
    """The listing's lines through render_range in this process (monkeypatches hold), summary left out."""
    from rmqdump.query.listing import Filter
    from rmqdump.readers.commitlog import CommitLog
    from rmqdump.scan.splits import commitlog_splits

    spec = records.ListSpec("jsonl", Filter(), body=body)
    out = []
    for split in commitlog_splits(CommitLog.open(str(cl))):
        for p in records.render_range(split, spec).pieces:
            out.append(p if isinstance(p, bytes | str) else bytes(p) if not isinstance(p, records.Halves) else p[0 : len(p.first) + len(p.second)])
    text = "".join(x.decode() if isinstance(x, bytes) else x for x in out)
    return text.splitlines()
