"""`rmqdump msgid ID`: what a message id says, and the message it names."""

from __future__ import annotations

import time

import typer

from rmqdump.cli import render
from rmqdump.cli.commands import options as O
from rmqdump.cli.commands.index import HASH_SLOTS, INDEX_ENTRIES, emit_lookup, fleet_lookup, lookup_quiet, resolve_msgid, tail_mappers
from rmqdump.cli.commands.options import ListFormat
from rmqdump.cli.fleet import FLEET_HELP, fleet


def msgid(
    text: str = typer.Argument(..., metavar="ID", help="An offset msgId or a UNIQ_KEY (32 or 56 hex characters)."),
    store: list[str] = O.stores_option(FLEET_HELP),
    topics: list[str] = O.topic_option("Look the UNIQ_KEY up in this topic only (repeatable)."),
    fmt: ListFormat = O.format_option(ListFormat.table, "table or jsonl."),
    explain: bool = typer.Option(False, "--explain", help="Show the index walk of a UNIQ_KEY lookup."),
    hash_slots: int = O.hash_slots_option(HASH_SLOTS),
    index_entries: int = O.index_entries_option(INDEX_ENTRIES, min=1),
    workers: int = O.workers_option(),
    engine: O.Engine = O.engine_option("the CommitLog past the index's end read as Spark tasks"),
    master: str = O.master_option(),
    spark_conf: list[str] = O.spark_conf_option(),
    ship: O.Ship = O.ship_option(),
):
    """Decode a message id and read its message.

    An offset msgId (store IP, port, physical offset) is read straight from the
    CommitLog; anything else of the same shape is a UNIQ_KEY (producer IP, pid,
    class loader hash, time, counter), looked up through the index. The
    UNIQ_KEY's time counts from the producer's month start; the month and the
    producer's UTC offset are anchored on the found record's bornTimestamp.
    Exit 0 found, 1 not found, 2 not a message id.

    Example:  rmqdump msgid C000020230155FFD2B276C21C3CC0001 --store fixtures/real/rmq4-basic/store
    """
    from rmqdump.common.timeutil import iso
    from rmqdump.query.lookup import Index

    refs = fleet(store)
    with tail_mappers(engine, workers, master, spark_conf, ship) as tails:
        if refs is not None:
            raise typer.Exit(fleet_lookup(refs, lambda ref: lookup_quiet(ref.root, None, text, topics, None, None, None, hash_slots, index_entries, tails), fmt, explain))
        root = str(store[0] if store else ".")
        with Index(root, hash_slots, index_entries, mapper=tails(root)) as idx:
            r = resolve_msgid(idx, text, topics)
    d = r.decoded(int(time.time() * 1000))
    if fmt is ListFormat.jsonl:
        render.jsonl(d)
    else:
        for k, v in d.items():
            if k == "kind":
                continue
            extra = f" ({iso(v)})" if k in ("time", "month_start", "anchor") and isinstance(v, int) else ""
            render.out.print(f"{k}: {'unknown' if v is None else v}{extra}", markup=False)  # JSON's null, in words
    emit_lookup(r.messages, r.lookup, fmt, explain)
    raise typer.Exit(0 if r.messages else 1)


def register(app, guarded) -> None:
    app.command("msgid")(guarded(msgid))
