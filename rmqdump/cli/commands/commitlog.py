"""`rmqdump commitlog`: decode CommitLog records, like kafka-dump-log for RocketMQ."""

from __future__ import annotations

import os
from pathlib import Path

import typer

from rmqdump.cli.commands import options as O
from rmqdump.cli.commands.options import BodyMode, Format


def commitlog(
    files: list[Path] = typer.Argument(None, metavar="FILE", help="CommitLog files, commitlog/ directories or store roots (files are taken in offset order)."),
    stores: list[str] = O.stores_option("A store root, instead of FILE (repeat it to list several stores' CommitLogs one after another)."),
    topic: str = O.topic_option("Only messages of this topic."),
    queue: int = O.queue_option("Only messages of this queue id."),
    from_offset: int = typer.Option(None, "--from-offset", help="Start at this physical offset (a record start, or any byte: the scan resyncs)."),
    to_offset: int = typer.Option(None, "--to-offset", help="Stop before records starting at this physical offset."),
    since: str = O.since_option(),
    until: str = O.until_option(),
    key: str = typer.Option(None, "--key", help="Only messages with this key in KEYS, or this UNIQ_KEY."),
    tag: str = typer.Option(None, "--tag", help="Only messages with exactly this TAGS value."),
    limit: int = O.limit_option("Stop after this many messages."),
    body: BodyMode = O.body_option(),
    uncompress: bool = typer.Option(False, "--decompress", help="Uncompress zlib/lz4/zstd bodies (sysFlag bits 0 and 8-10) before printing."),
    fmt: Format = O.format_option(Format.table, "table, jsonl (one JSON object per line) or csv."),
    no_crc: bool = O.no_crc_option(),
    workers: int = O.workers_option(),
    engine: O.Engine = O.engine_option("the same listing, the CommitLog's ranges rendered by Spark tasks"),
    master: str = O.master_option(),
    spark_conf: list[str] = O.spark_conf_option(),
    ship: O.Ship = O.ship_option(),
):
    """Decode CommitLog records: every header field, properties, keys, tags, UNIQ_KEY, offset msgId, CRC.

    Damage is reported with a problem code, file and byte offset, and the scan
    resyncs to the next record it can prove. Exit 0 clean, 1 problems found.

    Example:  rmqdump commitlog -s store -t orders -n 5 -f jsonl
    """
    import functools

    from rmqdump.cli import render
    from rmqdump.cli.records import ListSpec, Printer, render_items, render_range
    from rmqdump.common.timeutil import parse_time
    from rmqdump.query.listing import Filter, Tally
    from rmqdump.readers.commitlog import CommitLog
    from rmqdump.readers.readable import prove_readable
    from rmqdump.scan.ranges import map_ranges
    from rmqdump.scan.splits import held_range_bytes, window_splits

    window = [O.parsed(None, parse_time, t or None) for t in (since, until)]
    flt = Filter(topic, queue, from_offset, to_offset, *window, key, tag, limit)
    if not files and not stores:
        render.fail("usage: rmqdump commitlog: give FILE... or --store/-s DIR (see 'rmqdump commitlog --help')", 2)
    paths = [str(f) for f in files or []] + list(stores or [])
    for p in paths:
        if os.path.isdir(os.path.join(p, "commitlog")) or os.path.isdir(os.path.join(p, "consumequeue")):
            prove_readable(p)  # a store root: none of its files is passed over unread
    cl = CommitLog.open(paths)
    if not cl.files:
        render.fail(f"no_commitlog: {', '.join(paths)}: no CommitLog files found", 2)
    # each range's text is held whole until the fold writes it: ranges of the size for held text (bodies: more of it)
    held = "text" if body.value != "none" else "listing"
    ranges = window_splits(cl, from_offset, to_offset, held_range_bytes(held), check_crc=not no_crc)
    total = sum(sp.length for sp in ranges)
    tally = Tally()
    out = Printer(fmt.value)
    try:
        with O.range_mapper(engine, workers, total, master, spark_conf, ship) as mapper, render.progress(total, "commitlog") as advance:
            spec = ListSpec(fmt.value, flt, body.value, uncompress, halves=mapper.workers == 1)
            layout = render_items(cl.problems, spec)  # the files' layout problems, before any record
            out.put(layout)
            tally.problems += layout.problems
            listed = map_ranges(ranges, functools.partial(render_range, spec=spec), mapper, progress=advance)
            try:
                for sp, text in listed:
                    if limit is not None and limit - tally.messages < min(limit, text.messages + 1):
                        text = render_range(sp, spec, limit - tally.messages)  # the limit falls inside: the range cut there
                    out.put(text)
                    tally.messages += text.messages
                    tally.blanks += text.blanks
                    tally.problems += text.problems
                    if limit is not None and tally.messages >= limit:
                        break
            finally:
                listed.close()  # ranges read ahead for a limit already reached are given up
        if fmt is Format.jsonl:
            out.summary({"kind": "summary", "files": len(cl.files), "messages": tally.messages, "blanks": tally.blanks, "problems": tally.problems})
    finally:
        out.finish()
    if fmt is Format.table:
        render.err.print(f"{tally.messages} messages, {tally.blanks} end-of-file markers, {tally.problems} problems in {len(cl.files)} files", highlight=False)
    raise typer.Exit(1 if tally.problems else 0)


def register(app, guarded) -> None:
    app.command("commitlog")(guarded(commitlog))
