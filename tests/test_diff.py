"""`rmqdump diff A B` against the broker's truth and against divergences the tests build themselves.

- fixtures/real/rmq53-ha-failover and rmq53-ha-lag: master/store and slave/store written by RocketMQ 5.3.3's
  DefaultMessageStore + DefaultHAService (README.txt); truth.json holds the identical prefix, the first
  differing byte, every message only on each side and per queue both max offsets and every queue offset that
  names different messages. The answers must equal it exactly.
- Copies of fixtures/real/rmq4-basic made to diverge (Hypothesis): from a record boundary the copy holds a
  chosen sequence of the original's later records (moved, so their physicalOffset field is set to where they
  now lie) or altered ones (another UNIQ_KEY), then zeros, and no later file. The expected answer is computed
  here from the manifest and the two byte strings, not from rmqdump.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import tempfile
import zlib
from pathlib import Path

import pyarrow.dataset as ds
import pytest
from conftest import REAL, SETTINGS, jsonl, manifest, run, run_proc, unpack_store
from hypothesis import HealthCheck, given, settings
from hypothesis import event as _event
from hypothesis import strategies as st

from rmqdump.readers.fastpath import field_offset
from rmqdump.scan.splits import RANGE_BYTES
from rmqdump.schemas import message_header

PAIRS = ["rmq53-ha-failover", "rmq53-ha-lag"]


def _truth(name: str) -> dict:
    return json.loads((REAL / name / "truth.json").read_text())


def _diff(a, b, *extra):
    res = run("diff", a, b, "-f", "jsonl", *extra)
    recs = jsonl(res.stdout)
    kinds: dict[str, list[dict]] = {}
    for r in recs:
        kinds.setdefault(r["kind"], []).append(r)
    return res, kinds


def _expand(ranges: list[list[int]]) -> list[int]:
    return [x for lo, hi in ranges for x in range(lo, hi)]


FIELDS = ["phys_offset", "total_size", "topic", "queue_id", "queue_offset", "uniq_key", "msg_id", "keys", "tags", "store_timestamp"]


def _truth_message(t: dict) -> dict:
    return {
        "phys_offset": t["wroteOffset"],
        "total_size": t["wroteBytes"],
        "topic": t["topic"],
        "queue_id": t["queueId"],
        "queue_offset": t["queueOffset"],
        "uniq_key": t["uniqKey"],
        "msg_id": t["msgId"],
        "keys": t["keys"].split() if t["keys"] else [],
        "tags": t["tags"],
        "store_timestamp": t["storeTimestamp"],
    }


@pytest.mark.parametrize("pair", PAIRS)
def test_pair_equals_truth(pair):
    t = _truth(pair)
    res, k = _diff(REAL / pair / "master" / "store", REAL / pair / "slave" / "store")
    assert res.exit_code == 1
    (pre,) = k["prefix"]
    assert pre["identical_up_to"] == t["commitlog"]["identicalUpTo"]
    assert pre["first_differing_byte"] == t["commitlog"]["firstDifferingByteOffset"]
    assert pre["prefix_of"] == ("b" if not t["onlyOnSlave"] else None)  # the lagging slave's CommitLog is a prefix of the master's
    assert pre["a_data_end"] == t["commitlog"]["master"]["maxPhyOffset"]
    assert pre["b_data_end"] == max(t["commitlog"]["slave"]["maxPhyOffset"], t["commitlog"]["identicalUpTo"])
    msgs = k.get("message", [])
    for side, key in (("a", "onlyOnMaster"), ("b", "onlyOnSlave")):
        got = [{f: m[f] for f in FIELDS} for m in msgs if m["side"] == side]
        assert got == [_truth_message(x) for x in t[key]]
        assert all(m["status"] == "only" for m in msgs if m["side"] == side)
    assert len(msgs) == len(t["onlyOnMaster"]) + len(t["onlyOnSlave"])
    queues = {f"{q['topic']}/{q['queue_id']}": q for q in k["queue"]}
    assert set(queues) == set(t["queues"])
    for name, tq in t["queues"].items():
        q = queues[name]
        assert (q["a_max_offset"], q["b_max_offset"]) == (tq["master"]["maxOffset"], tq["slave"]["maxOffset"])
        want = [
            {
                "queue_offset": d["queueOffset"],
                "a": {
                    "phys_offset": d["master"]["commitLogOffset"],
                    "size": d["master"]["size"],
                    "uniq_key": d["master"]["uniqKey"],
                    "msg_id": d["master"]["msgId"],
                },
                "b": {
                    "phys_offset": d["slave"]["commitLogOffset"],
                    "size": d["slave"]["size"],
                    "uniq_key": d["slave"]["uniqKey"],
                    "msg_id": d["slave"]["msgId"],
                },
            }
            for d in tq["divergentOffsets"]
        ]
        assert q["divergent_offsets"] == want
        assert _expand(q["only_a_offsets"]) == tq["onlyMasterOffsets"]
        assert _expand(q["only_b_offsets"]) == tq["onlySlaveOffsets"]
    (s,) = k["summary"]
    assert (s["only_a"], s["only_b"], s["moved"]) == (t["counts"]["onlyMaster"], t["counts"]["onlySlave"], 0)
    # compared by ranges: no more than one range was read again byte by byte
    assert pre["bytes_compared"] <= 2 * RANGE_BYTES


def test_table_names_the_prefix():
    t = _truth("rmq53-ha-failover")
    res = run("diff", REAL / "rmq53-ha-failover" / "master" / "store", REAL / "rmq53-ha-failover" / "slave" / "store")
    assert res.exit_code == 1
    assert f"identical up to {t['commitlog']['identicalUpTo']} (first differing byte {t['commitlog']['firstDifferingByteOffset']})" in res.stdout
    assert f"only on A {t['counts']['onlyMaster']}" in res.stdout and f"only on B {t['counts']['onlySlave']}" in res.stdout


def test_same_store_twice_is_identical():
    root = REAL / "rmq4-basic" / "store"
    res = run_proc("diff", root, root, "-f", "jsonl")
    assert res.returncode == 0, res.stderr
    recs = jsonl(res.stdout)
    assert recs[0]["kind"] == "prefix" and recs[0]["identical"] and recs[0]["first_differing_byte"] is None
    assert [r for r in recs if r["kind"] == "message"] == []


def test_identical_copy_is_identical(tmp_path):
    src = REAL / "rmq4-basic" / "store"
    shutil.copytree(src, tmp_path / "copy")
    res, k = _diff(src, tmp_path / "copy")
    assert res.exit_code == 0
    pre = k["prefix"][0]
    assert pre["identical"] and pre["bytes_hashed"] + pre["bytes_skipped"] == 2 * sum(p.stat().st_size for p in (src / "commitlog").iterdir())
    assert k["summary"][0]["divergent_offsets"] == 0


def test_holes_are_not_read(tmp_path):
    """A sparse copy (holes where the newest file was never written) against a dense one: the holes are skipped,
    the dense side's zeros are checked, and a byte planted in the hole region is still found."""
    src = REAL / "rmq4-basic" / "store"
    files = sorted((src / "commitlog").iterdir())
    last = files[-1]
    end = max(m["wroteOffset"] + m["wroteBytes"] for m in manifest("rmq4-basic"))
    data_end = end - int(last.name)
    assert 0 < data_end < last.stat().st_size - 8192
    sparse = tmp_path / "sparse"
    shutil.copytree(src, sparse)
    keep = -(-data_end // 4096) * 4096
    with open(sparse / "commitlog" / last.name, "r+b") as f:  # the same bytes, the tail as a hole
        f.truncate(keep)
        f.truncate(last.stat().st_size)
    res, k = _diff(src, sparse)
    assert res.exit_code == 0
    pre = k["prefix"][0]
    total = sum(p.stat().st_size for p in files)
    assert pre["bytes_skipped"] > 0 and pre["bytes_hashed"] + pre["bytes_skipped"] == 2 * total
    planted = int(last.name) + last.stat().st_size - 100
    dense = tmp_path / "dense-store"
    shutil.copytree(src, dense)
    with open(dense / "commitlog" / last.name, "r+b") as f:
        f.seek(planted - int(last.name))
        f.write(b"\x01")
    res, k = _diff(sparse, dense)
    assert res.exit_code == 1 and k["prefix"][0]["first_differing_byte"] == planted
    assert k["prefix"][0]["identical_up_to"] == end  # the records all end before it: nothing past the prefix
    assert "message" not in k


def test_error_paths(tmp_path):
    good = REAL / "rmq4-basic" / "store"
    res = run_proc("diff", good, tmp_path / "absent")
    assert res.returncode == 2 and res.stderr.startswith("rmqdump: not_found") and str(tmp_path / "absent") in res.stderr
    (tmp_path / "notastore").mkdir()
    (tmp_path / "notastore" / "x.txt").write_text("x")
    res = run_proc("diff", tmp_path / "notastore", good)
    assert res.returncode == 2 and res.stderr.startswith("rmqdump: not_a_store") and "Traceback" not in res.stderr
    (tmp_path / "empty" / "commitlog").mkdir(parents=True)
    res = run_proc("diff", good, tmp_path / "empty")
    assert res.returncode == 2 and res.stderr.startswith("rmqdump: no_commitlog")
    res = run_proc("diff", good)
    assert res.returncode == 2 and res.stderr.startswith("rmqdump: usage")


def test_out_holds_the_messages_only_on_each_side(tmp_path):
    t = _truth("rmq53-ha-failover")
    pair = REAL / "rmq53-ha-failover"
    out = tmp_path / "only"
    res = run("diff", pair / "master" / "store", pair / "slave" / "store", "--out", out)
    assert res.exit_code == 1
    rows = ds.dataset(out, format="parquet", partitioning="hive").to_table().to_pylist()
    for side, key in (("a", "onlyOnMaster"), ("b", "onlyOnSlave")):
        got = sorted((r for r in rows if r["side"] == side), key=lambda r: r["phys_offset"])
        assert [(r["phys_offset"], r["uniq_key"], r["topic"]) for r in got] == [(x["wroteOffset"], x["uniqKey"], x["topic"]) for x in t[key]]
        assert [zlib.crc32(r["body"]) & 0x7FFFFFFF for r in got] == [x["bodyCRC"] for x in t[key]]
    res = run("diff", pair / "master" / "store", pair / "slave" / "store", "--out", out)
    assert res.exit_code == 2 and "output_exists" in res.stderr
    res = run("diff", pair / "master" / "store", pair / "slave" / "store", "--out", pair / "slave" / "store" / "only")
    assert res.exit_code == 2 and "output_inside_store" in res.stderr


def test_consumers_moving_to_the_other_side(tmp_path):
    """A consumer committed on the old master inside TradeEvents/0's divergent range, one past the slave's max, one before the range."""
    t = _truth("rmq53-ha-failover")
    tq = t["queues"]["TradeEvents/0"]
    div = [d["queueOffset"] for d in tq["divergentOffsets"]]
    lo, b_max = div[0], tq["slave"]["maxOffset"]
    a = tmp_path / "a"
    shutil.copytree(REAL / "rmq53-ha-failover" / "master" / "store", a)
    (a / "config").mkdir()
    table = {"TradeEvents@g_mid": {"0": lo + 10}, "TradeEvents@g_past": {"0": b_max + 3}, "TradeEvents@g_before": {"0": lo}}
    (a / "config" / "consumerOffset.json").write_text(json.dumps({"offsetTable": table}))
    res, k = _diff(a, REAL / "rmq53-ha-failover" / "slave" / "store")
    assert res.exit_code == 1
    got = {c["group"]: c for c in k["consumer"]}
    assert set(got) == {"g_mid", "g_past"}  # g_before consumed nothing the sides disagree on
    mid = got["g_mid"]
    # the slave's messages at [lo, lo+10) are others than the ones it consumed: never delivered to it
    assert (mid["side"], mid["committed"], mid["skipped_offsets"], mid["read_twice"], mid["beyond_max"]) == ("a", lo + 10, [[lo, lo + 10]], 0, False)
    past = got["g_past"]
    assert (past["skipped_offsets"], past["beyond_max"], past["other_max_offset"]) == ([[lo, b_max]], True, b_max)


# --- built divergences -----------------------------------------------------------------------------------

STORE = "rmq4-basic"
FILE = SETTINGS[STORE]["commitlog"]
PHYS_AT = field_offset(message_header(), "phys_offset")
QOFF_AT = field_offset(message_header(), "queue_offset")


def _ident(m: dict):
    return m["uniqKey"] or ("seq", m["seq"])


def _records() -> list[dict]:
    return sorted((m for m in manifest(STORE) if m["status"] == "PUT_OK"), key=lambda m: m["wroteOffset"])


def _file_bytes(root: Path) -> dict[int, bytes]:
    return {int(p.name): p.read_bytes() for p in sorted((root / "commitlog").iterdir())}


def _stream(files: dict[int, bytes]) -> bytes:
    end = max(b + len(d) for b, d in files.items())
    buf = bytearray(end)
    for b, d in files.items():
        buf[b : b + len(d)] = d
    return bytes(buf)


@st.composite
def divergences(draw):
    recs = _records()
    k = draw(st.integers(0, len(recs) - 1))
    base = recs[k]["wroteOffset"] // FILE * FILE
    later = [m for m in recs[k:] if m["wroteOffset"] < base + FILE]  # the file's records from k on
    room = later[-1]["wroteOffset"] + later[-1]["wroteBytes"] - recs[k]["wroteOffset"]
    modes = st.one_of(st.just("moved"), st.just("new_key"), st.integers(-4, 4).filter(bool))  # an int: queue offset shifted by it
    picks = draw(st.lists(st.tuples(st.integers(0, len(later) - 1), modes), max_size=6, unique_by=lambda x: x[0]))
    chosen, used, named = [], 0, set()
    for i, mode in picks:
        m = later[i]
        if mode == "new_key" and not m["uniqKey"]:
            mode = "moved"
        qo = m["logicsOffset"] + (mode if isinstance(mode, int) else 0)
        if used + m["wroteBytes"] <= room and qo >= 0 and (m["topic"], m["queueId"], qo) not in named:
            chosen.append((m, mode))
            named.add((m["topic"], m["queueId"], qo))
            used += m["wroteBytes"]
    fill = draw(st.one_of(st.just(b"\0"), st.binary(min_size=1, max_size=64).filter(any)))  # what follows: zeros, or garbage
    return k, chosen, fill


def _build(dst: Path, k: int, chosen: list[tuple[dict, object]], fill: bytes = b"\0") -> tuple[list[dict], dict[int, bytes]]:
    """A copy of the store holding the original up to record k, then `chosen` (records moved; `new_key`: with another
    UNIQ_KEY; an int: named at a queue offset shifted by it, as a producer's retry to the other side would be), then
    `fill` repeated to the file's end (zeros, or garbage: a torn write, another broker's bytes)."""
    recs = _records()
    shutil.copytree(REAL / STORE / "store", dst)
    at = recs[k]["wroteOffset"]
    base = at // FILE * FILE
    orig = _stream(_file_bytes(REAL / STORE / "store"))
    data = bytearray((dst / "commitlog" / f"{base:020d}").read_bytes())
    data[at - base :] = (fill * (FILE // len(fill) + 1))[: FILE - (at - base)]
    written = []
    pos = at
    for m, mode in chosen:
        raw = bytearray(orig[m["wroteOffset"] : m["wroteOffset"] + m["wroteBytes"]])
        struct.pack_into(">q", raw, PHYS_AT, pos)
        ident, qo = _ident(m), m["logicsOffset"]
        if mode == "new_key":
            new = m["uniqKey"][:-1] + "Z"  # not a hex digit: no other message's key
            i = raw.index(m["uniqKey"].encode())
            raw[i : i + len(new)] = new.encode()
            ident = new
        elif isinstance(mode, int):
            qo += mode
            struct.pack_into(">q", raw, QOFF_AT, qo)
        data[pos - base : pos - base + len(raw)] = raw
        written.append({**m, "wroteOffset": pos, "ident": ident, "logicsOffset": qo})
        pos += len(raw)
    (dst / "commitlog" / f"{base:020d}").write_bytes(bytes(data))
    for p in (dst / "commitlog").iterdir():
        if int(p.name) > base:
            p.unlink()
    return written, _file_bytes(dst)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(divergences(), st.data())
def test_built_divergence(case, data):
    def commit(queues: list, offsets) -> dict:
        out = {}
        for topic, qid in data.draw(st.lists(st.sampled_from(queues), max_size=3, unique=True)) if queues else []:
            offs = offsets(topic, qid)
            out[(topic, qid)] = data.draw(st.integers(min(offs) - 1, max(offs) + 2))
        return out

    _check_built(*case, commit)


def test_retried_message_is_read_twice():
    """B holds record k+1 first, at queue offset one below its own (a producer's retry taken by the other side);
    a consumer on B past it, moving to A, reads it again there."""
    recs = _records()
    k = next(i for i in range(100, len(recs) - 1) if recs[i]["wroteOffset"] // FILE == recs[i + 1]["wroteOffset"] // FILE and recs[i + 1]["logicsOffset"] > 0)
    m = recs[k + 1]
    events = _check_built(k, [(m, -1)], b"\0", lambda queues, offsets: {(m["topic"], m["queueId"]): m["logicsOffset"]})
    assert events == [("b", m["topic"], m["queueId"], [m["logicsOffset"]])]


def event(text: str) -> None:
    """Hypothesis statistics, when a Hypothesis test runs (the helper is also called from a plain test)."""
    from hypothesis.control import currently_in_test_context

    if currently_in_test_context():
        _event(text)


def _check_built(k: int, chosen: list, fill: bytes, commit) -> list:
    """Build B from (k, chosen), commit offsets on B (`commit(queues, offsets_of)`), diff, and compare with the model;
    returns (side, topic, queue, read-twice offsets) of the consumers that read something twice."""
    recs = _records()
    with tempfile.TemporaryDirectory() as tmp:
        b_root = Path(tmp) / "b"
        written, b_files = _build(b_root, k, chosen, fill)
        a_bytes, b_bytes = _stream(_file_bytes(REAL / STORE / "store")), _stream(b_files)
        b_bytes += bytes(len(a_bytes) - len(b_bytes))  # where B has no file: zeros
        d = next((i for i in range(len(a_bytes)) if a_bytes[i] != b_bytes[i]), None)
        upto = max(
            [m["wroteOffset"] for m in recs if d is not None and m["wroteOffset"] <= d]
            + [m["wroteOffset"] + m["wroteBytes"] for m in recs if d is not None and m["wroteOffset"] + m["wroteBytes"] <= d]
            + [0]
        )
        a_past = [{**m, "ident": _ident(m)} for m in recs if d is not None and m["wroteOffset"] >= upto]
        b_past = [m for m in written if d is not None and m["wroteOffset"] >= upto]
        # committed offsets on B (the copy) for queues named past the prefix, around the offsets the two sides name
        queues = sorted({(m["topic"], m["queueId"]) for m in a_past + b_past})
        commits = commit(queues, lambda t, q: [m["logicsOffset"] for m in a_past + b_past if (m["topic"], m["queueId"]) == (t, q)])
        if commits:  # replaces the copied file (the broker's, groupA's offsets: those stay on A)
            table = {f"{t}@g{q}": {str(q): c} for (t, q), c in commits.items()}
            (b_root / "config" / "consumerOffset.json").write_text(json.dumps({"offsetTable": table}))
        committed = {"a": _offsets(REAL / STORE / "store"), "b": _offsets(b_root)}
        res, got = _diff(REAL / STORE / "store", b_root)
    event("tail: " + ("zeros" if fill == b"\0" else "garbage") + (", differs at a record start" if d == upto else ""))
    if d is None:
        event("identical")
        assert res.exit_code == 0 and got["prefix"][0]["identical"]
        return []
    assert res.exit_code == 1
    pre = got["prefix"][0]
    assert (pre["first_differing_byte"], pre["identical_up_to"]) == (d, upto)
    where = {"a": {m["ident"]: m["wroteOffset"] for m in a_past}, "b": {m["ident"]: m["wroteOffset"] for m in b_past}}

    def status(m, other):
        o = where[other].get(m["ident"])
        return "only" if o is None else ("same" if o == m["wroteOffset"] else "moved")

    want = [("a", m["wroteOffset"], m["uniqKey"], m["queueId"], m["logicsOffset"], status(m, "b")) for m in a_past]
    want += [("b", m["wroteOffset"], None if m["ident"] == ("seq", m["seq"]) else m["ident"], m["queueId"], m["logicsOffset"], status(m, "a")) for m in b_past]
    have = [(m["side"], m["phys_offset"], m["uniq_key"], m["queue_id"], m["queue_offset"], m["status"]) for m in got.get("message", [])]
    event("statuses: " + ",".join(sorted({f"{w[0]}-{w[5]}" for w in want})))
    assert have == want
    named = {s: {(m["topic"], m["queueId"], m["logicsOffset"]): m["ident"] for m in past} for s, past in (("a", a_past), ("b", b_past))}
    div = sorted(q for q in set(named["a"]) & set(named["b"]) if named["a"][q] != named["b"][q])
    have_div = sorted((q["topic"], q["queue_id"], x["queue_offset"]) for q in got["queue"] for x in q["divergent_offsets"])
    assert have_div == div
    only_a = sorted(set(named["a"]) - set(named["b"]))
    assert sorted((q["topic"], q["queue_id"], o) for q in got["queue"] for o in _expand(q["only_a_offsets"])) == only_a
    only_b = sorted(set(named["b"]) - set(named["a"]))
    assert sorted((q["topic"], q["queue_id"], o) for q in got["queue"] for o in _expand(q["only_b_offsets"])) == only_b
    assert pre["prefix_of"] == ("b" if not b_past else None)
    # a consumer committed on one side moving to the other: the other side's messages below its offset that this
    # side never had are skipped, those at or past it that it consumed here (below its offset) are read twice; both
    # sides' ConsumeQueues are the original's, so each side's max offset is the manifest's
    q_max = {}
    for m in recs:
        key = (m["topic"], m["queueId"])
        q_max[key] = max(q_max.get(key, 0), m["logicsOffset"] + 1)
    want_c = []
    for side, other in (("a", "b"), ("b", "a")):
        for group, topic, qid, c in committed[side]:
            mine = {o: i for (t, q, o), i in named[side].items() if (t, q) == (topic, qid)}
            theirs = {o: i for (t, q, o), i in named[other].items() if (t, q) == (topic, qid)}
            if (not mine and not theirs) or c <= min([*mine, *theirs]):
                continue
            consumed = {i for o, i in mine.items() if o < c}
            skipped = sorted(o for o, i in theirs.items() if o < c and i not in set(mine.values()))
            twice = sorted(o for o, i in theirs.items() if o >= c and i in consumed)
            want_c.append((side, group, topic, qid, c, skipped, twice, c > q_max[(topic, qid)]))
            event("consumer: " + ("skips " if skipped else "") + ("reads-twice " if twice else "") + ("beyond" if c > q_max[(topic, qid)] else ""))
    have_c = [
        (x["side"], x["group"], x["topic"], x["queue_id"], x["committed"], _expand(x["skipped_offsets"]), _expand(x["read_twice_offsets"]), x["beyond_max"])
        for x in got.get("consumer", [])
    ]
    assert sorted(have_c) == sorted(want_c)
    return [(c[0], c[2], c[3], c[6]) for c in want_c if c[6]]


def _offsets(root: Path) -> list[tuple[str, str, int, int]]:
    """(group, topic, queue id, offset) of config/consumerOffset.json (fastjson writes unquoted integer keys)."""
    text = (root / "config" / "consumerOffset.json").read_text()
    table = json.loads(re.sub(r"([{,]\s*)(\d+):", r'\1"\2":', text))["offsetTable"]
    return [(key.split("@")[1], key.split("@")[0], int(q), c) for key, per in table.items() for q, c in per.items()]


def test_truncated_at_a_record_boundary(tmp_path):
    """The plainest divergence, by hand: the copy stops at record 1000 (its file zeroed from there, no later file)."""
    recs = _records()
    written, _ = _build(tmp_path / "b", 1000, [])
    assert written == []
    res, got = _diff(REAL / STORE / "store", tmp_path / "b")
    assert res.exit_code == 1
    assert got["prefix"][0]["identical_up_to"] == recs[1000]["wroteOffset"] and got["prefix"][0]["prefix_of"] == "b"
    assert [m["phys_offset"] for m in got["message"]] == [m["wroteOffset"] for m in recs[1000:]]
    assert os.path.isdir(tmp_path / "b")


# --- DLedger: where the ledgers part ------------------------------------------------------------------

DL_FILE = 131072  # rmq53-dledger README.txt: mappedFileSizeCommitLog=131072
DL_HEADER = 48  # README.txt: entry header magic(4) size(4) index(8) term(8) pos(8) channel(4) chainCrc(4) bodyCrc(4) bodySize(4)


def _dledger_copy(dst: Path) -> Path:
    return unpack_store("rmq53-dledger", dst)


@pytest.mark.parametrize("k", [1, 170, 300, 499])
@pytest.mark.parametrize("how", ["truncated", "new_term"])
def test_dledger_parting_point(tmp_path, k, how):
    """B's ledger from entry k on is cut (zeros), or rewritten by a new leader: the same messages under term 7."""
    puts = sorted((m for m in manifest("rmq53-dledger") if m.get("kind") == "put"), key=lambda m: m["wroteOffset"])
    a, b = _dledger_copy(tmp_path / "a"), _dledger_copy(tmp_path / "b")
    data = b / "dledger-n0" / "data"

    def entry(i: int) -> tuple[Path, int]:
        pos = puts[i]["wroteOffset"] - DL_HEADER
        return data / f"{pos // DL_FILE * DL_FILE:020d}", pos % DL_FILE

    def index_term(i: int) -> tuple[int, int]:
        path, at = entry(i)
        raw = (a / "dledger-n0" / "data" / path.name).read_bytes()
        return struct.unpack_from(">qq", raw, at + 8)

    if how == "truncated":
        path, at = entry(k)
        raw = bytearray(path.read_bytes())
        raw[at:] = bytes(len(raw) - at)
        path.write_bytes(bytes(raw))
        for p in data.iterdir():
            if int(p.name) > int(path.name):
                p.unlink()
    else:
        for i in range(k, len(puts)):
            path, at = entry(i)
            with open(path, "r+b") as f:
                f.seek(at + 16)
                f.write(struct.pack(">q", 7))
    res, got = _diff(a, b)
    assert res.exit_code == 1
    pre = got["prefix"][0]
    assert pre["identical_up_to"] == puts[k]["wroteOffset"] - DL_HEADER
    assert pre["last_common_entry"] == dict(zip(("index", "term"), index_term(k - 1), strict=True))
    idx, term = index_term(k)
    assert pre["a_first_entry"] == {"index": idx, "term": term}
    msgs = got["message"]
    a_msgs = [(m["phys_offset"], m["uniq_key"], m["status"]) for m in msgs if m["side"] == "a"]
    b_msgs = [(m["phys_offset"], m["uniq_key"], m["status"]) for m in msgs if m["side"] == "b"]
    if how == "truncated":
        assert pre["b_first_entry"] is None and pre["prefix_of"] == "b"
        assert a_msgs == [(m["wroteOffset"], m["uniqKey"], "only") for m in puts[k:]] and b_msgs == []
    else:
        assert pre["b_first_entry"] == {"index": idx, "term": 7} and pre["prefix_of"] is None
        assert a_msgs == [(m["wroteOffset"], m["uniqKey"], "same") for m in puts[k:]]
        assert b_msgs == a_msgs
        assert sum(len(q["divergent_offsets"]) for q in got["queue"]) == 0


# --- controller mode: epochFileCheckpoint -----------------------------------------------------------------


def _epoch_file(path: Path, entries: list[tuple[int, int]], crc: int | None = None) -> None:
    """Written as the broker's CheckpointFile does (count, CRC32 & 0x7FFFFFFF of the entry lines, `epoch-startOffset` lines)."""
    body = "".join(f"{e}-{s}\n" for e, s in entries)
    path.write_text(f"{len(entries)}\n{zlib.crc32(body.encode()) & 0x7FFFFFFF if crc is None else crc}\n{body}")


def _pair_copy(tmp_path: Path) -> tuple[Path, Path]:
    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(REAL / "rmq53-ha-failover" / "master" / "store", a)
    shutil.copytree(REAL / "rmq53-ha-failover" / "slave" / "store", b)
    return a, b


def test_epochs_after_failover(tmp_path):
    """Old master: epoch 1 from 0; the promoted slave started epoch 2 where replication stopped. The broker's
    consistent point is then the end of the replicated bytes: truth.json's identicalUpTo."""
    t = _truth("rmq53-ha-failover")["commitlog"]
    a, b = _pair_copy(tmp_path)
    _epoch_file(a / "epochFileCheckpoint", [(1, 0)])
    _epoch_file(b / "epochFileCheckpoint", [(1, 0), (2, t["identicalUpTo"])])
    res, got = _diff(a, b)
    assert res.exit_code == 1
    (ep,) = got["epochs"]
    assert ep["a_epochs"] == [{"epoch": 1, "start_offset": 0, "end_offset": t["master"]["maxPhyOffset"]}]
    assert ep["b_epochs"] == [
        {"epoch": 1, "start_offset": 0, "end_offset": t["identicalUpTo"]},
        {"epoch": 2, "start_offset": t["identicalUpTo"], "end_offset": t["slave"]["maxPhyOffset"]},
    ]
    assert ep["consistent_point"] == t["identicalUpTo"] == got["prefix"][0]["identical_up_to"]
    res = run("diff", a, b)
    assert f"consistent point (A rejoining B, as the broker computes it): {t['identicalUpTo']}" in res.stdout


def test_epochs_split_brain(tmp_path):
    """Both sides claim epoch 2 from different offsets: the broker falls back to epoch 1, which ends at the smaller start."""
    a, b = _pair_copy(tmp_path)
    _epoch_file(a / "epochFileCheckpoint", [(1, 0), (2, 900000)])
    _epoch_file(b / "epochFileCheckpoint", [(1, 0), (2, 700000), (3, 1000000)])
    _, got = _diff(a, b)
    assert got["epochs"][0]["consistent_point"] == 700000  # epoch 3 only on B, epoch 2 starts differ, epoch 1: min(900000, 700000)
    _epoch_file(b / "epochFileCheckpoint", [(5, 0)])
    _, got = _diff(a, b)
    assert got["epochs"][0]["consistent_point"] == -1  # no epoch in common: the broker's -1


def test_epoch_file_damaged(tmp_path):
    a, b = _pair_copy(tmp_path)
    _epoch_file(a / "epochFileCheckpoint", [(1, 0), (2, 900000)], crc=12345)
    _epoch_file(b / "epochFileCheckpoint", [(1, 0)])
    _, got = _diff(a, b)
    (p,) = [x for x in got.get("problem", []) if x["code"] == "epoch_file_damaged"]
    assert (p["file"], p["file_offset"]) == (str(a / "epochFileCheckpoint"), len("2\n"))  # the CRC line
    assert got["epochs"][0]["consistent_point"] is None and got["epochs"][0]["a_epochs"] == []
    _epoch_file(a / "epochFileCheckpoint.bak", [(1, 0)])  # the broker falls back to the .bak
    _, got = _diff(a, b)
    assert "problem" not in got and got["epochs"][0]["a_file"] == str(a / "epochFileCheckpoint.bak")
    assert got["epochs"][0]["consistent_point"] == _truth("rmq53-ha-failover")["commitlog"]["slave"]["maxPhyOffset"]


def test_identical_stores_with_epochs(tmp_path):
    src = REAL / "rmq4-basic" / "store"
    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(src, a)
    shutil.copytree(src, b)
    _epoch_file(a / "epochFileCheckpoint", [(1, 0), (3, 5000)])
    _epoch_file(b / "epochFileCheckpoint", [(1, 0), (3, 5000)])
    res, got = _diff(a, b)
    assert res.exit_code == 0
    end = max(m["wroteOffset"] + m["wroteBytes"] for m in manifest("rmq4-basic"))
    assert got["epochs"][0]["consistent_point"] == end


def test_older_files_gone_on_one_side(tmp_path):
    """B lost its first CommitLog file (retention): the comparison starts where both hold bytes, and says what only A holds."""
    src = REAL / "rmq4-basic" / "store"
    b = tmp_path / "b"
    shutil.copytree(src, b)
    first = sorted((b / "commitlog").iterdir())[0]
    first.unlink()
    res, got = _diff(src, b)
    assert res.exit_code == 0
    assert got["prefix"][0]["start"] == FILE
    assert got["summary"][0]["notes"] == [f"a alone holds [0, {FILE}) (the other side's older files are gone): not compared"]


def test_damage_past_the_prefix_is_reported(tmp_path):
    """A body byte flipped in B's first message past the prefix: a body_crc_mismatch problem line there, the message still paired."""
    t = _truth("rmq53-ha-failover")
    a, b = _pair_copy(tmp_path)
    m = t["onlyOnSlave"][0]
    size = t["commitlog"]["mappedFileSizeCommitLog"]
    path = b / "commitlog" / f"{m['wroteOffset'] // size * size:020d}"
    at = m["wroteOffset"] % size + m["wroteBytes"] // 2  # inside the 300-500 byte body (README.txt), after the ~100 byte header
    with open(path, "r+b") as f:
        f.seek(at)
        byte = f.read(1)[0]
        f.seek(at)
        f.write(bytes([byte ^ 0x20]))
    res, got = _diff(a, b)
    assert res.exit_code == 1
    (p,) = got["problem"]
    assert (p["code"], p["side"], p["file"], p["phys_offset"]) == ("body_crc_mismatch", "b", str(path), m["wroteOffset"])
    assert got["summary"][0]["b_problems"] == 1 and got["summary"][0]["only_b"] == t["counts"]["onlySlave"]


def test_walk_starts_at_a_consumequeue_unit():
    """The walk to the record holding the first differing byte starts at the last record a ConsumeQueue unit names
    before it (on the failover pair: the old master's first phase-2 message, truth.json's identicalUpTo), not at the
    file's first byte; the answer is the same."""
    from rmqdump.checks.diffprefix import common_prefix
    from rmqdump.readers.store import Store

    t = _truth("rmq53-ha-failover")["commitlog"]
    a, b = (Store.open(REAL / "rmq53-ha-failover" / s / "store") for s in ("master", "slave"))
    pre = common_prefix(a.commitlog, b.commitlog, record_start_before=lambda side, d: {"a": t["identicalUpTo"]}.get(side))
    assert (pre.walk_from, pre.identical_up_to) == (t["identicalUpTo"], t["identicalUpTo"])
    bad = common_prefix(a.commitlog, b.commitlog, record_start_before=lambda side, d: t["identicalUpTo"] - 7)  # not a record start
    assert (bad.walk_from, bad.identical_up_to) == (t["identicalUpTo"] // t["mappedFileSizeCommitLog"] * t["mappedFileSizeCommitLog"], t["identicalUpTo"])
    from rmqdump.checks.diff import unit_before

    assert unit_before(a, t["firstDifferingByteOffset"]) == t["identicalUpTo"]  # the master's CQ names its first phase-2 message
    _, got = _diff(REAL / "rmq53-ha-failover" / "master" / "store", REAL / "rmq53-ha-failover" / "slave" / "store")
    assert got["prefix"][0]["identical_up_to"] == t["identicalUpTo"]


@pytest.mark.parametrize("seq", [m["seq"] for m in manifest("rmq4-flags") if m["sysFlag"] & 0x4])  # PREPARED and ROLLBACK records
def test_first_differing_byte_at_a_record_no_queue_names(tmp_path, seq):
    """B differs from A first at the first byte of a record no ConsumeQueue unit names (a PREPARED or ROLLBACK
    transaction record): the walk starts at an earlier unit and must count the record that ends exactly there.
    The expected prefix is the manifest's: the end of the last whole record at or before that byte."""
    ms = sorted(manifest("rmq4-flags"), key=lambda m: m["wroteOffset"])
    m = next(x for x in ms if x["seq"] == seq)
    d, size = m["wroteOffset"], SETTINGS["rmq4-flags"]["commitlog"]
    b = tmp_path / "b"
    shutil.copytree(REAL / "rmq4-flags" / "store", b)
    path = b / "commitlog" / f"{d // size * size:020d}"
    data = bytearray(path.read_bytes())
    data[d % size] = 0xFF  # the high byte of its totalSize: nothing else changes
    path.write_bytes(bytes(data))
    upto = max(x["wroteOffset"] + x["wroteBytes"] for x in ms if x["wroteOffset"] + x["wroteBytes"] <= d)
    assert upto == d  # records follow each other: the one before ends where this one starts
    res, k = _diff(REAL / "rmq4-flags" / "store", b)
    assert res.exit_code == 1
    pre = k["prefix"][0]
    assert (pre["first_differing_byte"], pre["identical_up_to"]) == (d, upto)
    # past the prefix A holds this record and every later one; B the later ones at the same offsets
    a_msgs = [x["phys_offset"] for x in k["message"] if x["side"] == "a"]
    assert a_msgs == [x["wroteOffset"] for x in ms if x["wroteOffset"] >= upto]
    assert [x["phys_offset"] for x in k["message"] if x["side"] == "b"] == a_msgs[1:]
    (s,) = k["summary"]
    assert s["identical_up_to"] == upto


def test_consumers_affected_is_unknown_without_committed_offsets(tmp_path):
    """Neither side of rmq53-ha-failover holds config/consumerOffset.json: the impact is unknown, not 0; with offsets
    on one side only, that side's consumers are counted and the other named."""
    pair = REAL / "rmq53-ha-failover"
    assert not (pair / "master" / "store" / "config" / "consumerOffset.json").exists()
    assert not (pair / "slave" / "store" / "config" / "consumerOffset.json").exists()
    res, k = _diff(pair / "master" / "store", pair / "slave" / "store")
    assert res.exit_code == 1
    (s,) = k["summary"]
    assert (s["consumers_affected"], s["consumers_affected_why"]) == (None, "neither store holds config/consumerOffset.json")
    t = run("diff", pair / "master" / "store", pair / "slave" / "store")
    assert "consumers affected: unknown (neither store holds config/consumerOffset.json)" in t.stdout
    tq = _truth("rmq53-ha-failover")["queues"]["TradeEvents/0"]
    a = tmp_path / "a"
    shutil.copytree(pair / "master" / "store", a)
    (a / "config").mkdir()
    lo = tq["divergentOffsets"][0]["queueOffset"]
    (a / "config" / "consumerOffset.json").write_text(json.dumps({"offsetTable": {"TradeEvents@g": {"0": lo + 1}, "TradeEvents@h": {"0": lo}}}))
    res, k = _diff(a, pair / "slave" / "store")
    (s,) = k["summary"]
    assert s["consumers_affected"] == 1  # g committed past the first divergent offset; h at it consumed nothing that differs
    assert s["consumers_affected_why"] == "B holds no config/consumerOffset.json: B's consumers are not counted"
    # identical stores: nothing differs, so no consumer can be affected, offsets or not
    res, k = _diff(pair / "master" / "store", pair / "master" / "store")
    assert res.exit_code == 0
    assert (k["summary"][0]["consumers_affected"], k["summary"][0]["consumers_affected_why"]) == (0, None)
