"""`rmqdump compaction verify|view`: compaction topics (cleanup.policy=COMPACTION) and what their consumers get."""

from __future__ import annotations

from pathlib import Path

import typer

from rmqdump.cli import render
from rmqdump.cli.commands import options as O
from rmqdump.cli.commands.options import ListFormat, store_option
from rmqdump.cli.helptext import WholeSentenceGroup

compaction_app = typer.Typer(
    help="Compaction topics: verify the compaction log and queue against the CommitLog, show what a consumer gets.", no_args_is_help=True, cls=WholeSentenceGroup, rich_markup_mode=None
)


def _open(store: Path, topic: str | None = None, queue: int | None = None):
    """The store and its compaction files (none: exit 2); given a topic, the compaction queues it and `queue` name
    must exist too."""
    from rmqdump.readers.compaction import find_compaction
    from rmqdump.readers.store import Store

    st = Store.open(store)
    cf = find_compaction(st.root)
    if cf is None:
        render.fail(f"no_compaction: {st.root}/compaction: no compaction directory in this store", 2)
    if topic is not None and not cf.select(topic, queue):
        render.fail(f"no_queue: {cf.root}/compactionLog/{topic}{'' if queue is None else '/' + str(queue)}: no such compaction queue", 2)
    return st, cf


def _problem_table(problems, st) -> None:
    """The problems in the columns `cq verify` shows; nothing for none."""
    t = render.table()
    t.add_column("code", no_wrap=True)
    for name in ("topic", "queue", "q-offset", "offset"):
        t.add_column(name, overflow="fold")
    t.add_column("file@offset", overflow="fold")
    t.add_column("detail", overflow="fold")
    for p in problems:
        e = p.extra
        t.add_row(
            p.code,
            e.get("topic") or "",
            *(render.cell(v) for v in (e.get("queue_id"), e.get("unit_index"), p.phys_offset)),
            st.rel(p.file) + ("" if p.file_offset is None else f"@{p.file_offset}"),
            p.detail,
        )
    if t.row_count:
        render.out.print(t, markup=False)


def verify_cmd(
    store: Path = store_option(),
    topic: str = O.topic_option(),
    queue: int = O.queue_option(),
    no_crc: bool = O.no_crc_option("Skip body/property CRC checks of the compaction-log records (faster)."),
    fmt: ListFormat = O.format_option(ListFormat.table, "table or jsonl."),
    workers: int = O.workers_option(),
    engine: O.Engine = O.engine_option("the CommitLog's ranges read for the originals as Spark tasks"),
    master: str = O.master_option(),
    spark_conf: list[str] = O.spark_conf_option(),
    ship: O.Ship = O.ship_option(),
):
    """Check the compaction log, its queue and checkpoint against each other, the CommitLog and the retention rule.

    Exit 0 clean, 1 problems found, 2 unusable input.

    Example:  rmqdump compaction verify -s store -f jsonl
    """
    from rmqdump.checks.compactionverify import Summary, verify
    from rmqdump.checks.cqunits import PROBLEM_COLUMNS

    st, _ = _open(store)
    s = Summary()
    total = sum(f.size for f in st.commitlog.files)
    with O.range_mapper(engine, workers, total, master, spark_conf, ship) as mapper, render.progress(total, "compaction verify") as advance:
        found = verify(st.root, st.commitlog, topic=topic, queue_id=queue, check_crc=not no_crc, summary=s, on_bytes=advance, mapper=mapper)
    if fmt is ListFormat.jsonl:
        for p in found:
            render.jsonl(p.to_dict(PROBLEM_COLUMNS))
        render.jsonl(s.to_dict())
    else:
        _problem_table(found, st)
        codes = ", ".join(f"{k} {v}" for k, v in sorted(s.codes.items()))
        absent = "" if s.commitlog else " (no CommitLog files: the records were not compared with their originals)"
        render.err.print(
            f"{s.queues} compaction queues, {s.records} log records, {s.units} units: {s.problems} problems{' (' + codes + ')' if codes else ''}{absent}"
        )
    raise typer.Exit(1 if s.problems else 0)


def view_cmd(
    store: Path = store_option(),
    topic: str = O.topic_option("The compaction topic.", required=True),
    queue: int = O.queue_option(),
    key: str = typer.Option(None, "--key", help="The history of one key (the whole KEYS string): every put, which is served, why the others are not."),
    fmt: ListFormat = O.format_option(ListFormat.table, "table or jsonl."),
    workers: int = O.workers_option(),
    engine: O.Engine = O.engine_option("the CommitLog's ranges read for the originals as Spark tasks"),
    master: str = O.master_option(),
    spark_conf: list[str] = O.spark_conf_option(),
    ship: O.Ship = O.ship_option(),
):
    """What a consumer of the compacted queue gets, in order; with --key, the history of one key.

    Exit 0, 1 when nothing is found (or a unit's record cannot be read), 2 unusable input.

    Example:  rmqdump compaction view -s store -t CompactKV -q 0 --key item-007 -f jsonl
    """
    from rmqdump.common.problems import Problem
    from rmqdump.common.timeutil import iso
    from rmqdump.query.compaction import consumer_view, key_history

    st, cf = _open(store, topic, queue)
    total = sum(f.size for f in st.commitlog.files)
    with O.range_mapper(engine, workers, total, master, spark_conf, ship) as mapper, render.progress(total, "compaction view") as advance:
        if key is not None:
            rows = key_history(cf, st.commitlog, topic, key, queue, on_bytes=advance, mapper=mapper)
        else:
            rows = list(consumer_view(cf, st.commitlog, topic, queue, on_bytes=advance, mapper=mapper))
    bad = [r for r in rows if isinstance(r, Problem)]
    good = [r for r in rows if not isinstance(r, Problem)]
    if fmt is ListFormat.jsonl:
        for r in rows:
            render.jsonl(r.to_dict() if isinstance(r, Problem) else r)
    else:
        cols = ["queue", "q-offset", "keys", "uniq_key", "CommitLog", "compaction log", "part", "stored (UTC)"]
        cols += ["served", "why"] if key is not None else ["tags", "body"]
        t = render.table(*cols)
        for r in good:
            cells = [str(r["queue_id"]), str(r["queue_offset"]), r["keys"] or "", r["uniq_key"] or "", render.cell(r["phys_offset"]), render.cell(r["compaction_log_offset"])]
            cells += [r["part"], iso(r["store_timestamp"])]
            cells += ["yes" if r["served"] else "no", r["why"]] if key is not None else [r["tags"] or "", str(r["body_length"])]
            t.add_row(*cells)
        render.out.print(t, markup=False)
        for p in bad:
            render.err.print(p.line(), markup=False)
    raise typer.Exit(1 if bad or not good else 0)


def log_cmd(
    store: Path = store_option(),
    topic: str = O.topic_option("The compaction topic.", required=True),
    queue: int = O.queue_option(),
    fmt: ListFormat = O.format_option(ListFormat.table, "table or jsonl."),
    workers: int = O.workers_option(),
    engine: O.Engine = O.engine_option("the CommitLog's ranges read for the originals as Spark tasks"),
    master: str = O.master_option(),
    spark_conf: list[str] = O.spark_conf_option(),
    ship: O.Ship = O.ship_option(),
):
    """The records of a compaction log, each with its compaction-log offset and its original's CommitLog offset.

    JSON Lines rows are `commitlog`'s message rows, with `compaction_log_offset`, `phys_offset` (the original's,
    null when the CommitLog no longer holds it) and `compaction_key` (the whole KEYS string). Exit 0, 1 when the
    log has problems or no records, 2 unusable input.

    Example:  rmqdump compaction log -s store -t CompactKV -q 0 -f jsonl
    """
    from rmqdump.common.problems import Problem
    from rmqdump.common.timeutil import iso
    from rmqdump.query.compaction import log_rows

    st, cf = _open(store, topic, queue)
    total = sum(f.size for f in st.commitlog.files)
    with O.range_mapper(engine, workers, total, master, spark_conf, ship) as mapper, render.progress(total, "compaction log") as advance:
        rows = list(log_rows(cf, st.commitlog, topic, queue, on_bytes=advance, mapper=mapper))
    bad = [r for r in rows if isinstance(r, Problem)]
    if fmt is ListFormat.jsonl:
        for r in rows:
            render.jsonl(r.to_dict() if isinstance(r, Problem) else r)
    else:
        t = render.table("file@offset", "compaction log", "CommitLog", "queue", "q-offset", "size", "keys", "tags", "body", "stored (UTC)")
        for r in rows:
            if isinstance(r, Problem):
                t.add_row(f"{Path(r.file).name}@{r.file_offset}", r.code, "", "", "", "", "", "", "", r.detail)
                continue
            t.add_row(
                f"{Path(r['file']).name}@{r['file_offset']}",
                str(r["compaction_log_offset"]),
                render.cell(r["phys_offset"]),
                str(r["queue_id"]),
                str(r["queue_offset"]),
                str(r["total_size"]),
                r["compaction_key"] or "",
                r["tags"] or "",
                str(r["body_length"]),
                iso(r["store_timestamp"]),
            )
        render.out.print(t, markup=False)
    raise typer.Exit(1 if bad or not rows else 0)


def units_cmd(
    store: Path = store_option(),
    topic: str = O.topic_option("The compaction topic.", required=True),
    queue: int = O.queue_option(),
    fmt: ListFormat = O.format_option(ListFormat.table, "table or jsonl."),
):
    """The SparseConsumeQueue units of a compaction topic as written: valid units, end units, other non-zero units.

    Exit 0, 1 when there is no unit, 2 unusable input.

    Example:  rmqdump compaction units -s store -t CompactKV -q 1 -f jsonl
    """
    from rmqdump.query.compaction import unit_rows

    _, cf = _open(store, topic, queue)
    rows = list(unit_rows(cf, topic, queue))
    if fmt is ListFormat.jsonl:
        for r in rows:
            render.jsonl(r)
    else:
        cols = ("file@offset", "compaction log", "size", "tags_code", "store_time", "q-offset", "batch", "compacted", "reserved", "")
        t = render.table(*cols)
        for r in rows:
            note = "end" if r["end"] else "" if r["valid"] else "invalid"
            vals = (
                r["compaction_log_offset"],
                r["size"],
                r["tags_code"],
                r["store_time"],
                r["queue_offset"],
                r["batch_num"],
                r["compacted_offset"],
                r["reserved"],
            )
            t.add_row(f"{Path(r['cq_file']).name}@{r['file_offset']}", *map(str, vals), note)
        render.out.print(t, markup=False)
    raise typer.Exit(0 if rows else 1)


def register(app, guarded) -> None:
    compaction_app.command("verify")(guarded(verify_cmd))
    compaction_app.command("view")(guarded(view_cmd))
    compaction_app.command("log")(guarded(log_cmd))
    compaction_app.command("units")(guarded(units_cmd))
    app.add_typer(compaction_app, name="compaction")
