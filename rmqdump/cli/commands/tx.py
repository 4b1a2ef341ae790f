"""`rmqdump tx`: every transaction in a store and how far the broker's check service got."""

from __future__ import annotations


def tx(journeys, store: str):
    """Every transaction (a message with a half copy): its state (tx_pending, tx_committed, tx_rolled_back,
    tx_discarded), the broker's checks, its half copies, the op record settling it and its commit; then the check
    service's committed offsets (CID_RMQ_SYS_TRANS) on the half and op queues against their ends.

    A second commit is journey_double_commit, a commit naming no half journey_commit_without_half.
    Exit 0 nothing odd, 1 a problem (or CommitLog damage met), 2 an unreadable store.

    Example:  rmqdump tx -s fixtures/real/rmq53-lifecycle/store
    """
    from rmqdump.query.transactions import transactions

    return transactions(journeys)


def register(app, guarded) -> None:
    from rmqdump.cli.views import register_view

    register_view(app, guarded, tx, "transactions")
