"""`rmqdump cq verify|dump|seek`: the ConsumeQueues against the CommitLog."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from rmqdump.cli import render
from rmqdump.cli.commands import options as O
from rmqdump.cli.commands.options import Engine, ListFormat, Ship, engine_option, master_option, ship_option, spark_conf_option, store_option
from rmqdump.cli.helptext import WholeSentenceGroup

if TYPE_CHECKING:
    from rmqdump.readers.store import Store

cq_app = typer.Typer(help="ConsumeQueues: verify against the CommitLog, dump units, find an offset by time.", no_args_is_help=True, cls=WholeSentenceGroup, rich_markup_mode=None)


def verify_cmd(
    store: Path = store_option(),
    topic: str = O.topic_option(),
    queue: int = O.queue_option(),
    no_crc: bool = O.no_crc_option("Skip body/property CRC checks in the CommitLog scan (faster)."),
    delay_levels: str = typer.Option(
        None, "--delay-levels", help="The broker's messageDelayLevel (tagsCode of SCHEDULE_TOPIC_XXXX units; default: the broker's default levels)."
    ),
    fmt: ListFormat = O.format_option(ListFormat.table, "table or jsonl."),
    window: int = typer.Option(None, "--window", min=1, help="CommitLog records joined at a time (bounds memory: about 50 bytes each, several times that while checked; default 262,144)."),
    workers: int = O.workers_option(),
    engine: Engine = engine_option("the same findings, computed by Spark"),
    master: str = master_option(),
    spark_conf: list[str] = spark_conf_option(),
    ship: Ship = ship_option(),
):
    """Cross-check every unit against its record and every message against its unit.

    Exit 0 clean, 1 problems found, 2 unusable input.

    Example:  rmqdump cq verify -s store --format jsonl
    """
    from rmqdump.checks.cqunits import PROBLEM_COLUMNS, MissingUnits
    from rmqdump.checks.cqverify import WINDOW_RECORDS, VerifySummary, verify
    from rmqdump.checks.findingruns import RunFolder, causes
    from rmqdump.readers.store import Store
    from rmqdump.scan.dispatch import DelayLevels
    from rmqdump.schemas import constants as C

    delay_levels = C.DEFAULT_DELAY_LEVELS if delay_levels is None else delay_levels
    window = WINDOW_RECORDS if window is None else window
    delays = O.parsed(None, DelayLevels.parse, delay_levels)
    st = Store.open(store)
    if not st.commitlog.files:
        render.fail(f"no_commitlog: {st.root}: no CommitLog files in commitlog/", 2)
    summary = VerifySummary()
    folder = RunFolder()

    def emit(p) -> None:
        if isinstance(p, MissingUnits):  # a window's records without a unit, as columns (verify's batched)
            if fmt is not ListFormat.jsonl:
                return folder.add_missing(p)
            for one in p:
                emit(one)
            return None
        d = p.to_dict(PROBLEM_COLUMNS)
        if fmt is ListFormat.jsonl:
            render.jsonl(d)
        else:
            folder.add(d)

    total = sum(f.size for f in st.commitlog.files)
    with render.progress(total, "verify") as advance:
        if engine is Engine.spark:
            from rmqdump.checks.cqverify import VerifyScope
            from rmqdump.engines.spark.verify import verify_spark

            with O.spark_session(master, spark_conf, ship=ship.value) as spark:
                found = verify_spark(spark, st, VerifyScope(topic, queue, not no_crc, delays), summary=summary)
        else:
            from rmqdump.engines.local import local_map

            mapper = local_map(workers, total)
            found = verify(
                st,
                topic=topic,
                queue_id=queue,
                check_crc=not no_crc,
                delays=delays,
                summary=summary,
                on_bytes=advance,
                window_records=window,
                mapper=mapper,
                batched=True,
            )
        for p in found:
            emit(p)
    from rmqdump.readers.compaction import find_compaction

    cf = find_compaction(st.root)
    if cf is not None:  # cq verify covers compaction topics too; without compaction/ there is nothing to add, nor its checks to load
        from contextlib import nullcontext

        from rmqdump.checks.compactionverify import verify as verify_compaction
        from rmqdump.scan.ranges import SERIAL

        # a compaction topic asked for: its originals read by the same engine (else one thread)
        with O.range_mapper(engine, workers, total, master, spark_conf, ship) if cf.select(topic, queue) else nullcontext(SERIAL) as mapper:
            for p in verify_compaction(st.root, st.commitlog, topic=topic, queue_id=queue, check_crc=not no_crc, mapper=mapper):
                summary.count(p)
                emit(p)
    if fmt is ListFormat.jsonl:
        for row in summary.filler_units:
            render.jsonl(row)
        render.jsonl(summary.to_dict())
    else:
        _table(st, folder.runs())
        _fillers(st, summary.filler_units)
        codes = ", ".join(f"{k} {v}" for k, v in sorted(summary.codes.items()))
        fillers = f"; {len(summary.filler_units)} filler units of rmqdump repair (not problems)" if summary.filler_units else ""
        render.err.print(
            f"{summary.queues} queues, {summary.units} units, {summary.messages} messages: {summary.problems} problems{' (' + codes + ')' if codes else ''}{fillers}",
            highlight=False,
        )
        for c in causes(folder.runs()) if folder.findings > len(folder.runs()) else ():
            render.err.print(f"  {c}", highlight=False)
    raise typer.Exit(1 if summary.problems else 0)


def _table(st: Store, runs: list) -> None:
    """The findings as lines: a run of one code in one queue is one line (checks.findingruns), the damage first."""
    if not runs:
        return
    t = render.table()
    t.add_column("code", no_wrap=True, min_width=max(len(r.code) for r in runs))
    for name in ("topic", "queue", "units", "count", "phys"):
        t.add_column(name, overflow="fold")
    t.add_column("file", overflow="fold")
    t.add_column("detail", overflow="fold")
    for r in runs:
        t.add_row(r.code, r.topic or "", render.cell(r.queue_id), r.units, str(r.count), r.phys, st.rel(r.file or ""), r.text)
    render.out.print(t)


def _fillers(st: Store, rows: list[dict]) -> None:
    """repair's filler units, a line per run in a queue: the queue offsets and the replaced range each stands for."""
    if not rows:
        return
    from rmqdump.checks.findingruns import RunFolder

    folder = RunFolder()
    for d in rows:
        where = f"{d['length']} bytes at {d['phys_offset']}, replaced by a {d['replaced_by']}" if d["phys_offset"] is not None else f"one of {d['candidates']}"
        folder.add({"code": "filler_unit", **d, "detail": f"stands for a message destroyed in the range {where}"}, note=None)
    render.out.print("filler units written by rmqdump repair where destroyed messages were (the broker's pull steps over them):", highlight=False)
    _table(st, folder.runs())


def _queue(st: Store, topic: str, queue: int):
    q = st.queue(topic, queue)
    if q is None:
        render.fail(f"no_queue: {st.root}/consumequeue/{topic}/{queue}: no such queue", 2)
    return q


def dump_cmd(
    store: Path = store_option(),
    topic: str = O.topic_option("Topic of the queue.", required=True),
    queue: int = O.queue_option("Queue id.", required=True),
    start: int = typer.Option(None, "--from", min=0, help="First queue offset to show."),
    limit: int = O.limit_option("Show at most this many units."),
    resolve: bool = typer.Option(False, "--resolve", help="Read each unit's record and show it next to the unit."),
    all_units: bool = typer.Option(False, "--all", help="Also list the unwritten units after the queue's end (its last valid unit)."),
    fmt: ListFormat = O.format_option(ListFormat.table, "table or jsonl."),
):
    """The units of one queue, decoded (offset, size, tagsCode), optionally with their records.

    The listing stops at the queue's end, its last valid unit (offset >= 0 and
    size > 0, where the broker's recovery ends the queue), and closes with one
    line counting the unwritten units after it (`--all` lists them too). An
    invalid unit before the end is a hole and is listed.

    A Batch ConsumeQueue shows msgBaseOffset as the queue offset, with batchSize
    and storeTime; a unit whose tagsCode is a ConsumeQueue ext address shows the
    real tagsCode, the address and the filter bitmap.

    Example:  rmqdump cq dump -s store -t orders -q 1 --from 100 -n 5 --resolve
    """
    from rmqdump.common.timeutil import iso
    from rmqdump.query.cqseek import RecordReader, dump_batch_units, dump_units, queue_tail
    from rmqdump.readers.store import Store

    st = Store.open(store)
    bq = st.batch_queues.get((topic, queue))
    q = bq if bq is not None else _queue(st, topic, queue)
    n = 0
    with RecordReader(st.commitlog) as reader:
        if hasattr(q, "dump_rows"):  # a RocksDB ConsumeQueue
            rows = _with_records(q.dump_rows(start=start, limit=limit), reader if resolve else None)
        elif bq is not None:
            rows = dump_batch_units(bq, start=start, limit=limit, reader=reader if resolve else None, all_units=all_units)
        else:
            rows = dump_units(q, start=start, limit=limit, reader=reader if resolve else None, ext=st.ext_queues.get((topic, queue)), all_units=all_units)
        unresolved = 0
        if fmt is ListFormat.jsonl:
            for r in rows:
                render.jsonl(r)
                n += 1
                unresolved += resolve and not _resolves(r, topic, queue)
            if limit is None or n < limit:  # the listing reached the queue's end
                render.jsonl(queue_tail(q))
        else:
            cols = ["unit", "phys_offset", "size", "tags_code", "file@offset"]
            extra = ["batch_size", "store_time"] if bq is not None else ["ext_address", "filter_bitmap"] if (topic, queue) in st.ext_queues else []
            cols += extra
            if resolve:
                cols += ["stored (UTC)", "rec q/qoffset", "tags", "keys", "check"]
            t = render.table(*cols)
            for r in rows:
                n += 1
                unresolved += resolve and not _resolves(r, topic, queue)
                cells = [
                    str(r["unit_index"]),
                    str(r["phys_offset"]),
                    str(r["size"]),
                    str(r["tags_code"]),
                    f"{Path(r['cq_file']).name}@{r['file_offset']}" if r["file_offset"] is not None else "rocksdb",
                ]
                cells += [render.cell(r.get(c)) for c in extra]
                if r["filler"]:
                    cells[1] = "[dim]filler[/dim]"
                elif not r["valid"]:
                    cells[1] = f"[yellow]{r['phys_offset']} (invalid)[/yellow]"
                if resolve:
                    rec = r.get("record")
                    if rec is None:
                        cells += ["", "", "", "", ""]
                    elif not rec["ok"]:
                        cells += ["", "", "", "", f"[red]{rec['code']}[/red]"]
                    else:
                        cells += [
                            iso(rec["store_timestamp"]),
                            f"{rec['queue_id']}/{rec['queue_offset']}",
                            rec["tags"] or "",
                            " ".join(rec["keys"]),
                            "ok" if _resolves(r, topic, queue) else "[red]MISMATCH[/red]",
                        ]
                t.add_row(*cells)
            render.out.print(t)
            if limit is None or n < limit:
                render.out.print(_tail_line(queue_tail(q), st), highlight=False)
    raise typer.Exit(1 if not n or unresolved else 0)


def _tail_line(tail: dict, st: Store) -> str:
    """The line closing a `cq dump` table: the unwritten units after the queue's end."""
    if not tail["units"]:
        return "end of queue: no unwritten units after it"
    where = f"from unit {tail['first_unit']}, " if tail["first_unit"] is not None else ""
    dirt = f", {tail['not_zero']} of them not all zeros" if tail["not_zero"] else ""
    return f"end of queue: {tail['units']} unwritten units after it ({where}{st.rel(tail['cq_file'])}@{tail['file_offset']}{dirt}); --all lists them"


def _resolves(row: dict, topic: str, queue: int) -> bool:
    """Whether a valid unit's record is readable and is the message the unit says (fillers and invalid units pass)."""
    rec = row.get("record")
    if row["filler"] or not row["valid"] or rec is None:
        return True
    if not rec["ok"]:
        return False
    if "lmq_offsets" in rec:  # an LMQ unit points at its parent topic's record, which names this queue
        return rec["total_size"] == row["size"] and row["unit_index"] in rec["lmq_offsets"]
    return rec["total_size"] == row["size"] and rec["topic"] == topic and rec["queue_id"] == queue and rec["queue_offset"] == row["unit_index"]


def _with_records(rows, reader):
    from rmqdump.query.cqseek import record_summary

    for r in rows:
        if reader is not None and r["valid"]:
            r["record"] = record_summary(reader.read(r["phys_offset"]))
        yield r


def seek_cmd(
    store: Path = store_option(),
    topic: str = O.topic_option("Topic of the queue.", required=True),
    queue: int = O.queue_option("Queue id.", required=True),
    time: str = typer.Option(..., "--time", help="Epoch milliseconds or ISO 8601 (UTC when no zone is given)."),
    fmt: ListFormat = O.format_option(ListFormat.table, "table or jsonl."),
):
    """The queue offset of the first message stored at or after a time (binary search, like getOffsetInQueueByTime).

    Exit 0 when such a message exists, 1 when every message is older (the answer is then the queue's max offset).

    Example:  rmqdump cq seek -s store -t orders -q 1 --time 2026-11-21T23:55:52Z
    """
    from rmqdump.common.timeutil import iso, parse_time
    from rmqdump.query.cqseek import seek, seek_batch
    from rmqdump.readers.store import Store

    ts = O.parsed(None, parse_time, time)
    st = Store.open(store)
    bq = st.batch_queues.get((topic, queue))
    r = seek_batch(bq, ts) if bq is not None else seek(_queue(st, topic, queue), st.commitlog, ts)
    read = f"{r.probes} Batch ConsumeQueue files read" if bq is not None else f"{r.probes} records read"
    d = r.to_dict()
    if fmt is ListFormat.jsonl:
        render.jsonl(d)
    elif d["found"]:
        render.out.print(
            f"{topic}/{queue}: queue offset {r.queue_offset} (stored {iso(r.store_timestamp)}, CommitLog offset {r.phys_offset}); "
            f"queue holds {r.min_offset}..{r.max_offset - 1}; {read}"
        )
    else:
        render.out.print(f"{topic}/{queue}: no message stored at or after {iso(ts)}; queue offset {r.queue_offset} is the end (max offset)")
    raise typer.Exit(0 if d["found"] else 1)


def register(app, guarded) -> None:
    cq_app.command("verify")(guarded(verify_cmd))
    cq_app.command("dump")(guarded(dump_cmd))
    cq_app.command("seek")(guarded(seek_cmd))
    app.add_typer(cq_app, name="cq")
