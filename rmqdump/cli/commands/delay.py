"""`rmqdump delay`: every delay level's progress and every message still waiting for its level."""

from __future__ import annotations


def delay(journeys, store: str):
    """Per delay level: its schedule queue, the delivery progress in config/delayOffset.json, the queue's bounds and how
    many messages wait; then every message still waiting in SCHEDULE_TOPIC_XXXX (push retries too) with when it falls
    due and where it goes; timer-wheel messages are counted and left to `rmqdump timer list`.

    A level delivered past a copy that never reached its topic is journey_delay_undelivered.
    Exit 0 nothing odd, 1 a problem (or CommitLog damage met), 2 an unreadable store.

    Example:  rmqdump delay -s fixtures/real/rmq53-lifecycle/store
    """
    from rmqdump.query.delays import delays

    return delays(journeys, store)


def register(app, guarded) -> None:
    from rmqdump.cli.views import register_view

    register_view(app, guarded, delay, "delay levels")
