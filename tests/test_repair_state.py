"""`rmqdump repair` carries compaction and timer state, judged by the broker's own code on the repaired copy.

Damage is planted in copies of fixtures/real/rmq53-compaction and rmq53-timer
(one body byte of a record the state names). After the repair:
- the broker oracle (its recovery and CommitLog walk) keeps every intact put of
  the manifest at its physical and queue offset;
- tests/broker/StoreState.java runs RocketMQ 5.3.3's CompactionStore (the pull a
  consumer of a COMPACTION topic ends in) and TimerMessageStore recovery on the
  repaired copy: what they serve must be what truth.json / the manifest say the
  store held (consumerView of each compacted queue; the timer's queue offset,
  every wheel slot and the record each timer log unit reads).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import REAL, broker_recovery, unpack_store
from test_repair import broker_program, check_broker_keeps, puts, repair_cli

BODY_AT = 88  # a record's body starts after its fixed header (IPv4 hosts)


@pytest.fixture(scope="session")
def store_state(tmp_path_factory):
    """state(mode, store, *args) -> the JSON lines StoreState.java prints for a copy of `store`."""
    run = broker_program(tmp_path_factory, "StoreState")

    def state(mode: str, store: Path, *args) -> list[dict]:
        return run(store, [mode], list(args))

    return state


def flip_body(root: Path, file_size: int, offset: int) -> None:
    """Flip one body byte of the record at physical `offset` (a body CRC mismatch: the broker's recovery stops there)."""
    path = root / "commitlog" / f"{offset // file_size * file_size:020d}"
    with open(path, "r+b") as f:
        f.seek(offset % file_size + BODY_AT + 3)
        c = f.read(1)
        f.seek(offset % file_size + BODY_AT + 3)
        f.write(bytes([c[0] ^ 0xFF]))


# --- compaction: rmq53-compaction (README.txt: CommitLog files 262144, CQ 12000 B, maxHashSlotNum 500, maxIndexNum
# 6000, compactionMappedFileSize 65536, compactionCqMappedFileSize 5566; topic CompactKV, 2 queues)
COMPACTION = ["262144", "12000", "500", "6000", "65536", "5566", "CompactKV", "2"]


@pytest.mark.slow
def test_repair_keeps_what_a_compacted_topic_serves(tmp_path, store_state):
    base = REAL / "rmq53-compaction"
    truth = json.loads((base / "truth.json").read_text(encoding="utf-8"))
    every = puts("rmq53-compaction")
    views = {int(q): [[m["queueOffset"], m["compactionLogOffset"], m["size"]] for m in t["consumerView"]] for q, t in truth["queues"].items()}
    # damage a put the compacted view still serves, in the CommitLog's middle: its compaction log copy must still be served
    served_puts = sorted(m["commitLogWroteOffset"] for t in truth["queues"].values() for m in t["consumerView"])
    end = max(m["wroteOffset"] + m["wroteBytes"] for m in every)
    victim = next(o for o in served_puts if end // 3 < o < end // 2)
    store = tmp_path / "store"
    shutil.copytree(base / "store", store)
    flip_body(store, 262144, victim)

    new = tmp_path / "new"
    code, rows = repair_cli("-s", store, "--out", new, "--hash-slots", "500", "--index-entries", "6000")
    assert code == 1
    summary = next(r for r in rows if r["kind"] == "summary")
    assert "compaction" in summary["copied"]
    assert not [n for n in summary["notes"] if "compaction" in n and "not copied" in n]
    assert [r["phys_offset"] for r in rows if r["kind"] == "range"] == [victim]

    o = broker_recovery(new, tmp_path / "oracle.json")
    check_broker_keeps(o, [m for m in every if m["wroteOffset"] != victim])
    got = {r["queue_id"]: r["served"] for r in store_state("compaction", new, *COMPACTION)}
    assert got == views  # what CompactionStore serves from the repaired copy is truth's consumerView, the damaged put's copy included
    assert (new / "compaction" / "position-checkpoint").read_text(encoding="utf-8") == truth["positionCheckpoint"]["content"]


# --- timer: rmq53-timer (README.txt: CommitLog files 131072, CQ 2400 B, maxHashSlotNum 500, maxIndexNum 2000,
# mappedFileSizeTimerLog 4160, timerPrecisionMs 1000)
TIMER = ["131072", "2400", "500", "2000", "4160", "1000"]


def _timer_truth() -> tuple[list[dict], list[dict], dict, list[dict]]:
    """(timer log units, wheel slots, timercheck, every CommitLog message: the puts and the timer's own re-puts) of the manifest."""
    rows = [json.loads(line) for line in (REAL / "rmq53-timer" / "manifest.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()]
    units = [r for r in rows if r["kind"] == "timerlog_unit"]
    slots = [r for r in rows if r["kind"] == "timerwheel_slot"]
    check = next(r for r in rows if r["kind"] == "timercheck_file")
    msgs = [
        {
            "wroteOffset": r["physicalOffset"],
            "wroteBytes": r["totalSize"],
            "uniqKey": r["properties"].get("UNIQ_KEY"),
            "topic": r["topic"],
            "queueId": r["queueId"],
            "logicsOffset": r["queueOffset"],
            "sysFlag": r["sysFlag"],
            "realTopic": r["properties"].get("REAL_TOPIC"),
        }
        for r in rows
        if r["kind"] == "commitlog_msg"
    ]
    return units, slots, check, msgs


@pytest.mark.slow
def test_repair_keeps_the_timer_wheel_and_voids_the_unit_of_a_destroyed_record(tmp_path, store_state):
    units, slots, check, every = _timer_truth()
    by_offset = {m["wroteOffset"]: m for m in every}
    # the record of the newest timer log unit: the one TimerMessageStore.recover reads to revise its queue offset
    last = max(units, key=lambda u: u["timerLogOffset"])
    victim = last["offsetPy"]
    assert by_offset[victim]["topic"] == "rmq_sys_wheel_timer" and victim + last["sizePy"] < max(by_offset)  # not the CommitLog's end
    store = unpack_store("rmq53-timer", tmp_path)
    flip_body(store, 131072, victim)

    new = tmp_path / "new"
    code, rows = repair_cli("-s", store, "--out", new, "--hash-slots", "500", "--index-entries", "2000")
    assert code == 1
    summary = next(r for r in rows if r["kind"] == "summary")
    assert {"timerlog", "timerwheel", "config"} <= set(summary["copied"])
    report = json.loads((new / "rmqdump-repair" / "report.json").read_text(encoding="utf-8"))
    assert [(u["timerlog_offset"], u["offset_py"], u["size_py_was"]) for u in report["voided_timer_units"]] == [
        (last["timerLogOffset"], victim, last["sizePy"])
    ]

    o = broker_recovery(new, tmp_path / "oracle.json")
    check_broker_keeps(o, [m for m in every if m["wroteOffset"] != victim])

    lines = store_state("timer", new, *TIMER, *(s["timeMs"] for s in slots))
    timer = next(r for r in lines if r["kind"] == "timer")
    # the broker's timer recovers to the checkpoint's queue offset, clamped to the queue's end (TimerMessageStore.recover):
    # here 299, the destroyed record was the queue's last message; not 1, the filler read as the last unit's record
    queue_end = o["consumeQueues"]["rmq_sys_wheel_timer/0"]["maxOffset"]
    assert queue_end == by_offset[victim]["logicsOffset"]
    assert timer["queueOffset"] == min(check["lastTimerQueueOffset"], queue_end)
    got = {r["timeMs"]: r for r in lines if r["kind"] == "slot"}
    by_pos = {u["timerLogOffset"]: u for u in units}
    for s in slots:
        g = got[s["timeMs"]]
        assert (g["firstPos"], g["lastPos"], g["num"]) == (s["firstPos"], s["lastPos"], s["num"])
        for u in g["units"]:
            want = by_pos[u["pos"]]
            assert (u["magic"], u["offsetPy"]) == (want["magic"], want["offsetPy"])
            if want["offsetPy"] == victim:  # destroyed: the dequeue reads no message and drops the unit
                assert (u["sizePy"], u["realTopic"], u["uniqKey"]) == (0, None, None)
            else:  # the message the dequeue delivers: the put's, to its real topic
                m = by_offset[want["offsetPy"]]
                assert (u["sizePy"], u["realTopic"], u["uniqKey"]) == (want["sizePy"], m["realTopic"], m["uniqKey"])
    assert sum(len(g["units"]) for g in got.values()) == sum(s["num"] for s in slots)
