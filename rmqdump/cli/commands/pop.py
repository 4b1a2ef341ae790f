"""`rmqdump pop`: every message a POP consumer group popped, acked or not, and how far the revive service got."""

from __future__ import annotations

from pathlib import Path

from rmqdump.cli.commands import options as O
from rmqdump.cli.commands.options import ListFormat, store_option


def pop(
    store: Path = store_option(),
    fmt: ListFormat = O.format_option(ListFormat.table, "table or jsonl."),
    workers: int = O.workers_option(),
    no_crc: bool = O.no_crc_option(),
    engine: O.Engine = O.engine_option("the same rows, the CommitLog's ranges read by Spark tasks"),
    master: str = O.master_option(),
    spark_conf: list[str] = O.spark_conf_option(),
    ship: O.Ship = O.ship_option(),
):
    """Every popped message per POP group: acked or unacked, the checkpoints naming it, until when it is invisible, and
    where the revive service put it again; then the revive service's committed offsets (CID_RMQ_SYS_REVIVE_GROUP) per
    revive queue, and a note on what the store cannot tell (acks merged in memory with enablePopBufferMerge).

    Checkpoints naming no message are journey_orphan_checkpoint, unreadable ones journey_bad_evidence.
    Exit 0 nothing odd, 1 a problem (or CommitLog damage met), 2 an unreadable store.

    Example:  rmqdump pop -s fixtures/real/rmq53-lifecycle/store
    """
    from rmqdump.cli.views import scan, show
    from rmqdump.query.pops import pops

    show(pops(scan(store, not no_crc, "pop", engine, workers, master, spark_conf, ship)), fmt, "popped messages")


def register(app, guarded) -> None:
    app.command("pop")(guarded(pop))
