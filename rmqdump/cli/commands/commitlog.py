"""`rmqdump commitlog`: decode CommitLog records, like kafka-dump-log for RocketMQ."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from rmqdump.cli import render
from rmqdump.cli.commands.options import BodyMode, Format
from rmqdump.common.problems import Problem
from rmqdump.common.timeutil import iso, parse_time
from rmqdump.query.listing import Filter, Tally, list_commitlog
from rmqdump.readers.commitlog import Blank, CommitLog
from rmqdump.readers.message import Message

CSV_COLUMNS = [
    "kind", "file", "phys_offset", "total_size", "magic_version", "body_crc", "crc_ok", "prop_crc_ok", "queue_id", "flag",
    "queue_offset", "sys_flag", "transaction", "born_timestamp", "born_host", "store_timestamp", "store_host", "reconsume_times",
    "prepared_transaction_offset", "body_length", "topic", "tags", "keys", "uniq_key", "msg_id", "properties", "body", "body_encoding",
    "code", "file_offset", "detail", "length", "marker",
]  # fmt: skip

TABLE_COLUMNS = ["offset", "size", "topic", "q", "qoffset", "stored (UTC)", "tags", "keys", "uniq_key", "tx", "crc"]


def _crc_cell(m: Message) -> str:
    if m.crc_ok is None:
        return "-"
    s = "ok" if m.crc_ok else "BAD"
    if m.prop_crc_ok is not None:
        s += "/ok" if m.prop_crc_ok else "/BAD"
    return s


class _TableOut:
    """A rich table printed every few hundred rows, so long dumps stream."""

    def __init__(self, body: str):
        self.body = body
        self.rows: list = []

    def add(self, e) -> None:
        if isinstance(e, Message):
            self.rows.append(
                (
                    str(e.phys_offset),
                    str(e.total_size),
                    e.topic,
                    str(e.queue_id),
                    str(e.queue_offset),
                    iso(e.store_timestamp),
                    e.tags or "",
                    " ".join(e.keys),
                    e.uniq_key or "",
                    e.transaction if e.transaction != "none" else "",
                    _crc_cell(e),
                )
            )
            if e.body is not None:
                self.rows.append(("", "", "[dim]body[/dim]", "", "", render.encode_body(e.body, self.body)[:200], "", "", "", "", ""))
        elif isinstance(e, Blank):
            self.rows.append((str(e.phys_offset), str(e.length), f"[dim]<end of file: {e.marker}>[/dim]", "", "", "", "", "", "", "", ""))
        elif isinstance(e, Problem):
            self.rows.append(
                (str(e.phys_offset if e.phys_offset is not None else ""), "", f"[red]{e.code}[/red]", "", "", f"[red]{e.detail}[/red]", "", "", "", "", "")
            )
        if len(self.rows) >= 500:
            self.flush()

    def flush(self) -> None:
        if not self.rows:
            return
        t = Table(*TABLE_COLUMNS, box=None, pad_edge=False, header_style="bold")
        for r in self.rows:
            t.add_row(*r)
        render.out.print(t)
        self.rows = []


def commitlog(
    files: list[Path] = typer.Argument(..., help="CommitLog files, or a commitlog/ directory (files are taken in offset order)."),
    topic: str = typer.Option(None, "--topic", help="Only messages of this topic."),
    queue: int = typer.Option(None, "--queue", help="Only messages of this queue id."),
    from_offset: int = typer.Option(None, "--from-offset", help="Start at this physical offset (a record start, or any byte: the scan resyncs)."),
    to_offset: int = typer.Option(None, "--to-offset", help="Stop before records starting at this physical offset."),
    since: str = typer.Option(None, "--since", help="Store time at or after this (epoch ms or ISO 8601, UTC by default)."),
    until: str = typer.Option(None, "--until", help="Store time before this (epoch ms or ISO 8601)."),
    key: str = typer.Option(None, "--key", help="Only messages with this key in KEYS, or this UNIQ_KEY."),
    tag: str = typer.Option(None, "--tag", help="Only messages with exactly this TAGS value."),
    limit: int = typer.Option(None, "--limit", min=1, help="Stop after this many messages."),
    body: BodyMode = typer.Option(BodyMode.none, "--body", help="Print bodies as text, hex or base64."),
    uncompress: bool = typer.Option(False, "--decompress", help="Uncompress zlib/lz4/zstd bodies (sysFlag bits 0 and 8-10) before printing."),
    fmt: Format = typer.Option(Format.table, "--format", "-f", help="table, jsonl (one JSON object per line) or csv."),
    no_crc: bool = typer.Option(False, "--no-crc", help="Skip the body and property CRC checks (faster)."),
):
    """Decode CommitLog records: every header field, properties, keys, tags, UNIQ_KEY, offset msgId, CRC.

    Damage is reported with a problem code, file and byte offset, and the scan
    resyncs to the next record it can prove. Exit 0 clean, 1 problems found.

    Example:  rmqdump commitlog store/commitlog --topic orders --limit 5 -f jsonl
    """
    try:
        flt = Filter(topic, queue, from_offset, to_offset, parse_time(since) if since else None, parse_time(until) if until else None, key, tag, limit)
    except ValueError as e:
        render.fail(f"usage: {e}", 2)
    cl = CommitLog.open([str(f) for f in files])
    if not cl.files:
        render.fail(f"no_commitlog: {', '.join(map(str, files))}: no CommitLog files found", 2)
    with_body = body is not BodyMode.none
    tally = Tally()
    total = sum(f.size for f in cl.files)
    table = _TableOut(body.value) if fmt is Format.table else None
    csvw = render.CsvOut(CSV_COLUMNS) if fmt is Format.csv else None
    with render.progress(total, "commitlog") as advance:
        for e in list_commitlog(cl, flt, check_crc=not no_crc, with_body=with_body, uncompress=uncompress, tally=tally, on_bytes=advance):
            if table is not None:
                table.add(e)
                continue
            d = e.to_dict()
            if isinstance(e, Message) and e.body is not None:
                d["body"] = render.encode_body(e.body, body.value)
                d["body_encoding"] = "utf-8" if body is BodyMode.text else body.value
            if csvw is not None:
                csvw.row(d)
            else:
                render.jsonl(d)
    summary = {"kind": "summary", "files": len(cl.files), "messages": tally.messages, "blanks": tally.blanks, "problems": tally.problems}
    if table is not None:
        table.flush()
        render.err.print(f"{tally.messages} messages, {tally.blanks} end-of-file markers, {tally.problems} problems in {len(cl.files)} files", highlight=False)
    elif fmt is Format.jsonl:
        render.jsonl(summary)
    raise typer.Exit(1 if tally.problems else 0)


def register(app, guarded) -> None:
    app.command("commitlog")(guarded(commitlog))
