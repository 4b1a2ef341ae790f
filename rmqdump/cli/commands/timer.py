"""`rmqdump timer list|verify|dump-wheel`: the 5.x timer message store (timerlog/, timerwheel, config/timercheck)."""

from __future__ import annotations

import itertools
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from rmqdump.cli import render
from rmqdump.cli.commands.options import ListFormat, parsed, store_option
from rmqdump.cli.helptext import WholeSentenceGroup
from rmqdump.common.timeutil import iso, parse_time

if TYPE_CHECKING:  # the libraries are imported when a command runs: `rmqdump --help` stays fast
    from rmqdump.readers.store import Store
    from rmqdump.readers.timerlog import TimerStore

timer_app = typer.Typer(help="5.x timer messages: list the timer log, verify wheel/log/CommitLog, dump the wheel.", no_args_is_help=True, cls=WholeSentenceGroup, rich_markup_mode=None)


class State(str, Enum):
    pending = "pending"
    fired = "fired"


def _precision_option() -> int:
    return typer.Option(None, "--precision-ms", min=1, help="The broker's timerPrecisionMs (default: inferred from the wheel slots and their units).")


def _open(store: Path, precision: int | None) -> tuple[Store, TimerStore]:
    from rmqdump.readers.store import Store
    from rmqdump.readers.timerlog import TimerStore

    st = Store.open(store)
    ts = TimerStore.open(st.root, precision)
    if ts is None:
        render.fail(f"no_timer_store: {st.root}: no timerlog/, timerwheel or config/timercheck here", 2)
    return st, ts


def list_cmd(
    store: Path = store_option(),
    topic: str = typer.Option(None, "--topic", "-t", help="Only timers whose real topic (REAL_TOPIC) is this."),
    since: str = typer.Option(None, "--since", help="Delivery time at or after this (epoch ms or ISO 8601, UTC by default)."),
    until: str = typer.Option(None, "--until", help="Delivery time before this."),
    state: State = typer.Option(None, "--state", help="pending (not yet fired per config/timercheck) or fired."),
    limit: int = typer.Option(None, "--limit", "-n", min=1, help="Show at most this many."),
    precision: int = _precision_option(),
    fmt: ListFormat = typer.Option(ListFormat.table, "--format", "-f", help="table or jsonl."),
):
    """Every timer-log unit: delivery time, the CommitLog record it points at, real topic, keys, pending or fired.

    The listing stops at the log's end; unfiltered, it closes with one line counting the unwritten 52-byte positions after it.
    Damage in the timer store's files (a unit cut short, a bad blank marker, a damaged unit) comes first, as problems.

    Exit 0 when something was listed, 1 when nothing matched or the files are damaged, 2 no timer store.

    Example:  rmqdump timer list -s store --state pending --topic orders -f jsonl
    """
    from rmqdump.query.timers import file_problems, list_timers, timer_log_tail

    lo, hi = parsed("--since", parse_time, since), parsed("--until", parse_time, until)
    st, ts = _open(store, precision)
    probs, unlisted = file_problems(ts)  # the files' damage, before any unit: a filtered listing says it too
    rows = list_timers(ts, st.commitlog, topic=topic, since=lo, until=hi, state=state.value if state else None, limit=limit)
    n = 0
    whole = topic is None and lo is None and hi is None and state is None  # a filtered listing is not the log: no tail line
    if fmt is ListFormat.jsonl:
        for p in probs:
            render.jsonl(p.to_dict())
        for code, more in sorted(unlisted.items()):
            render.jsonl({"kind": "unlisted", "code": code, "problems": more})
        for r in rows:
            render.jsonl(r)
            n += 1
        if whole and (limit is None or n < limit):  # the listing reached the log's end
            render.jsonl(timer_log_tail(ts))
    else:
        _problem_table(st, probs, unlisted)
        t = render.table("log offset", "deliver (UTC)", "state", "phys", "size", "real topic", "q", "keys", "uniq_key")
        for r in rows:
            n += 1
            t.add_row(
                str(r["timer_log_offset"]),
                iso(r["deliver_ms"]),
                r["state"] + ("" if not r["flags"] else " (" + ",".join(r["flags"]) + ")"),
                str(r["phys_offset"]),
                str(r["size"]),
                r["real_topic"] or ("[red]record missing[/red]" if r["record"] != "ok" else ""),
                render.cell(r["real_queue_id"]),
                " ".join(r["keys"]),
                r["uniq_key"] or "",
            )
        render.out.print(t)
        if whole and (limit is None or n < limit):
            tail = timer_log_tail(ts)
            where = f" ({st.rel(tail['timer_log_file'])}@{tail['file_offset']})" if tail["units"] else ""
            render.out.print(f"end of the timer log at offset {tail['timer_log_offset']}: {tail['units']} unwritten units after it{where}", highlight=False)
        damage = sum(unlisted.values()) + len(probs)
        render.err.print(f"{n} timers" + (f", {damage} problems in the timer store's files" if damage else ""), highlight=False)
    raise typer.Exit(0 if n and not probs else 1)


def _problem_table(st: Store, probs, unlisted) -> None:
    """Findings as a table (code, file, offset, detail), then one line per code with findings counted, not listed."""
    render.tables(("code", "file", "offset", "detail"), ((p.code, st.rel(p.file), render.cell(p.file_offset), p.detail) for p in probs))
    for code, more in sorted(unlisted.items()):
        render.out.print(f"... {more} more {code} problems (counted, not listed)", highlight=False, markup=False)


def verify_cmd(
    store: Path = store_option(),
    no_crc: bool = typer.Option(False, "--no-crc", help="Skip body/property CRC checks of the records read."),
    precision: int = _precision_option(),
    fmt: ListFormat = typer.Option(ListFormat.table, "--format", "-f", help="table or jsonl."),
):
    """Wheel slots vs timer-log chains vs CommitLog records, and config/timercheck against them.

    Finds units pointing past the CommitLog's end or at a record that is not a timer message, broken or
    miscounted slot chains, pending units no slot reaches, and damaged units, each at its file and byte offset.
    Every finding is counted; the first 1000 of each code are listed, the rest said in one line (the summary's `unlisted`).
    Exit 0 clean, 1 problems found, 2 no timer store.

    Example:  rmqdump timer verify -s store -f jsonl
    """
    from rmqdump.checks.timerverify import TimerVerifySummary, verify_timers
    from rmqdump.schemas import constants as C

    st, ts = _open(store, precision)
    q = st.queue(C.TIMER_TOPIC, 0)
    qmax = q.bounds()[1] if q is not None else None
    summary = TimerVerifySummary()
    found = verify_timers(ts, st.commitlog, timer_queue_max=qmax, check_crc=not no_crc, summary=summary)
    if fmt is ListFormat.jsonl:
        for p in found:
            render.jsonl(p.to_dict())
        render.jsonl(summary.to_dict())
    else:
        _problem_table(st, found, summary.unlisted)
        codes = ", ".join(f"{k} {v}" for k, v in sorted(summary.codes.items()))
        render.err.print(
            f"{summary.units} timer log units ({summary.pending} pending, {summary.fired} fired), {summary.slots} wheel slots, "
            f"precision {summary.precision_ms} ms ({ts.precision_source}): {summary.problems} problems{' (' + codes + ')' if codes else ''}",
            highlight=False,
        )
    raise typer.Exit(1 if summary.problems else 0)


def dump_wheel_cmd(
    store: Path = store_option(),
    state: State = typer.Option(None, "--state", help="pending (slot time at or after timercheck's lastReadTimeMs) or fired."),
    limit: int = typer.Option(None, "--limit", "-n", min=1, help="Show at most this many."),
    precision: int = _precision_option(),
    fmt: ListFormat = typer.Option(ListFormat.table, "--format", "-f", help="table or jsonl."),
):
    """The non-empty slots of the timer wheel (time in ms: the file stores time / timerPrecisionMs).

    Example:  rmqdump timer dump-wheel -s store --state pending
    """
    from rmqdump.common.jsontext import encode
    from rmqdump.query.timers import wheel_rows

    _, ts = _open(store, precision)
    if ts.wheel is None:
        render.fail(f"no_timer_wheel: {ts.root}/timerwheel: no such file", 2)
    rows = (r for r in wheel_rows(ts) if state is None or r["state"] == state.value)
    if limit is not None:
        rows = itertools.islice(rows, limit)
    n = 0
    if fmt is ListFormat.jsonl:  # every slot, written a batch of lines at a time
        while batch := list(itertools.islice(rows, 4096)):
            render.text("".join(encode(r) + "\n" for r in batch))
            n += len(batch)
    else:  # a table row costs rich a millisecond or more: a wheel of garbage would take half an hour
        shown = list(itertools.islice(rows, TABLE_ROWS))
        t = render.table("slot", "file offset", "time (UTC)", "state", "firstPos", "lastPos", "num", "magic")
        for r in shown:
            t.add_row(
                *(str(x) for x in (r["slot_index"], r["file_offset"], iso(r["time_ms"]), r["state"], r["first_pos"], r["last_pos"], r["num"], r["magic"]))
            )
        render.out.print(t)
        more = sum(1 for _ in rows)
        n = len(shown) + more
        if more:
            render.out.print(f"... {more} more slots (-f jsonl lists every one)", highlight=False, markup=False)
    raise typer.Exit(0 if n else 1)


TABLE_ROWS = 1000  # wheel slots in dump-wheel's table; the rest are counted


def register(app, guarded) -> None:
    timer_app.command("list")(guarded(list_cmd))
    timer_app.command("verify")(guarded(verify_cmd))
    timer_app.command("dump-wheel")(guarded(dump_wheel_cmd))
    app.add_typer(timer_app, name="timer")
