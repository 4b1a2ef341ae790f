"""`rmqdump rebuild STOREDIR --out OUTDIR`: ConsumeQueues, IndexFiles and checkpoint from the CommitLog."""

from __future__ import annotations

import os
from enum import Enum
from pathlib import Path

import typer

from rmqdump.cli import render
from rmqdump.cli.commands import options as O
from rmqdump.cli.commands.options import Engine, ListFormat, Ship, engine_option, master_option, ship_option, spark_conf_option
from rmqdump.common.timeutil import iso

TABLE_ROWS = 50  # queues / index files listed in the table output


class Part(str, Enum):
    consumequeue = "consumequeue"
    index = "index"


def _first_rows(p, lines: list[str]) -> None:
    """The first TABLE_ROWS lines, indented, then how many more JSON Lines would show."""
    for line in lines[:TABLE_ROWS]:
        p(f"  {line}")
    if len(lines) > TABLE_ROWS:
        p(f"  ... {len(lines) - TABLE_ROWS} more (-f jsonl lists every one)")


def _print_table(rep, s: dict) -> None:
    p = render.out.print
    st = rep.settings
    from rmqdump.readers.commitlog import commitlog_path

    p(f"rebuilt {s['out']} from {commitlog_path(s['store'])} ({s['commitlog_files']} files, {s['commitlog_bytes']} bytes)")
    p("settings:")
    for name, value, shown in (
        ("cq_units_per_file", st.cq_units_per_file, True),
        ("hash_slots", st.hash_slots, True),
        ("index_entries", st.index_entries, True),
        ("delay_levels", st.delay_spec, True),
        ("bcq_file_size", st.bcq_file_size, rep.queues and os.path.isdir(os.path.join(rep.store, "batchconsumequeue"))),
        ("ext_bitmap_bits", st.ext_bitmap_bits, st.ext_bitmap_bits is not None),
        ("ext_file_size", st.ext_file_size, st.ext_bitmap_bits is not None),
        ("lmq", "yes", st.lmq),
    ):
        if shown:
            p(f"  {name:<18} {value}  ({st.source.get(name, '')})")
    p(f"records: {s['records']} scanned, {s['messages']} taken, {s['workers']} worker(s), {s['seconds']} s ({s['messages_per_second']} messages/s)")
    if "consumequeue" in s["built"]:
        p(f"consumequeue: {s['queues']} queues, {s['cq_files']} files, {s['cq_units']} units, {s['cq_filler_units']} filler units")
        for q in rep.queues[:TABLE_ROWS]:
            extra = f", starts at {q.first_offset} ({q.pre_blank} filler units)" if q.first_offset > 0 else ""
            p(f"  {q.topic}/{q.queue_id}: {q.units} units in {len(q.files)} files, next offset {q.next_offset}{extra}")
        if len(rep.queues) > TABLE_ROWS:
            p(f"  ... {len(rep.queues) - TABLE_ROWS} more queues (-f jsonl lists every one)")
    if "index" in s["built"]:
        p(f"index: {s['index_files']} files, {s['index_entries']} entries")
        for f in rep.index_files[:TABLE_ROWS]:
            p(
                f"  {f.name}: {f.entries} entries, {f.hash_slot_count} slots used, "
                f"phy {f.begin_phy_offset}..{f.end_phy_offset}, {iso(f.begin_timestamp) if f.begin_timestamp else '-'}..{iso(f.end_timestamp) if f.end_timestamp else '-'}"
            )
    if len(rep.index_files) > TABLE_ROWS:
        p(f"  ... {len(rep.index_files) - TABLE_ROWS} more index files (-f jsonl lists every one)")
    cp = s["checkpoint"]
    p(f"checkpoint: physic {cp['physic_msg_timestamp']}, logics {cp['logics_msg_timestamp']}, index {cp['index_msg_timestamp']}")
    if rep.damaged:
        p(f"damaged CommitLog regions skipped: {len(rep.damaged)} ({s['skipped_bytes']} bytes)")
        _first_rows(p, [d.line() for d in rep.damaged])
    if rep.flagged:
        p(f"records with problems, still dispatched (the broker does too): {len(rep.flagged)}")
        _first_rows(p, [d.line() for d in rep.flagged])
    for pr in rep.problems:
        p(f"problem: {pr.line()}")
    for n in rep.notes:
        p(f"note: {n}")
    v = s["verify"]
    if v is None:
        p("verify: skipped (--no-verify)")
    else:
        for part in ("consumequeue", "index"):
            r = v.get(part)
            if r is not None:
                codes = ", ".join(f"{c}={n}" for c, n in sorted(r["codes"].items())) or "none"
                fill = ", ".join(f"{c}={n}" for c, n in sorted(r.get("at_filler_units", {}).items()))
                fill = f"; at the filler units put in holes, as expected: {fill}" if fill else ""
                p(f"verify {part}: {'ok' if r['ok'] else 'FAILED'} (problems: {codes}{fill})")


def rebuild_cmd(
    store: Path = O.storedir_argument(),
    store_opt: Path = O.storedir_option(),
    out: Path = O.out_option("Where to write consumequeue/, index/ and checkpoint. Must be outside STOREDIR, empty or absent.", metavar="OUTDIR"),
    force: bool = O.force_option("Replace a non-empty OUTDIR (only once the new one is complete)."),
    only: Part = typer.Option(None, "--only", help="Build only the ConsumeQueues or only the index."),
    topic: list[str] = O.topic_option("Only this topic (repeatable). The index then holds only its keys."),
    cq_units: int = O.cq_units_option(),
    bcq_file_size: int = typer.Option(
        None, "--bcq-file-size", min=46, help="Bytes per Batch ConsumeQueue file (broker: mapperFileSizeBatchConsumeQueue; default 13800000)."
    ),
    ext_bitmap_bits: int = typer.Option(
        None,
        "--ext-bitmap-bits",
        min=0,
        help="Write consumequeue_ext/ with filter bitmaps of this many bits (broker: bitMapLengthConsumeQueueExt); the bits are written all ones.",
    ),
    hash_slots: int = O.hash_slots_option(),
    index_entries: int = O.index_entries_option(),
    delay_levels: str = typer.Option(None, "--delay-levels", help="messageDelayLevel, e.g. '1s 5s 10s 30s 1m 2m ... 2h' (the broker default)."),
    broker_conf: Path = typer.Option(
        None, "--broker-conf", help="A broker.conf to take mappedFileSizeConsumeQueue, maxHashSlotNum, maxIndexNum, messageDelayLevel from."
    ),
    workers: int = O.workers_option(),
    check_crc: bool = O.crc_option("Also check body CRCs and report mismatches (slower; such records are still dispatched, as the broker does)."),
    no_verify: bool = typer.Option(False, "--no-verify", help="Skip the cq verify / index verify pass over the result."),
    no_sync: bool = O.no_sync_option(),
    fmt: ListFormat = O.format_option(ListFormat.table, "table, or jsonl (problem lines, queue and index_file lines, a summary)."),
    engine: Engine = engine_option("the same bytes, built by Spark; OUTDIR on a filesystem the executors share"),
    master: str = master_option(),
    spark_conf: list[str] = spark_conf_option(),
    ship: Ship = ship_option(),
):
    """Rebuild ConsumeQueues, IndexFiles and checkpoint from the CommitLog into OUTDIR, byte-identical to the broker's.

    OUTDIR plus the original commitlog/ is a store a broker can start on. The
    source is never written: everything goes to a temporary directory next to
    OUTDIR that is renamed into place at the end, so an interrupted rebuild
    leaves OUTDIR absent. Sizes come from the flags, --broker-conf, or the
    store's own files; when those do not settle them the error names the flag.
    Damaged CommitLog regions are skipped and listed. Exit 0 clean, 1 damage or
    problems found (the rebuild is still written), 2 usage or unreadable input.

    Example:  rmqdump rebuild fixtures/real/rmq4-basic/store --out /tmp/rebuilt
    """
    from rmqdump.builders.rebuild import PARTS, RebuildOptions, check_paths, rebuild
    from rmqdump.builders.settings import resolve

    store = O.one_store("rebuild", store, store_opt)
    check_paths(str(store), str(out), force)
    settings = resolve(
        str(store),
        cq_units=cq_units,
        hash_slots=hash_slots,
        index_entries=index_entries,
        delay_levels=delay_levels,
        broker_conf=str(broker_conf) if broker_conf else None,
        bcq_file_size=bcq_file_size,
        ext_bitmap_bits=ext_bitmap_bits,
    )
    from rmqdump.engines.local import local_map
    from rmqdump.readers.commitlog import CommitLog, commitlog_path

    total = sum(f.size for f in CommitLog.open(commitlog_path(str(store))).files)
    options = RebuildOptions(
        only=(only.value,) if only else PARTS,
        topics=frozenset(topic) if topic else None,
        check_crc=check_crc,
        mapper=local_map(workers, total),
        force=force,
        verify=not no_verify,
        sync=not no_sync,
    )
    with render.interruptible(out):
        with render.progress(total, "rebuild") as advance:
            if engine is Engine.spark:
                from rmqdump.engines.spark.rebuild import rebuild_spark

                with O.spark_session(master, spark_conf, ship=ship.value) as spark:
                    rep = rebuild_spark(spark, str(store), str(out), settings, options)
            else:
                rep = rebuild(str(store), str(out), settings, options, on_bytes=advance)
        from rmqdump.builders.compactioncqbuild import rebuild_compaction_cq

        comp = rebuild_compaction_cq(str(store), str(out), force=force, sync=not no_sync, topics=options.topics) if "consumequeue" in options.only else None
    s = rep.summary()
    from rmqdump.readers.rocksdbcq import is_rocksdb

    if is_rocksdb(str(Path(store) / "consumequeue")):
        s["note"] = "the store's ConsumeQueue is a RocksDB database (storeType=defaultRocksDB): wrote the file-based ConsumeQueue of storeType=default"
        render.err.print(f"note: {s['note']}", highlight=False)
    if fmt is ListFormat.jsonl:
        for d in rep.damaged + rep.flagged:
            render.jsonl(d.to_dict())
        for pr in rep.problems:
            render.jsonl(pr.to_dict())
        for q in rep.queues:
            render.jsonl({"kind": "queue", **q.to_dict()})
        for f in rep.index_files:
            render.jsonl({"kind": "index_file", **f.to_dict()})
        for row in [] if comp is None else [*(p.to_dict() for p in comp.problems), *(q.to_dict() for q in comp.queues)]:
            render.jsonl(row)
        render.jsonl(s)
    else:
        _print_table(rep, s)
        if comp is not None:
            render.out.print(
                f"compaction: {comp.out}: {len(comp.queues)} queues, {sum(q.units for q in comp.queues)} units, "
                f"{sum(q.end_units for q in comp.queues)} end units (files of {comp.cq_file_size} bytes, from the compaction logs)",
                markup=False,
            )
            for p in comp.problems:
                render.out.print(f"problem: {p.line()}", markup=False)
    raise typer.Exit(0 if rep.ok and not (comp and comp.problems) else 1)


def register(app, guarded) -> None:
    app.command("rebuild")(guarded(rebuild_cmd))
