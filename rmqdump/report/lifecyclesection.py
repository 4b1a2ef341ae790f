"""The report's lifecycle section: delayed messages waiting (by due time), transactions hanging or discarded (with the
broker's checks), dead-letter queues per group, popped messages never acked. Read through the queues (the store-wide
views' input, rmqdump.query.storejourneys); bounded: each list keeps its first LIMIT rows and its total."""

from __future__ import annotations

from dataclasses import dataclass, field

from rmqdump.query.delays import scheduled_rows
from rmqdump.query.lifecyclesummary import has_lifecycle, lifecycle_summary
from rmqdump.query.pops import popped_rows
from rmqdump.query.storejourneys import store_journeys
from rmqdump.query.transactions import transaction_row
from rmqdump.readers.store import Store
from rmqdump.schemas import lifecycle as L

LIMIT = 200


@dataclass
class Lifecycle:
    summary: dict
    due_times: list[int] = field(default_factory=list)  # every waiting delayed message's due time (a plot bins them)
    delays: list[dict] = field(default_factory=list)
    transactions: list[dict] = field(default_factory=list)  # pending or discarded: what a producer must look at
    transactions_total: int = 0
    dead_letters: list[tuple[str, int, int]] = field(default_factory=list)  # (group, messages in its DLQ, of which in this store's journeys)
    unacked: list[dict] = field(default_factory=list)
    unacked_total: int = 0


def collect_lifecycle(store: Store, *, check_crc: bool = True) -> Lifecycle | None:
    if not has_lifecycle(store):
        return None
    sj = store_journeys(store, check_crc=check_crc)
    summary = lifecycle_summary(store, sj=sj)
    waiting = sorted(scheduled_rows(sj), key=lambda r: (r["due_time"] or 0, r["phys_offset"]))
    hanging = [r for j in sj.found if (r := transaction_row(j)) and r["state"] in (L.STATE_TX_PENDING, L.STATE_TX_DISCARDED)]
    unacked = [r for j in sj.found for r in popped_rows(j) if r["state"] == L.GROUP_UNACKED]
    dlq = [(t[len(L.DLQ_PREFIX) :], n, sum(1 for j in sj.found if j.verdict.state == L.STATE_DEAD_LETTER and j.copies[-1].topic == t))
           for t, n in summary["dead_letter_queues"].items()]  # fmt: skip
    return Lifecycle(
        summary,
        [r["due_time"] for r in waiting if r["due_time"] is not None],
        waiting[:LIMIT],
        hanging[:LIMIT],
        len(hanging),
        dlq,
        unacked[:LIMIT],
        len(unacked),
    )
