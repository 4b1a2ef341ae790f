"""How the store-wide lifecycle views (`tx`, `pop`, `delay`, `retry`) are commands and run and print: the same options,
one mapped scan into journeys, a fold, then a table per row kind (or JSON Lines), a summary line, and the exit code (1
when the view passes a problem through)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import typer

from rmqdump.cli import render
from rmqdump.cli.commands import options as O
from rmqdump.cli.commands.options import Engine, ListFormat, Ship, range_mapper, store_option


def register_view(app, guarded, view: Callable, noun: str) -> None:
    """Register the command named `view.__name__`, helped by its docstring: every view takes the same options, and
    view(journeys, store argument) builds its rows from one scan (what `noun` names is printed when there are none)."""
    name = view.__name__

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


def scan(store: Path, check_crc: bool, label: str, engine: Engine, workers: int | None, master: str, spark_conf: list[str], ship: Ship):
    """The store's journeys (rmqdump.query.storejourneys), its ranges read by the engine --engine names (threads, or
    Spark tasks), with a progress bar on a terminal."""
    from rmqdump.query.storejourneys import store_journeys
    from rmqdump.readers.store import Store

    st = Store.open(store)
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
