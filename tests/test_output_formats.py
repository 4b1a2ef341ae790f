"""Every output format, field by field, against the manifests and the broker's own files.

Not against rmqdump's other output: each expected value comes from manifest.jsonl (what the broker
returned for each put) or from the broker's files parsed here with `struct` from the documented layouts.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import os
import struct
from datetime import datetime, timezone

import pytest
from conftest import SETTINGS, STORES, copy_store, jsonl, manifest, run, run_proc, store_root

TRANSACTIONS = {0: "none", 4: "prepared", 8: "commit", 12: "rollback"}  # sysFlag bits 2-3 (MessageSysFlag)
CQ_UNIT = struct.Struct(">qiq")  # commitLogOffset, size, tagsCode
INDEX_HEADER = struct.Struct(">qqqqii")
INDEX_ENTRY = struct.Struct(">iqii")  # keyHash, phyOffset, timeDiff, prevIndex


def _lines(text: str) -> list[dict]:
    """JSON Lines split on newlines only: a body as text may hold U+2028 or U+0085, which str.splitlines also splits on."""
    return [json.loads(line) for line in text.split("\n") if line.strip()]


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms // 1000, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S") + f".{ms % 1000:03d}Z"


def _java_hash(s: str) -> int:
    """Java String.hashCode over UTF-16 code units."""
    b = s.encode("utf-16-be")
    h = 0
    for i in range(0, len(b), 2):
        h = (31 * h + int.from_bytes(b[i : i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def _index_hash(s: str) -> int:
    h = _java_hash(s)
    return 0 if h == -(1 << 31) else abs(h)  # IndexService: abs(hashCode), Integer.MIN_VALUE -> 0


def _by_offset(store: str) -> list[dict]:
    return sorted(manifest(store), key=lambda x: x["wroteOffset"])


def _file_of(store: str, phys: int) -> str:
    size = SETTINGS[store]["commitlog"]
    return str(store_root(store) / "commitlog" / f"{phys // size * size:020d}")


def _properties(m: dict) -> dict:
    props = dict(m["properties"])
    if "storedPropCRC32" in m:
        props["__CRC32#"] = m["storedPropCRC32"]
    return props


# --- commitlog: CSV, table, bodies ---------------------------------------------------------------------


@pytest.mark.parametrize("store", STORES)
def test_commitlog_csv_every_column(store):
    res = run("commitlog", store_root(store) / "commitlog", "-f", "csv", "--body", "hex")
    assert res.exit_code == 0
    rows = list(csv.DictReader(io.StringIO(res.stdout)))
    msgs = [r for r in rows if r["kind"] == "message"]
    assert {r["kind"] for r in rows} <= {"message", "blank"}
    want = _by_offset(store)
    assert len(msgs) == len(want)
    for got, m in zip(msgs, want, strict=True):
        expected = {
            "kind": "message",
            "file": _file_of(store, m["wroteOffset"]),
            "phys_offset": str(m["wroteOffset"]),
            "total_size": str(m["wroteBytes"]),
            "magic_version": "2" if m.get("messageVersion") == "MESSAGE_VERSION_V2" else "1",
            "body_crc": str(m["bodyCRC"]),
            "crc_ok": "True",
            "prop_crc_ok": "True" if "storedPropCRC32" in m else "",
            "queue_id": str(m["queueId"]),
            "flag": str(m["flag"]),
            "queue_offset": str(m["logicsOffset"]),
            "sys_flag": str(m["sysFlag"]),
            "transaction": TRANSACTIONS[m["sysFlag"] & 0xC],
            "born_timestamp": str(m["bornTimestamp"]),
            "born_host": m["bornHost"],
            "store_timestamp": str(m["storeTimestamp"]),
            "store_host": m["storeHost"],
            "reconsume_times": str(m["reconsumeTimes"]),
            "prepared_transaction_offset": str(m["preparedTransactionOffset"]),
            "body_length": str(m["body_len"]),
            "topic": m["topic"],
            "tags": m["tags"] or "",
            "uniq_key": m["uniqKey"] or "",
            "msg_id": m["msgId"],
            "body_encoding": "hex",
            "code": "",
            "file_offset": "",
            "detail": "",
            "length": "",
            "marker": "",
            "dledger_index": "",  # a plain CommitLog: no DLedger entry
            "dledger_term": "",
        }
        assert {k: got[k] for k in expected} == expected, (store, m["seq"])
        assert json.loads(got["keys"]) == m["keys"]
        assert json.loads(got["properties"]) == _properties(m)
        assert hashlib.sha256(bytes.fromhex(got["body"])).hexdigest() == m["body_sha256"]
        assert set(got) == set(expected) | {"keys", "properties", "body"}


def _cells(line: str) -> list[str]:
    """A line as terminal cells (a wide character takes two), so columns can be cut at header positions."""
    from rich.cells import cell_len

    out: list[str] = []
    for ch in line:
        out.append(ch)
        out.extend([""] * (cell_len(ch) - 1))
    return out


def _parse_tables(text: str, first: str) -> list[dict]:
    """Rows of the rich tables in `text` (one header per printed table), cut at the header's column starts."""
    rows, cols = [], None
    for line in text.splitlines():
        if line.startswith(first + " ") and "  " in line:
            names = [n for n in line.split("  ") if n.strip()]
            starts = [len(_cells(line[: line.index(n.strip())])) for n in names]
            cols = list(zip([n.strip() for n in names], starts, [*starts[1:], None], strict=True))
            continue
        if cols is None or not line.strip():
            continue
        cells = _cells(line)
        rows.append({n: "".join(cells[a:b]).strip() for n, a, b in cols})
    return rows


@pytest.mark.parametrize("store", ["rmq4-basic", "rmq4-flags", "rmq53-v2"])  # CJK tags, every flag and IPv6, V2 and property CRCs
def test_commitlog_table_every_column(store):
    r = run_proc("commitlog", store_root(store) / "commitlog", env={**os.environ, "COLUMNS": "1000"})
    assert r.returncode == 0
    rows = [x for x in _parse_tables(r.stdout, "offset") if not x["topic"].startswith("<end of file")]
    want = _by_offset(store)
    assert len(rows) == len(want)
    for got, m in zip(rows, want, strict=True):
        tx = TRANSACTIONS[m["sysFlag"] & 0xC]
        assert got == {
            "offset": str(m["wroteOffset"]),
            "size": str(m["wroteBytes"]),
            "topic": m["topic"],
            "q": str(m["queueId"]),
            "qoffset": str(m["logicsOffset"]),
            "stored (UTC)": _iso(m["storeTimestamp"]),
            "tags": m["tags"] or "",
            "keys": " ".join(m["keys"]),
            "uniq_key": m["uniqKey"] or "",
            "tx": "" if tx == "none" else tx,
            "crc": "ok/ok" if "storedPropCRC32" in m else "ok",
        }, (store, m["seq"])
    assert (
        r.stderr.strip()
        == f"{len(want)} messages, {r.stdout.count('<end of file')} end-of-file markers, 0 problems in {len(os.listdir(store_root(store) / 'commitlog'))} files"
    )


@pytest.mark.parametrize("store", ["rmq4-flags", "rmq53-v2"])
def test_commitlog_body_text_and_decompressed(store):
    """--body text is the body as UTF-8 (U+FFFD where it is not); --decompress gives the producer's bytes back."""
    want = {m["wroteOffset"]: m for m in manifest(store)}
    text = run("commitlog", store_root(store) / "commitlog", "-f", "jsonl", "--body", "text")
    raw = run("commitlog", store_root(store) / "commitlog", "-f", "jsonl", "--body", "base64", "--decompress")
    assert text.exit_code == raw.exit_code == 0
    t_msgs = [x for x in _lines(text.stdout) if x["kind"] == "message"]
    r_msgs = [x for x in _lines(raw.stdout) if x["kind"] == "message"]
    assert [x["phys_offset"] for x in t_msgs] == [x["phys_offset"] for x in r_msgs] == sorted(want)
    compressed = 0
    for t, r in zip(t_msgs, r_msgs, strict=True):
        m = want[t["phys_offset"]]
        assert t["body_encoding"] == "utf-8" and r["body_encoding"] == "base64"
        body = base64.b64decode(r["body"])
        if m["sysFlag"] & 1:
            compressed += 1
            assert r["decompressed"] is True
            assert hashlib.sha256(body).hexdigest() == m["uncompressed_body_sha256"]
            # the stored (compressed) bytes are binary: as text they carry U+FFFD
            assert "\ufffd" in t["body"] or hashlib.sha256(t["body"].encode()).hexdigest() == m["body_sha256"]
        else:
            assert hashlib.sha256(body).hexdigest() == m["body_sha256"]
            assert t["body"] == body.decode("utf-8", errors="replace")
    assert compressed == sum(1 for m in want.values() if m["sysFlag"] & 1) > 0


def cq_end(store: str) -> int:
    """Where the ConsumeQueues stop: rmq4-crash's dispatch was blocked at reputFromOffset (crash.json); the others are complete."""
    if store == "rmq4-crash":
        return json.loads((store_root(store).parent / "crash.json").read_text())["store"]["reputFromOffset"]
    return 1 << 62


# --- cq dump -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("store", ["rmq4-basic", "rmq4-crash"])
def test_cq_dump_every_unit_against_the_broker_files(store):
    root = store_root(store)
    by_queue = {(m["topic"], m["queueId"], m["logicsOffset"]): m for m in manifest(store)}
    queues = [(t, int(q)) for t in sorted(os.listdir(root / "consumequeue")) for q in sorted(os.listdir(root / "consumequeue" / t))]
    assert queues
    for topic, qid in queues:
        expected = []
        qdir = root / "consumequeue" / topic / str(qid)
        for name in sorted(os.listdir(qdir)):
            data = (qdir / name).read_bytes()
            for i in range(len(data) // CQ_UNIT.size):
                phys, size, tags = CQ_UNIT.unpack_from(data, i * CQ_UNIT.size)
                expected.append((int(name) // CQ_UNIT.size + i, str(qdir / name), i * CQ_UNIT.size, phys, size, tags, phys >= 0 and size > 0))
        res = run("cq", "dump", "-s", root, "--topic", topic, "--queue", qid, "--resolve", "-f", "jsonl")
        assert res.exit_code == 0
        units = [x for x in jsonl(res.stdout) if x["kind"] == "unit"]
        # every written unit of the broker's files, in order; the unwritten (zero) rest of the last file, when
        # listed, only as units marked not valid
        got = [(u["unit_index"], u["cq_file"], u["file_offset"], u["phys_offset"], u["size"], u["tags_code"], u["valid"]) for u in units]
        assert [g for g in got if g[-1]] == [e for e in expected if e[-1]]
        assert set(got) <= set(expected)
        assert all("record" not in u for u in units if not u["valid"])
        units = [u for u in units if u["valid"]]
        assert len(units) == sum(1 for m in manifest(store) if (m["topic"], m["queueId"]) == (topic, qid) and m["wroteOffset"] < cq_end(store))
        for u in units:
            m = by_queue[(topic, qid, u["unit_index"])]
            rec = u["record"]
            assert (u["topic"], u["queue_id"], u["filler"]) == (topic, qid, False)
            assert (u["phys_offset"], u["size"]) == (m["wroteOffset"], m["wroteBytes"])
            assert rec == {
                "ok": True,
                "total_size": m["wroteBytes"],
                "topic": topic,
                "queue_id": qid,
                "queue_offset": m["logicsOffset"],
                "store_timestamp": m["storeTimestamp"],
                "tags": m["tags"],
                "keys": m["keys"],
                "uniq_key": m["uniqKey"],
                "msg_id": m["msgId"],
                "transaction": TRANSACTIONS[m["sysFlag"] & 0xC],
            }


# --- info: config files --------------------------------------------------------------------------------


@pytest.mark.parametrize("store", STORES)
def test_info_lists_every_config_file_with_its_size(store):
    root = store_root(store)
    res = run("info", "-s", root, "-f", "jsonl", "--no-recovery")
    got = [x for x in jsonl(res.stdout) if x["kind"] == "config"]
    cfg = root / "config"
    names = sorted(n for n in os.listdir(cfg) if (cfg / n).is_file()) if cfg.is_dir() else []
    assert got == [{"kind": "config", "path": str(cfg / n), "size": os.path.getsize(cfg / n), "ok": True, "error": None} for n in names]


def test_info_names_a_config_file_cut_short(tmp_path):
    root = copy_store("rmq4-basic", tmp_path)
    path = root / "config" / "topics.json"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    res = run("info", "-s", root, "-f", "jsonl", "--no-recovery")
    bad = [x for x in jsonl(res.stdout) if x["kind"] == "config" and not x["ok"]]
    assert [(x["path"], x["size"]) for x in bad] == [(str(path), len(data) // 2)] and bad[0]["error"]
    table = run("info", "-s", root, "--no-recovery").stdout
    assert f"topics.json ({len(data) // 2} bytes) {bad[0]['error']}" in table


# --- index dump ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("store", ["rmq4-flags", "rmq4-crash"])
def test_index_dump_every_field_against_the_broker_file(store):
    slots_n, entries_n = SETTINGS[store]["hash_slots"], SETTINGS[store]["index_entries"]
    for name in sorted(os.listdir(store_root(store) / "index")):
        path = store_root(store) / "index" / name
        data = path.read_bytes()
        hdr = INDEX_HEADER.unpack_from(data, 0)
        slots = [struct.unpack_from(">i", data, INDEX_HEADER.size + 4 * s)[0] for s in range(slots_n)]
        base = INDEX_HEADER.size + 4 * slots_n
        entries = [INDEX_ENTRY.unpack_from(data, base + 20 * k) for k in range(1, hdr[5])]
        res = run("index", "dump", path, "-f", "jsonl")
        assert res.exit_code == 0
        out = jsonl(res.stdout)
        head = out[0]
        assert {k: v for k, v in head.items() if k not in ("sizing",)} == {
            "kind": "header",
            "file": str(path),
            "begin_timestamp": hdr[0],
            "end_timestamp": hdr[1],
            "begin_phy_offset": hdr[2],
            "end_phy_offset": hdr[3],
            "hash_slot_count": hdr[4],
            "index_count": hdr[5],
            "hash_slots": slots_n,
            "index_entries": entries_n,
        }
        assert [(x["slot"], x["entry"]) for x in out if x["kind"] == "slot"] == [(s, e) for s, e in enumerate(slots) if e]
        got = [x for x in out if x["kind"] == "entry"]
        assert [(x["entry"], x["key_hash"], x["phys_offset"], x["time_diff"], x["prev_index"]) for x in got] == [
            (k, *e) for k, e in enumerate(entries, start=1)
        ]
        offsets = {m["wroteOffset"] for m in manifest(store)}
        assert {x["phys_offset"] for x in got} <= offsets


# --- msgid --explain -----------------------------------------------------------------------------------


def _walk(path, slots_n: int, key_hash: int) -> tuple[int, list[tuple]]:
    """The broker's chain walk for one hash in one index file: (head, [(entry, keyHash, phyOffset, timeDiff)])."""
    data = path.read_bytes()
    head = struct.unpack_from(">i", data, INDEX_HEADER.size + 4 * (key_hash % slots_n))[0]
    base = INDEX_HEADER.size + 4 * slots_n
    steps, k = [], head
    while k > 0:
        kh, phys, diff, prev = INDEX_ENTRY.unpack_from(data, base + 20 * k)
        steps.append((k, kh, phys, diff))
        k = prev
    return head, steps


def test_msgid_explain_against_the_manifest_and_the_index_files():
    store = "rmq53-v2"
    m = next(x for x in manifest(store) if x["uniqKey"].startswith("FD") and x["keys"] == [])
    uk = bytes.fromhex(m["uniqKey"])
    # MessageClientIDSetter: IP (16 bytes for IPv6), pid (short), class loader hash (int), ms since month start (int), counter (short)
    ip, pid, loader, millis, counter = uk[:16], *struct.unpack(">hiih", uk[16:])
    res = run("msgid", m["uniqKey"], "-s", store_root(store), "--explain", "-f", "jsonl")
    assert res.exit_code == 0
    out = jsonl(res.stdout)
    head = out[0]
    born = datetime.fromtimestamp(m["bornTimestamp"] / 1000, tz=timezone.utc)
    month_start = int(datetime(born.year, born.month, 1, tzinfo=timezone.utc).timestamp() * 1000)
    assert head == {
        "kind": "msgid",
        "id": m["uniqKey"],
        "type": "uniq_key",
        "ip": ":".join(f"{int.from_bytes(ip[i : i + 2], 'big'):x}" for i in range(0, 16, 2)),
        "pid": pid & 0xFFFF,
        "class_loader_hash": loader,
        "month_millis": millis,
        "counter": counter & 0xFFFF,
        "time": month_start + millis,
        "month_start": month_start,
        "utc_offset_minutes": 0,
        "anchor": m["bornTimestamp"],
        "time_anchor": "born_timestamp",
        "found": 1,
    }
    msgs = [x for x in out if x["kind"] == "message"]
    assert [(x["phys_offset"], x["msg_id"], x["topic"], x["uniq_key"]) for x in msgs] == [(m["wroteOffset"], m["msgId"], m["topic"], m["uniqKey"])]
    slots_n = SETTINGS[store]["hash_slots"]
    explains = [x for x in out if x["kind"] == "explain"]
    topics = sorted({x["topic"] for x in manifest(store)})
    files = sorted(os.listdir(store_root(store) / "index"), reverse=True)  # newest first
    assert [(x["topic"], x["index_file"]) for x in explains] == [(t, f) for t in topics for f in files]
    for x in explains:
        h = _index_hash(f"{x['topic']}#{m['uniqKey']}")
        path = store_root(store) / "index" / x["index_file"]
        head_entry, steps = _walk(path, slots_n, h)
        assert (x["slot"], x["head"], x["steps"]) == (h % slots_n, head_entry, len(steps))
        assert x["other_hashes"] == sum(1 for s in steps if s[1] != h)
        assert x["stop"] == ("empty" if head_entry == 0 else "end")
        begin = INDEX_HEADER.unpack_from(path.read_bytes(), 0)[0]
        want = [(x["index_file"], k, phys, begin + diff * 1000, m["storeTimestamp"] - (begin + diff * 1000)) for k, kh, phys, diff in steps if kh == h]
        assert [(c["index_file"], c["entry"], c["phys_offset"], c["index_time"], c["time_delta_ms"]) for c in x["candidates"]] == want
        assert all(c["verdict"] == "match" and c["store_timestamp"] == m["storeTimestamp"] for c in x["candidates"])
    assert sum(len(x["candidates"]) for x in explains) == 1


def test_msgid_offset_id_against_the_manifest():
    for store in ("rmq4-basic", "rmq53-v2"):
        for m in _by_offset(store)[::250]:
            out = jsonl(run("msgid", m["msgId"], "-s", store_root(store), "-f", "jsonl").stdout)
            assert out[0] == {
                "kind": "msgid",
                "id": m["msgId"],
                "type": "offset",
                "store_host": m["storeHost"],
                "phys_offset": m["wroteOffset"],
                "found": 1,
            }
            assert [(x["phys_offset"], x["uniq_key"]) for x in out if x["kind"] == "message"] == [(m["wroteOffset"], m["uniqKey"])]
