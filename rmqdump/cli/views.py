"""How the store-wide lifecycle views (`tx`, `pop`, `delay`, `retry`) are commands and run and print: the same options,
one mapped scan into journeys, a fold, then a table per row kind (or JSON Lines), a summary line, and the exit code (1
when the view passes a problem through)."""

from __future__ import annotations

from pathlib import Path

import typer

from rmqdump.cli import render
from rmqdump.cli.commands import options as O
from rmqdump.cli.commands.options import Engine, ListFormat, Ship, range_mapper, store_option


def register(app, guarded, name: str) -> None:
    """Register the view `name` (one of VIEWS) as a command, helped by its function's docstring: every view takes the
    same options, and view(journeys, store argument) builds its rows from one scan (what `noun` names is printed when
    there are none)."""
    view, noun = VIEWS[name]

    def command(
        store: Path = store_option(),
        fmt: ListFormat = O.format_option(ListFormat.table, "table or jsonl."),
        workers: int = O.workers_option(),
        no_crc: bool = O.no_crc_option(),
        engine: Engine = O.engine_option("the same rows, the CommitLog's ranges read by Spark tasks"),
        master: str = O.master_option(),
        spark_conf: list[str] = O.spark_conf_option(),
        ship: Ship = O.ship_option(),
    ):
        show(view(scan(store, not no_crc, name, engine, workers, master, spark_conf, ship), str(store)), fmt, noun)

    command.__name__, command.__doc__ = name, view.__doc__
    app.command(name)(guarded(command))


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


VIEWS = {"retry": (retry, "retries"), "tx": (tx, "transactions"), "pop": (pop, "popped messages"), "delay": (delay, "delay levels")}


def scan(store: Path, check_crc: bool, label: str, engine: Engine, workers: int | None, master: str, spark_conf: list[str], ship: Ship):
    """The store's journeys (rmqdump.query.storejourneys), its ranges read by the engine --engine names (threads, or
    Spark tasks), with a progress bar on a terminal."""
    from rmqdump.common.problems import InputError
    from rmqdump.query.storejourneys import store_journeys
    from rmqdump.readers.commitlog import commitlog_path
    from rmqdump.readers.store import Store

    st = Store.open(store)
    if not st.commitlog.files:  # nothing to scan: an empty view would pass for a store with nothing in flight
        raise InputError("no_commitlog", commitlog_path(st.root), "no CommitLog files: the view is read from the records there")
    total = sum(f.size for f in st.commitlog.files)
    with range_mapper(engine, workers, total, master, spark_conf, ship) as mapper, render.progress(total, label, enabled=None) as advance:
        return store_journeys(st, mapper=mapper, check_crc=check_crc, on_bytes=advance)


def show(view, fmt: ListFormat, noun: str) -> None:
    """Print the view and exit: 0 nothing passed through, 1 a problem."""
    if fmt is ListFormat.jsonl:
        for row in view.rows:
            render.jsonl(row)
        for p in view.problems:
            render.jsonl(p.to_dict())
        render.jsonl({"kind": "summary", **view.summary})
    else:
        _tables(view.rows)
        for p in view.problems:
            render.err.print(f"rmqdump: {p.line()}", highlight=False)
        render.err.print(", ".join(f"{n} {k.replace('_', ' ')}" for k, n in view.summary.items()) or f"no {noun}", highlight=False)
    raise typer.Exit(1 if view.problems else 0)


def _cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, dict):
        if value and all(isinstance(x, int) for x in value.values()):  # counts by name
            return ", ".join(f"{k}: {n}" for k, n in value.items())
        return " ".join(str(x) for x in value.values())
    if isinstance(value, list):
        return ",".join(str(x) for x in value)
    return str(value)


def _tables(rows: list[dict]) -> None:
    """One table per row kind, in the order the kinds first appear; a note is printed as text."""
    from rmqdump.common.timeutil import iso

    kinds: dict[str, list[dict]] = {}
    for r in rows:
        kinds.setdefault(r["kind"], []).append(r)
    for kind, rs in kinds.items():
        if kind in ("note", "timer"):
            for r in rs:
                render.out.print(r.get("text") or f"{r['waiting']} messages wait in the timer wheel: see {r['see']}", markup=False)
            continue
        cols = [k for k in rs[0] if k != "kind"]
        t = render.table(*cols, title=kind, title_justify="left")
        for r in rs:
            t.add_row(*(iso(r[c]) if c in ("due_time", "invisible_until") and r[c] is not None else _cell(r[c]) for c in cols))
        render.out.print(t)
