"""`rmqdump diff`: two stores that were one (after a failover or a lagging slave): where they part and who holds what."""

from __future__ import annotations

from pathlib import Path

import typer

from rmqdump.cli.commands import options as O
from rmqdump.cli.commands.options import ListFormat


def diff(
    store_a: Path = typer.Argument(..., metavar="A", help="Store root A (e.g. the old master's)."),
    store_b: Path = typer.Argument(..., metavar="B", help="Store root B (e.g. the promoted slave's)."),
    fmt: ListFormat = O.format_option(ListFormat.table, "table or jsonl (kinds prefix, message, queue, consumer, summary)."),
    out: Path = O.out_option("Also write the messages only on each side as Parquet (side=a|b/topic=...), bodies included.", required=False),
    force: bool = O.force_option("Replace an existing --out."),
    no_sync: bool = O.no_sync_option(),
    no_crc: bool = O.no_crc_option("Skip the body CRC checks of the records past the common prefix."),
    workers: int = O.workers_option("Threads hashing the two CommitLogs side by side (default: both, for CommitLogs over 64 MiB)."),
    engine: O.Engine = O.engine_option("each side's records past the common prefix decoded by Spark tasks (executors on this machine)"),
    master: str = O.master_option(),
    spark_conf: list[str] = O.spark_conf_option(),
    ship: O.Ship = O.ship_option(),
    temp_dir: Path = O.temp_dir_option(
        "Where the records past the common prefix are kept while they are paired (default: beside --out, else the system temp directory; never inside a store)."
    ),
):
    """Compare two stores' CommitLogs: the common prefix (by range CRCs, then bytes), each side's messages past it paired by UNIQ_KEY,
    per queue the max offsets and the queue offsets naming different messages, and what consumers with committed offsets there
    skip or read twice on the other side.

    Exit 0 identical, 1 they differ, 2 usage or unreadable input.

    Example:  rmqdump diff master/store slave/store -f jsonl
    """
    from rmqdump.checks.diff import diff_stores
    from rmqdump.checks.diffspill import system_arrow_pool
    from rmqdump.cli import render
    from rmqdump.readers.store import Store

    system_arrow_pool()
    stores = {"a": Store.open(store_a), "b": Store.open(store_b)}
    for s, st in stores.items():
        if not st.commitlog.files:
            render.fail(f"no_commitlog: {st.root}: no CommitLog files found (store {s.upper()})", 2)
    total = max(f.base + f.size for st in stores.values() for f in st.commitlog.files)
    spill_in = temp_dir if temp_dir is not None else (out.absolute().parent if out is not None else None)
    with render.progress(total, "diff") as advance:
        from rmqdump.engines.local import local_map

        mapper = local_map(workers, sum(f.size for f in stores["a"].commitlog.files))  # the two sides of each range side by side
        kw = {"check_crc": not no_crc, "progress": advance, "mapper": mapper, "temp_dir": None if spill_in is None else str(spill_in)}
        if engine is O.Engine.local:
            d = diff_stores(stores["a"], stores["b"], **kw)
        else:
            from rmqdump.engines.spark.diffdecode import spark_decoder

            with O.spark_session(master, spark_conf, ship=ship.value) as spark:
                d = diff_stores(stores["a"], stores["b"], decode=spark_decoder(spark), **kw)
    with d:
        if out is not None:
            from rmqdump.export.diffset import write_side_messages

            only = {s: d.phys_offsets(s, "only") for s in ("a", "b")}
            write_side_messages(stores, only, d.prefix.identical_up_to, str(out), force=force, check_crc=not no_crc, sync=not no_sync)
        if fmt is ListFormat.jsonl:
            for rec in d.records():
                render.jsonl_streamed(rec) if rec.get("kind") == "queue" else render.jsonl(rec)
        else:
            _table(d)
        clean = d.identical and not (d.epochs and d.epochs.problems())
    raise typer.Exit(0 if clean else 1)


def _table(d) -> None:
    from rmqdump.cli import render

    p = d.prefix
    if d.identical:
        render.out.print(f"identical: both CommitLogs hold the same bytes on [{p.start}, {p.end})")
    else:
        who = {"a": " (A is a prefix of B)", "b": " (B is a prefix of A)"}.get(d.prefix_of(), "")
        render.out.print(f"identical up to {p.identical_up_to} (first differing byte {p.first_differing_byte}){who}")
        s = d.summary()
        render.out.print(
            f"past it: A {s['a_messages_past_prefix']} messages (only on A {s['only_a']}), B {s['b_messages_past_prefix']} (only on B {s['only_b']}), "
            f"moved {s['moved']}, same offset {s['same_offset']}"
        )
    t = render.table("topic", "queue", "A max", "B max", "divergent", "only A", "only B")
    for q in d.queues:
        if not q.differs():
            continue
        t.add_row(
            q.topic,
            str(q.queue_id),
            render.cell(q.a_max_offset),
            render.cell(q.b_max_offset),
            _runs(q.divergent_ranges),
            _runs(q.only_a),
            _runs(q.only_b),
        )
    if t.row_count:
        render.out.print(t)
    ca = d.consumers_affected()
    if not d.identical:
        count = "unknown" if ca["consumers_affected"] is None else str(ca["consumers_affected"])
        render.out.print(f"consumers affected: {count}" + (f" ({ca['consumers_affected_why']})" if ca["consumers_affected_why"] else ""), markup=False)
    if d.consumers:
        c = render.table("committed on", "group", "topic", "queue", "offset", "skips there", "reads twice")
        for x in d.consumers:
            row = x.to_dict()
            c.add_row(x.side.upper(), x.group, x.topic, str(x.queue_id), str(x.committed), str(row["skipped"]), str(row["read_twice"]))
        render.out.print(c)
    if d.epochs is not None:
        for s in ("a", "b"):
            hist = ", ".join(f"{e}@{st}" for e, st, _ in d.epochs.ends[s]) or "none"
            render.out.print(f"epochs {s.upper()}: {hist}")
        render.out.print(f"consistent point (A rejoining B, as the broker computes it): {d.epochs.consistent_point}")
        for p in d.epochs.problems():
            render.err.print(f"{p.code}: {p.file} at byte {p.file_offset}: {p.detail}", highlight=False)
    for side in ("a", "b"):
        found = d.problems[side]
        for p in found[:10]:
            render.err.print(f"{side.upper()}: {p.code}: {p.file} at byte {p.file_offset}: {p.detail}", highlight=False)
        if len(found) > 10:
            render.err.print(f"{side.upper()}: {len(found) - 10} more problems (-f jsonl lists them)", highlight=False)
    for n in d.notes:
        render.err.print(n, highlight=False)


def _runs(ranges: list[list[int]]) -> str:
    if not ranges:
        return ""
    text = ", ".join(f"{a}" if b == a + 1 else f"{a}..{b - 1}" for a, b in ranges[:3])
    return text + (f" (+{len(ranges) - 3} runs)" if len(ranges) > 3 else "")


def register(app, guarded) -> None:
    app.command("diff")(guarded(diff))
