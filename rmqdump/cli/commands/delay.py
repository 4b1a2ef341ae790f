"""`rmqdump delay`: every delay level's progress and every message still waiting for its level."""

from __future__ import annotations

from pathlib import Path

from rmqdump.cli.commands import options as O
from rmqdump.cli.commands.options import ListFormat, store_option


def delay(
    store: Path = store_option(),
    fmt: ListFormat = O.format_option(ListFormat.table, "table or jsonl."),
    workers: int = O.workers_option(),
    no_crc: bool = O.no_crc_option(),
    engine: O.Engine = O.engine_option("the same rows, the CommitLog's ranges read by Spark tasks"),
    master: str = O.master_option(),
    spark_conf: list[str] = O.spark_conf_option(),
    ship: O.Ship = O.ship_option(),
):
    """Per delay level: its schedule queue, the delivery progress in config/delayOffset.json, the queue's bounds and how
    many messages wait; then every message still waiting in SCHEDULE_TOPIC_XXXX (push retries too) with when it falls
    due and where it goes; timer-wheel messages are counted and left to `rmqdump timer list`.

    A level delivered past a copy that never reached its topic is journey_delay_undelivered.
    Exit 0 nothing odd, 1 a problem (or CommitLog damage met), 2 an unreadable store.

    Example:  rmqdump delay -s fixtures/real/rmq53-lifecycle/store
    """
    from rmqdump.cli.views import scan, show
    from rmqdump.query.delays import delays

    show(delays(scan(store, not no_crc, "delay", engine, workers, master, spark_conf, ship), str(store)), fmt, "delay levels")


def register(app, guarded) -> None:
    app.command("delay")(guarded(delay))
