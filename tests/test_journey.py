"""`rmqdump journey` against what a whole RocketMQ 5.3.3 broker and its clients did (fixtures/real/rmq53-lifecycle*/truth.json).

truth.json lists, for every message a client sent, every copy the broker stored (storeCopies), every consume attempt,
the transaction's outcome, pops and acks; manifest.jsonl holds every stored record (store_msg, with its properties and,
for op, checkpoint and ack records, its body). The expectations below are computed from those files alone.
"""

from __future__ import annotations

import json
import shutil
from collections import defaultdict
from functools import cache

import pytest
from conftest import REAL, copy_store, jsonl, manifest, patch, run

LIFECYCLE = ["rmq53-lifecycle", "rmq53-lifecycle-crash"]
PUSH, POP = "GID_lc_push", "GID_lc_pop"
LEVELS_MS = [int(t[:-1]) * {"s": 1000, "m": 60_000, "h": 3_600_000}[t[-1]] for t in ["1s", "5s", "10s", "30s", "1m", "2m", "3m", "4m", "5m", "6m", "7m", "8m", "9m", "10m", "20m", "30m", "1h", "2h"]]
HELD = ("SCHEDULE_TOPIC_XXXX", "rmq_sys_wheel_timer")


@cache
def truth(name: str) -> dict:
    return json.loads((REAL / name / "truth.json").read_text())


@cache
def records(name: str) -> dict[int, dict]:
    """Every stored record by CommitLog offset (manifest store_msg lines: one per ConsumeQueue unit)."""
    return {m["commitLogOffset"]: m for m in manifest(name) if m["kind"] == "store_msg"}


def _rows_all(name: str, *extra: str) -> list[dict]:
    r = run("journey", "--all", "-s", REAL / name / "store", "-f", "jsonl", *extra)
    assert r.exit_code in (0, 1), r.stderr
    return jsonl(r.stdout)


@cache
def rows_all(name: str) -> tuple[dict, ...]:
    return tuple(_rows_all(name))


@cache
def rows_index(name: str) -> tuple[dict, ...]:
    """The same journeys found one message at a time through the IndexFile and the op/revive/timer queues."""
    from rmqdump.query.journeys import journeys
    from rmqdump.readers.store import Store

    st = Store.open(REAL / name / "store")
    found, _problems, g = journeys(st, [m["uniqKey"] for m in truth(name)["messages"]], use_index=True)
    assert g.how == "index"
    return tuple(r for j in found for r in json.loads(json.dumps(j.rows())))


MODES = {"scan": rows_all, "index": rows_index}


def _by_key(rows, kind: str) -> dict[str, list[dict]]:
    out = defaultdict(list)
    for r in rows:
        if r["kind"] == kind:
            out[r["uniq_key"]].append(r)
    return out


def expected_state(m: dict) -> str:
    if m.get("inDLQ"):
        return "dead_letter"
    if m["kind"] == "transaction":
        return {"commit": "tx_committed", "rollback": "tx_rolled_back"}.get(m.get("txOutcome")) or (
            "tx_discarded" if m["inTransCheckMaxTopic"] else "tx_pending"
        )
    if m["kind"] in ("delay", "timer") and not m.get("deliveredBeforeShutdown"):
        return "scheduled"
    last = max(m["storeCopies"], key=lambda c: c["commitLogOffset"])
    return "scheduled" if last["topic"] in HELD else "delivered"


def expected_hop(m: dict, c: dict, rec: dict) -> str:
    t, props = c["topic"], rec["properties"]
    if t == "SCHEDULE_TOPIC_XXXX":
        return "scheduled"
    if t == "rmq_sys_wheel_timer":
        return "timer"
    if t == "RMQ_SYS_TRANS_HALF_TOPIC":
        return "half_check" if "TRANSACTION_CHECK_TIMES" in props else "half"
    if t == "TRANS_CHECK_MAX_TIME_TOPIC":
        return "check_max"
    if t == "%RETRY%GID_lc_pop_LcPopJobs":
        return "pop_retry"
    if t.startswith("%RETRY%"):
        return "retry"
    if t.startswith("%DLQ%"):
        return "dlq"
    if rec["sysFlag"] & 0xC == 0x8:
        return "commit"
    return "delivered" if m["kind"] in ("delay", "timer") else "put"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", LIFECYCLE)
def test_copies_are_the_stored_copies(name, mode):
    """Every message's copy rows are exactly its storeCopies, each field as the record says (manifest)."""
    copies = _by_key(MODES[mode](name), "copy")
    recs = records(name)
    msgs = truth(name)["messages"]
    assert set(copies) >= {m["uniqKey"] for m in msgs}
    for m in msgs:
        got = copies[m["uniqKey"]]
        assert sorted((r["topic"], r["queue_id"], r["queue_offset"], r["phys_offset"]) for r in got) == sorted(
            (c["topic"], c["queueId"], c["queueOffset"], c["commitLogOffset"]) for c in m["storeCopies"]
        ), m["uniqKey"]
        assert [r["phys_offset"] for r in got] == sorted(r["phys_offset"] for r in got)  # store order
        halves = sorted(c["commitLogOffset"] for c in m["storeCopies"] if c["topic"] == "RMQ_SYS_TRANS_HALF_TOPIC")
        for r in got:
            c = next(c for c in m["storeCopies"] if c["commitLogOffset"] == r["phys_offset"])
            rec, props = recs[r["phys_offset"]], recs[r["phys_offset"]]["properties"]
            hop = expected_hop(m, c, rec)
            level = int(props["DELAY"]) if props.get("DELAY") not in (None, "0") else (c["queueId"] + 1 if hop == "scheduled" else None)
            due = {"scheduled": rec["storeTimestamp"] + LEVELS_MS[min(level or 1, 18) - 1], "timer": int(props.get("TIMER_OUT_MS", 0))}.get(hop)
            want = {
                "kind": "copy",
                "uniq_key": m["uniqKey"],
                "hop": hop,
                "topic": c["topic"],
                "queue_id": c["queueId"],
                "queue_offset": c["queueOffset"],
                "phys_offset": c["commitLogOffset"],
                "store_time": rec["storeTimestamp"],
                "total_size": rec["storeSize"],
                "msg_id": c["offsetMsgId"],
                "real_topic": props.get("REAL_TOPIC"),
                "real_queue_id": int(props["REAL_QID"]) if "REAL_QID" in props else None,
                "delay_level": level,
                "due_time": due,
                "reconsume_times": c["reconsumeTimes"],
                "check_times": int(props["TRANSACTION_CHECK_TIMES"]) if "TRANSACTION_CHECK_TIMES" in props else None,
                "prepared_offset": max(h for h in halves if h < c["commitLogOffset"]) if hop == "commit" else None,
                "origin_msg_id": props.get("ORIGIN_MESSAGE_ID"),
                "retry_topic": props.get("RETRY_TOPIC"),
                "producer_group": props.get("PGROUP"),
                "keys": [k for k in props.get("KEYS", "").split(" ") if k],
                "tags": props.get("TAGS"),
                "recovery_drops": False,  # the crash store's pages were complete: the broker's recovery keeps every record
            }
            assert {k: r[k] for k in want} == want
            assert r["file"].endswith("commitlog/00000000000000000000")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", LIFECYCLE)
def test_verdicts_are_what_happened(name, mode):
    """The state and every group's status are what the broker and its clients did (truth.json)."""
    verdicts = {r["uniq_key"]: r for r in MODES[mode](name) if r["kind"] == "verdict"}
    clean = name == "rmq53-lifecycle"
    offsets = _offsets(name)
    for m in truth(name)["messages"]:
        v = verdicts[m["uniqKey"]]
        assert v["state"] == expected_state(m), m["uniqKey"]
        if m["kind"] == "pop":
            want = {POP: "acked" if m.get("popAcked") else ("unacked" if m.get("pops") else "not_consumed")}
        else:
            success = [a for a in m.get("consumeAttempts", []) if a["result"] == "CONSUME_SUCCESS"]
            want = {PUSH: "consumed" if success else "not_consumed"}
            if not clean and success:
                # as last persisted: consumed only where the committed offset is past the copy the consumer read
                a = success[-1]
                topic = next(c["topic"] for c in m["storeCopies"] if c["commitLogOffset"] == a["commitLogOffset"])
                if offsets.get((PUSH, topic, a["queueId"]), -1) <= a["queueOffset"]:
                    want = {PUSH: "not_consumed"}
        assert v["groups"] == want, m["uniqKey"]
        assert v["why"] and "None" not in v["why"]
        assert v["due_time"] == (max(c["due_time"] for c in _by_key(MODES[mode](name), "copy")[m["uniqKey"]] if c["due_time"]) if v["state"] == "scheduled" else None)
        assert bool(v["evidence_caveats"]) == (not clean)


def _offsets(name: str) -> dict[tuple[str, str, int], int]:
    from rmqdump.readers.configfiles import loads_fastjson

    doc = loads_fastjson((REAL / name / "store" / "config" / "consumerOffset.json").read_text())
    return {(k.split("@")[1], k.split("@")[0], int(q)): int(o) for k, per in doc["offsetTable"].items() for q, o in per.items()}


def expected_evidence(name: str) -> set[tuple]:
    """(uniq key, hop, record offset, named topic, queue, offset, held in the timer) for every op, checkpoint and ack record in
    the store, for each position it names that holds a copy of a message (the test's own reading of the bodies)."""
    where = {(c["topic"], c["queueId"], c["queueOffset"]): m["uniqKey"] for m in truth(name)["messages"] for c in m["storeCopies"]}
    out = set()
    for off, rec in records(name).items():
        t, props = rec["topic"], rec["properties"]
        held = t == "rmq_sys_wheel_timer" and props.get("REAL_TOPIC", "").startswith("rmq_sys_REVIVE_LOG_")
        if t == "RMQ_SYS_TRANS_OP_HALF_TOPIC":
            names = [("RMQ_SYS_TRANS_HALF_TOPIC", rec["queueId"], int(x)) for x in rec["body"].split(",") if x]
            hop = "op"
        elif t.startswith("rmq_sys_REVIVE_LOG_") or held:
            b = json.loads(rec.get("body") or _body(name, off))
            if props["TAGS"] == "ck":
                hop, names = "checkpoint", [(b["t"], b["q"], b["so"] + d) for d in b["d"]]
            else:
                hop, names = "ack", [(b["t"], b["q"], o) for o in b.get("aol", [b.get("ao")])]
        else:
            continue
        out |= {(where[n], hop, off, *n, held) for n in names if n in where}
    return out


def _body(name: str, off: int) -> str:
    """A record's body read by the test itself (IPv4 hosts: the body length at byte 84, the body after it)."""
    with open(REAL / name / "store" / "commitlog" / "00000000000000000000", "rb") as f:
        f.seek(off + 84)
        n = int.from_bytes(f.read(4), "big")
        return f.read(n).decode()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", LIFECYCLE)
def test_every_record_about_a_message_is_its_evidence(name, mode):
    rows = [r for r in MODES[mode](name) if r["kind"] == "evidence"]
    got = {(r["uniq_key"], r["hop"], r["phys_offset"], r["names_topic"], r["names_queue_id"], r["names_queue_offset"], r["held_in_timer"]) for r in rows}
    assert len(got) == len(rows)
    assert got == expected_evidence(name)
    recs = records(name)
    for r in rows:
        rec = recs[r["phys_offset"]]
        assert (r["topic"], r["queue_id"], r["queue_offset"], r["store_time"]) == (rec["topic"], rec["queueId"], rec["queueOffset"], rec["storeTimestamp"])
        if r["hop"] != "op":
            b = json.loads(rec.get("body") or _body(name, r["phys_offset"]))
            assert (r["group"], r["pop_time"]) == (b["c"], b["pt"])
            assert (r["invisible_time"], r["revive_time"]) == ((b["it"], b["reviveTime"]) if r["hop"] == "checkpoint" else (None, None))


def expected_problems(name: str) -> set[tuple[str, str]]:
    """Odd journeys, from truth: a transaction committed twice; a DLQ copy at or below the group's retry limit."""
    limit = json.loads((REAL / name / "store" / "config" / "subscriptionGroup.json").read_text())["subscriptionGroupTable"][PUSH]["retryMaxTimes"]
    out = set()
    for m in truth(name)["messages"]:
        commits = [c for c in m["storeCopies"] if c["topic"] == m["topic"] and m["kind"] == "transaction"]
        if len(commits) > 1:
            out.add(("journey_double_commit", m["uniqKey"]))
        if any(c["topic"].startswith("%DLQ%") and c["reconsumeTimes"] <= limit for c in m["storeCopies"]):
            out.add(("journey_dlq_before_retry_limit", m["uniqKey"]))
    return out


@pytest.mark.parametrize("name", LIFECYCLE)
def test_odd_journeys_are_problems(name):
    rows = rows_all(name)
    got = {(r["code"], r["uniq_key"]) for r in rows if r["kind"] == "problem"}
    assert got == expected_problems(name)
    assert any(code == "journey_double_commit" for code, _ in got) == (name == "rmq53-lifecycle-crash")
    summary = rows[-1]
    assert summary == {"kind": "summary", "journeys": len(truth(name)["messages"]), "problems": len(got), "not_found": 0}


def test_one_message_by_id_key_and_offset_msgid():
    m = next(m for m in truth("rmq53-lifecycle")["messages"] if m.get("inDLQ") and m["consumePlan"] == "failAlways")
    store = REAL / "rmq53-lifecycle" / "store"
    by_uniq = run("journey", m["uniqKey"], "-s", store, "-f", "jsonl")
    by_offset = run("journey", m["offsetMsgId"], "-s", store, "-f", "jsonl")
    by_key = run("journey", "--key", m["keys"].split()[0], "-s", store, "-f", "jsonl")
    for r in (by_uniq, by_offset, by_key):
        assert r.exit_code == 0, r.stderr
        rows = jsonl(r.stdout)
        assert [x["uniq_key"] for x in rows if x["kind"] == "verdict"] == [m["uniqKey"]]
        assert {(x["topic"], x["phys_offset"]) for x in rows if x["kind"] == "copy"} == {(c["topic"], c["commitLogOffset"]) for c in m["storeCopies"]}
    table = run("journey", m["uniqKey"], "-s", store)
    assert table.exit_code == 0 and "dead_letter" in table.stdout and "%DLQ%GID_lc_push" in table.stdout


def test_not_found_and_malformed_ids():
    store = REAL / "rmq53-lifecycle" / "store"
    r = run("journey", "7F0000010F5B5FFD2B278C7058CF0FFF", "-s", store)
    assert r.exit_code == 1 and "journey_not_found" in r.stderr and "Traceback" not in r.stderr
    r = run("journey", "not-hex", "-s", store)
    assert r.exit_code == 2 and "bad_msgid" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = run("journey", "-s", store)
    assert r.exit_code == 2 and "usage" in r.stderr


@pytest.mark.parametrize("name", ["rmq4-basic", "rmq4-flags", "rmq5-basic", "rmq53-v2", "rmq4-crash"])
def test_other_stores_every_record_is_a_copy(name):
    """On stores written by the broker's store code alone, every stored record is a copy of the message its UNIQ_KEY (else
    its offset msgId) names, and the journey's state follows from its topics and transaction types (the manifest)."""
    from rmqdump.readers.msgid import OffsetMsgId

    rows = _rows_all(name)
    want: dict[str, set] = defaultdict(set)
    kinds: dict[str, list] = defaultdict(list)
    for m in manifest(name):
        if m.get("appendStatus", "PUT_OK") != "PUT_OK" or not m.get("msgId") or m["topic"] == "RMQ_SYS_TRANS_OP_HALF_TOPIC":
            continue  # an op record is evidence about halves, not a copy of a message
        phys = OffsetMsgId.decode(m["msgId"]).phys_offset
        key = m.get("uniqKey") or m["msgId"]
        want[key].add((m["topic"], m["queueId"], m["logicsOffset"], phys))
        kinds[key].append((phys, m["topic"], m["sysFlag"] & 0xC))
    got: dict[str, set] = defaultdict(set)
    for r in rows:
        if r["kind"] == "copy":
            got[r["uniq_key"]].add((r["topic"], r["queue_id"], r["queue_offset"], r["phys_offset"]))
    assert {k: v for k, v in got.items() if k in want} == dict(want)
    states = {r["uniq_key"]: r["state"] for r in rows if r["kind"] == "verdict"}
    for key, recs in kinds.items():
        recs.sort()
        topics, tx = [t for _, t, _ in recs], [f for _, _, f in recs]
        if any(t.startswith("%DLQ%") for t in topics):
            state = "dead_letter"
        elif 0x8 in tx:
            state = "tx_committed"
        elif 0xC in tx:
            state = "tx_rolled_back"
        elif "RMQ_SYS_TRANS_HALF_TOPIC" in topics:
            continue  # settled or not by op records whose bodies the manifest does not hold: judged on the lifecycle stores
        elif 0x4 in tx:
            state = "tx_pending"
        elif topics[-1] == "SCHEDULE_TOPIC_XXXX":
            state = "scheduled"
        else:
            state = "delivered"
        assert states[key] == state, key


def test_delay_delivered_past_the_levels_offset_but_missing(tmp_path):
    """config/delayOffset.json past a still-scheduled copy (a delivery the CommitLog does not hold) is journey_delay_undelivered."""
    src = REAL / "rmq53-lifecycle" / "store"
    dst = tmp_path / "store"
    shutil.copytree(src, dst)
    pending = [m for m in truth("rmq53-lifecycle")["messages"] if m["kind"] == "delay" and not m["deliveredBeforeShutdown"]]
    level18 = [m for m in pending if m["delayLevel"] == 18]
    assert level18
    for f in ("delayOffset.json", "delayOffset.json.bak"):
        p = dst / "config" / f
        p.write_text(p.read_text().replace("18:0", "18:" + str(1 + max(c["queueOffset"] for m in level18 for c in m["storeCopies"]))))
    rows = _rows_all_at(dst)
    got = {r["uniq_key"] for r in rows if r.get("code") == "journey_delay_undelivered"}
    assert got == {m["uniqKey"] for m in level18}


def _rows_all_at(store) -> list[dict]:
    r = run("journey", "--all", "-s", store, "-f", "jsonl")
    assert r.exit_code == 1, r.stderr
    return jsonl(r.stdout)


# --- the rules on journeys the stores above do not hold, each built by the test from records it describes ---


def _copy(hop: str, topic: str, phys: int, **kw):
    from rmqdump.readers.lifecycle import Copy

    base = dict(uniq_key="AA" * 16, hop=hop, topic=topic, queue_id=0, queue_offset=phys // 100, phys_offset=phys, store_timestamp=1000 + phys,
                total_size=100, msg_id=f"7F000001000051AF{phys:016X}", file="/s/commitlog/00000000000000000000")  # fmt: skip
    base.update(kw)
    return Copy(**base)


def _judge(copies, **ctx):
    from rmqdump.checks.journey import Context, link

    c = Context(**ctx)
    (j,) = link(copies, c)
    return j


def test_a_commit_without_its_half_and_a_second_commit():
    half = _copy("half", "RMQ_SYS_TRANS_HALF_TOPIC", 100, real_topic="T", real_queue_id=0)
    first = _copy("commit", "T", 300, prepared_offset=100)
    stray = _copy("commit", "T", 500, prepared_offset=400)  # names no half of this message
    j = _judge([half, first, stray])
    assert j.verdict.state == "tx_committed"
    assert [(p.code, p.phys_offset, p.file_offset) for p in j.problems] == [
        ("journey_double_commit", 500, 500),
        ("journey_commit_without_half", 500, 500),
    ]
    assert [p.code for p in _judge([half, first]).problems] == []
    # a half in a file already deleted (below the CommitLog's first offset) cannot be judged: no problem
    assert [p.code for p in _judge([_copy("commit", "T", 500, prepared_offset=400)], min_phys=450).problems] == []


def test_a_retry_whose_original_is_gone():
    orig = _copy("put", "T", 100)
    retry = _copy("retry", "%RETRY%G", 300, origin_msg_id=orig.msg_id, retry_topic="T", reconsume_times=1)
    assert [p.code for p in _judge([orig, retry]).problems] == []
    j = _judge([retry])
    assert [(p.code, p.phys_offset) for p in j.problems] == [("journey_origin_missing", 300)]
    assert [p.code for p in _judge([retry], min_phys=200).problems] == []  # deleted with its file, as retention does


def test_an_orphan_checkpoint_and_a_body_the_broker_does_not_write():
    from rmqdump.checks.journey import Context, orphan_checkpoints
    from rmqdump.readers.lifecycle import read_record
    from rmqdump.readers.message import Message

    def rec(body: bytes, tag: str, phys: int):
        m = Message("/s/commitlog/00000000000000000000", phys, 200, 0, 0, None, None, 1, 0, 0, 0, 1, "h", 2, "h", 0, 0, len(body),
                    "rmq_sys_REVIVE_LOG_C", {"TAGS": tag}, "X")  # fmt: skip
        return read_record(m, body)

    ck = rec(b'{"c":"G","t":"T","q":0,"so":5,"d":[0,2],"pt":7,"it":10,"bm":1}', "ck", 1000)
    assert (ck.hop, ck.names, ck.acked, ck.revive_time) == ("checkpoint", [("T", 0, 5), ("T", 0, 7)], [5], 17)
    bad = rec(b"not json", "ack", 2000)
    assert bad.hop == "ack" and bad.names == [] and bad.problem
    ctx = Context()
    ctx.add_evidence([ck, bad])
    got = orphan_checkpoints(ctx, {("T", 0, 5)}, {("T", 0): (0, 10)})
    assert [(p.code, p.phys_offset) for p in got] == [("journey_orphan_checkpoint", 1000), ("journey_bad_evidence", 2000)]
    assert orphan_checkpoints(ctx, {("T", 0, 5)}, {("T", 0): (8, 10)})[0].code == "journey_bad_evidence"  # offset 7 below the queue's min


def test_pop_ack_of_the_latest_checkpoint_decides():
    """changeInvisibleTime acks the old checkpoint and writes a new one: only an ack of the newest one counts."""
    from rmqdump.checks.journey import Context
    from rmqdump.readers.lifecycle import Evidence

    def ev(hop, pt, phys):
        return Evidence(hop, "rmq_sys_REVIVE_LOG_C", 0, phys, phys, pt, "/s/commitlog/00000000000000000000", [("T", 0, 1)], group="G", pop_time=pt, start_offset=1, invisible_time=5, revive_time=pt + 5)

    msg = _copy("put", "T", 100, queue_offset=1)
    old_ck, old_ack, new_ck = ev("checkpoint", 10, 1000), ev("ack", 10, 1100), ev("checkpoint", 20, 1200)
    ctx = Context()
    ctx.add_evidence([old_ck, old_ack, new_ck])
    from rmqdump.checks.journey import link

    (j,) = link([msg], ctx)
    assert j.verdict.groups == {"G": "unacked"}
    ctx.add_evidence([ev("ack", 20, 1300)])
    (j,) = link([msg], ctx)
    assert j.verdict.groups == {"G": "acked"}
    assert len(j.evidence) == 4


@pytest.mark.parametrize("via", ["queues", "scan"])
@pytest.mark.parametrize("name", LIFECYCLE)
def test_lifecycle_journeys_through_the_queues_or_a_scan(name, via):
    """The store-wide views' input: every message the broker moved or a POP consumer popped, with its copies and state,
    whether found through the system queues and the index or by the whole-store scan."""
    from rmqdump.query.journeys import lifecycle_journeys
    from rmqdump.readers.store import Store

    found, problems, g, ctx = lifecycle_journeys(Store.open(REAL / name / "store"), via=via)
    assert g.how == ("queues" if via == "queues" else "scan")
    moved = [m for m in truth(name)["messages"] if m["kind"] != "normal" or len(m["storeCopies"]) > 1]
    by_key = {j.uniq_key: j for j in found}
    assert set(by_key) == {m["uniqKey"] for m in moved}
    for m in moved:
        j = by_key[m["uniqKey"]]
        assert sorted((c.topic, c.queue_id, c.queue_offset, c.phys_offset) for c in j.copies) == sorted(
            (c["topic"], c["queueId"], c["queueOffset"], c["commitLogOffset"]) for c in m["storeCopies"]
        )
        assert j.verdict.state == expected_state(m)
    assert problems == []
    assert {(p.code, j.uniq_key) for j in found for p in j.problems} == expected_problems(name)
    about = {
        off
        for off, rec in records(name).items()
        if rec["topic"] == "RMQ_SYS_TRANS_OP_HALF_TOPIC"
        or rec["topic"].startswith("rmq_sys_REVIVE_LOG_")
        or (rec["topic"] == "rmq_sys_wheel_timer" and rec["properties"].get("REAL_TOPIC", "").startswith("rmq_sys_REVIVE_LOG_"))
    }
    assert sorted(e.phys_offset for e in ctx.evidence) == sorted(about)


@pytest.mark.parametrize("name", ["rmq53-lifecycle-crash", "rmq4-basic"])
def test_every_engine_gives_the_same_journeys(name, monkeypatch, spark):
    """journey --all over many small ranges, mapped by one thread, two threads and Spark tasks: the same rows (the
    single-copy journeys spelled range by range, the linked ones after), each set equal to what the truth says."""
    from rmqdump.engines.local import LocalMap
    from rmqdump.engines.spark.rangemap import SparkMap
    from rmqdump.query import journeyscan
    from rmqdump.query.journeys import all_journeys
    from rmqdump.readers.store import Store

    monkeypatch.setattr(journeyscan, "SURVEY_SPLIT", 48 << 10)
    monkeypatch.setattr(journeyscan, "RENDER_SPLIT", 16 << 10)

    def rows(mapper) -> list[str]:
        out = []
        for item in all_journeys(Store.open(REAL / name / "store"), mapper=mapper):
            if isinstance(item, journeyscan.Rendered):
                out += item.text.splitlines()
            elif hasattr(item, "rows"):
                out += [json.dumps(r, sort_keys=True) for r in item.rows()]
        return out

    one = rows(LocalMap(1))
    assert rows(LocalMap(2)) == one
    assert rows(SparkMap(spark)) == one
    copies = {(json.loads(x)["uniq_key"], json.loads(x)["phys_offset"]) for x in one if '"kind":"copy"' in x or '"kind": "copy"' in x}
    if name in LIFECYCLE:
        assert copies == {(m["uniqKey"], c["commitLogOffset"]) for m in truth(name)["messages"] for c in m["storeCopies"]}
    else:
        assert len(copies) == len(manifest(name))


def test_single_copy_spelling_is_the_objects_spelling():
    """The render pass spells a single-copy journey from escaped pieces; encoding its Copy and verdict gives the same bytes
    (keys, tags and topics with quotes, backslashes and non-ASCII included)."""
    from rmqdump.checks.journey import Context, PutJudge
    from rmqdump.common.jsontext import encode
    from rmqdump.query.journeyscan import _Speller
    from rmqdump.readers.lifecycle import Copy

    ctx = Context(offsets={("G\\1", 'T"ö', 2): 7, ("G2", 'T"ö', 2): 3, ("G3", "other", 0): 1}, offsets_file="x", abnormal=True)
    judge = PutJudge.of(ctx)
    sp = _Speller(judge, '/s/"c"/00000000000000000000', "b\\1")
    for qo in (2, 5, 7, 9):
        c = Copy("AB" * 16, "put", 'T"ö', 2, qo, 100 + qo, 1000, 321, "0A" * 16, '/s/"c"/00000000000000000000', reconsume_times=1,
                 keys=['k"1', "ü"], tags="t\\x")  # fmt: skip
        assert sp.copy(c.uniq_key, c.topic, 2, qo, c.phys_offset, 1000, 321, c.msg_id, 1, encode(c.keys), encode(c.tags)) == encode({**c.to_dict(), "broker": "b\\1"})
        line, statuses = sp.verdict(c.uniq_key, c.topic, 2, qo)
        want = judge.verdict(c.uniq_key, c.topic, 2, qo)
        assert line == encode({**want, "broker": "b\\1"})
        assert statuses == list(want["groups"].items())


def test_a_fleet_names_the_broker_that_holds_the_message():
    m = next(m for m in truth("rmq53-lifecycle-crash")["messages"] if m["kind"] == "transaction" and m["txOutcome"] == "commit")
    r = run("journey", m["uniqKey"], "-s", str(REAL / "rmq53-lifecycle*" / "store"), "-f", "jsonl")
    assert r.exit_code in (0, 1), r.stderr
    rows = jsonl(r.stdout)
    assert {x["broker"] for x in rows if x["kind"] in ("copy", "verdict")} == {"rmq53-lifecycle-crash"}
    assert {(x["topic"], x["phys_offset"]) for x in rows if x["kind"] == "copy"} == {(c["topic"], c["commitLogOffset"]) for c in m["storeCopies"]}
    assert rows[-1]["not_found"] == 0
    r = run("journey", "7F0000010F5B5FFD2B278C7058CF0FFF", "-s", str(REAL / "rmq53-lifecycle*" / "store"), "-f", "jsonl")
    assert r.exit_code == 1 and jsonl(r.stdout)[-2:] == [{"kind": "not_found", "id": "7F0000010F5B5FFD2B278C7058CF0FFF"}, {"kind": "summary", "journeys": 0, "problems": 0, "not_found": 1}]


@pytest.mark.parametrize("name", LIFECYCLE)
def test_info_says_what_the_lifecycle_holds_back(name):
    r = run("info", "-s", REAL / name / "store", "-f", "jsonl")
    (d,) = [x for x in jsonl(r.stdout) if x["kind"] == "lifecycle"]
    msgs = truth(name)["messages"]
    waiting = [m for m in msgs if expected_state(m) == "scheduled"]
    in_timer = [m for m in waiting if max(m["storeCopies"], key=lambda c: c["commitLogOffset"])["topic"] == "rmq_sys_wheel_timer"]
    tx = [m for m in msgs if m["kind"] == "transaction"]
    assert d == {
        "kind": "lifecycle",
        "delays_waiting": len(waiting) - len(in_timer),
        "timer_waiting": len(in_timer),
        "transactions_pending": sum(expected_state(m) == "tx_pending" for m in tx),
        "transactions_discarded": sum(expected_state(m) == "tx_discarded" for m in tx),
        "dead_letter_messages": sum(m.get("inDLQ", False) for m in msgs),
        "dead_letter_queues": {"%DLQ%GID_lc_push": sum(m.get("inDLQ", False) for m in msgs)},
        "pops_unacked": sum(m["kind"] == "pop" and bool(m.get("pops")) and not m["popAcked"] for m in msgs),
        "problems": len(expected_problems(name)),
    }
    table = run("info", "-s", REAL / name / "store")
    assert f"{d['pops_unacked']} popped messages never acked (rmqdump pop -s" in table.stdout
    assert all(x["kind"] != "lifecycle" for x in jsonl(run("info", "-s", REAL / "rmq4-basic" / "store", "-f", "jsonl").stdout))


@pytest.mark.parametrize("keys", [["a", "b c", "ü€"], ['q"uote'], ["back\\slash"], ["ctl\x01"], [b"\xff\xfe".decode("latin-1")], []])
def test_keys_spelled_by_joining_only_when_json_would_leave_them_as_they_are(keys):
    import numpy as np

    from rmqdump.common.jsontext import encode
    from rmqdump.query.journeyscan import _plain_text

    raw = "".join(keys).encode("utf-8")
    if _plain_text(np.frombuffer(raw, np.uint8)):
        assert ('["' + '","'.join(keys) + '"]' if keys else "[]") == encode(keys)
    else:
        assert any(c in "".join(keys) for c in '"\\\x01') or keys == [b"\xff\xfe".decode("latin-1")]
    assert not _plain_text(np.frombuffer(b"\xff\xfe", np.uint8))  # not UTF-8: the encoder's path


@pytest.mark.parametrize("command", [["journey", "--all"], ["tx"], ["pop"], ["delay"], ["retry"]])
def test_a_damaged_lifecycle_store_names_the_damage_never_a_traceback(command, tmp_path):
    """A POP checkpoint's body flipped in a copy of the store: the record fails its body CRC; every lifecycle command
    names it (file and byte offset, from the test's own choice of record) and exits 1, with no traceback."""
    name = "rmq53-lifecycle"
    dst = tmp_path / "store"
    shutil.copytree(REAL / name / "store", dst)
    off = min(o for o, rec in records(name).items() if rec["topic"].startswith("rmq_sys_REVIVE_LOG_") and rec["properties"]["TAGS"] == "ck")
    seg = dst / "commitlog" / "00000000000000000000"
    with open(seg, "r+b") as f:
        f.seek(off + 88)  # the body's first byte (IPv4 hosts)
        b = f.read(1)
        f.seek(off + 88)
        f.write(bytes([b[0] ^ 0x20]))
    r = run(*command, "-s", dst, "-f", "jsonl")
    assert r.exit_code == 1, (r.stdout[-500:], r.stderr[-500:])
    assert "Traceback" not in r.stdout + r.stderr
    probs = [x for x in jsonl(r.stdout) if x["kind"] == "problem"]
    assert any(p["code"] == "body_crc_mismatch" and p["phys_offset"] == off and p["file"].endswith("00000000000000000000") and p["file_offset"] == off + 88 for p in probs), probs  # located at the body


def _single_copy_lines(store, monkeypatch) -> tuple[list[str], int]:
    """The rows journey --all spells range by range (its single-copy journeys), over many small ranges, and how many
    batches were spelled row by row."""
    from rmqdump.engines.local import LocalMap
    from rmqdump.query import journeyscan
    from rmqdump.query.journeys import all_journeys
    from rmqdump.readers.store import Store

    monkeypatch.setattr(journeyscan, "RENDER_SPLIT", 16 << 10)
    by_row = []
    spell_rows = journeyscan._spell_rows
    monkeypatch.setattr(journeyscan, "_spell_rows", lambda *a: by_row.append(1) or spell_rows(*a))
    items = all_journeys(Store.open(store), mapper=LocalMap(1))
    return [x for item in items if isinstance(item, journeyscan.Rendered) for x in item.text.splitlines()], len(by_row)


def _spelled_as_manifest_says(lines: list[str], name: str, store, keys_of=lambda rec: rec["properties"].get("KEYS", "")) -> None:
    """Each copy row is the bytes of its record as manifest.jsonl lists it (in the encoder's key order), and the verdict
    after it the bytes of what consumerOffset.json says of each group reading its topic (a clean store: no caveats)."""
    recs, offsets = records(name), _offsets(name)
    enc = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
    assert lines and len(lines) % 2 == 0
    for copy, verdict in zip(lines[::2], lines[1::2], strict=True):
        rec = recs[json.loads(copy)["phys_offset"]]
        t, q, qo, key = rec["topic"], rec["queueId"], rec["queueOffset"], rec["uniqKey"]
        want = {
            "kind": "copy", "uniq_key": key, "hop": "put", "topic": t, "queue_id": q, "queue_offset": qo, "phys_offset": rec["commitLogOffset"],
            "store_time": rec["storeTimestamp"], "total_size": rec["storeSize"], "msg_id": rec["offsetMsgId"], "real_topic": None,
            "real_queue_id": None, "delay_level": None, "due_time": None, "reconsume_times": rec["reconsumeTimes"], "check_times": None,
            "prepared_offset": None, "origin_msg_id": None, "retry_topic": None, "producer_group": None,
            "keys": [k for k in keys_of(rec).split(" ") if k], "tags": rec["properties"].get("TAGS"), "recovery_drops": False,
            "file": str(store / "commitlog" / "00000000000000000000"),
        }  # fmt: skip
        assert copy == enc(want)
        groups, notes = {}, []
        for g in sorted({g for g, tt, _ in offsets if tt == t} - {"CID_RMQ_SYS_TRANS", "CID_RMQ_SYS_REVIVE_GROUP"}):
            done = offsets.get((g, t, q))
            groups[g] = "consumed" if done is not None and done > qo else "not_consumed"
            if done is None:
                notes.append(f"{g}: not consumed (no committed offset on {t} queue {q}).")
            else:
                notes.append(f"{g}: {'consumed' if done > qo else 'not consumed'} ({t} queue {q} committed to {done} {'>' if done > qo else '<='} {qo}).")
        why = " ".join([f"Delivered to {t} queue {q} offset {qo}.", *notes])
        assert verdict == enc({"kind": "verdict", "uniq_key": key, "state": "delivered", "groups": groups, "why": why, "due_time": None, "evidence_caveats": []})


def test_single_copy_rows_are_the_manifests_records(monkeypatch):
    """journey --all spells its single-copy journeys column by column: the bytes the manifest's records and the committed
    offsets give, consumed and not consumed groups both."""
    name = "rmq53-lifecycle"
    lines, by_row = _single_copy_lines(REAL / name / "store", monkeypatch)
    assert by_row == 0
    _spelled_as_manifest_says(lines, name, REAL / name / "store")
    statuses = {s for x in lines[1::2] for s in json.loads(x)["groups"].values()}
    assert statuses == {"consumed", "not_consumed"}


def test_keys_that_json_escapes_are_spelled_row_by_row(tmp_path, monkeypatch):
    """A record whose KEYS hold a quote (the same length: the record stays whole) sends its range down the row-by-row
    path; every row is still the bytes the manifest gives, the quote escaped."""
    name = "rmq53-lifecycle"
    store = copy_store(name, tmp_path)
    plain = {x["phys_offset"] for x in map(json.loads, _single_copy_lines(store, monkeypatch)[0][::2])}
    off = min(o for o in plain if records(name)[o]["properties"].get("KEYS", "").count("-") >= 2)
    old = records(name)[off]["properties"]["KEYS"]
    new = old.replace("-", '"', 1)
    log = store / "commitlog" / "00000000000000000000"
    raw = log.read_bytes()
    at = raw.index(b"KEYS\x01" + old.encode() + b"\x02", off, off + records(name)[off]["storeSize"]) + 5
    patch(log, at, new.encode())
    lines, by_row = _single_copy_lines(store, monkeypatch)
    assert by_row == 1 and any('\\"' in x for x in lines[::2])
    _spelled_as_manifest_says(lines, name, store, keys_of=lambda rec: new if rec["commitLogOffset"] == off else rec["properties"].get("KEYS", ""))


def test_offsets_that_do_not_parse_are_named_not_called_absent(tmp_path):
    """A consumerOffset.json (and .bak) that does not parse: every verdict's caveat names both files and the byte where
    parsing failed, rather than saying the store has none; the groups it cannot judge are not_consumed."""
    dst = tmp_path / "store"
    shutil.copytree(REAL / "rmq53-lifecycle" / "store", dst)
    for f in ("consumerOffset.json", "consumerOffset.json.bak"):
        (dst / "config" / f).write_text("{garbage")
    m = next(m for m in truth("rmq53-lifecycle")["messages"] if m["consumePlan"] == "ok" and m["kind"] == "normal")
    r = run("journey", m["uniqKey"], "-s", dst, "-f", "jsonl")
    (v,) = [x for x in jsonl(r.stdout) if x["kind"] == "verdict"]
    (caveat,) = v["evidence_caveats"]
    assert caveat.startswith("config/consumerOffset.json does not parse (")
    assert f"{dst}/config/consumerOffset.json: not JSON: " in caveat and f"{dst}/config/consumerOffset.json.bak: not JSON: " in caveat
    assert caveat.count("at byte 1") == 2
    assert v["groups"] == {} and r.exit_code == 0
