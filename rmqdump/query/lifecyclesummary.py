"""`info`'s lifecycle line: how many delayed and timer messages wait, transactions hang, messages sit in DLQs and popped
messages were never acked, each with the command that looks closer. Read through the queues (rmqdump.query.journeys),
nothing when the store has no queue the broker moves messages through."""

from __future__ import annotations

from collections import Counter

from rmqdump.query.delays import scheduled_rows, timer_waiting
from rmqdump.query.pops import popped_rows
from rmqdump.query.storeinfo import has_lifecycle
from rmqdump.query.storejourneys import StoreJourneys, store_journeys
from rmqdump.readers.store import Store
from rmqdump.scan.ranges import SERIAL, Mapper
from rmqdump.schemas import lifecycle as L


def lifecycle_summary(store: Store, *, check_crc: bool = True, sj: StoreJourneys | None = None, mapper: Mapper = SERIAL) -> dict | None:
    """The counts (None when the store has no lifecycle queue, or no CommitLog to read them in); `sj`: the journeys
    already read, when the caller has them; else they are read with `mapper` over the CommitLog's ranges."""
    if not has_lifecycle(store):
        return None
    sj = sj if sj is not None else store_journeys(store, check_crc=check_crc, mapper=mapper)
    states = Counter(j.verdict.state for j in sj.found)
    dlq = {}
    for (t, _), q in sorted(store.queues.items()):
        if t.startswith(L.DLQ_PREFIX):
            lo, hi = q.bounds()
            dlq[t] = dlq.get(t, 0) + max(0, hi - lo)
    unacked = sum(r["state"] == L.GROUP_UNACKED for j in sj.found for r in popped_rows(j))
    return {
        "kind": "lifecycle",
        "delays_waiting": len(scheduled_rows(sj)),
        "timer_waiting": timer_waiting(sj),
        "transactions_pending": states[L.STATE_TX_PENDING],
        "transactions_discarded": states[L.STATE_TX_DISCARDED],
        "dead_letter_messages": sum(dlq.values()),
        "dead_letter_queues": dlq,
        "pops_unacked": unacked,
        "problems": len(sj.damage) + len(sj.store_problems) + sum(len(j.problems) for j in sj.found),
    }


def lifecycle_line(d: dict, store_arg: str) -> str:
    """The one line `info` prints, each count with the command that lists it."""
    dlq = ", ".join(f"{t}: {n}" for t, n in d["dead_letter_queues"].items())
    s = f"-s {store_arg}"
    return (
        f"{d['delays_waiting']} delayed messages waiting (rmqdump delay {s}), {d['timer_waiting']} timer messages waiting "
        f"(rmqdump timer list {s}), {d['transactions_pending']} transactions pending and {d['transactions_discarded']} discarded "
        f"(rmqdump tx {s}), {d['dead_letter_messages']} messages in dead-letter queues{f' ({dlq})' if dlq else ''} "
        f"(rmqdump journey --all {s}), {d['pops_unacked']} popped messages never acked (rmqdump pop {s})"
    )
