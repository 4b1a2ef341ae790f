"""The problem codes of the 5.x formats, each produced by a damaged copy of a real RocketMQ 5.3.3 store.

Timer store (rmq53-timer: timerlog/, timerwheel, config/timercheck), RocksDB ConsumeQueue (rmq53-rocksdbcq),
Batch ConsumeQueue (rmq53-batchcq) and LMQ (rmq53-lmq). Each test damages one thing in a copy, runs the
command an operator would (`-f jsonl`) and asserts the code and where it points: the file, the byte offset of
the field at fault, and the timer log offset / wheel slot / queue unit / physical offset the problem carries,
all derived from the store's manifest.jsonl (what the broker's own code read back) and the bytes damaged here,
never from rmqdump's other output. Byte offsets of fields come from the construct layouts in schemas/.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REAL, jsonl, manifest, patch, run, store_root

from rmqdump.readers.fastpath import field_offset
from rmqdump.schemas import (
    BatchConsumeQueueUnit,
    ConsumeQueueUnit,
    RocksCQKey,
    RocksOffsetKey,
    RocksOffsetValue,
    TimerCheck,
    TimerLogBlank,
    TimerLogUnit,
    TimerWheelSlot,
    message_header,
)
from rmqdump.schemas import constants as C

# --- the timer store: `rmqdump timer verify` ----------------------------------------------------------------

TIMER = "rmq53-timer"
T_UNITS = [m for m in manifest(TIMER) if m["kind"] == "timerlog_unit"]
T_SLOTS = [m for m in manifest(TIMER) if m["kind"] == "timerwheel_slot"]  # the slots still ahead of the read pointer
T_BLANKS = [m for m in manifest(TIMER) if m["kind"] == "timerlog_blank"]
T_CHECK = next(m for m in manifest(TIMER) if m["kind"] == "timercheck_file")
T_RECORDS = {m["physicalOffset"]: m for m in manifest(TIMER) if m["kind"] == "commitlog_msg"}
UNIT = TimerLogUnit.sizeof()


def _pending(u: dict) -> bool:
    """The broker's dequeue has not reached the unit's second yet (timercheck's lastReadTimeMs)."""
    return u["delayedTimeMs"] >= T_CHECK["lastReadTimeMs"]


def _slot_of(u: dict) -> dict:
    return next(s for s in T_SLOTS if s["lastPos"] == u["timerLogOffset"])


T_FILE = T_BLANKS[0]["timerLogOffset"] + T_BLANKS[0]["size"]  # the first file ends where its blank record does


def _units_after(u: dict) -> bool:
    return any(v["timerLogOffset"] > u["timerLogOffset"] and v["timerLogOffset"] // T_FILE == u["timerLogOffset"] // T_FILE for v in T_UNITS)


# a pending unit alone in its slot (prevPos -1, num 1), inside a later timer log file (so that its file offset, its
# index in the file and its timer log offset all differ), with units after it in that file
P_UNIT = next(
    u
    for u in T_UNITS
    if _pending(u)
    and u["prevPos"] == -1
    and _slot_of(u)["num"] == 1
    and u["timerLogOffset"] > T_FILE
    and u["timerLogOffset"] % T_FILE > UNIT
    and _units_after(u)
)
P_SLOT = _slot_of(P_UNIT)


@pytest.fixture()
def timer(tmp_path) -> Path:
    """A writable copy of rmq53-timer's store (shipped as a sparse tarball)."""
    subprocess.run(["tar", "-xzf", str(REAL / TIMER / "store.tar.gz"), "-C", str(tmp_path)], check=True)
    return tmp_path / "store"


def _log_file(root: Path, offset: int) -> tuple[Path, int]:
    """(timer log file, offset in it) of a timer log offset: the file is the one named by the highest base at or below it."""
    base = max(int(n) for n in os.listdir(root / "timerlog") if int(n) <= offset)
    return root / "timerlog" / f"{base:020d}", offset - base


def _edit(path: Path, at: int, layout, **fields) -> None:
    """Rewrite some fields of one structure (a unit, a slot, timercheck) in place, through its construct layout."""
    with open(path, "rb") as f:
        f.seek(at)
        raw = f.read(layout.sizeof())
    rec = layout.parse(raw)
    rec.update(fields)
    patch(path, at, layout.build(rec))


def _edit_unit(root: Path, u: dict, **fields) -> tuple[Path, int]:
    path, at = _log_file(root, u["timerLogOffset"])
    _edit(path, at, TimerLogUnit, **fields)
    return path, at


def _edit_slot(root: Path, s: dict, **fields) -> None:
    _edit(root / "timerwheel", s["fileOffset"], TimerWheelSlot, **fields)


def _edit_check(root: Path, **fields) -> None:
    _edit(root / "config" / "timercheck", 0, TimerCheck, **fields)


def _tverify(root: Path) -> tuple[int, list[dict]]:
    r = run("timer", "verify", "-s", root, "-f", "jsonl")
    rows = jsonl(r.stdout)
    assert rows[-1]["kind"] == "summary"
    return r.exit_code, [x for x in rows if x["kind"] == "problem"]


def _u(p: dict) -> tuple:
    """Where a unit problem points: code, file, byte offset, timer log offset, unit index in its file, physical offset."""
    return p["code"], p["file"], p["file_offset"], p.get("timer_log_offset"), p.get("unit_index"), p["phys_offset"]


def _s(p: dict) -> tuple:
    """Where a wheel slot problem points: code, file, byte offset, slot index, the slot's second in ms."""
    return p["code"], p["file"], p["file_offset"], p.get("slot_index"), p.get("slot_time_ms")


_OWN = object()  # the unit's own offsetPy, as the manifest has it


def _unit_at(root: Path, u: dict, code: str, field: str | None, phys=_OWN) -> tuple:
    """Where a problem of unit `u` must point; `field` None: the unit's first byte. phys None: a unit the reader skipped."""
    path, at = _log_file(root, u["timerLogOffset"])
    off = at + (field_offset(TimerLogUnit, field) if field else 0)
    return code, str(path), off, u["timerLogOffset"], at // UNIT, u["offsetPy"] if phys is _OWN else phys


def _slot_at(root: Path, s: dict, code: str, field: str) -> tuple:
    return code, str(root / "timerwheel"), s["fileOffset"] + field_offset(TimerWheelSlot, field), s["slotIndex"], s["timeMs"]


def _c(p: dict) -> tuple:
    return p["code"], p["file"], p["file_offset"]


# timer log units and files


def test_timerlog_bad_unit(timer):
    """A unit's size field is not 52: the unit is skipped, so the slot that holds it points at no unit."""
    _edit_unit(timer, P_UNIT, size=UNIT + 1)
    code, probs = _tverify(timer)
    assert code == 1
    assert [_u(p) for p in probs if p["code"] == "timerlog_bad_unit"] == [_unit_at(timer, P_UNIT, "timerlog_bad_unit", None, phys=None)]
    assert [_s(p) for p in probs if p["code"] != "timerlog_bad_unit"] == [_slot_at(timer, P_SLOT, "timerwheel_chain_broken", "last_pos")]


def test_timerlog_bad_magic(timer):
    _edit_unit(timer, P_UNIT, magic=8)  # not a combination of default (1), roll (2), delete (4)
    code, probs = _tverify(timer)
    assert code == 1
    assert [_u(p) for p in probs if p["code"] == "timerlog_bad_magic"] == [_unit_at(timer, P_UNIT, "timerlog_bad_magic", "magic", phys=None)]
    assert [_s(p) for p in probs if p["code"] != "timerlog_bad_magic"] == [_slot_at(timer, P_SLOT, "timerwheel_chain_broken", "last_pos")]


def test_timerlog_bad_reserved(timer):
    _edit_unit(timer, P_UNIT, reserved=7)
    code, probs = _tverify(timer)
    assert code == 1
    assert [_u(p) for p in probs] == [_unit_at(timer, P_UNIT, "timerlog_bad_reserved", "reserved", phys=None)]


def test_timerlog_zeroed_unit(timer):
    """A unit zeroed with units after it in its file: a hole in the log; its slot now points at nothing."""
    path, at = _log_file(timer, P_UNIT["timerLogOffset"])
    patch(path, at, bytes(UNIT))
    code, probs = _tverify(timer)
    assert code == 1
    assert [_u(p) for p in probs if p["code"] == "timerlog_zeroed_unit"] == [
        ("timerlog_zeroed_unit", str(path), at, P_UNIT["timerLogOffset"], at // UNIT, None)
    ]
    assert [_s(p) for p in probs if p["code"] != "timerlog_zeroed_unit"] == [_slot_at(timer, P_SLOT, "timerwheel_chain_broken", "last_pos")]


def test_timerlog_bad_blank(timer):
    """The end-of-file blank record of the second file says 4 bytes fewer are left than there are."""
    b = T_BLANKS[1]
    path, at = _log_file(timer, b["timerLogOffset"])
    _edit(path, at, TimerLogBlank, size=b["size"] - 4)
    code, probs = _tverify(timer)
    assert code == 1
    assert [(p["code"], p["file"], p["file_offset"]) for p in probs] == [("timerlog_bad_blank", str(path), at)]


def test_timerlog_bad_prev(timer):
    """A unit's prevPos pointed at itself: not an earlier unit; the slot's chain loops back to a unit it already reached."""
    _edit_unit(timer, P_UNIT, prev_pos=P_UNIT["timerLogOffset"])
    code, probs = _tverify(timer)
    assert code == 1
    assert [_u(p) for p in probs] == [
        _unit_at(timer, P_UNIT, "timerlog_bad_prev", "prev_pos"),
        _unit_at(timer, P_UNIT, "timerwheel_chain_broken", "prev_pos"),
    ]


def test_timerlog_bad_file_name(timer):
    stray = timer / "timerlog" / "00000000000000004160.bak"
    shutil.copyfile(timer / "timerlog" / "00000000000000004160", stray)
    code, probs = _tverify(timer)
    assert code == 1
    assert [(p["code"], p["file"], p["file_offset"]) for p in probs] == [("timerlog_bad_file_name", str(stray), None)]


def test_timerlog_file_size(timer):
    """The newest timer log file grown by one unit of zeros (the others are mappedFileSizeTimerLog apart)."""
    path = timer / "timerlog" / max(os.listdir(timer / "timerlog"))
    size = os.path.getsize(path)
    os.truncate(path, size + UNIT)
    code, probs = _tverify(timer)
    assert code == 1
    assert [(p["code"], p["file"], p["file_offset"]) for p in probs] == [("timerlog_file_size", str(path), size + UNIT)]


def test_timerlog_gap(timer):
    """A middle timer log file lost: the next file starts where no file ends. The units it held are gone with it."""
    names = sorted(os.listdir(timer / "timerlog"))
    lost, after = names[1], names[2]
    os.unlink(timer / "timerlog" / lost)
    code, probs = _tverify(timer)
    assert code == 1
    assert [(p["code"], p["file"], p["file_offset"]) for p in probs if p["code"] == "timerlog_gap"] == [("timerlog_gap", str(timer / "timerlog" / after), 0)]
    # the rest is what losing those units means: the slots (or chain links) that pointed into the file, and the
    # units of later files whose prevPos did; the chains are the manifest's units of one second, newest first
    gone = {u["timerLogOffset"] for u in T_UNITS if int(lost) <= u["timerLogOffset"] < int(after)}
    by_offset = {u["timerLogOffset"]: u for u in T_UNITS}
    want_units = [_unit_at(timer, u, "timerlog_bad_prev", "prev_pos") for u in T_UNITS if u["timerLogOffset"] not in gone and u["prevPos"] in gone]
    want_slots = []
    seconds = {u["delayedTimeMs"] // 1000 for u in T_UNITS}
    for sec in sorted(seconds, key=lambda t: t % C.TIMER_WHEEL_SLOTS):  # slots are walked in index order
        cur = max((u for u in T_UNITS if u["delayedTimeMs"] // 1000 == sec), key=lambda u: u["timerLogOffset"])
        slot = {"slotIndex": sec % C.TIMER_WHEEL_SLOTS, "fileOffset": sec % C.TIMER_WHEEL_SLOTS * C.TIMER_SLOT_SIZE, "timeMs": sec * 1000}
        if cur["timerLogOffset"] in gone:
            want_slots.append(_slot_at(timer, slot, "timerwheel_chain_broken", "last_pos"))
            continue
        while cur["prevPos"] != -1:
            if cur["prevPos"] in gone:
                want_units.append(_unit_at(timer, cur, "timerwheel_chain_broken", "prev_pos"))
                break
            cur = by_offset[cur["prevPos"]]
    rest = [p for p in probs if p["code"] != "timerlog_gap"]
    assert sorted(_u(p) for p in rest if "timer_log_offset" in p) == sorted(want_units) and want_units
    assert sorted(_s(p) for p in rest if "timer_log_offset" not in p) == sorted(want_slots) and want_slots
    assert all(s["lastPos"] == max(u["timerLogOffset"] for u in T_UNITS if u["delayedTimeMs"] == s["timeMs"]) for s in T_SLOTS)


# units against their CommitLog records


def test_timer_record_missing(timer):
    """offsetPy moved one byte into its record: no record starts there."""
    _edit_unit(timer, P_UNIT, offset_py=P_UNIT["offsetPy"] + 1)
    code, probs = _tverify(timer)
    assert code == 1
    assert [_u(p) for p in probs] == [_unit_at(timer, P_UNIT, "timer_record_missing", "offset_py", phys=P_UNIT["offsetPy"] + 1)]


def test_timer_record_missing_negative(timer):
    _edit_unit(timer, P_UNIT, offset_py=-1)
    code, probs = _tverify(timer)
    assert code == 1
    assert [_u(p) for p in probs] == [_unit_at(timer, P_UNIT, "timer_record_missing", "offset_py", phys=-1)]


def test_timer_record_size_mismatch(timer):
    assert T_RECORDS[P_UNIT["offsetPy"]]["totalSize"] == P_UNIT["sizePy"]
    _edit_unit(timer, P_UNIT, size_py=P_UNIT["sizePy"] + 1)
    code, probs = _tverify(timer)
    assert code == 1
    assert [_u(p) for p in probs] == [_unit_at(timer, P_UNIT, "timer_record_size_mismatch", "size_py")]


def test_timer_deliver_mismatch(timer):
    """The delay one millisecond longer: same wheel second, but no longer the record's TIMER_OUT_MS."""
    assert int(T_RECORDS[P_UNIT["offsetPy"]]["properties"]["TIMER_OUT_MS"]) == P_UNIT["delayedTimeMs"]
    _edit_unit(timer, P_UNIT, delayed_time_offset=P_UNIT["delayedTimeOffset"] + 1)
    code, probs = _tverify(timer)
    assert code == 1
    assert [_u(p) for p in probs] == [_unit_at(timer, P_UNIT, "timer_deliver_mismatch", "delayed_time_offset")]


def test_timer_unit_wrong_slot(timer):
    """The delay one second longer: the unit now delivers in the next second, but is chained in its old slot."""
    _edit_unit(timer, P_UNIT, delayed_time_offset=P_UNIT["delayedTimeOffset"] + 1000)
    code, probs = _tverify(timer)
    assert code == 1
    assert sorted(_u(p) for p in probs) == [
        _unit_at(timer, P_UNIT, "timer_deliver_mismatch", "delayed_time_offset"),
        _unit_at(timer, P_UNIT, "timer_unit_wrong_slot", "delayed_time_offset"),
    ]


def test_timer_topic_hash_mismatch(timer):
    _edit_unit(timer, P_UNIT, hash_code_of_real_topic=P_UNIT["hashCodeOfRealTopic"] ^ 1)
    code, probs = _tverify(timer)
    assert code == 1
    assert [_u(p) for p in probs] == [_unit_at(timer, P_UNIT, "timer_topic_hash_mismatch", "hash_code_of_real_topic")]


def test_timer_unit_before_commitlog(timer):
    """The oldest CommitLog file deleted (as the broker's cleaning does): each pending unit whose message was in it is lost."""
    first = sorted(os.listdir(timer / "commitlog"))
    os.unlink(timer / "commitlog" / first[0])
    start = int(first[1])
    code, probs = _tverify(timer)
    want = sorted(_unit_at(timer, u, "timer_unit_before_commitlog", "offset_py") for u in T_UNITS if u["offsetPy"] < start and _pending(u))
    assert code == 1 and len(want) > 0
    assert sorted(_u(p) for p in probs) == want


# wheel slots


def test_timerwheel_bad_slot_index(timer):
    """A pending slot's time field moved one second on: it is not in the slot of its second; its unit is reached by no slot."""
    _edit_slot(timer, P_SLOT, time=P_SLOT["timeMs"] // 1000 + 1)
    code, probs = _tverify(timer)
    assert code == 1
    assert [(p["code"], p["file"], p["file_offset"], p["slot_index"]) for p in probs if p["code"] == "timerwheel_bad_slot_index"] == [
        _slot_at(timer, P_SLOT, "timerwheel_bad_slot_index", "time")[:4]
    ]
    assert [_u(p) for p in probs if p["code"] != "timerwheel_bad_slot_index"] == [_unit_at(timer, P_UNIT, "timer_unit_unreachable", None)]


def test_timerwheel_bad_magic(timer):
    _edit_slot(timer, P_SLOT, magic=1)
    code, probs = _tverify(timer)
    assert code == 1
    assert [_s(p) for p in probs] == [_slot_at(timer, P_SLOT, "timerwheel_bad_magic", "magic")]


def test_timerwheel_chain_broken(timer):
    """A slot's lastPos one byte off its unit: the chain starts at no unit, and the unit is reached by no slot."""
    _edit_slot(timer, P_SLOT, last_pos=P_SLOT["lastPos"] + 1)
    code, probs = _tverify(timer)
    assert code == 1
    assert [_s(p) for p in probs if p["code"] == "timerwheel_chain_broken"] == [_slot_at(timer, P_SLOT, "timerwheel_chain_broken", "last_pos")]
    assert [_u(p) for p in probs if p["code"] != "timerwheel_chain_broken"] == [_unit_at(timer, P_UNIT, "timer_unit_unreachable", None)]


def test_timerwheel_chain_end(timer):
    """firstPos names the next unit of the log: the chain from lastPos ends elsewhere."""
    _edit_slot(timer, P_SLOT, first_pos=P_SLOT["firstPos"] + UNIT)
    code, probs = _tverify(timer)
    assert code == 1
    assert [_s(p) for p in probs] == [_slot_at(timer, P_SLOT, "timerwheel_chain_end", "first_pos")]


def test_timerwheel_slot_count(timer):
    _edit_slot(timer, P_SLOT, num=P_SLOT["num"] + 1)
    code, probs = _tverify(timer)
    assert code == 1
    assert [_s(p) for p in probs] == [_slot_at(timer, P_SLOT, "timerwheel_slot_count", "num")]


# config/timercheck


def test_timercheck_bad_reserved(timer):
    at = field_offset(TimerCheck, "reserved") + 100
    patch(timer / "config" / "timercheck", at, b"\x01")
    code, probs = _tverify(timer)
    assert code == 1
    assert [_c(p) for p in probs] == [("timercheck_bad_reserved", str(timer / "config" / "timercheck"), at)]


def test_timercheck_read_time(timer):
    """lastReadTimeMs half a second on: not a multiple of the 1000 ms precision (every unit's state stays the same)."""
    _edit_check(timer, last_read_time_ms=T_CHECK["lastReadTimeMs"] + 500)
    code, probs = _tverify(timer)
    assert code == 1
    assert [_c(p) for p in probs] == [("timercheck_read_time", str(timer / "config" / "timercheck"), field_offset(TimerCheck, "last_read_time_ms"))]


def test_timercheck_flush_pos(timer):
    assert T_CHECK["lastTimerLogFlushPos"] == max(u["timerLogOffset"] for u in T_UNITS) + UNIT
    _edit_check(timer, last_timer_log_flush_pos=T_CHECK["lastTimerLogFlushPos"] - UNIT)
    code, probs = _tverify(timer)
    assert code == 1
    assert [_c(p) for p in probs] == [("timercheck_flush_pos", str(timer / "config" / "timercheck"), field_offset(TimerCheck, "last_timer_log_flush_pos"))]


# rmq_sys_wheel_timer/0 holds 300 messages (queue offsets 0..299), every one with a timer log unit
TIMER_QUEUE_END = sum(1 for m in manifest(TIMER) if m["kind"] == "cq_unit" and m["topic"] == C.TIMER_TOPIC)


@pytest.mark.parametrize(
    ("fields", "at"),
    [
        ({"last_timer_queue_offset": TIMER_QUEUE_END - 1}, ["last_timer_queue_offset"]),  # the log already holds that record's unit
        ({"master_timer_queue_offset": TIMER_QUEUE_END - 1}, ["master_timer_queue_offset"]),  # below lastTimerQueueOffset
        (
            {"last_timer_queue_offset": TIMER_QUEUE_END + 1, "master_timer_queue_offset": TIMER_QUEUE_END + 1},
            ["last_timer_queue_offset", "master_timer_queue_offset"],
        ),
    ],
    ids=["last-behind-the-log", "master-below-last", "both-past-the-queue"],
)
def test_timercheck_queue_offset(timer, fields, at):
    assert T_CHECK["lastTimerQueueOffset"] == T_CHECK["masterTimerQueueOffset"] == TIMER_QUEUE_END
    _edit_check(timer, **fields)
    code, probs = _tverify(timer)
    assert code == 1
    path = str(timer / "config" / "timercheck")
    assert [_c(p) for p in probs] == [("timercheck_queue_offset", path, field_offset(TimerCheck, name)) for name in at]


# --- RocksDB ConsumeQueue: `rmqdump cq verify` ----------------------------------------------------------------

ROCKS = "rmq53-rocksdbcq"
R_UNITS = [m for m in manifest(ROCKS) if m["kind"] == "cq_unit"]


@pytest.fixture()
def rocks(tmp_path) -> Path:
    root = tmp_path / "store"
    shutil.copytree(store_root(ROCKS), root)
    return root


def _rewrite(root: Path, cf: str, edit) -> None:
    """Change a copy's database through RocksDB itself (a test's damage; rmqdump never opens a database for writing)."""
    from rocksdict import AccessType, Options, Rdict

    db = Rdict(
        str(root / "consumequeue"),
        options=Options(raw_mode=True),
        column_families={"default": Options(raw_mode=True), "offset": Options(raw_mode=True)},
        access_type=AccessType.read_write(),
    )
    edit(db.get_column_family(cf))
    db.flush()
    db.close()


def _rverify(root: Path):
    return run("cq", "verify", "-s", root, "-f", "jsonl")


def test_rocksdb_cq_bad_key(rocks):
    """Two keys that are not unit keys: one among a queue's units (a byte too long), one after every queue."""
    assert any(m["topic"] == "RocksTopicA" and m["queueId"] == 1 and m["queueOffset"] == 6 for m in R_UNITS)
    key = RocksCQKey.build({"topic_length": len(b"RocksTopicA"), "topic": b"RocksTopicA", "queue_id": 1, "cq_offset": 5})
    long = key + b"\x00"  # sorts between units 5 and 6 of RocksTopicA/1
    stray = b"not-a-unit-key"  # sorts after every key (they start with the topic length's zero bytes)
    value = bytes(28)

    def edit(cf):
        cf[long] = value
        cf[stray] = value

    _rewrite(rocks, "default", edit)
    r = _rverify(rocks)
    assert r.exit_code == 1
    probs = [x for x in jsonl(r.stdout) if x["kind"] == "problem"]
    db = str(rocks / "consumequeue")
    assert sorted(((p["code"], p["file"], p["file_offset"], p.get("topic"), p.get("queue_id"), p.get("unit_index"), p["key"]) for p in probs), key=str) == [
        ("rocksdb_cq_bad_key", db, None, "RocksTopicA", 1, None, long.hex()),
        ("rocksdb_cq_bad_key", db, None, None, None, None, stray.hex()),
    ]


def test_rocksdb_cq_offset_mismatch(rocks):
    """The `offset` family's max for one queue one past its last unit."""
    units = [m for m in R_UNITS if m["topic"] == "RocksTopicB" and m["queueId"] == 2]
    last = max(units, key=lambda m: m["queueOffset"])
    key = RocksOffsetKey.build({"topic_length": 11, "topic": b"RocksTopicB", "bound": b"max", "queue_id": 2})

    def edit(cf):
        cf[key] = RocksOffsetValue.build({"commit_log_offset": last["commitLogOffset"], "cq_offset": last["queueOffset"] + 1})

    _rewrite(rocks, "offset", edit)
    r = _rverify(rocks)
    assert r.exit_code == 1
    probs = [x for x in jsonl(r.stdout) if x["kind"] == "problem"]
    db = str(rocks / "consumequeue")
    assert [(p["code"], p["file"], p["file_offset"], p["topic"], p["queue_id"], p["unit_index"]) for p in probs] == [
        ("rocksdb_cq_offset_mismatch", db, None, "RocksTopicB", 2, last["queueOffset"])
    ]


def _one_line(r) -> tuple[str, str, str]:
    """(code, where, detail) of a command's one-line error (`rmqdump: CODE: WHERE: DETAIL`), with exit 2 and nothing listed."""
    assert r.exit_code == 2 and r.stdout == ""
    (line,) = r.stderr.strip().splitlines()
    prog, code, where, detail = line.split(": ", 3)
    assert prog == "rmqdump"
    return code, where, detail


def test_rocksdb_unreadable_manifest(rocks):
    """CURRENT names a MANIFEST that is not there: RocksDB refuses to open the database, named as given (not the mirror)."""
    db = rocks / "consumequeue"
    (db / "CURRENT").write_text("MANIFEST-000099\n")
    code, where, detail = _one_line(_rverify(rocks))
    assert (code, where) == ("rocksdb_unreadable", str(db))
    assert f"{db}/MANIFEST-000099" in detail and "rmqdump-rocksdb-" not in detail


def test_rocksdb_unreadable_sst(rocks):
    """A table file the MANIFEST lists is gone: the line names that file."""
    db = rocks / "consumequeue"
    sst = max(db.glob("*.sst"))
    os.unlink(sst)
    code, where, detail = _one_line(_rverify(rocks))
    assert (code, where) == ("rocksdb_unreadable", str(sst))
    assert "No such file" in detail and "rmqdump-rocksdb-" not in detail


def test_rocksdb_binding_missing(monkeypatch):
    """Without the rocksdict package a RocksDB ConsumeQueue cannot be read: one line naming the database and the fix."""
    monkeypatch.setitem(sys.modules, "rocksdict", None)  # `import rocksdict` now raises ImportError
    root = store_root(ROCKS)
    assert (root / "consumequeue" / "CURRENT").is_file()
    for args in (("cq", "verify", "-s", root), ("cq", "dump", "-s", root, "-t", "RocksTopicA", "-q", "0"), ("info", "-s", root, "--no-recovery")):
        assert _one_line(run(*args)) == (
            "rocksdb_binding_missing",
            str(root / "consumequeue"),
            "a RocksDB ConsumeQueue needs the rocksdict package (pip install rocksdict)",
        ), args


# --- Batch ConsumeQueue and LMQ: `rmqdump cq verify` ------------------------------------------------------------


def _copy(name: str, dest: Path) -> Path:
    root = dest / name
    shutil.copytree(store_root(name), root)
    for d, _, files in os.walk(root):
        os.chmod(d, 0o755)
        for f in files:
            os.chmod(os.path.join(d, f), 0o644)
    return root


def _cverify(root: Path) -> tuple[int, list[dict]]:
    r = run("cq", "verify", "-s", root, "-f", "jsonl")
    return r.exit_code, [x for x in jsonl(r.stdout) if x["kind"] == "problem"]


def test_cq_batch_offset_gap(tmp_path):
    """The second unit's batchSize one higher: it no longer matches its record, and the third unit's msgBaseOffset is
    no longer where the second's batch ends (the README's example)."""
    name = "rmq53-batchcq"
    root = _copy(name, tmp_path)
    units = sorted(
        (m for m in manifest(name) if m["kind"] == "cq_unit" and m["topic"] == "BatchTopicBCQ" and m["queueId"] == 0), key=lambda m: m["queueOffset"]
    )
    second, third = units[1], units[2]  # one manifest line per unit: queueOffset is its msgBaseOffset
    assert third["queueOffset"] == second["queueOffset"] + second["batchNum"]
    path = root / "batchconsumequeue" / "BatchTopicBCQ" / "0" / f"{0:020d}"
    size = BatchConsumeQueueUnit.sizeof()
    _edit(path, size, BatchConsumeQueueUnit, batch_size=second["batchNum"] + 1)
    code, probs = _cverify(root)
    assert code == 1
    assert sorted((p["code"], p["file"], p["file_offset"], p["unit_index"], p["phys_offset"]) for p in probs) == [
        ("cq_batch_offset_gap", str(path), 2 * size, third["queueOffset"], third["commitLogOffset"]),
        ("cq_batch_size_mismatch", str(path), size, second["queueOffset"], second["commitLogOffset"]),
    ]


def test_cq_lmq_not_dispatched(tmp_path):
    """An LMQ unit re-pointed (offset, size, tagsCode) at a parent record that names other LMQ queues only."""
    name = "rmq53-lmq"
    root = _copy(name, tmp_path)
    queue = "%LMQ%order_1"
    units = sorted((m for m in manifest(name) if m["kind"] == "cq_unit" and m["topic"] == queue), key=lambda m: m["queueOffset"])
    puts = [m for m in manifest(name) if m["kind"] == "put"]
    k = next(
        k
        for k in range(1, len(units) - 1)
        if any(
            units[k - 1]["commitLogOffset"] < p["wroteOffset"] < units[k + 1]["commitLogOffset"] and queue not in p.get("lmqQueues", []) and p["lmqQueues"]
            for p in puts
        )
    )
    other = next(
        p
        for p in puts
        if units[k - 1]["commitLogOffset"] < p["wroteOffset"] < units[k + 1]["commitLogOffset"] and p["lmqQueues"] and queue not in p["lmqQueues"]
    )
    path = root / "consumequeue" / queue / "0" / f"{0:020d}"
    unit = ConsumeQueueUnit.sizeof()
    patch(path, k * unit, ConsumeQueueUnit.build({"commit_log_offset": other["wroteOffset"], "size": other["wroteBytes"], "tags_code": other["tagsCode"]}))
    code, probs = _cverify(root)
    assert code == 1
    assert sorted((p["code"], p["file"], p["file_offset"], p["topic"], p["unit_index"], p["phys_offset"]) for p in probs) == [
        ("cq_lmq_not_dispatched", str(path), k * unit, queue, k, other["wroteOffset"]),
        ("cq_missing_unit", str(path), None, queue, k, units[k]["commitLogOffset"]),  # the record that names order_1 at k
    ]


def test_cq_batch_offset_gap_in_rebuild(tmp_path):
    """A rebuild writes each batch record's unit at its queueOffset: one record's queueOffset moved one on leaves the
    queue offset before it uncovered; reported once per queue, at its first gap, with the record that starts there."""
    name = "rmq53-batchcq"
    root = _copy(name, tmp_path)
    puts = sorted(
        (m for m in manifest(name) if m["kind"].startswith("put") and m["topic"] == "BatchTopicBCQ" and m["queueId"] == 0), key=lambda m: m["logicsOffset"]
    )
    victim = puts[2]
    base = max(int(n) for n in os.listdir(root / "commitlog") if int(n) <= victim["wroteOffset"])
    patch(
        root / "commitlog" / f"{base:020d}",
        victim["wroteOffset"] - base + field_offset(message_header(), "queue_offset"),
        (victim["logicsOffset"] + 1).to_bytes(8, "big"),
    )
    out = tmp_path / "out"
    r = run("rebuild", root, "--out", out, "-f", "jsonl", "--no-sync", "--hash-slots", 500, "--index-entries", 2000, "--no-verify")
    assert r.exit_code == 1
    probs = [x for x in jsonl(r.stdout) if x["kind"] == "problem"]
    assert [(p["code"], p["file"], p["file_offset"], p["phys_offset"], p["topic"], p["queue_id"]) for p in probs] == [
        ("cq_batch_offset_gap", str(out / "batchconsumequeue" / "BatchTopicBCQ" / "0"), None, victim["wroteOffset"], "BatchTopicBCQ", 0)
    ]
    assert f"first: queue offset {victim['logicsOffset'] + 1}, expected {victim['logicsOffset']}" in probs[0]["detail"]
