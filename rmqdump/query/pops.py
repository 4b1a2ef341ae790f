"""`pop`: every message a POP consumer group popped, acked or not, and how far the revive service got.

A fold over the store's journeys: acked/unacked is the journey verdict's group status, the checkpoints are the journey's
checkpoint evidence, the revive is its pop_retry copy. Whether the broker merged acks in memory (enablePopBufferMerge)
is not written in a store: an ack merged in memory and never flushed into a checkpoint leaves no record, so the view
says when it cannot tell rather than guessing.
"""

from __future__ import annotations

from rmqdump.checks.journey import BAD_EVIDENCE, ORPHAN_CHECKPOINT, Journey
from rmqdump.query.storejourneys import StoreJourneys, View
from rmqdump.schemas import lifecycle as L

POP_STATES = (L.GROUP_ACKED, L.GROUP_UNACKED)


def popped_rows(j: Journey) -> list[dict]:
    """One row per POP group that popped this message."""
    out = []
    for g, status in j.verdict.groups.items():
        if status not in POP_STATES:
            continue
        cks = [(ev, pos) for ev, pos in j.evidence if ev.hop == L.EVIDENCE_CHECKPOINT and ev.group == g]
        if not cks:
            continue
        latest, pos = max(cks, key=lambda x: (x[0].pop_time or 0, x[0].phys_offset))
        revived = [c for c in j.copies if c.hop == L.HOP_POP_RETRY]
        out.append(
            {
                "kind": "popped",
                "uniq_key": j.uniq_key,
                "group": g,
                "state": status,
                "topic": pos[0],
                "queue_id": pos[1],
                "queue_offset": pos[2],
                "checkpoint_offsets": sorted({ev.phys_offset for ev, _ in cks}),
                "invisible_until": latest.revive_time,
                "revived_to": None if not revived else {"topic": revived[-1].topic, "queue_id": revived[-1].queue_id, "queue_offset": revived[-1].queue_offset},
            }
        )
    return out


def revive_progress(sj: StoreJourneys) -> list[dict]:
    """The revive service's committed offsets (CID_RMQ_SYS_REVIVE_GROUP) against each revive queue's end."""
    out = []
    for t, q, committed, max_offset in sj.progress(L.REVIVE_GROUP, lambda t: t.startswith(L.REVIVE_TOPIC_PREFIX)):
        out.append(
            {
                "kind": "revive_progress",
                "revive_topic": t,
                "revive_queue": q,
                "committed": committed,
                "max_offset": max_offset,
            }
        )
    return out


def buffer_merge_note(sj: StoreJourneys) -> dict:
    """What the store says about enablePopBufferMerge: a checkpoint written with acked bits proves it was on; nothing
    proves it was off (it is broker configuration, which a store does not hold)."""
    merged = [ev for ev in sj.ctx.evidence if ev.hop == L.EVIDENCE_CHECKPOINT and ev.acked]
    if merged:
        text = (
            f"enablePopBufferMerge was on (the checkpoint at CommitLog offset {merged[0].phys_offset} carries acked bits): "
            "acks merged in memory and not yet flushed into a checkpoint were never written, so an unacked message may have been acked"
        )
    else:
        text = (
            "the store cannot tell whether enablePopBufferMerge was on (broker configuration; no checkpoint carries acked bits, "
            "subscriptionGroup.json does not say): if it was, acks merged in memory may never have been written, "
            "so an unacked message may have been acked"
        )
    return {"kind": "note", "about": "enablePopBufferMerge", "known_on": bool(merged), "text": text}


def pops(sj: StoreJourneys) -> View:
    v = View()
    for j in sj.found:
        v.rows += popped_rows(j)
    popped = len(v.rows)
    acked = sum(1 for r in v.rows if r["state"] == L.GROUP_ACKED)
    v.rows += revive_progress(sj)
    pop_evidence = any(ev.hop in (L.EVIDENCE_CHECKPOINT, L.EVIDENCE_ACK) for ev in sj.ctx.evidence)
    if popped or pop_evidence:
        v.rows.append(buffer_merge_note(sj))
    v.problems = (
        sj.config_problems
        + sj.damage
        + sj.queue_problems(lambda t: t.startswith(L.REVIVE_TOPIC_PREFIX))
        + sj.evidence_problems((L.EVIDENCE_CHECKPOINT, L.EVIDENCE_ACK), (ORPHAN_CHECKPOINT, BAD_EVIDENCE))
    )
    v.summary = {"popped": popped, "acked": acked, "unacked": popped - acked, "problems": len(v.problems)}
    return v
