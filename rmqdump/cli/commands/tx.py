"""`rmqdump tx`: every transaction in a store and how far the broker's check service got."""

from __future__ import annotations

from pathlib import Path

from rmqdump.cli.commands import options as O
from rmqdump.cli.commands.options import ListFormat, store_option


def tx(
    store: Path = store_option(),
    fmt: ListFormat = O.format_option(ListFormat.table, "table or jsonl."),
    workers: int = O.workers_option(),
    no_crc: bool = O.no_crc_option(),
    engine: O.Engine = O.engine_option("the same rows, the CommitLog's ranges read by Spark tasks"),
    master: str = O.master_option(),
    spark_conf: list[str] = O.spark_conf_option(),
    ship: O.Ship = O.ship_option(),
):
    """Every transaction (a message with a half copy): its state (tx_pending, tx_committed, tx_rolled_back,
    tx_discarded), the broker's checks, its half copies, the op record settling it and its commit; then the check
    service's committed offsets (CID_RMQ_SYS_TRANS) on the half and op queues against their ends.

    A second commit is journey_double_commit, a commit naming no half journey_commit_without_half.
    Exit 0 nothing odd, 1 a problem (or CommitLog damage met), 2 an unreadable store.

    Example:  rmqdump tx -s fixtures/real/rmq53-lifecycle/store
    """
    from rmqdump.cli.views import scan, show
    from rmqdump.query.transactions import transactions

    show(transactions(scan(store, not no_crc, "tx", engine, workers, master, spark_conf, ship)), fmt, "transactions")


def register(app, guarded) -> None:
    app.command("tx")(guarded(tx))
