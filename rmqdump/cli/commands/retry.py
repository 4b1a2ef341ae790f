"""`rmqdump retry`: each push consumer group's retries and dead letters."""

from __future__ import annotations

from pathlib import Path

from rmqdump.cli.commands import options as O
from rmqdump.cli.commands.options import ListFormat, store_option


def retry(
    store: Path = store_option(),
    fmt: ListFormat = O.format_option(ListFormat.table, "table or jsonl."),
    workers: int = O.workers_option(),
    no_crc: bool = O.no_crc_option(),
    engine: O.Engine = O.engine_option("the same rows, the CommitLog's ranges read by Spark tasks"),
    master: str = O.master_option(),
    spark_conf: list[str] = O.spark_conf_option(),
    ship: O.Ship = O.ship_option(),
):
    """Per push consumer group: messages retried through its %RETRY% topic, retries still waiting in
    SCHEDULE_TOPIC_XXXX, messages in its %DLQ% topic with the topics they came from and the group's retry limit; then
    one row per dead-lettered message (its original topic, attempts, place in the DLQ).

    A DLQ copy with no more attempts than the group's retry limit is journey_dlq_before_retry_limit, one whose original
    is gone journey_origin_missing. Exit 0 nothing odd, 1 a problem, 2 an unreadable store.

    Example:  rmqdump retry -s fixtures/real/rmq53-lifecycle/store
    """
    from rmqdump.cli.views import scan, show
    from rmqdump.query.retries import retries

    show(retries(scan(store, not no_crc, "retry", engine, workers, master, spark_conf, ship)), fmt, "retries")


def register(app, guarded) -> None:
    app.command("retry")(guarded(retry))
