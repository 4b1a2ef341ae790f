"""What the timer store holds, as rows: timer-log units with their records, wheel slots, a per-topic summary.

A unit's state comes from config/timercheck: the broker's dequeue has walked
the wheel up to lastReadTimeMs, so a unit delivering before that has fired
(its message was put again to its real topic), the others are pending.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import numpy as np

from rmqdump.checks.timerverify import PROBLEMS_LISTED, records_at
from rmqdump.common.problems import Problem
from rmqdump.readers.commitlog import CommitLog
from rmqdump.readers.timerlog import SLOT_SIZE, STEP, UNIT_SIZE, TimerStore
from rmqdump.schemas import constants as C

CHUNK = 50_000  # units whose records are looked up by one CommitLog scan


def _flags(magic: int) -> list[str]:
    out = []
    if magic & C.TIMER_MAGIC_ROLL:
        out.append("roll")
    if magic & C.TIMER_MAGIC_DELETE:
        out.append("delete")
    return out


def list_timers(
    ts: TimerStore,
    cl: CommitLog,
    *,
    topic: str | None = None,
    since: int | None = None,
    until: int | None = None,
    state: str | None = None,
    limit: int | None = None,
) -> Iterator[dict]:
    """Timer-log units in log order with delivery time, record, real topic, keys and state; filters on delivery time [since, until).

    The log is read back a chunk at a time and each chunk's records looked up by one CommitLog scan: memory is bounded by the chunk.
    """
    n = 0
    for u in ts.chunks(CHUNK):
        pending = ts.pending(u)
        deliver = u.deliver_ms
        sel = np.ones(len(u), dtype=bool)
        if since is not None:
            sel &= deliver >= since
        if until is not None:
            sel &= deliver < until
        if state is not None:
            sel &= pending if state == "pending" else ~pending
        part = np.flatnonzero(sel)
        if not part.size:
            continue
        recs = records_at(cl, u.offset_py[part])
        for i in part.tolist():
            off = int(u.offset_py[i])
            rec = recs.get(off)
            real = rec.properties.get(C.PROPERTY_REAL_TOPIC) if rec else None
            if topic is not None and real != topic:
                continue
            path, foff = ts.unit_file(int(u.file_index[i]), int(u.offset[i]))
            out_ms = rec.properties.get(C.PROPERTY_TIMER_OUT_MS) if rec else None
            yield {
                "kind": "timer",
                "timer_log_offset": int(u.offset[i]),
                "deliver_ms": int(deliver[i]),
                "enqueue_ms": int(u.curr_write_time_ms[i]),
                "phys_offset": off,
                "size": int(u.size_py[i]),
                "real_topic": real,
                "real_queue_id": int(rec.properties[C.PROPERTY_REAL_QUEUE_ID]) if rec and rec.properties.get(C.PROPERTY_REAL_QUEUE_ID, "").isdigit() else None,
                "keys": rec.keys if rec else [],
                "uniq_key": rec.uniq_key if rec else None,
                "timer_out_ms": int(out_ms) if out_ms and out_ms.lstrip("-").isdigit() else None,
                "state": "pending" if pending[i] else "fired",
                "flags": _flags(int(u.magic[i])),
                "record": "ok" if rec else "missing",
                "timer_log_file": path,
                "file_offset": foff,
            }
            n += 1
            if limit is not None and n >= limit:
                return


def timer_log_tail(ts: TimerStore) -> dict:
    """The row that ends a `timer list` listing: the unwritten 52-byte positions after the timer log's end, counted.

    The log ends after its last non-zero unit (or at its file's blank marker);
    the positions after it in the files hold nothing the broker wrote.
    """
    row = {"kind": "unwritten", "timer_log_offset": ts.log_end, "units": 0, "timer_log_file": None, "file_offset": None}
    for f, lay in zip(ts.log.files if ts.log else [], ts.layouts, strict=True):
        if f.base + f.size <= ts.log_end:
            continue
        lo = max(0, ts.log_end - f.base) // UNIT_SIZE
        if lo < lay.units_on_grid and row["timer_log_file"] is None:
            row.update(timer_log_file=f.path, file_offset=lo * UNIT_SIZE)
        row["units"] += max(0, lay.units_on_grid - lo)
    return row


def wheel_rows(ts: TimerStore) -> Iterator[dict]:
    """Every non-empty wheel slot, time in milliseconds (the file stores time / precision).

    The slots are read as Python ints STEP at a time: a numpy row's fields cost a microsecond each, and a wheel of
    garbage has 1.2 million slots.
    """
    last = ts.last_read_time_ms
    p = ts.precision
    for lo in range(0, len(ts.slots), STEP):
        part = ts.slots[lo : lo + STEP]
        for idx, time, first_pos, last_pos, num, magic in zip(*(part[k].tolist() for k in _SLOT_COLUMNS), strict=True):
            t = time * p
            yield {
                "kind": "slot",
                "slot_index": idx,
                "file_offset": idx * SLOT_SIZE,
                "time_ms": t,
                "first_pos": first_pos,  # the slot's own fields
                "last_pos": last_pos,
                "num": num,
                "magic": magic,
                "state": "pending" if last is None or t >= last else "fired",
            }


_SLOT_COLUMNS = ("index", "time", "first_pos", "last_pos", "num", "magic")


def file_problems(ts: TimerStore) -> tuple[list[Problem], Counter]:
    """The damage opening the timer store found in its files (the timer log's layout and units, the wheel's size,
    timercheck): what a listing of the store must say before it lists anything, so that a torn unit or a file cut
    short is never passed over. The findings between the files are `timer verify`'s.

    (listed, unlisted): the first PROBLEMS_LISTED of each code, and how many more of each code there are.
    """
    listed, seen, unlisted = [], Counter(), Counter()
    for p in ts.problems:
        seen[p.code] += 1
        if seen[p.code] <= PROBLEMS_LISTED:
            listed.append(p)
        else:
            unlisted[p.code] += 1
    return listed, unlisted


def timer_summary(ts: TimerStore, cl: CommitLog) -> dict:
    """Pending timers per real topic and the next delivery time (for `info`), a chunk of the log at a time."""
    per: dict[str, dict] = {}
    for u in ts.chunks(CHUNK):  # records looked up a chunk at a time: memory bounded by the chunk
        part = np.flatnonzero(ts.pending(u))
        if not part.size:
            continue
        recs = records_at(cl, u.offset_py[part])
        for off, ms in zip(u.offset_py[part].tolist(), u.deliver_ms[part].tolist(), strict=True):
            rec = recs.get(off)
            t = (rec.properties.get(C.PROPERTY_REAL_TOPIC) if rec else None) or "?"
            d = per.setdefault(t, {"topic": t, "pending": 0, "next_deliver_ms": None})
            d["pending"] += 1
            if d["next_deliver_ms"] is None or ms < d["next_deliver_ms"]:
                d["next_deliver_ms"] = ms
    next_ms = min((d["next_deliver_ms"] for d in per.values()), default=None)  # the soonest of every topic's
    c = ts.check
    return {
        "kind": "timer",
        "units": ts.count,
        "pending": ts.pending_count,
        "fired": ts.count - ts.pending_count,
        "next_deliver_ms": next_ms,
        "last_read_time_ms": c.last_read_time_ms if c else None,
        "precision_ms": ts.precision,
        "timer_log_files": len(ts.log.files) if ts.log else 0,
        "timer_log_end": ts.log_end,
        "wheel_slots": len(ts.slots),
        "topics": [per[k] for k in sorted(per)],
    }
