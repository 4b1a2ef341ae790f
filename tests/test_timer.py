"""The 5.x timer store (timerlog/, timerwheel, config/timercheck) against rmq53-timer's manifest, and damage found at its unit."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from conftest import REAL, flip, jsonl, patch, run
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmqdump.common.javahash import java_hash
from rmqdump.schemas import constants as C
from rmqdump.schemas.timer import TimerCheck, TimerLogUnit, TimerWheelSlot

NAME = "rmq53-timer"
ARCHIVE = REAL / NAME / "store.tar.gz"


def _manifest() -> list[dict]:
    import json

    with open(REAL / NAME / "manifest.jsonl", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


M = _manifest()
UNITS = [m for m in M if m["kind"] == "timerlog_unit"]
SLOTS = {m["slotIndex"]: m for m in M if m["kind"] == "timerwheel_slot"}
CHECK = next(m for m in M if m["kind"] == "timercheck_file")
RECORDS = {m["physicalOffset"]: m for m in M if m["kind"] == "commitlog_msg"}
# A timer fired when the broker put its message again to the real topic (with TIMER_DEQUEUE_MS): the truth for `state`.
REPUT = {m["properties"]["UNIQ_KEY"] for m in RECORDS.values() if C.PROPERTY_TIMER_DEQUEUE_MS in m["properties"]}
README = (REAL / NAME / "README.txt").read_text(encoding="utf-8")


def readme_int(name: str) -> int:
    """A number README.txt gives: a config line `name = N` or a summary line `"name": N`."""
    m = re.search(rf'^\s*"?{re.escape(name)}"?\s*[:=]\s*(-?\d+)', README, flags=re.M)
    assert m, name
    return int(m.group(1))


FIRED, PENDING = readme_int("timerShortDelay(fired during run)"), readme_int("timerLongDelay(remain in wheel)")
LOG_FILE = readme_int("mappedFileSizeTimerLog")
LAST_LOG_FILE = readme_int("timerLogMaxWrotePosition") // LOG_FILE * LOG_FILE  # where the log's last unit is
TIMER_QUEUE_MAX = sum(1 for m in M if m["kind"] == "cq_unit" and m["topic"] == C.TIMER_TOPIC)  # the timer topic's units


def unpack(dest: Path) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    subprocess.run(["tar", "-xzf", str(ARCHIVE), "-C", str(dest)], check=True)
    return dest / "store"


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    root = unpack(tmp_path_factory.mktemp("timer"))
    for dirpath, _, files in os.walk(root):  # evidence: tests below only read it
        for f in files:
            os.chmod(os.path.join(dirpath, f), 0o444)
    return root


@pytest.fixture()
def damaged(tmp_path) -> Path:
    return unpack(tmp_path)


def _unit_bytes(root: Path, offset: int) -> bytes:
    files = sorted(os.listdir(root / "timerlog"))
    size = os.path.getsize(root / "timerlog" / files[0])
    with open(root / "timerlog" / f"{offset // size * size:020d}", "rb") as f:
        f.seek(offset % size)
        return f.read(TimerLogUnit.sizeof())


def test_schemas_parse_and_rebuild_every_unit_slot_and_timercheck(store):
    assert TimerLogUnit.sizeof() == C.TIMER_LOG_UNIT_SIZE and TimerWheelSlot.sizeof() == C.TIMER_SLOT_SIZE
    for m in UNITS:
        raw = _unit_bytes(store, m["timerLogOffset"])
        u = TimerLogUnit.parse(raw)
        assert TimerLogUnit.build(u) == raw
        assert (u.size, u.prev_pos, u.magic, u.curr_write_time_ms, u.delayed_time_offset, u.offset_py, u.size_py, u.hash_code_of_real_topic, u.reserved) == (
            m["size"], m["prevPos"], m["magic"], m["currWriteTimeMs"], m["delayedTimeOffset"], m["offsetPy"], m["sizePy"], m["hashCodeOfRealTopic"], m["reserved"],
        )  # fmt: skip
    wheel = (store / "timerwheel").read_bytes()
    assert len(wheel) == C.TIMER_WHEEL_SLOTS * C.TIMER_SLOT_SIZE
    for idx, m in SLOTS.items():
        raw = wheel[m["fileOffset"] : m["fileOffset"] + C.TIMER_SLOT_SIZE]
        s = TimerWheelSlot.parse(raw)
        assert TimerWheelSlot.build(s) == raw and idx * C.TIMER_SLOT_SIZE == m["fileOffset"]
        assert (s.time * 1000, s.first_pos, s.last_pos, s.num, s.magic) == (m["timeMs"], m["firstPos"], m["lastPos"], m["num"], m["magic"])
    raw = (store / "config" / "timercheck").read_bytes()
    c = TimerCheck.parse(raw)
    assert TimerCheck.build(c) == raw
    assert (c.last_read_time_ms, c.last_timer_log_flush_pos, c.last_timer_queue_offset, c.master_timer_queue_offset) == (
        CHECK["lastReadTimeMs"], CHECK["lastTimerLogFlushPos"], CHECK["lastTimerQueueOffset"], CHECK["masterTimerQueueOffset"],
    )  # fmt: skip
    assert (c.data_version_state_version, c.data_version_timestamp, c.data_version_counter) == (
        CHECK["dataVersion.stateVersion"], CHECK["dataVersion.timestamp"], CHECK["dataVersion.counter"],
    )  # fmt: skip


def test_reader_finds_every_unit_blank_and_slot(store):
    from rmqdump.readers.timerlog import TimerStore

    ts = TimerStore.open(str(store))
    assert ts.problems == [] and ts.precision == 1000
    got = {o: (d, p) for u in ts.chunks(7) for o, d, p in zip(u.offset.tolist(), u.deliver_ms.tolist(), u.offset_py.tolist(), strict=True)}
    assert sorted(got) == [m["timerLogOffset"] for m in UNITS] and ts.count == len(UNITS)
    for m in UNITS:
        assert got[m["timerLogOffset"]] == (m["delayedTimeMs"], m["offsetPy"])
        found, u = ts.units_at([m["timerLogOffset"]])  # read back by offset, as the chain walk does
        assert found.tolist() == [True] and (int(u.deliver_ms[0]), int(u.offset_py[0])) == (m["delayedTimeMs"], m["offsetPy"])
        assert ts.unit(m["timerLogOffset"])[4:] == (m["delayedTimeMs"], m["offsetPy"])
    blanks = [m for m in M if m["kind"] == "timerlog_blank"]
    assert [(b.phys_offset, b.length) for b in ts.blanks] == [(m["timerLogOffset"], m["size"]) for m in blanks]
    assert ts.log_end == CHECK["lastTimerLogFlushPos"]
    # the manifest lists the slots still ahead of the read pointer; the file also keeps the fired ones
    pending = {int(r["index"]) for r in ts.slots if r["time"] * 1000 >= CHECK["lastReadTimeMs"]}
    assert pending == set(SLOTS)
    assert all(r["time"] * 1000 < CHECK["lastReadTimeMs"] for r in ts.slots if int(r["index"]) not in SLOTS)


def test_timer_list_agrees_with_the_manifest_field_by_field(store):
    r = run("timer", "list", "-s", store, "-f", "jsonl")
    assert r.exit_code == 0
    rows = jsonl(r.stdout)
    assert rows.pop()["kind"] == "unwritten"  # the closing line (tests/test_cq_dump_end.py checks it)
    assert [x["timer_log_offset"] for x in rows] == [m["timerLogOffset"] for m in UNITS]
    for x, m in zip(rows, UNITS, strict=True):
        rec = RECORDS[m["offsetPy"]]
        props = rec["properties"]
        assert x["deliver_ms"] == m["delayedTimeMs"] == int(props["TIMER_OUT_MS"])
        assert (x["phys_offset"], x["size"]) == (m["offsetPy"], m["sizePy"]) == (rec["physicalOffset"], rec["totalSize"])
        assert x["real_topic"] == props["REAL_TOPIC"] and java_hash(x["real_topic"]) == m["hashCodeOfRealTopic"]
        assert x["real_queue_id"] == int(props["REAL_QID"])
        assert x["keys"] == props["KEYS"].split(" ") and x["uniq_key"] == props["UNIQ_KEY"]
        assert x["state"] == ("fired" if props["UNIQ_KEY"] in REPUT else "pending")
    assert Counter(x["state"] for x in rows) == {"fired": FIRED, "pending": PENDING}
    assert len(rows) == readme_int("timerLogUnits") == FIRED + PENDING


def test_timer_list_filters(store):
    def listed(*args):
        r = run("timer", "list", "-s", store, "-f", "jsonl", *args)
        return r.exit_code, jsonl(r.stdout)

    code, rows = listed("--state", "pending", "-t", "TimerTopicX")
    want = [
        m
        for m in UNITS
        if RECORDS[m["offsetPy"]]["properties"]["UNIQ_KEY"] not in REPUT and RECORDS[m["offsetPy"]]["properties"]["REAL_TOPIC"] == "TimerTopicX"
    ]
    assert code == 0 and want and [x["timer_log_offset"] for x in rows] == [m["timerLogOffset"] for m in want]
    lo, hi = sorted(m["delayedTimeMs"] for m in UNITS)[10], sorted(m["delayedTimeMs"] for m in UNITS)[50]
    code, rows = listed("--since", str(lo), "--until", str(hi))
    assert {x["timer_log_offset"] for x in rows} == {m["timerLogOffset"] for m in UNITS if lo <= m["delayedTimeMs"] < hi}
    code, rows = listed("-n", "5", "--state", "fired")
    assert code == 0 and len(rows) == 5 and all(x["state"] == "fired" for x in rows)
    code, rows = listed("-t", "NoSuchTopic")
    assert code == 1 and rows == []


def test_dump_wheel_lists_every_non_empty_slot(store):
    r = run("timer", "dump-wheel", "-s", store, "-f", "jsonl", "--state", "pending")
    assert r.exit_code == 0
    rows = jsonl(r.stdout)
    assert {x["slot_index"]: (x["time_ms"], x["first_pos"], x["last_pos"], x["num"], x["file_offset"]) for x in rows} == {
        i: (m["timeMs"], m["firstPos"], m["lastPos"], m["num"], m["fileOffset"]) for i, m in SLOTS.items()
    }


def test_timer_verify_is_clean_and_counts_match(store):
    r = run("timer", "verify", "-s", store, "-f", "jsonl")
    assert r.exit_code == 0, r.stdout
    (s,) = jsonl(r.stdout)
    assert (s["units"], s["pending"], s["fired"], s["problems"], s["precision_ms"]) == (len(UNITS), PENDING, FIRED, 0, readme_int("timerPrecisionMs"))


def test_info_summarises_pending_timers(store):
    r = run("info", "-s", store, "-f", "jsonl", "--no-recovery")
    assert r.exit_code == 0
    rows = jsonl(r.stdout)
    t = next(x for x in rows if x["kind"] == "timer")
    pend = [m for m in UNITS if RECORDS[m["offsetPy"]]["properties"]["UNIQ_KEY"] not in REPUT]
    per = Counter(RECORDS[m["offsetPy"]]["properties"]["REAL_TOPIC"] for m in pend)
    assert {x["topic"]: x["pending"] for x in t["topics"]} == per
    assert t["next_deliver_ms"] == min(m["delayedTimeMs"] for m in pend)
    for x in t["topics"]:
        assert x["next_deliver_ms"] == min(m["delayedTimeMs"] for m in pend if RECORDS[m["offsetPy"]]["properties"]["REAL_TOPIC"] == x["topic"])
    assert not [x for x in rows if x["kind"] in ("problem", "unsupported")]
    assert not [x for x in rows if x["kind"] == "config" and x["path"].endswith("timercheck")]


def _verify(root: Path) -> tuple[int, list[dict]]:
    r = run("timer", "verify", "-s", root, "-f", "jsonl")
    rows = jsonl(r.stdout)
    return r.exit_code, [x for x in rows if x["kind"] == "problem"]


# (file, start, length): one pending unit (in the last file), one fired unit, a pending slot, timercheck's checked fields
def _targets() -> list[tuple[str, int, int]]:
    pend = next(m for m in UNITS if RECORDS[m["offsetPy"]]["properties"]["UNIQ_KEY"] not in REPUT and m["timerLogOffset"] >= LAST_LOG_FILE)
    fired = next(m for m in UNITS if RECORDS[m["offsetPy"]]["properties"]["UNIQ_KEY"] in REPUT)
    slot = next(iter(SLOTS.values()))
    # a fired second with several units (its slot is not in the manifest, which lists pending slots only)
    sec, _ = Counter(m["delayedTimeMs"] // 1000 for m in UNITS if RECORDS[m["offsetPy"]]["properties"]["UNIQ_KEY"] in REPUT).most_common(1)[0]
    out = [("timerwheel", sec % C.TIMER_WHEEL_SLOTS * C.TIMER_SLOT_SIZE, C.TIMER_SLOT_SIZE)]
    for m in (pend, fired):
        base = m["timerLogOffset"] // LOG_FILE * LOG_FILE
        out.append((f"timerlog/{base:020d}", m["timerLogOffset"] - base, C.TIMER_LOG_UNIT_SIZE))
    out.append(("timerwheel", slot["fileOffset"], C.TIMER_SLOT_SIZE))
    out.append(("config/timercheck", 0, 32))  # lastReadTimeMs, lastTimerLogFlushPos, lastTimerQueueOffset, masterTimerQueueOffset
    return out


@pytest.mark.parametrize("target", _targets(), ids=lambda t: f"{t[0]}@{t[1]}")
def test_every_flipped_bit_is_found_at_its_unit(damaged, target):
    """Bit 0 of every byte, and the top bit of every 4-byte word (a sign or a far offset)."""
    from rmqdump.checks.timerverify import verify_timers
    from rmqdump.readers.store import Store
    from rmqdump.readers.timerlog import TimerStore

    rel, start, length = target
    path = damaged / rel
    st = Store.open(damaged)
    flips = [(k, 0x01) for k in range(length)] + [(k, 0x80) for k in range(0, length, 4)]
    for k, mask in flips:
        flip(path, start + k, mask)
        probs = list(verify_timers(TimerStore.open(str(damaged)), st.commitlog, timer_queue_max=TIMER_QUEUE_MAX))
        flip(path, start + k, mask)
        here = [p for p in probs if p.file == str(path) and start <= p.file_offset < start + length]
        assert here, (rel, start + k, mask, [p.line() for p in probs])
        assert all(p.code.startswith(("timer", "timerlog", "timerwheel", "timercheck")) for p in probs)
    assert _verify(damaged) == (0, [])


def test_unit_pointing_past_the_commitlog_end(damaged):
    """As after the truncation in apache/rocketmq#10668: the CommitLog lost its tail, the timer log kept units for it."""
    cut = sorted(m["offsetPy"] for m in UNITS)[-10]
    for name in sorted(os.listdir(damaged / "commitlog")):  # zero everything from `cut` on, as a truncation leaves it
        path, base = damaged / "commitlog" / name, int(name)
        size = os.path.getsize(path)
        if base + size > cut:
            start = max(0, cut - base)
            patch(path, start, bytes(size - start))
    code, probs = _verify(damaged)
    past = {p["timer_log_offset"] for p in probs if p["code"] == "timer_unit_past_commitlog"}
    assert code == 1 and past == {m["timerLogOffset"] for m in UNITS if m["offsetPy"] >= cut} and len(past) == 10


def test_unit_pointing_at_a_normal_record(damaged):
    from rmqdump.readers.fastpath import field_offset

    normal = next(r for r in RECORDS.values() if r["topic"] == "NormalTopicA")
    m = UNITS[7]
    path = damaged / "timerlog" / "00000000000000000000"
    patch(path, m["timerLogOffset"] + field_offset(TimerLogUnit, "offset_py"), normal["physicalOffset"].to_bytes(8, "big"))
    patch(path, m["timerLogOffset"] + field_offset(TimerLogUnit, "size_py"), normal["totalSize"].to_bytes(4, "big"))
    code, probs = _verify(damaged)
    assert code == 1 and [(p["code"], p["file"], p["timer_log_offset"]) for p in probs] == [("timer_record_not_timer", str(path), m["timerLogOffset"])]


def test_short_or_odd_files_are_one_problem_each(damaged):
    os.truncate(damaged / "timerwheel", 64)
    os.truncate(damaged / "config" / "timercheck", 20)
    code, probs = _verify(damaged)
    codes = Counter(p["code"] for p in probs)
    assert code == 1 and codes["timerwheel_file_size"] == 1 and codes["timercheck_short"] == 1
    # with the wheel gone no unit can fire; without a readable timercheck every unit counts as pending
    assert codes["timer_unit_unreachable"] == len(UNITS)


def test_no_timer_store_is_exit_2():
    from conftest import store_root

    r = run("timer", "list", "-s", store_root("rmq4-basic"))
    assert r.exit_code == 2 and "no_timer_store" in r.stderr


def test_renamed_copy_reads_the_same(damaged, tmp_path):
    other = tmp_path / "elsewhere" / "broker-b-store"
    other.parent.mkdir()
    shutil.move(str(damaged), other)
    code, probs = _verify(other)
    assert (code, probs) == (0, [])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    target=st.sampled_from(["timerlog/00000000000000000000", f"timerlog/{LAST_LOG_FILE:020d}", "timerwheel", "config/timercheck"]),
    pos=st.integers(0, 1 << 20),
    junk=st.binary(min_size=1, max_size=64),
    cut=st.booleans(),
)
def test_random_damage_is_reported_never_raised(damaged, target, pos, junk, cut):
    """Random bytes (or a cut) in any timer file: every command answers with findings or one-line errors, never a traceback."""
    path = damaged / target
    before = path.read_bytes() if target != "timerwheel" else None
    size = os.path.getsize(path)
    at = pos % max(1, size if target != "timerwheel" else 13_400_000)
    if cut:
        os.truncate(path, at)
    else:
        patch(path, at, junk)
    try:
        for args in (("verify",), ("list",), ("dump-wheel",)):
            r = run("timer", *args, "-s", damaged, "-f", "jsonl")
            assert r.exit_code in (0, 1), (args, r.stderr)
            jsonl(r.stdout)
        r = run("info", "-s", damaged, "-f", "jsonl", "--no-recovery")
        assert r.exit_code in (0, 1)
    finally:  # restore for the next example
        if target == "timerwheel":
            shutil.rmtree(damaged)
            unpack(damaged.parent)
        else:
            path.write_bytes(before)


_PEAK = """
import atexit, resource, sys
from rmqdump.cli.app import main
atexit.register(lambda: print("PEAK", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr, flush=True))  # rmqdump's exit runs it
main()
"""


def _peak_kb(*args) -> tuple[int, str]:
    import sys

    p = subprocess.run([sys.executable, "-c", _PEAK, *map(str, args)], capture_output=True, text=True, check=False)
    return int(p.stderr.rsplit("PEAK ", 1)[1]), p.stdout


def test_memory_does_not_grow_with_the_timer_log(store, tmp_path):
    """The real store grown 5x apart (bench/bench_timer.py replicates its units): peak RSS of each command about the same.

    Holding the log as columns, as the commands once did, cost 38 MB more for the larger log (72 -> 110 MB for timer verify).
    """
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_timer", Path(__file__).parents[1] / "bench" / "bench_timer.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    small, large = tmp_path / "small", tmp_path / "large"
    grown = [-(-n // len(UNITS)) * len(UNITS) for n in (70_000, 350_000)]  # bench_timer.gen copies the real log's units whole
    assert bench.gen(str(store), str(small), 70_000, file_units=20_000)["units"] == grown[0]
    assert bench.gen(str(store), str(large), 350_000, file_units=100_000)["units"] == grown[1]
    for args in (("timer", "verify", "-f", "jsonl"), ("info", "-f", "jsonl", "--no-recovery")):
        (lo, out_lo), (hi, out_hi) = (_peak_kb(*args, "-s", root) for root in (small, large))
        if args[0] == "timer":  # both grown stores verify as clean as the real one, every unit counted
            assert [jsonl(out)[-1]["units"] for out in (out_lo, out_hi)] == grown
            assert [jsonl(out)[-1]["problems"] for out in (out_lo, out_hi)] == [0, 0]
        assert hi - lo < 10 * 1024, (args, lo, hi)
