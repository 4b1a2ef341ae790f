"""`rmqdump retry`: per push consumer group, what its %RETRY% and %DLQ% queues hold: how many messages, from which
topics, after how many attempts; and one row per dead-lettered message. A fold over the store-wide journeys."""

from __future__ import annotations

from rmqdump.checks.journey import DLQ_BEFORE_LIMIT, ORIGIN_MISSING
from rmqdump.query.storejourneys import StoreJourneys, View, about
from rmqdump.schemas import lifecycle as L

RETRY_PROBLEMS = (DLQ_BEFORE_LIMIT, ORIGIN_MISSING)


def _group(topic: str, prefix: str) -> str:
    return topic[len(prefix) :]


def retries(sj: StoreJourneys) -> View:
    v = View()
    groups: dict[str, dict] = {}

    def of(g: str) -> dict:
        return groups.setdefault(g, {"kind": "group", "group": g, "retried": 0, "retry_copies": 0, "waiting_retry": 0, "dead_letters": 0,
                                     "retry_limit": sj.ctx.retry_limits.get(g), "from_topics": {}})  # fmt: skip

    for j in sj.found:
        retried = {_group(c.topic, L.RETRY_PREFIX) for c in j.copies if c.hop == L.HOP_RETRY}
        for g in retried:
            of(g)["retried"] += 1
        for c in j.copies:
            if c.hop == L.HOP_RETRY:
                of(_group(c.topic, L.RETRY_PREFIX))["retry_copies"] += 1
            if c.hop == L.HOP_SCHEDULED and (c.real_topic or "").startswith(L.RETRY_PREFIX) and c is j.copies[-1]:
                of(_group(c.real_topic, L.RETRY_PREFIX))["waiting_retry"] += 1
        dlq = [c for c in j.copies if c.hop == L.HOP_DLQ]
        for d in dlq:
            g = _group(d.topic, L.DLQ_PREFIX)
            row = of(g)
            row["dead_letters"] += 1
            origin = d.retry_topic or j.copies[0].topic
            row["from_topics"][origin] = row["from_topics"].get(origin, 0) + 1
            v.rows.append(
                {"kind": "dead_letter", "uniq_key": j.uniq_key, "group": g, "original_topic": origin, "attempts": d.reconsume_times,
                 "dlq_queue_id": d.queue_id, "dlq_queue_offset": d.queue_offset, "phys_offset": d.phys_offset, "store_time": d.store_timestamp}
            )  # fmt: skip
        v.problems += [about(p, j) for p in j.problems if p.code in RETRY_PROBLEMS]
    v.rows = [groups[g] for g in sorted(groups)] + v.rows
    v.problems = sj.config_problems + sj.damage + v.problems
    v.summary = {"groups": len(groups), "dead_letters": sum(r["dead_letters"] for r in groups.values()), "problems": len(v.problems)}
    return v
