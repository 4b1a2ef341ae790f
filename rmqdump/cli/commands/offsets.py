"""`rmqdump offsets`: committed consumer offsets against the queues on disk."""

from __future__ import annotations

from pathlib import Path

import typer

from rmqdump.cli import render
from rmqdump.cli.commands import options as O
from rmqdump.cli.commands.options import ListFormat, store_option


def offsets(
    store: Path = store_option(),
    group: str = typer.Option(None, "--group", help="Only this consumer group."),
    topic: str = O.topic_option(),
    fmt: ListFormat = O.format_option(ListFormat.table, "table or jsonl."),
):
    """Per group/topic/queue: committed offset, the queue's min/max, lag; flags offsets the broker would reset and .bak disagreements.

    Reads config/consumerOffset.json and its .bak (fastjson's unquoted integer keys are fine).
    Exit 0 all fine, 1 something flagged, nothing matched or an entry not what the broker writes (bad_config), 2 no offsets
    file (or neither it nor its .bak parses).

    Example:  rmqdump offsets -s store --group groupA
    """
    from rmqdump.checks.offsets import consumer_offsets
    from rmqdump.readers.configfiles import problem_of
    from rmqdump.readers.store import Store

    st = Store.open(store)
    rep = consumer_offsets(st, group=group, topic=topic)
    # one of the two files unreadable (the other is listed), or entries that are not what the broker writes: named, not passed over
    bad = [problem_of(c) for c in (rep.file, rep.bak) if c is not None and c.error is not None] + rep.problems
    if fmt is ListFormat.jsonl:
        for p in bad:
            render.jsonl(p.to_dict())
        for r in rep.rows:
            render.jsonl(r.to_dict())
        render.jsonl(
            {
                "kind": "summary",
                "rows": len(rep.rows),
                "flagged": rep.flagged,
                "file": rep.file.path if rep.file else None,
                "bak": rep.bak.path if rep.bak else None,
            }
        )
    else:
        t = render.table("group", "topic", "queue", "committed", ".bak", "min", "max", "lag", "flags")
        for r in rep.rows:
            flags = ",".join(r.flags)
            t.add_row(
                r.group,
                r.topic,
                str(r.queue_id),
                *(render.cell(v) for v in (r.committed, r.bak, r.min_offset, r.max_offset, r.lag)),
                flags if flags == "ok" else f"[red]{flags}[/red]",
            )
        render.out.print(t)
        for p in bad:
            render.err.print(f"rmqdump: {p.line()}", highlight=False)
        render.err.print(f"{len(rep.rows)} offsets, {rep.flagged} flagged", highlight=False)
    raise typer.Exit(1 if rep.flagged or not rep.rows or bad else 0)


def register(app, guarded) -> None:
    app.command("offsets")(guarded(offsets))
