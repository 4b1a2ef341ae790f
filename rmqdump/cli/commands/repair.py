"""`rmqdump repair STOREDIR --out NEWDIR`: a repaired copy of a damaged store the broker restarts from without losing intact messages."""

from __future__ import annotations

from pathlib import Path

import typer

from rmqdump.cli import render
from rmqdump.cli.commands import options as O
from rmqdump.cli.commands.options import ListFormat

TABLE_ROWS = 50


def _rec(d: dict | None) -> str:
    if not d:
        return "-"
    if "not_a_message" in d:
        return f"@{d['phys_offset']} ({d['not_a_message']})"
    return f"@{d['phys_offset']} {d['topic']}/{d['queue_id']}#{d['queue_offset']} ({d['size']} B)"


def _print_table(rep, s: dict) -> None:
    p = render.out.print
    p(f"repaired copy {s['out']} of {s['store']} ({s['commitlog_files']} CommitLog files, {s['records']} records, intact data ends at {s['data_end']})")
    if not rep.ranges:
        p("damaged ranges: none (NEWDIR is a clean copy with rebuilt queues and index)")
    else:
        p(
            f"damaged ranges: {len(rep.ranges)}, {s['repaired']} replaced ({s['repaired_bytes']} bytes; {s['headers_restored']} by the record with its header restored), {s['left']} left to the broker's truncation"
        )
        p(f"  {'phys_offset':>12} {'length':>7}  {'action':<6}  {'codes':<28} before -> after")
        for r in rep.ranges[:TABLE_ROWS]:
            p(f"  {r.start:>12} {r.length:>7}  {r.action:<6}  {','.join(r.codes):<28} {_rec(r.before)} -> {_rec(r.after)}")
            for d in r.destroyed:
                p(f"  {'':>12} {'':>7}  destroyed: {_rec(d)} UNIQ_KEY {d['uniq_key']}")
            if r.restored is not None:
                from rmqdump.scan.headerfix import spelled

                h = r.restored
                p(f"  {'':>12} {'':>7}  header restored ({spelled(h.fields, h.found, h.restored)}): the record is kept at its offset")
            if r.action == "left":
                p(f"  {'':>12} {'':>7}  {r.why}")
        if len(rep.ranges) > TABLE_ROWS:
            p(f"  ... {len(rep.ranges) - TABLE_ROWS} more (-f jsonl lists every one)")
    if rep.holes:
        p(f"queue offsets without a message (filler units the broker's pull steps over): {s['queue_holes']}")
        for h in rep.holes[:TABLE_ROWS]:
            p(f"  {h['topic']}/{h['queue_id']}: {h['from']}..{h['to'] - 1}")
            if h.get("caveat"):
                p(f"    caveat: {h['caveat']}")
    for pr in rep.layout:
        p(f"layout problem (not repaired): {pr.line()}")
    if rep.flagged:
        p(f"records the broker accepts as they are, with a problem: {len(rep.flagged)}")
        for pr in rep.flagged[:TABLE_ROWS]:
            p(f"  {pr.line()}")
    rb = s["rebuild"]
    if rb is not None:
        p(f"rebuilt: {rb['queues']} queues, {rb['cq_units']} units, {rb['index_files']} index files, {rb['index_entries']} entries")
        v = rb["verify"]
        if v is not None:
            p(f"verify: {'ok' if v['ok'] else 'FAILED'}")
    for n in s["notes"]:
        p(f"note: {n}")
    p(f"report: {s['out']}/rmqdump-repair/report.json; original bytes: {s['out']}/rmqdump-repair/quarantine.bin (index quarantine.json)")


def repair_cmd(
    store: Path = O.storedir_argument(),
    store_opt: Path = O.storedir_option(),
    out: Path = O.out_option("Where to write the repaired store. Must be outside STOREDIR, empty or absent.", metavar="NEWDIR"),
    force: bool = O.force_option("Replace a non-empty NEWDIR (only once the new one is complete)."),
    cq_units: int = O.cq_units_option(),
    hash_slots: int = O.hash_slots_option(),
    index_entries: int = O.index_entries_option(),
    broker_conf: Path = typer.Option(None, "--broker-conf", help="A broker.conf to take the ConsumeQueue and index sizes from."),
    workers: int = O.workers_option(),
    no_crc: bool = O.no_crc_option("Skip the body CRC checks (faster); a record whose body CRC does not match is then left as it is."),
    no_verify: bool = typer.Option(False, "--no-verify", help="Skip the cq verify / index verify pass over the rebuilt files."),
    no_sync: bool = O.no_sync_option(),
    fmt: ListFormat = O.format_option(ListFormat.table, "table, or jsonl (range, hole and problem lines, a summary)."),
    engine: O.Engine = O.engine_option("the ranges scanned and copied by Spark tasks; NEWDIR on a filesystem the executors share"),
    master: str = O.master_option(),
    spark_conf: list[str] = O.spark_conf_option(),
    ship: O.Ship = O.ship_option(),
):
    """Write a repaired copy of the store to NEWDIR, from which the broker restarts and keeps every intact message.

    Each damaged CommitLog range the broker's recovery would stop at is
    replaced, in the copy, by a rolled-back filler record of the same length
    (no consumer receives it; every later record keeps its offset); the
    original bytes go to NEWDIR/rmqdump-repair/quarantine.bin. ConsumeQueues
    and IndexFiles are rebuilt (queue offsets unchanged), no abort file is
    written (normal recovery), config/ is copied. The store is only read.
    Exit 0 nothing needed repair (NEWDIR is a clean copy), 1 damage found (or a
    CommitLog file of another size, padded or cut in the copy; a layout problem
    such as a missing file; flagged records; queue offsets without a message),
    2 usage or unreadable input.

    Example:  rmqdump repair -s /data/broker-a/store --out /data/broker-a/store.repaired
    """
    from rmqdump.builders.repair import RepairOptions, check_repairable, repair
    from rmqdump.builders.settings import resolve

    store = O.one_store("repair", store, store_opt)
    cl = check_repairable(str(store), str(out), force)[2]
    settings = resolve(str(store), cq_units=cq_units, hash_slots=hash_slots, index_entries=index_entries, broker_conf=str(broker_conf) if broker_conf else None)
    total = sum(f.size for f in cl.files)
    with render.interruptible(out), O.range_mapper(engine, workers, total, master, spark_conf, ship) as mapper, render.progress(total, "repair") as advance:
        options = RepairOptions(force=force, sync=not no_sync, verify=not no_verify, mapper=mapper, check_crc=not no_crc)
        rep = repair(str(store), str(out), settings, options, on_bytes=advance)
    s = rep.summary()
    if fmt is ListFormat.jsonl:
        for r in rep.ranges:
            render.jsonl(r.to_dict())
        for h in rep.holes:
            render.jsonl(h)
        for pr in rep.layout + rep.flagged:
            render.jsonl(pr.to_dict())
        render.jsonl(s)
    else:
        _print_table(rep, s)
    raise typer.Exit(1 if rep.found_damage else 0)


def register(app, guarded) -> None:
    app.command("repair")(guarded(repair_cmd))
