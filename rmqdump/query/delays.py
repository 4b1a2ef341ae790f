"""`delay`: every delay level's progress and every message still waiting in SCHEDULE_TOPIC_XXXX.

A fold over the store's journeys: a message waits when its verdict is scheduled and its last copy is a delay-level copy
(a push retry waits there too, bound for its %RETRY% topic). Messages held by the timer wheel are only counted: their
own view is `rmqdump timer list`.
"""

from __future__ import annotations

from rmqdump.checks.journey import DELAY_UNDELIVERED
from rmqdump.query.storejourneys import StoreJourneys, View, about
from rmqdump.schemas import lifecycle as L


def scheduled_rows(sj: StoreJourneys) -> list[dict]:
    out = []
    for j in sj.found:
        last = j.copies[-1]
        if j.verdict.state != L.STATE_SCHEDULED or last.hop != L.HOP_SCHEDULED:
            continue
        out.append(
            {
                "kind": "scheduled",
                "uniq_key": j.uniq_key,
                "level": last.delay_level,
                "due_time": last.due_time,
                "real_topic": last.real_topic,
                "real_queue_id": last.real_queue_id,
                "queue_offset": last.queue_offset,
                "phys_offset": last.phys_offset,
            }
        )
    return out


def level_rows(sj: StoreJourneys, waiting: list[dict]) -> list[dict]:
    """One row per delay level the store knows (a schedule queue, level - 1, or an entry in delayOffset.json)."""
    levels = set(sj.ctx.delay_offsets) | {q + 1 for _, q in sj.queue_ids(lambda t: t == L.SCHEDULE_TOPIC)}
    out = []
    for level in sorted(levels):
        b = sj.bounds(L.SCHEDULE_TOPIC, level - 1)
        out.append(
            {
                "kind": "level",
                "level": level,
                "schedule_queue_id": level - 1,
                "delay_offset": sj.ctx.delay_offsets.get(level),
                "min_offset": None if b is None else b[0],
                "max_offset": None if b is None else b[1],
                "waiting": sum(1 for r in waiting if r["level"] == level),
            }
        )
    return out


def timer_waiting(sj: StoreJourneys) -> int:
    return sum(1 for j in sj.found if j.verdict.state == L.STATE_SCHEDULED and j.copies[-1].hop == L.HOP_TIMER)


def delays(sj: StoreJourneys, store_arg: str) -> View:
    v = View()
    waiting = scheduled_rows(sj)
    v.rows = level_rows(sj, waiting) + waiting
    timers = timer_waiting(sj)
    if timers:
        v.rows.append({"kind": "timer", "waiting": timers, "see": f"rmqdump timer list -s {store_arg}"})
    v.problems = (
        sj.config_problems
        + sj.damage
        + sj.queue_problems(lambda t: t == L.SCHEDULE_TOPIC)
        + [about(p, j) for j in sj.found for p in j.problems if p.code == DELAY_UNDELIVERED]
    )
    v.summary = {"levels": sum(1 for r in v.rows if r["kind"] == "level"), "scheduled": len(waiting), "timer_waiting": timers, "problems": len(v.problems)}
    return v
