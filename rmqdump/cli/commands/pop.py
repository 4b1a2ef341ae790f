"""`rmqdump pop`: every message a POP consumer group popped, acked or not, and how far the revive service got."""

from __future__ import annotations


def pop(journeys, store: str):
    """Every popped message per POP group: acked or unacked, the checkpoints naming it, until when it is invisible, and
    where the revive service put it again; then the revive service's committed offsets (CID_RMQ_SYS_REVIVE_GROUP) per
    revive queue, and a note on what the store cannot tell (acks merged in memory with enablePopBufferMerge).

    Checkpoints naming no message are journey_orphan_checkpoint, unreadable ones journey_bad_evidence.
    Exit 0 nothing odd, 1 a problem (or CommitLog damage met), 2 an unreadable store.

    Example:  rmqdump pop -s fixtures/real/rmq53-lifecycle/store
    """
    from rmqdump.query.pops import pops

    return pops(journeys)


def register(app, guarded) -> None:
    from rmqdump.cli.views import register_view

    register_view(app, guarded, pop, "popped messages")
