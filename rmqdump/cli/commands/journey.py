"""`rmqdump journey ID...`: where a message went (every copy the broker stored, every record about it) and why a
consumer group did or did not get it."""

from __future__ import annotations

import typer

from rmqdump.cli import render
from rmqdump.cli.commands import options as O
from rmqdump.cli.commands.options import Engine, ListFormat, Ship
from rmqdump.cli.fleet import FLEET_HELP, fleet

_STATE_STYLE = {
    "delivered": "green",
    "tx_committed": "green",
    "scheduled": "cyan",
    "tx_pending": "yellow",
    "dead_letter": "red",
    "tx_rolled_back": "magenta",
    "tx_discarded": "red",
}


def journey(
    ids: list[str] = typer.Argument(None, help="UNIQ_KEYs or offset msgIds (32 or 56 hex characters)."),
    store: list[str] = O.stores_option(FLEET_HELP),
    key: list[str] = typer.Option(None, "--key", "-k", help="Messages whose KEYS hold this key (repeatable)."),
    every: bool = typer.Option(False, "--all", help="Every message in the store (one scan of the CommitLog)."),
    fmt: ListFormat = O.format_option(ListFormat.table, "table or jsonl."),
    workers: int = O.workers_option(),
    no_crc: bool = O.no_crc_option(),
    engine: Engine = O.engine_option("the same journeys, the CommitLog's ranges read by Spark"),
    master: str = O.master_option(),
    spark_conf: list[str] = O.spark_conf_option(),
    ship: Ship = O.ship_option(),
):
    """Where a message went and why a consumer group did or did not get it.

    One row per stored copy (hop: put, scheduled, timer, delivered, half, half_check, commit, check_max, retry,
    pop_retry, dlq), one per record about it (evidence: the transaction op record that settles its half, the POP
    checkpoints and acks that name it, in the revive topic or still in the timer wheel), and a verdict: where it
    stands (scheduled, delivered, dead_letter, tx_pending, tx_committed, tx_rolled_back, tx_discarded), what each
    consumer group did (consumed / not_consumed from its committed offset; acked / unacked for a POP group), and why.
    Odd journeys are problems with stable codes (journey_double_commit, journey_commit_without_half,
    journey_delay_undelivered, journey_origin_missing, journey_dlq_before_retry_limit, journey_orphan_checkpoint).
    Exit 0 found and nothing odd, 1 a problem or an ID not found, 2 a malformed ID or an unreadable store.

    Example:  rmqdump journey 7F0000010F5B5FFD2B278C7058CF000C -s fixtures/real/rmq53-lifecycle/store
    """
    from rmqdump.common.problems import InputError

    ids = [t for t in (ids or []) if t]
    if not ids and not key and not every:
        render.fail("usage: rmqdump journey: give an ID, --key KEY or --all (see 'rmqdump journey --help')", 2)
    if every and (ids or key):
        render.fail("usage: rmqdump journey: --all takes no ID and no --key", 2)
    refs = fleet(store)
    roots = [(r.name, r.root) for r in refs] if refs is not None else [(None, str(store[0] if store else "."))]
    problems = 0
    missing: list[str] = []
    seen: set[str] = set()  # UNIQ_KEYs and msgIds found in any store of the fleet
    total = 0
    if every:
        raise typer.Exit(_every(roots, refs is not None, fmt, workers, not no_crc, engine, master, spark_conf, ship))
    for broker, root in roots:
        try:
            found, probs, missed = _one_store(root, ids, key, every, workers, not no_crc, engine, master, spark_conf, ship, seen)
        except InputError as e:
            if refs is None:
                raise
            render.err.print(f"rmqdump: {broker}: {e.line()}", highlight=False)
            problems += 1
            continue
        total += len(found)
        missing += [m for m in missed if m not in missing]
        problems += len(probs) + sum(len(j.problems) for j in found)
        _emit(found, probs, fmt, broker)
    if refs is not None:
        missing = [m for m in missing if m.strip().upper() not in seen]
    for m in missing:
        if fmt is ListFormat.jsonl:
            render.jsonl({"kind": "not_found", "id": m})
        else:
            render.err.print(f"rmqdump: journey_not_found: {m}: no record carries this id", highlight=False)
    if fmt is ListFormat.jsonl:
        render.jsonl({"kind": "summary", "journeys": total, "problems": problems, "not_found": len(missing)})
    else:
        render.err.print(f"{total} {'journey' if total == 1 else 'journeys'}, {problems} {'problem' if problems == 1 else 'problems'}, {len(missing)} not found", highlight=False)
    raise typer.Exit(1 if problems or missing or not total else 0)


def _every(roots, fleet_given: bool, fmt: ListFormat, workers, check_crc, engine, master, spark_conf, ship) -> int:
    """--all: every journey of each store, in bounded memory (single-copy journeys streamed as the ranges are read)."""
    from collections import Counter

    from rmqdump.checks.journey import Journey
    from rmqdump.cli.commands.options import range_mapper
    from rmqdump.common.problems import InputError
    from rmqdump.query.journeys import all_journeys
    from rmqdump.query.journeyscan import Rendered
    from rmqdump.readers.store import Store

    total, n_problems = 0, 0
    states: Counter = Counter()
    groups: Counter = Counter()
    for broker, root in roots:
        try:
            st = Store.open(root)
        except InputError as e:
            if not fleet_given:
                raise
            render.err.print(f"rmqdump: {broker}: {e.line()}", highlight=False)
            n_problems += 1
            continue
        size = sum(f.size for f in st.commitlog.files)
        with range_mapper(engine, workers, size, master, spark_conf, ship) as mapper, render.progress(size, "journey", enabled=None) as advance:
            for item in all_journeys(st, mapper=mapper, check_crc=check_crc, broker=broker, on_bytes=advance):
                if isinstance(item, Rendered):
                    total += item.journeys
                    states.update(item.states)
                    groups.update(item.groups)
                    if fmt is ListFormat.jsonl and item.text:
                        render.text(item.text)
                elif isinstance(item, list):
                    n_problems += len(item)
                    _emit([], item, fmt, broker)
                elif isinstance(item, Journey):
                    total += 1
                    states[item.verdict.state] += 1
                    groups.update(item.verdict.groups.items())
                    n_problems += len(item.problems)
                    if fmt is ListFormat.jsonl or item.problems or item.verdict.state != "delivered":
                        _emit([item], [], fmt, broker)
    if fmt is ListFormat.jsonl:
        render.jsonl({"kind": "summary", "journeys": total, "problems": n_problems, "not_found": 0})
    else:
        t = render.table("state", "journeys")
        for k, v in sorted(states.items()):
            t.add_row(k, str(v))
        render.out.print(t)
        g = render.table("group", "status", "journeys")
        for (gr, status), v in sorted(groups.items()):
            g.add_row(gr, status, str(v))
        if groups:
            render.out.print(g)
        render.err.print(
            f"{total} journeys, {n_problems} problems (the table shows every journey that is not simply delivered; -f jsonl lists them all)",
            highlight=False,
        )
    return 1 if n_problems or not total else 0


def _one_store(root, ids, key, every, workers, check_crc, engine, master, spark_conf, ship, seen: set[str]):
    from rmqdump.cli.commands.options import range_mapper
    from rmqdump.query.journeys import by_keys, journeys
    from rmqdump.readers.store import Store

    st = Store.open(root)
    wanted = None if every else list(ids)
    if key:
        wanted = (wanted or []) + by_keys(st, list(key))
        if not wanted and not ids:
            return [], [], [f"key {k}" for k in key]
    total = sum(f.size for f in st.commitlog.files)
    with range_mapper(engine, workers, total, master, spark_conf, ship) as mapper, render.progress(total, "journey", enabled=None) as advance:
        found, probs, _ = journeys(st, wanted, mapper=mapper, check_crc=check_crc, on_bytes=advance)
    keys = {j.uniq_key for j in found}
    ids_of = {c.msg_id for j in found for c in j.copies}
    seen.update(keys | ids_of)
    missed = [] if wanted is None else [t for t in ids if t.strip().upper() not in keys and t.strip().upper() not in ids_of]
    return found, probs, missed


def _emit(found, probs, fmt: ListFormat, broker: str | None) -> None:
    more = {} if broker is None else {"broker": broker}
    if fmt is ListFormat.jsonl:
        for j in found:
            for row in j.rows():
                render.jsonl({**row, **more})
        for p in probs:
            render.jsonl({**p.to_dict(), **more})
        return
    from rmqdump.common.timeutil import iso

    for j in found:
        v = j.verdict
        style = _STATE_STYLE.get(v.state, "")
        head = f"[bold]{j.uniq_key}[/bold]" + (f"  ({broker})" if broker else "") + f"  [{style}]{v.state}[/{style}]"
        render.out.print(head)
        t = render.table("kind", "hop", "topic", "queue", "offset", "phys", "stored", "detail")
        for row in j.rows():
            if row["kind"] == "copy":
                t.add_row("copy", row["hop"], row["topic"], str(row["queue_id"]), str(row["queue_offset"]), str(row["phys_offset"]), iso(row["store_time"]), _copy_detail(row))
            elif row["kind"] == "evidence":
                named = f"names {row['names_topic']} q{row['names_queue_id']} @{row['names_queue_offset']}"
                extra = " (held in the timer wheel)" if row["held_in_timer"] else ""
                who = f"{row['group']} " if row["group"] else ""
                t.add_row("evidence", row["hop"], row["topic"], str(row["queue_id"]), str(row["queue_offset"]), str(row["phys_offset"]), iso(row["store_time"]), f"{who}{named}{extra}")
        render.out.print(t)
        groups = ", ".join(f"{g}: {s}" for g, s in v.groups.items()) or "no consumer group known"
        render.out.print(f"  groups: {groups}", markup=False)
        render.out.print(f"  why: {v.why}", markup=False)
        for w in v.weaker:
            render.out.print(f"  caveat: {w}", markup=False)
        for p in j.problems:
            render.out.print(f"  [red]problem[/red] {p.line()}", highlight=False)
        render.out.print("")
    for p in probs:
        render.err.print(f"rmqdump: {p.line()}", highlight=False)


def _copy_detail(row: dict) -> str:
    from rmqdump.common.timeutil import iso

    parts = []
    held = row["hop"] in ("scheduled", "timer", "half", "half_check", "check_max")
    if held and row["real_topic"] and row["real_topic"] != row["topic"]:
        parts.append(f"for {row['real_topic']} q{row['real_queue_id']}")
    if row["delay_level"] and row["hop"] == "scheduled":
        parts.append(f"level {row['delay_level']}")
    if row["due_time"] is not None:
        parts.append(f"due {iso(row['due_time'])}")
    if row["reconsume_times"]:
        parts.append(f"reconsumed {row['reconsume_times']}")
    if row["origin_msg_id"] and row["hop"] in ("retry", "dlq"):
        parts.append(f"from {row['retry_topic']}")
    if row["check_times"]:
        parts.append(f"check {row['check_times']}")
    if row["prepared_offset"] is not None:
        parts.append(f"half @{row['prepared_offset']}")
    if row["recovery_drops"]:
        parts.append("[red]a restart drops it[/red]")
    return ", ".join(parts)


def register(app, guarded) -> None:
    app.command("journey")(guarded(journey))
