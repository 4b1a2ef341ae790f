"""`rmqdump retry`: each push consumer group's retries and dead letters."""

from __future__ import annotations


def retry(journeys, store: str):
    """Per push consumer group: messages retried through its %RETRY% topic, retries still waiting in
    SCHEDULE_TOPIC_XXXX, messages in its %DLQ% topic with the topics they came from and the group's retry limit; then
    one row per dead-lettered message (its original topic, attempts, place in the DLQ).

    A DLQ copy with no more attempts than the group's retry limit is journey_dlq_before_retry_limit, one whose original
    is gone journey_origin_missing. Exit 0 nothing odd, 1 a problem, 2 an unreadable store.

    Example:  rmqdump retry -s fixtures/real/rmq53-lifecycle/store
    """
    from rmqdump.query.retries import retries

    return retries(journeys)


def register(app, guarded) -> None:
    from rmqdump.cli.views import register_view

    register_view(app, guarded, retry, "retries")
