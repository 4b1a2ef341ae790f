"""`rmqdump tx`, `pop` and `delay` against what a whole RocketMQ 5.3.3 broker and its clients did (truth.json of
fixtures/real/rmq53-lifecycle*), the stored records (manifest.jsonl) and the broker's own files (config/*.json), read
by the tests themselves; rmq4-flags (legacy and half-topic transactions, delay levels) against its manifest.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from functools import cache

import pytest
from conftest import REAL, jsonl, manifest, run
from test_journey import HELD, LEVELS_MS, LIFECYCLE, POP, _body, _offsets, expected_state, records, truth

HALF, OP, SCHEDULE = "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC", "SCHEDULE_TOPIC_XXXX"
POP_RETRY = "%RETRY%GID_lc_pop_LcPopJobs"


@cache
def view(command: str, name: str) -> tuple[int, tuple[dict, ...]]:
    """One run of a view on a store (JSON Lines), shared by the tests below."""
    r = run(command, "-s", REAL / name / "store", "-f", "jsonl")
    assert r.exit_code in (0, 1), r.stderr
    assert "Traceback" not in r.stderr
    return r.exit_code, tuple(jsonl(r.stdout))


def kind(rows, k: str) -> list[dict]:
    return [r for r in rows if r["kind"] == k]


def broker_queues(name: str) -> dict[tuple[str, int], dict]:
    """(topic, queue id) -> {minOffset, maxOffset} as the broker reported them just before shutdown (truth.json)."""
    return {(t, int(q)): b for t, per in truth(name)["brokerView"]["queues"].items() for q, b in per.items()}


def last_copy(m: dict) -> dict:
    return max(m["storeCopies"], key=lambda c: c["commitLogOffset"])


# --- tx ---------------------------------------------------------------------------------------------


def op_names(name: str) -> list[tuple[int, int, int]]:
    """(op record offset, half queue id, half queue offset) for every op record, bodies read by the test (manifest)."""
    return sorted((off, rec["queueId"], int(x)) for off, rec in records(name).items() if rec["topic"] == OP for x in rec["body"].split(",") if x)


@pytest.mark.parametrize("name", LIFECYCLE)
def test_tx_lists_every_transaction_once_as_it_ended(name):
    code, rows = view("tx", name)
    recs, ops = records(name), op_names(name)
    got = {r["uniq_key"]: r for r in kind(rows, "transaction")}
    assert len(got) == len(kind(rows, "transaction"))
    msgs = [m for m in truth(name)["messages"] if m["kind"] == "transaction"]
    assert set(got) == {m["uniqKey"] for m in msgs}  # nothing else listed
    for m in msgs:
        r = got[m["uniqKey"]]
        halves = sorted((c for c in m["storeCopies"] if c["topic"] == HALF), key=lambda c: c["commitLogOffset"])
        commits = sorted(c["commitLogOffset"] for c in m["storeCopies"] if c["topic"] == m["topic"])
        settling = [off for off, q, qo in ops if any((c["queueId"], c["queueOffset"]) == (q, qo) for c in halves)]
        checks = [int(recs[c["commitLogOffset"]]["properties"].get("TRANSACTION_CHECK_TIMES", 0)) for c in m["storeCopies"]]
        assert r == {
            "kind": "transaction",
            "uniq_key": m["uniqKey"],
            "state": expected_state(m),
            "checks": max(checks),
            "half_offsets": [c["commitLogOffset"] for c in halves],
            "op_offset": settling[0] if settling else None,
            "commit_offset": commits[0] if commits else None,
            "producer_group": truth(name)["settings"]["groups"]["txProducer"],
            "topic": m["topic"],
        }, m["uniqKey"]
    # the check service's progress: its committed offsets (consumerOffset.json) against the queues' ends (the broker's view)
    offsets, queues = _offsets(name), broker_queues(name)
    want = [
        {"kind": "check_progress", "group": "CID_RMQ_SYS_TRANS", "topic": t, "queue_id": q, "committed": offsets[("CID_RMQ_SYS_TRANS", t, q)],
         "max_offset": queues[(t, q)]["maxOffset"], "behind": queues[(t, q)]["maxOffset"] - offsets[("CID_RMQ_SYS_TRANS", t, q)]}
        for t, q in sorted(k for k in queues if k[0] in (HALF, OP))
    ]  # fmt: skip
    assert kind(rows, "check_progress") == want
    # a transaction committed twice is the journey's problem, passed through (the crash store has three)
    doubles = {m["uniqKey"] for m in msgs if len([c for c in m["storeCopies"] if c["topic"] == m["topic"]]) > 1}
    probs = kind(rows, "problem")
    assert {(p["code"], p["uniq_key"]) for p in probs} == {("journey_double_commit", k) for k in doubles}
    assert all(records(name)[p["phys_offset"]]["uniqKey"] == p["uniq_key"] and p["phys_offset"] in set(_commits(name, p["uniq_key"])[1:]) for p in probs)
    assert bool(doubles) == (name == "rmq53-lifecycle-crash") and code == (1 if doubles else 0)
    states = defaultdict(int)
    for m in msgs:
        states[expected_state(m)] += 1
    assert rows[-1] == {"kind": "summary", "transactions": len(msgs), **dict(sorted(states.items())), "problems": len(doubles)}


def test_tx_check_progress_behind_the_half_queue(tmp_path):
    """A check service committed short of the half queue's end (consumerOffset.json edited in a copy): behind = max - committed."""
    import shutil

    src, dst = REAL / "rmq53-lifecycle" / "store", tmp_path / "store"
    for d in ("commitlog", "consumequeue", "config"):
        shutil.copytree(src / d, dst / d)
    for f in ("consumerOffset.json", "consumerOffset.json.bak"):
        p = dst / "config" / f
        text = p.read_text()
        assert '"RMQ_SYS_TRANS_HALF_TOPIC@CID_RMQ_SYS_TRANS":{0:57' in text
        p.write_text(text.replace('"RMQ_SYS_TRANS_HALF_TOPIC@CID_RMQ_SYS_TRANS":{0:57', '"RMQ_SYS_TRANS_HALF_TOPIC@CID_RMQ_SYS_TRANS":{0:40'))
    r = run("tx", "-s", dst, "-f", "jsonl")
    assert r.exit_code == 0, r.stderr
    half_max = broker_queues("rmq53-lifecycle")[(HALF, 0)]["maxOffset"]
    assert [(x["topic"], x["committed"], x["max_offset"], x["behind"]) for x in kind(jsonl(r.stdout), "check_progress")] == [
        (HALF, 40, half_max, half_max - 40),
        (OP, _offsets("rmq53-lifecycle")[("CID_RMQ_SYS_TRANS", OP, 0)], broker_queues("rmq53-lifecycle")[(OP, 0)]["maxOffset"], 0),
    ]


def _commits(name: str, key: str) -> list[int]:
    m = next(m for m in truth(name)["messages"] if m["uniqKey"] == key)
    return sorted(c["commitLogOffset"] for c in m["storeCopies"] if c["topic"] == m["topic"])


def test_tx_legacy_and_half_topic_transactions():
    """rmq4-flags: three 4.x PREPARED records (two committed, one rolled back) and three half messages (two committed,
    one rolled back by its op record); op bodies are identified by their SHA-256 in the manifest."""
    code, rows = view("tx", "rmq4-flags")
    recs = [m for m in manifest("rmq4-flags") if m.get("appendStatus") == "PUT_OK"]
    op_body = {m["wroteOffset"]: next(str(i) for i in range(10_000) if hashlib.sha256(str(i).encode()).hexdigest() == m["body_sha256"]) for m in recs if m["topic"] == OP}
    settled = {int(b): off for off, b in op_body.items()}
    want = {}
    for key in {m["uniqKey"] for m in recs if m["topic"] == HALF or m["sysFlag"] & 0xC == 0x4}:
        mine = sorted((m for m in recs if m["uniqKey"] == key), key=lambda m: m["wroteOffset"])
        halves = [m for m in mine if m["topic"] == HALF or m["sysFlag"] & 0xC == 0x4]
        commits = [m["wroteOffset"] for m in mine if m["sysFlag"] & 0xC == 0x8]
        op = next((settled[h["logicsOffset"]] for h in halves if h["topic"] == HALF and h["logicsOffset"] in settled), None)
        want[key] = {
            "kind": "transaction",
            "uniq_key": key,
            "state": "tx_committed" if commits else "tx_rolled_back",
            "checks": 0,
            "half_offsets": [h["wroteOffset"] for h in halves],
            "op_offset": op,
            "commit_offset": commits[0] if commits else None,
            "producer_group": halves[0]["properties"]["PGROUP"],
            "topic": halves[0]["properties"].get("REAL_TOPIC", halves[0]["topic"]),
        }
    assert {r["uniq_key"]: r for r in kind(rows, "transaction")} == want
    assert len(want) == 6 and code == 0


# --- pop --------------------------------------------------------------------------------------------


def checkpoints(name: str) -> list[tuple[int, dict]]:
    """(record offset, body) of every POP checkpoint, in the revive topic or held in the timer wheel (bodies read by the test)."""
    out = []
    for off, rec in records(name).items():
        t, props = rec["topic"], rec["properties"]
        if (t.startswith("rmq_sys_REVIVE_LOG_") or (t == "rmq_sys_wheel_timer" and props.get("REAL_TOPIC", "").startswith("rmq_sys_REVIVE_LOG_"))) and props["TAGS"] == "ck":
            out.append((off, json.loads(rec.get("body") or _body(name, off))))
    return out


@pytest.mark.parametrize("name", LIFECYCLE)
def test_pop_lists_every_popped_message_acked_or_not(name):
    code, rows = view("pop", name)
    got = {r["uniq_key"]: r for r in kind(rows, "popped")}
    assert len(got) == len(kind(rows, "popped"))
    msgs = [m for m in truth(name)["messages"] if m["kind"] == "pop"]
    assert {k for k, r in got.items() if r["state"] == "unacked"} == {m["uniqKey"] for m in msgs if not m.get("popAcked") and m.get("pops")}
    assert {k for k, r in got.items() if r["state"] == "acked"} == {m["uniqKey"] for m in msgs if m.get("popAcked")}
    cks = checkpoints(name)
    for m in msgs:
        if m["uniqKey"] not in got:
            continue
        r = got[m["uniqKey"]]
        where = {(c["topic"], c["queueId"], c["queueOffset"]) for c in m["storeCopies"]}
        naming = [(off, b) for off, b in cks if b["c"] == POP and any((b["t"], b["q"], b["so"] + d) in where for d in b["d"])]
        _, latest = max(naming, key=lambda x: (x[1]["pt"], x[0]))
        revived = sorted((c for c in m["storeCopies"] if c["topic"] == POP_RETRY), key=lambda c: c["commitLogOffset"])
        popped_at = next((b["t"], b["q"], b["so"] + d) for b in [latest] for d in b["d"] if (b["t"], b["q"], b["so"] + d) in where)
        assert r == {
            "kind": "popped",
            "uniq_key": m["uniqKey"],
            "group": POP,
            "state": r["state"],
            "topic": popped_at[0],
            "queue_id": popped_at[1],
            "queue_offset": popped_at[2],
            "checkpoint_offsets": sorted(off for off, _ in naming),
            "invisible_until": latest["reviveTime"],
            "revived_to": {"topic": revived[-1]["topic"], "queue_id": revived[-1]["queueId"], "queue_offset": revived[-1]["queueOffset"]} if revived else None,
        }, m["uniqKey"]
    offsets, queues = _offsets(name), broker_queues(name)
    revive = sorted(k for k in queues if k[0].startswith("rmq_sys_REVIVE_LOG_"))
    assert kind(rows, "revive_progress") == [
        {"kind": "revive_progress", "revive_topic": t, "revive_queue": q, "committed": offsets.get(("CID_RMQ_SYS_REVIVE_GROUP", t, q)), "max_offset": queues[(t, q)]["maxOffset"]}
        for t, q in revive
    ]
    # enablePopBufferMerge (off in both runs: README) is broker configuration: the store cannot tell, and says so once
    notes = kind(rows, "note")
    assert len(notes) == 1 and notes[0]["about"] == "enablePopBufferMerge"
    assert notes[0]["known_on"] == any(b.get("bm") for _, b in cks) == False  # noqa: E712
    acked = sum(1 for m in msgs if m.get("popAcked"))
    assert rows[-1] == {"kind": "summary", "popped": len(got), "acked": acked, "unacked": len(got) - acked, "problems": 0} and code == 0


# --- delay ------------------------------------------------------------------------------------------


def _delay_offsets(name: str) -> dict[int, int]:
    from rmqdump.readers.configfiles import loads_fastjson

    doc = loads_fastjson((REAL / name / "store" / "config" / "delayOffset.json").read_text())
    return {int(k): int(v) for k, v in doc["offsetTable"].items()}


@pytest.mark.parametrize("name", LIFECYCLE)
def test_delay_lists_levels_and_every_waiting_message(name):
    code, rows = view("delay", name)
    recs = records(name)
    msgs = truth(name)["messages"]
    # waiting for a level: scheduled (truth), the last copy in SCHEDULE_TOPIC_XXXX (a pending delay, or a retry waiting there)
    waiting = [m for m in msgs if expected_state(m) == "scheduled" and last_copy(m)["topic"] == SCHEDULE]
    assert {m["uniqKey"] for m in msgs if m["kind"] == "delay" and not m["deliveredBeforeShutdown"]} <= {m["uniqKey"] for m in waiting}
    want = []
    for m in waiting:
        c = last_copy(m)
        rec = recs[c["commitLogOffset"]]
        props = rec["properties"]
        level = int(props["DELAY"]) if props.get("DELAY") not in (None, "0") else c["queueId"] + 1
        want.append(
            {
                "kind": "scheduled",
                "uniq_key": m["uniqKey"],
                "level": level,
                "due_time": rec["storeTimestamp"] + LEVELS_MS[level - 1],
                "real_topic": props["REAL_TOPIC"],
                "real_queue_id": int(props["REAL_QID"]),
                "queue_offset": c["queueOffset"],
                "phys_offset": c["commitLogOffset"],
            }
        )
    assert sorted(kind(rows, "scheduled"), key=lambda r: r["phys_offset"]) == sorted(want, key=lambda r: r["phys_offset"])
    delay_offsets, queues = _delay_offsets(name), broker_queues(name)
    levels = sorted(set(delay_offsets) | {q + 1 for t, q in queues if t == SCHEDULE})
    assert kind(rows, "level") == [
        {
            "kind": "level", "level": lv, "schedule_queue_id": lv - 1, "delay_offset": delay_offsets.get(lv),
            "min_offset": queues[(SCHEDULE, lv - 1)]["minOffset"], "max_offset": queues[(SCHEDULE, lv - 1)]["maxOffset"],
            "waiting": sum(1 for w in want if w["level"] == lv),
        }
        for lv in levels
    ]  # fmt: skip
    timers = [m for m in msgs if expected_state(m) == "scheduled" and last_copy(m)["topic"] == HELD[1]]
    assert {m["uniqKey"] for m in msgs if m["kind"] == "timer" and not m["deliveredBeforeShutdown"]} == {m["uniqKey"] for m in timers}
    assert kind(rows, "timer") == [{"kind": "timer", "waiting": len(timers), "see": f"rmqdump timer list -s {REAL / name / 'store'}"}]
    assert rows[-1] == {"kind": "summary", "levels": len(levels), "scheduled": len(want), "timer_waiting": len(timers), "problems": 0} and code == 0


def test_delay_on_a_store_of_the_store_code_alone():
    """rmq4-flags: five delayed messages (levels 1, 2, 1, 18, 3) and a retry via level 1; only the level-18 one waits."""
    code, rows = view("delay", "rmq4-flags")
    recs = [m for m in manifest("rmq4-flags") if m.get("appendStatus") == "PUT_OK" and m.get("uniqKey")]
    last = {}
    for m in sorted(recs, key=lambda m: m["wroteOffset"]):
        last[m["uniqKey"]] = m
    waiting = [m for m in last.values() if m["topic"] == SCHEDULE]
    assert [(r["uniq_key"], r["level"], r["phys_offset"], r["real_topic"], r["real_queue_id"]) for r in kind(rows, "scheduled")] == [
        (m["uniqKey"], int(m["properties"]["DELAY"]), m["wroteOffset"], m["properties"]["REAL_TOPIC"], int(m["properties"]["REAL_QID"])) for m in waiting
    ]
    assert [r["level"] for r in kind(rows, "scheduled")] == [18] and code == 0
    assert {r["level"]: r["delay_offset"] for r in kind(rows, "level")} == {lv: _delay_offsets("rmq4-flags").get(lv) for lv in (1, 2, 3, 18)}


def test_delay_level_delivered_past_a_waiting_message(tmp_path):
    """config/delayOffset.json (in a copy) says level 18 was delivered past its waiting messages: the journeys'
    journey_delay_undelivered is passed on, each naming its message, and the level shows the file's offset."""
    import shutil

    src, dst = REAL / "rmq53-lifecycle" / "store", tmp_path / "store"
    for d in ("commitlog", "consumequeue", "config"):
        shutil.copytree(src / d, dst / d)
    level18 = [m for m in truth("rmq53-lifecycle")["messages"] if m["kind"] == "delay" and not m["deliveredBeforeShutdown"] and m["delayLevel"] == 18]
    past = 1 + max(last_copy(m)["queueOffset"] for m in level18)
    for f in ("delayOffset.json", "delayOffset.json.bak"):
        p = dst / "config" / f
        p.write_text(p.read_text().replace("18:0", f"18:{past}"))
    r = run("delay", "-s", dst, "-f", "jsonl")
    rows = jsonl(r.stdout)
    assert r.exit_code == 1, r.stderr
    assert {(p["code"], p["uniq_key"], p["phys_offset"]) for p in kind(rows, "problem")} == {
        ("journey_delay_undelivered", m["uniqKey"], last_copy(m)["commitLogOffset"]) for m in level18
    }
    assert next(x for x in kind(rows, "level") if x["level"] == 18)["delay_offset"] == past


# --- every other store: empty views -----------------------------------------------------------------


@pytest.mark.parametrize("command", ["tx", "pop", "delay"])
@pytest.mark.parametrize("name", ["rmq4-basic", "rmq5-basic", "rmq53-v2", "rmq4-crash"])
def test_other_stores_have_empty_views(name, command):
    code, rows = view(command, name)
    assert code == 0 and len(rows) == 1 and rows[0]["kind"] == "summary"
    assert set(rows[0].values()) == {"summary", 0}


@pytest.mark.parametrize("command", ["tx", "pop", "delay"])
def test_tables_and_unreadable_stores(command, tmp_path):
    r = run(command, "-s", REAL / "rmq53-lifecycle" / "store")
    assert r.exit_code == 0 and "0 problems" in r.stderr
    first = {"tx": "transaction", "pop": "popped", "delay": "level"}[command]
    assert r.stdout.lstrip().startswith(first)
    r = run(command, "-s", tmp_path / "missing")
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1 and str(tmp_path / "missing") in r.stderr


@pytest.mark.parametrize("command", ["tx", "pop", "delay"])
def test_commitlog_damage_is_passed_on(command):
    """A record whose body fails its CRC (damage.json): the view may miss what it held, so it says where and exits 1."""
    damage = json.loads((REAL / "rmq53-damaged-bodycrc" / "damage.json").read_text())
    code, rows = view(command, "rmq53-damaged-bodycrc")
    probs = kind(rows, "problem")
    assert code == 1 and [(p["code"], p["phys_offset"]) for p in probs] == [("body_crc_mismatch", r["physicalOffset"]) for r in damage["recordsHit"]]
    assert all(p["file"].endswith(damage["file"]) for p in probs) and rows[-1]["problems"] == len(probs)


@pytest.mark.parametrize("name", ["rmq53-lifecycle", "rmq53-lifecycle-crash"])
def test_retry_view_is_what_the_push_consumer_gave_up_on(name):
    """Per push group: messages retried, retry copies, retries still waiting, dead letters with their original topics;
    one row per dead-lettered message: all from truth.json's copies of each message."""
    import json

    from conftest import REAL, jsonl, run
    from test_journey import expected_state

    msgs = json.loads((REAL / name / "truth.json").read_text())["messages"]
    r = run("retry", "-s", REAL / name / "store", "-f", "jsonl")
    rows = jsonl(r.stdout)
    retry, dlq = "%RETRY%GID_lc_push", "%DLQ%GID_lc_push"
    dead = [m for m in msgs if m.get("inDLQ")]
    waiting = [m for m in msgs if m["kind"] == "normal" and expected_state(m) == "scheduled"]
    assert [x for x in rows if x["kind"] == "group"] == [
        {
            "kind": "group",
            "group": "GID_lc_push",
            "retried": sum(any(c["topic"] == retry for c in m["storeCopies"]) for m in msgs),
            "retry_copies": sum(c["topic"] == retry for m in msgs for c in m["storeCopies"]),
            "waiting_retry": len(waiting),
            "dead_letters": len(dead),
            "retry_limit": json.loads((REAL / name / "store" / "config" / "subscriptionGroup.json").read_text())["subscriptionGroupTable"]["GID_lc_push"]["retryMaxTimes"],
            "from_topics": {"LcOrders": len(dead)},
        }
    ]
    got = {(x["uniq_key"], x["attempts"], x["dlq_queue_offset"], x["phys_offset"]) for x in rows if x["kind"] == "dead_letter"}
    want = {(m["uniqKey"], c["reconsumeTimes"], c["queueOffset"], c["commitLogOffset"]) for m in dead for c in m["storeCopies"] if c["topic"] == dlq}
    assert got == want
    assert r.exit_code == 1  # the consumer sent some straight to the DLQ: journey_dlq_before_retry_limit
    empty = run("retry", "-s", REAL / "rmq4-basic" / "store", "-f", "jsonl")
    assert empty.exit_code == 0 and jsonl(empty.stdout) == [{"kind": "summary", "groups": 0, "dead_letters": 0, "problems": 0}]
