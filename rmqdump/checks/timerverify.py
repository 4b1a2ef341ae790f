"""Timer store checks: wheel slots vs timer log chains vs CommitLog records.

What the broker relies on when it fires timers: each unit points at a whole
rmq_sys_wheel_timer record of sizePy bytes whose TIMER_OUT_MS is the unit's
delivery time; a slot's lastPos chain (through prevPos) holds exactly the
units of its second, ends at firstPos and counts `num`; every unit not yet
fired is reachable from its slot; timercheck agrees with the log. A unit that
points past the CommitLog's end (the truncation in apache/rocketmq#10668) is
a message the broker will fail to fire.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from rmqdump.common.javahash import java_hash
from rmqdump.common.jsontext import fields_of
from rmqdump.common.problems import Problem
from rmqdump.readers.commitlog import CommitLog
from rmqdump.readers.fastpath import field_offset
from rmqdump.readers.timerlog import SLOT_SIZE, STEP, TimerRecord, TimerStore, TimerUnits
from rmqdump.scan import scanner
from rmqdump.scan.dataend import data_end_of
from rmqdump.schemas import constants as C
from rmqdump.schemas.timer import TimerCheck, TimerLogUnit, TimerWheelSlot

CHUNK = 50_000  # units whose records one CommitLog scan looks up
PROBLEMS_LISTED = 1000  # findings of one code made and listed; past that they are only counted (`unlisted`)

# Stable codes (the file-level ones live in readers/timerlog.py)
PAST_COMMITLOG = "timer_unit_past_commitlog"
BEFORE_COMMITLOG = "timer_unit_before_commitlog"
RECORD_MISSING = "timer_record_missing"
RECORD_SIZE = "timer_record_size_mismatch"
NOT_TIMER = "timer_record_not_timer"
DELIVER_MISMATCH = "timer_deliver_mismatch"
TOPIC_HASH = "timer_topic_hash_mismatch"
BAD_PREV = "timerlog_bad_prev"
UNREACHABLE = "timer_unit_unreachable"
WRONG_SLOT = "timer_unit_wrong_slot"
SLOT_INDEX = "timerwheel_bad_slot_index"
SLOT_MAGIC = "timerwheel_bad_magic"
CHAIN_BROKEN = "timerwheel_chain_broken"
CHAIN_END = "timerwheel_chain_end"
SLOT_COUNT = "timerwheel_slot_count"
CHECK_READ_TIME = "timercheck_read_time"
CHECK_FLUSH_POS = "timercheck_flush_pos"
CHECK_QUEUE_OFFSET = "timercheck_queue_offset"

_UNIT_SIZE = TimerLogUnit.sizeof()
_PREV_AT = field_offset(TimerLogUnit, "prev_pos")
_OFFSET_PY_AT = field_offset(TimerLogUnit, "offset_py")
_SIZE_PY_AT = field_offset(TimerLogUnit, "size_py")
_DELAY_AT = field_offset(TimerLogUnit, "delayed_time_offset")
_HASH_AT = field_offset(TimerLogUnit, "hash_code_of_real_topic")
_SLOT_FIRST_AT = field_offset(TimerWheelSlot, "first_pos")
_SLOT_LAST_AT = field_offset(TimerWheelSlot, "last_pos")
_SLOT_NUM_AT = field_offset(TimerWheelSlot, "num")
_SLOT_MAGIC_AT = field_offset(TimerWheelSlot, "magic")


@dataclass
class TimerVerifySummary:
    units: int = 0
    pending: int = 0
    fired: int = 0
    slots: int = 0
    precision_ms: int = 0
    codes: Counter = field(default_factory=Counter)  # every finding, by code
    unlisted: Counter = field(default_factory=Counter)  # findings counted but not made, past PROBLEMS_LISTED of their code

    @property
    def problems(self) -> int:
        return sum(self.codes.values())

    def listed(self, code: str, n: int = 1) -> int:
        """Count `n` findings of `code`; how many of them, the first ones, are among the first PROBLEMS_LISTED of
        their code (to be made and listed); the others are counted in `unlisted`. n = 0 names no code (no 0 in the summary)."""
        if n <= 0:
            return 0
        before = self.codes[code]
        self.codes[code] = before + n
        room = max(0, min(n, PROBLEMS_LISTED - before))
        if room < n:
            self.unlisted[code] += n - room
        return room

    def to_dict(self) -> dict:
        return {
            "kind": "summary",
            **fields_of(self, omit=("codes", "unlisted")),
            "problems": self.problems,
            "codes": dict(sorted(self.codes.items())),
            "unlisted": dict(sorted(self.unlisted.items())),
        }


def records_at(cl: CommitLog, offsets: np.ndarray, *, check_crc: bool = False) -> dict[int, TimerRecord]:
    """What the timer units need of the records starting exactly at these physical offsets (one scan over their stretch)."""
    return {k: TimerRecord.of(m) for k, m in scanner.records_at(cl, offsets, check_crc=check_crc).items()}


def verify_timers(
    ts: TimerStore, cl: CommitLog, *, timer_queue_max: int | None = None, check_crc: bool = False, summary: TimerVerifySummary | None = None
) -> Iterator[Problem]:
    """Every finding of the timer store, streamed (memory does not grow with the findings); counts go to `summary`.

    Every finding is counted; of each code the first PROBLEMS_LISTED are made and yielded, the rest only counted
    (`summary.unlisted`): a wheel of garbage has a million bad slots, a listing of them all says nothing more.

    The timer log is read back in chunks and slot chains are walked unit by unit through the maps: what is held
    is one chunk, its records, and one bit per timer log position (which units a slot's chain reached).
    `timer_queue_max`: the max offset of rmq_sys_wheel_timer/0.
    """
    s = summary if summary is not None else TimerVerifySummary()
    s.units, s.pending, s.slots, s.precision_ms = ts.count, ts.pending_count, len(ts.slots), ts.precision
    s.fired = s.units - s.pending

    def counted(found):
        for p in found:
            if s.listed(p.code):
                yield p

    yield from counted(ts.problems)
    seen_queue_max = None
    data_end = data_end_of(cl) if ts.count else cl.min_offset
    for u in ts.chunks(CHUNK):  # records looked up a chunk of units at a time: memory bounded by the chunk
        recs = records_at(cl, u.offset_py, check_crc=check_crc)
        yield from counted(_units_vs_records(ts, cl, recs, u, data_end))
        seen_queue_max = max([*_queue_offsets(recs), *([] if seen_queue_max is None else [seen_queue_max])], default=None)
    yield from counted(_prev_links(ts))
    visited = bytearray((ts.grid_size + 7) // 8)  # one bit per timer log position
    yield from _wheel(ts, visited, s.listed)  # counted as found: a bad slot past the listed ones is never made
    yield from counted(_unreachable(ts, visited))
    yield from counted(_timercheck(ts, seen_queue_max, timer_queue_max))


def _problem(ts: TimerStore, file_index: int, offset: int, offset_py: int, code: str, at: int, detail: str) -> Problem:
    """A finding at the unit at timer log `offset` (in file `file_index`), `at` bytes into it."""
    path, off = ts.unit_file(file_index, offset)
    return Problem(code, path, off + at, detail, phys_offset=offset_py, extra={"timer_log_offset": offset, "unit_index": off // _UNIT_SIZE})


def _unit_problem(ts: TimerStore, u: TimerUnits, j: int, code: str, at: int, detail: str) -> Problem:
    return _problem(ts, int(u.file_index[j]), int(u.offset[j]), int(u.offset_py[j]), code, at, detail)


def _units_vs_records(ts: TimerStore, cl: CommitLog, recs: dict[int, TimerRecord], u: TimerUnits, data_end: int) -> list[Problem]:
    """Each unit against the record it points at. The checks run per distinct record and are spread over the units
    as arrays; only units with a finding are visited one by one."""
    out = []
    if not len(u):
        return out
    files_end = cl.files[-1].base + cl.files[-1].size if cl.files else 0
    keys = np.fromiter(recs.keys(), dtype=np.int64, count=len(recs))
    order = np.argsort(keys)
    keys = keys[order]
    vals = [recs[int(k)] for k in keys.tolist()]
    k = np.searchsorted(keys, u.offset_py)
    has = (k < len(keys)) & (keys[np.minimum(k, max(len(keys) - 1, 0))] == u.offset_py) if len(keys) else np.zeros(len(u), dtype=bool)
    kc = np.where(has, k, len(keys))  # units without a record index a last, dummy entry of the per-record arrays
    # per record: its size, whether it is a timer message, its TIMER_OUT_MS (when a number), the hashCode of its REAL_TOPIC
    r_outs = [r.properties.get(C.PROPERTY_TIMER_OUT_MS) for r in vals]
    r_size = np.array([*(r.total_size for r in vals), 0], dtype=np.int64)
    r_timer = np.array([*(r.topic == C.TIMER_TOPIC and o is not None for r, o in zip(vals, r_outs, strict=True)), False], dtype=bool)
    r_num = np.array([*(o is not None and o.lstrip("-").isdigit() for o in r_outs), False], dtype=bool)
    r_out = [int(o) if n else 0 for o, n in zip([*r_outs, None], r_num.tolist(), strict=True)]
    r_big = np.array([not -(1 << 63) <= o < 1 << 63 for o in r_out], dtype=bool)  # beyond any int64 delivery time
    r_out64 = np.array([0 if b else o for o, b in zip(r_out, r_big.tolist(), strict=True)], dtype=np.int64)
    hashed: dict[str | None, int] = {None: 0}

    def topic_hash(real: str | None) -> int:
        if real not in hashed:
            hashed[real] = java_hash(real)
        return hashed[real]

    r_hash = np.array([*(topic_hash(r.properties.get(C.PROPERTY_REAL_TOPIC)) for r in vals), 0], dtype=np.int64)
    deliver = u.deliver_ms
    size_bad = has & (r_size[kc] != u.size_py)
    not_timer = has & ~r_timer[kc]
    timer = has & ~not_timer
    roll = (u.magic & C.TIMER_MAGIC_ROLL) != 0
    deliver_bad = timer & ~roll & r_num[kc] & (r_big[kc] | (r_out64[kc] != deliver))
    hash_bad = timer & (r_hash[kc] != u.hash_code_of_real_topic)
    pending = ts.pending(u)
    offs = u.offset_py
    any_bad = ~has | size_bad | not_timer | deliver_bad | hash_bad

    def flag(j: int, code: str, at: int, detail: str) -> None:
        out.append(_unit_problem(ts, u, j, code, at, detail))

    for j in np.flatnonzero(any_bad).tolist():
        off, size = int(offs[j]), int(u.size_py[j])
        if not has[j]:
            if 0 <= off < cl.min_offset:
                if pending[j]:  # fired units may outlive their CommitLog files; pending ones are lost
                    detail = f"points at CommitLog offset {off}, before the oldest file ({cl.min_offset}): a pending timer whose message was deleted"
                    flag(j, BEFORE_COMMITLOG, _OFFSET_PY_AT, detail)
            elif off < 0:
                flag(j, RECORD_MISSING, _OFFSET_PY_AT, f"offsetPy {off} is negative")
            elif off + size > files_end or off >= data_end:
                end = min(files_end, max(data_end, cl.min_offset))
                flag(j, PAST_COMMITLOG, _OFFSET_PY_AT, f"points at CommitLog offset {off} (+{size}), past the CommitLog's end ({end})")
            else:
                flag(j, RECORD_MISSING, _OFFSET_PY_AT, f"no CommitLog record starts at offset {off}")
            continue
        rec = vals[int(kc[j])]
        if size_bad[j]:
            flag(j, RECORD_SIZE, _SIZE_PY_AT, f"sizePy {size}, the record at {off} is {rec.total_size} bytes")
        if not_timer[j]:
            detail = f"the record at {off} is a message of topic {rec.topic!r} without being a timer message ({C.TIMER_TOPIC} with TIMER_OUT_MS)"
            flag(j, NOT_TIMER, _OFFSET_PY_AT, detail)
            continue
        if deliver_bad[j]:
            out_ms = rec.properties.get(C.PROPERTY_TIMER_OUT_MS)
            flag(j, DELIVER_MISMATCH, _DELAY_AT, f"delivery time {int(deliver[j])} (currWriteTimeMs + delay), the record's TIMER_OUT_MS is {out_ms}")
        if hash_bad[j]:
            real = rec.properties.get(C.PROPERTY_REAL_TOPIC)
            detail = f"hash of the real topic {int(u.hash_code_of_real_topic[j])}, hashCode of REAL_TOPIC {real!r} is {int(r_hash[kc[j]])}"
            flag(j, TOPIC_HASH, _HASH_AT, detail)
    return out


def _prev_links(ts: TimerStore) -> Iterator[Problem]:
    """prevPos is -1, or an earlier unit of the same second (or one in an already deleted file).

    Two passes over the log, so the findings come out as before: every prevPos that is no earlier unit, then every
    one that is a unit of another second.
    """
    first = ts.log.files[0].base if ts.log and ts.log.files else 0
    for kind in ("bad", "other"):
        for u in ts.chunks(CHUNK):
            prev = u.prev_pos
            check = (prev != -1) & ~((prev >= 0) & (prev < first))
            ask = np.flatnonzero(check)
            found, pu = ts.units_at(prev[ask])
            is_unit = np.zeros(len(u), dtype=bool)
            is_unit[ask[found]] = True
            bad = check & ((prev >= u.offset) | ~is_unit)
            if kind == "bad":
                for j in np.flatnonzero(bad).tolist():
                    yield _unit_problem(ts, u, j, BAD_PREV, _PREV_AT, f"prevPos {int(prev[j])} is not an earlier timer log unit")
                continue
            p_deliver = np.zeros(len(u), dtype=np.int64)
            p_magic = np.zeros(len(u), dtype=np.int64)
            p_deliver[ask[found]] = pu.deliver_ms
            p_magic[ask[found]] = pu.magic
            deliver = u.deliver_ms
            roll = ((u.magic | p_magic) & C.TIMER_MAGIC_ROLL) != 0
            other = check & ~bad & (p_deliver // ts.precision != deliver // ts.precision) & ~roll
            for j in np.flatnonzero(other).tolist():
                yield _unit_problem(
                    ts,
                    u,
                    j,
                    BAD_PREV,
                    _PREV_AT,
                    f"prevPos {int(prev[j])} is a unit of another second ({int(p_deliver[j])} ms, this one {int(deliver[j])})",
                )


def _slot_problem(ts: TimerStore, idx: int, t: int, code: str, at: int, detail: str) -> Problem:
    """A finding at wheel slot `idx` (whose time field is `t`), `at` bytes into it."""
    return Problem(code, ts.wheel.path, idx * SLOT_SIZE + at, detail, extra={"slot_index": idx, "slot_time_ms": t * ts.precision})


RELEASE_EVERY = 4096  # chain steps between giving the maps' pages back: each step may touch a page of its own (16 MB at most)
_SLOT_COLUMNS = ("index", "time", "first_pos", "last_pos", "num", "magic")


def _wheel(ts: TimerStore, visited: bytearray, listed: Callable[..., int]) -> Iterator[Problem]:
    """Walk every slot's chain unit by unit through the maps, setting the bit of each unit reached in `visited`.

    `listed(code, n=1)` counts findings and says how many to make. A slot whose time is not its own (every slot of
    a wheel of garbage) is found as an array, STEP slots at a time, and only those listed are visited; the other
    slots are read as Python ints (a numpy row's fields cost a microsecond each). The walk is linear: each step
    reaches a unit no chain reached before, or ends the chain.
    """
    if ts.wheel is None:
        return
    first_log = ts.log.files[0].base if ts.log and ts.log.files else 0
    nslots = ts.wheel.slot_count or C.TIMER_WHEEL_SLOTS
    precision = ts.precision
    last_read = ts.last_read_time_ms
    unit = ts.unit
    steps = 0
    for lo in range(0, len(ts.slots), STEP):
        part = ts.slots[lo : lo + STEP]
        misplaced = part["time"] % nslots != part["index"]  # numpy's % is Python's (floor) modulo, as the check below
        where = np.flatnonzero(misplaced)
        visit = ~misplaced
        visit[where[: listed(SLOT_INDEX, len(where))]] = True  # all counted; the listed ones are visited, in slot order
        part = part[visit]
        for idx, t, first_pos, cur, num, slot_magic in zip(*(part[k].tolist() for k in _SLOT_COLUMNS), strict=True):
            if t % nslots != idx:  # counted above
                yield _slot_problem(ts, idx, t, SLOT_INDEX, 0, f"slot {idx} holds time {t} x {precision} ms, which belongs in slot {t % nslots}")
                continue
            if slot_magic != 0 and listed(SLOT_MAGIC):
                yield _slot_problem(ts, idx, t, SLOT_MAGIC, _SLOT_MAGIC_AT, f"slot magic {slot_magic}, the broker writes 0")
            fired = last_read is not None and t * precision < last_read
            last_seen, count, n = None, 0, 0
            if fired and (0 <= cur < first_log or 0 <= first_pos < first_log):
                continue  # a fired second whose units were cleaned with their timer log files
            ok = True
            while cur != -1:
                got = unit(cur)
                if got is None or visited[got[1] >> 3] >> (got[1] & 7) & 1:
                    if listed(CHAIN_BROKEN):
                        what = "a unit already reached from a slot (a loop or two slots sharing units)" if got is not None else "no timer log unit"
                        if last_seen is None:
                            yield _slot_problem(ts, idx, t, CHAIN_BROKEN, _SLOT_LAST_AT, f"lastPos {cur} is {what}")
                        else:
                            yield _problem(ts, *last_seen, CHAIN_BROKEN, _PREV_AT, f"the chain of slot {idx} goes on at {cur}, {what}")
                    ok = False
                    break
                fi, g, prev, magic, deliver, offset_py = got
                if deliver // precision != t and not magic & C.TIMER_MAGIC_ROLL and listed(WRONG_SLOT):
                    detail = f"unit delivers at {deliver} ms but is chained into slot {idx} ({t * precision} ms)"
                    yield _problem(ts, fi, cur, offset_py, WRONG_SLOT, _DELAY_AT, detail)
                visited[g >> 3] |= 1 << (g & 7)
                n += 1
                count += -1 if magic & C.TIMER_MAGIC_DELETE else 1
                last_seen = (fi, cur, offset_py)
                cur = prev
                steps += 1
                if steps % RELEASE_EVERY == 0:
                    ts.release()
                if 0 <= cur < first_log:
                    break  # the rest of the chain was in deleted files
            if not ok:
                continue
            if last_seen is not None and cur == -1 and last_seen[1] != first_pos and listed(CHAIN_END):
                yield _slot_problem(ts, idx, t, CHAIN_END, _SLOT_FIRST_AT, f"firstPos {first_pos}, the chain from lastPos ends at {last_seen[1]}")
            if cur == -1 and count != num and listed(SLOT_COUNT):
                yield _slot_problem(ts, idx, t, SLOT_COUNT, _SLOT_NUM_AT, f"num {num}, the chain holds {count} (of {n} units)")
    ts.release()


def _unreachable(ts: TimerStore, visited: bytearray) -> Iterator[Problem]:
    if ts.wheel is None:
        return
    bits = np.frombuffer(visited, dtype=np.uint8)
    for u in ts.chunks(CHUNK):
        reached = (bits[u.grid >> 3] >> (u.grid & 7).astype(np.uint8)) & 1
        deliver = u.deliver_ms
        for j in np.flatnonzero(ts.pending(u) & (reached == 0)).tolist():
            yield _unit_problem(ts, u, j, UNREACHABLE, 0, f"pending unit (delivery {int(deliver[j])} ms) is in no wheel slot's chain: it would never fire")


def _timercheck(ts: TimerStore, seen_max: int | None, timer_queue_max: int | None) -> list[Problem]:
    """seen_max: the highest queue offset (in rmq_sys_wheel_timer/0) of a record the timer log holds a unit for."""
    c = ts.check
    if c is None:
        return []
    out = []
    v = c.values

    def flag(code: str, name: str, detail: str) -> None:
        out.append(Problem(code, c.path, field_offset(TimerCheck, name), detail))

    if v["last_read_time_ms"] % ts.precision:
        flag(CHECK_READ_TIME, "last_read_time_ms", f"lastReadTimeMs {v['last_read_time_ms']} is not a multiple of the precision {ts.precision} ms")
    if ts.log is not None and ts.log.files and v["last_timer_log_flush_pos"] != ts.log_end:
        flag(CHECK_FLUSH_POS, "last_timer_log_flush_pos", f"lastTimerLogFlushPos {v['last_timer_log_flush_pos']}, the timer log's data ends at {ts.log_end}")
    q = v["last_timer_queue_offset"]
    if seen_max is not None and seen_max >= q:
        flag(CHECK_QUEUE_OFFSET, "last_timer_queue_offset", f"lastTimerQueueOffset {q}, but the timer log already holds the record at queue offset {seen_max}")
    elif timer_queue_max is not None and q > timer_queue_max:
        flag(CHECK_QUEUE_OFFSET, "last_timer_queue_offset", f"lastTimerQueueOffset {q} is past the end of {C.TIMER_TOPIC}/0 ({timer_queue_max})")
    m = v["master_timer_queue_offset"]
    # the broker stores lastTimerQueueOffset = min(commit offset, masterTimerQueueOffset) and restarts from the smaller one
    if m < q:
        flag(CHECK_QUEUE_OFFSET, "master_timer_queue_offset", f"masterTimerQueueOffset {m} is below lastTimerQueueOffset {q}: a restart would enqueue timers again")
    elif timer_queue_max is not None and m > timer_queue_max:
        flag(CHECK_QUEUE_OFFSET, "master_timer_queue_offset", f"masterTimerQueueOffset {m} is past the end of {C.TIMER_TOPIC}/0 ({timer_queue_max})")
    return out


def _queue_offsets(recs: dict[int, TimerRecord]):
    for r in recs.values():
        if r.topic == C.TIMER_TOPIC and r.queue_offset is not None:
            yield r.queue_offset
