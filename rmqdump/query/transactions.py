"""`tx`: every transaction in a store (a journey with a half copy) and how far the broker's check service got.

A fold over the store's journeys: the state is the journey verdict's, the op record settling the half is the journey's
op evidence, and a second commit is the journey's own journey_double_commit problem passed through.
"""

from __future__ import annotations

from rmqdump.checks.journey import BAD_EVIDENCE, COMMIT_WITHOUT_HALF, DOUBLE_COMMIT, Journey
from rmqdump.query.storejourneys import StoreJourneys, View, about
from rmqdump.schemas import lifecycle as L

HALF_HOPS = (L.HOP_HALF, L.HOP_HALF_CHECK, L.HOP_PREPARED)
TX_PROBLEMS = (DOUBLE_COMMIT, COMMIT_WITHOUT_HALF)


def transaction_row(j: Journey) -> dict | None:
    """The transaction row of a journey, or None when it has no half copy."""
    halves = [c for c in j.copies if c.hop in HALF_HOPS]
    if not halves:
        return None
    commits = [c for c in j.copies if c.hop == L.HOP_COMMIT]
    ops = sorted(ev.phys_offset for ev, _ in j.evidence if ev.hop == L.EVIDENCE_OP)
    return {
        "kind": "transaction",
        "uniq_key": j.uniq_key,
        "state": j.verdict.state,
        "checks": max((c.check_times or 0 for c in j.copies), default=0),
        "half_offsets": [c.phys_offset for c in halves],
        "op_offset": ops[0] if ops else None,
        "commit_offset": commits[0].phys_offset if commits else None,
        "producer_group": next((c.producer_group for c in halves if c.producer_group), None),
        "topic": halves[0].target_topic,
    }


def transactions(sj: StoreJourneys) -> View:
    v = View()
    for j in sj.found:
        row = transaction_row(j)
        if row is None:
            continue
        v.rows.append(row)
        v.problems += [about(p, j) for p in j.problems if p.code in TX_PROBLEMS]
    v.rows += check_progress(sj)
    v.problems = (
        sj.config_problems
        + sj.damage
        + sj.queue_problems(lambda t: t in (L.TRANS_HALF_TOPIC, L.TRANS_OP_HALF_TOPIC))
        + v.problems
        + sj.evidence_problems((L.EVIDENCE_OP,), (BAD_EVIDENCE,))
    )
    states: dict[str, int] = {}
    for r in v.rows:
        if r["kind"] == "transaction":
            states[r["state"]] = states.get(r["state"], 0) + 1
    v.summary = {"transactions": sum(states.values()), **dict(sorted(states.items())), "problems": len(v.problems)}
    return v


def check_progress(sj: StoreJourneys) -> list[dict]:
    """The check service's committed offsets (CID_RMQ_SYS_TRANS) on the half and op queues against the queues' ends;
    a half or op queue without one is listed with committed null (the check service never committed there)."""
    topics = (L.TRANS_HALF_TOPIC, L.TRANS_OP_HALF_TOPIC)
    out = []
    for t, q, committed, max_offset in sj.progress(L.TRANS_GROUP, lambda t: t in topics):
        out.append(
            {
                "kind": "check_progress",
                "group": L.TRANS_GROUP,
                "topic": t,
                "queue_id": q,
                "committed": committed,
                "max_offset": max_offset,
                "behind": None if max_offset is None or committed is None else max_offset - committed,
            }
        )
    return out
