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
):
    """Decode CommitLog records: every header field, properties, keys, tags, UNIQ_KEY, offset msgId, CRC.

    Damage is reported with a problem code, file and byte offset, and the scan
    resyncs to the next record it can prove. Exit 0 clean, 1 problems found.

    Example:  rmqdump commitlog -s store -t orders -n 5 -f jsonl
    """
    from rmqdump.cli import render
    from rmqdump.cli.records import writer
    from rmqdump.common.timeutil import parse_time
    from rmqdump.query.listing import Filter, Records, Tally, list_records
    from rmqdump.readers.commitlog import CommitLog
    from rmqdump.readers.store import prove_readable

    try:
        flt = Filter(topic, queue, from_offset, to_offset, parse_time(since) if since else None, parse_time(until) if until else None, key, tag, limit)
    except ValueError as e:
        render.fail(f"usage: {e}", 2)
    if not files and not stores:
        render.fail("usage: rmqdump commitlog: give FILE... or --store/-s DIR (see 'rmqdump commitlog --help')", 2)
    paths = [str(f) for f in files or []] + list(stores or [])
    for p in paths:
        if os.path.isdir(os.path.join(p, "commitlog")) or os.path.isdir(os.path.join(p, "consumequeue")):
            prove_readable(p)  # a store root: none of its files is passed over unread
    cl = CommitLog.open(paths)
    if not cl.files:
        render.fail(f"no_commitlog: {', '.join(paths)}: no CommitLog files found", 2)
    tally = Tally()
    w = writer(fmt.value, flt, tally, body=body.value, uncompress=uncompress)
    try:
        with render.progress(sum(f.size for f in cl.files), "commitlog") as advance:
            late = w.renders_ahead()
            held = None  # with `late`, each item is handled one step late: its batch is rendered while the scan reads the next
            for item in list_records(cl, flt, check_crc=not no_crc, tally=tally, on_bytes=advance):
                if late and isinstance(item, Records):
                    w.render_ahead(item)
                if late:
                    item, held = held, item
                if item is not None:
                    w.item(item)
                if w.done:
                    break
            else:
                if held is not None:
                    w.item(held)
        w.close(len(cl.files))
        if fmt is Format.jsonl:
            summary = {"kind": "summary", "files": len(cl.files), "messages": tally.messages, "blanks": tally.blanks, "problems": tally.problems}
            w.entry_dict(summary)
    finally:
        w.finish()
    if fmt is Format.table:
        render.err.print(f"{tally.messages} messages, {tally.blanks} end-of-file markers, {tally.problems} problems in {len(cl.files)} files", highlight=False)
    raise typer.Exit(1 if tally.problems else 0)


def register(app, guarded) -> None:
    app.command("commitlog")(guarded(commitlog))
