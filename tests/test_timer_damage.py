"""Timer store damage the sweep found: a garbage wheel (answered in seconds, its findings counted and bounded), a
timer log file cut inside a unit (`timer list` says so), and a directory or file where the other kind belongs."""

from __future__ import annotations

import json
import os
import random
import shutil
import struct
import time
from collections import Counter
from pathlib import Path

import pytest
from codes import produces
from conftest import copy_store, jsonl, run, run_proc

from rmqdump.schemas import constants as C

NAME = "rmq53-lifecycle"
SLOT = struct.Struct(">qqqii")  # Slot.java: time / precision, firstPos, lastPos, num, magic
UNIT = struct.Struct(">iqiqiqiiq")  # TimerLog unit: size, prevPos, magic, currWriteTimeMs, delay, offsetPy, sizePy, hash, reserved
MAGICS = {1, 3, 5, 7}
BOUND_S = 20  # a generous bound: the fixed code answers a 4 MiB garbage wheel in a few seconds, the old one took minutes
SEGMENT = "00000000000000000000"


@pytest.fixture()
def store(tmp_path) -> Path:
    return copy_store(NAME, tmp_path)


def _garble_wheel(root: Path, nbytes: int, seed: int = 7) -> list[tuple[int, int]]:
    """Random bytes over the wheel's first `nbytes`; (slot index, time) of every slot they make non-zero."""
    junk = random.Random(seed).randbytes(nbytes)
    with open(root / "timerwheel", "r+b") as f:
        f.write(junk)
    out = []
    for i in range(nbytes // SLOT.size):
        raw = junk[i * SLOT.size : (i + 1) * SLOT.size]
        if any(raw):
            out.append((i, SLOT.unpack(raw)[0]))
    return out


def _timed(*args, **kw):
    t0 = time.monotonic()
    r = run_proc(*args, timeout=10 * BOUND_S, **kw)
    return r, time.monotonic() - t0


@produces("timerwheel_bad_slot_index")
def test_a_garbage_wheel_is_answered_in_seconds_with_its_bad_slots_counted(store):
    """4 MiB of random bytes over the wheel: 131,072 slots, each in the slot of its time only by chance. The old code
    printed one rich table row per bad slot (about 1 ms each: minutes); every one is counted, a bounded number listed."""
    from rmqdump.checks.timerverify import PROBLEMS_LISTED

    garbled = _garble_wheel(store, 4 << 20)
    bad = [i for i, t in garbled if t % C.TIMER_WHEEL_SLOTS != i]  # the slot index is time mod the slot count (Python's mod, as Java's floorMod)
    assert len(bad) > PROBLEMS_LISTED
    wheel = str(store / "timerwheel")

    r, took = _timed("timer", "verify", "-s", store, "-f", "jsonl")
    assert took < BOUND_S, took
    assert r.returncode == 1, r.stderr
    rows = jsonl(r.stdout)
    summary = rows[-1]
    assert summary["kind"] == "summary" and summary["codes"]["timerwheel_bad_slot_index"] == len(bad)
    listed = [x for x in rows if x.get("code") == "timerwheel_bad_slot_index"]
    assert [(x["file"], x["file_offset"], x["slot_index"]) for x in listed] == [(wheel, i * SLOT.size, i) for i in bad[:PROBLEMS_LISTED]]
    assert summary["unlisted"]["timerwheel_bad_slot_index"] == len(bad) - PROBLEMS_LISTED
    assert all(n <= PROBLEMS_LISTED for n in Counter(x["code"] for x in rows if x["kind"] == "problem").values())

    r, took = _timed("timer", "verify", "-s", store)  # the table: the slow part of the old code
    assert took < BOUND_S, took
    assert r.returncode == 1, r.stderr
    assert r.stdout.count("timerwheel_bad_slot_index") == PROBLEMS_LISTED + 1  # the listed rows, and the line saying how many more
    assert f"{len(bad) - PROBLEMS_LISTED} more timerwheel_bad_slot_index" in r.stdout

    r, took = _timed("timer", "dump-wheel", "-s", store)
    assert took < BOUND_S, took
    assert r.returncode == 0, r.stderr
    assert r.stderr == "" and "more slots (-f jsonl lists every one)" in r.stdout
    r, took = _timed("timer", "dump-wheel", "-s", store, "-f", "jsonl")
    assert took < BOUND_S, took
    got = [x["slot_index"] for x in jsonl(r.stdout)]
    assert r.returncode == 0 and got[: len(garbled)] == [i for i, _ in garbled]  # every slot, the garbage ones first


def test_a_wheel_of_slots_in_their_place_pointing_nowhere_is_answered_in_seconds(store):
    """Every slot of the wheel's first 4 MiB holds its own time and a lastPos that is no unit: each is walked, none
    hangs; every one is a broken chain, counted, a bounded number listed."""
    from rmqdump.checks.timerverify import PROBLEMS_LISTED

    n = (4 << 20) // SLOT.size
    last_read = struct.unpack_from(">q", (store / "config" / "timercheck").read_bytes())[0]
    base = last_read // 1000 // C.TIMER_WHEEL_SLOTS * C.TIMER_WHEEL_SLOTS + C.TIMER_WHEEL_SLOTS  # a pending second of slot 0
    rng = random.Random(3)
    log_size = os.path.getsize(store / "timerlog" / SEGMENT)
    buf = bytearray()
    for i in range(n):
        last = rng.randrange(log_size, 1 << 40)  # past the timer log: no unit
        buf += SLOT.pack(base + i, -1, last, 1, 0)
    with open(store / "timerwheel", "r+b") as f:
        f.write(buf)
    r, took = _timed("timer", "verify", "-s", store, "-f", "jsonl")
    assert took < BOUND_S, took
    rows = jsonl(r.stdout)
    s = rows[-1]
    assert r.returncode == 1 and s["codes"]["timerwheel_chain_broken"] == n
    broken = [x["slot_index"] for x in rows if x.get("code") == "timerwheel_chain_broken"]
    assert broken == list(range(PROBLEMS_LISTED)) and s["unlisted"]["timerwheel_chain_broken"] == n - PROBLEMS_LISTED


def _units(data: bytes) -> list[int]:
    """Offsets of the well-formed units of one timer log file's whole 52-byte positions (the model of `timer list`)."""
    out = []
    for k in range(len(data) // UNIT.size):
        u = UNIT.unpack_from(data, k * UNIT.size)
        if u[0] == UNIT.size and u[2] in MAGICS:
            out.append(k * UNIT.size)
    return out


@produces("timerlog_bad_blank")
def test_timer_list_reports_a_timer_log_file_cut_inside_a_unit(store):
    seg = store / "timerlog" / SEGMENT
    os.truncate(seg, 1001)  # 19 whole units, then 13 bytes of the 20th
    data = seg.read_bytes()
    torn = len(data) // UNIT.size * UNIT.size
    assert torn == 988 and any(data[torn:])
    r = run("timer", "list", "-s", store, "-f", "jsonl")
    rows = jsonl(r.stdout)
    assert r.exit_code == 1
    probs = [x for x in rows if x["kind"] == "problem"]
    assert [(p["code"], p["file"], p["file_offset"]) for p in probs] == [("timerlog_bad_blank", str(seg), torn)]
    assert "torn" in probs[0]["detail"]
    assert [x["timer_log_offset"] for x in rows if x["kind"] == "timer"] == _units(data)
    r = run("timer", "list", "-s", store)
    assert r.exit_code == 1
    line = next(x for x in r.stdout.splitlines() if "timerlog_bad_blank" in x)
    assert f"timerlog/{SEGMENT}" in line and f" {torn} " in f" {line} "
    # filtered, the listing still says the file is damaged
    r = run("timer", "list", "-s", store, "-f", "jsonl", "--state", "pending")
    assert r.exit_code == 1 and [x["file_offset"] for x in jsonl(r.stdout) if x["kind"] == "problem"] == [torn]


def _replace_with_dir(path: Path) -> None:
    path.unlink()
    path.mkdir()


def _replace_with_file(path: Path) -> None:
    shutil.rmtree(path)
    path.write_bytes(b"")


@pytest.mark.parametrize(
    "rel, change, detail",
    [
        ("timerwheel", _replace_with_dir, "not a regular file"),
        ("config/timercheck", _replace_with_dir, "not a regular file"),
        (f"timerlog/{SEGMENT}", _replace_with_dir, "not a regular file"),
        ("timerlog", _replace_with_file, "not a directory"),
    ],
    ids=["wheel-dir", "timercheck-dir", "segment-dir", "timerlog-file"],
)
@pytest.mark.parametrize("cmd", ["verify", "list", "dump-wheel"])
@produces("unreadable")
def test_the_wrong_kind_of_file_is_unreadable_never_absent(store, rel, change, detail, cmd):
    path = store / rel
    change(path)
    r = run("timer", cmd, "-s", store, "-f", "jsonl")
    assert r.exit_code == 2, (r.stdout, r.stderr)
    assert r.stderr == f"rmqdump: unreadable: {path}@0: {detail}\n"
    assert [json.loads(x)["kind"] for x in r.stdout.splitlines()] == []
