"""`rmqdump salvage STOREDIR --out DIR`: the intact messages a restart would lose or no consumer reaches, as data."""

from __future__ import annotations

import os
from pathlib import Path

import typer

from rmqdump.cli import render
from rmqdump.cli.commands import options as O

TABLE_ROWS = 20  # damage entries shown on screen


def _print_table(d: dict) -> None:
    p = render.out.print
    r = d["recovery"]
    p(f"salvaged into {d['out']} ({d['format']}), {d['records_scanned']} records scanned")
    p(f"recovery: {'ABNORMAL' if r['abnormal'] else 'normal'} (rules: {r['broker_rules']}, {r['broker_rules_why']}), stops at {r['valid_end']}: {r['stop']}")
    for e in r["load_errors"]:
        p(f"the broker would refuse to load the store: {e}", markup=False)
    for name, n in d["salvaged"].items():
        p(f"{name}: {n} records")
    for reason, n in d["counts"].items():
        if n:
            p(f"  {reason:<20} {n:>9} records {d['bytes'][reason]:>12} bytes in {d['ranges_total'][reason]} ranges")
    for topic, per in sorted(d["topics"].items()):
        p(f"  topic {topic}: " + ", ".join(f"{k}={v}" for k, v in sorted(per.items())))
    if d["damage_count"]:
        p(f"damage: {d['damage_count']} stretches ({d['damage_bytes']} bytes) not decodable, listed in manifest.json")
        for x in d["damage"][:TABLE_ROWS]:
            p(f"  {x['code']}: {x['file']}@{x['file_offset']}: {x['detail']}", markup=False)
    for h in d["header_damaged"][:TABLE_ROWS]:
        from rmqdump.scan.headerfix import spelled

        was = spelled(h["header_fields"], h["found"], h["restored"])
        p(f"  header_damaged @{h['phys_offset']} {h['topic']}/{h['queue_id']}#{h['queue_offset']} ({h['size']} B): {was}", markup=False)
    p("files:")
    for f in d["files"]:
        p(f"  {f['name']}: {f['rows']} rows, {f['bytes']} bytes, sha256 {f['sha256']}")


def salvage_cmd(
    store: Path = O.storedir_argument(),
    store_opt: Path = O.storedir_option(),
    out: Path = O.out_option("Directory to create: messages, flagged, manifest.json. Outside the store, empty or absent.", metavar="OUT"),
    fmt: O.DatasetFormat = O.format_option(O.DatasetFormat.parquet, "parquet, or jsonl (one JSON object per line; body and raw_without_body in base64)."),
    topic: list[str] = O.topic_option("Only this topic (repeatable)."),
    since: str = O.since_option(),
    until: str = O.until_option(),
    force: bool = O.force_option("Replace a non-empty OUT (only once the new one is complete)."),
    no_sync: bool = O.no_sync_option(),
    no_crc: bool = O.no_crc_option("Skip the body and property CRC checks (the broker's recovery checks the body CRC: faster, less exact)."),
    workers: int = O.workers_option(),
    broker: str = O.broker_version_option(),
    engine: O.Engine = O.engine_option("the ranges surveyed by Spark tasks; the rest on this machine"),
    master: str = O.master_option(),
    spark_conf: list[str] = O.spark_conf_option(),
    ship: O.Ship = O.ship_option(),
):
    """Write every intact message a restart would lose or no consumer reaches, with what a producer needs to re-send it.

    OUT/messages.{parquet,jsonl}: records after the point where the broker's
    recovery stops (also in the files it would delete), records no
    ConsumeQueue unit reaches, records of queues with damaged ConsumeQueue
    files; the `export` columns with body, plus `reason`, `raw_without_body`
    and `body_offset` (the record as stored is raw_without_body with the body
    put back at body_offset). OUT/flagged.*: stale tails past the write position and
    damaged records: evidence, not to re-send. OUT/manifest.json: counts by
    reason and topic, byte ranges, damage, sha256 of each file. The store is
    only read. Exit 0 nothing to salvage and no damage, 1 records salvaged or
    flagged, or damage found (even where nothing intact is left to give back),
    2 usage or unreadable input.

    Example:  rmqdump salvage /data/rocketmq/store --out /backup/salvaged
    """
    from rmqdump.builders.rebuild import NO_COMMITLOG, NOT_A_STORE
    from rmqdump.checks.recovery import preview_bytes
    from rmqdump.common.problems import InputError
    from rmqdump.common.publish import check_target
    from rmqdump.common.timeutil import parse_time
    from rmqdump.export.salvage import salvage
    from rmqdump.readers.commitlog import commitlog_path
    from rmqdump.readers.store import Store
    from rmqdump.scan.splits import default_name

    store = O.one_store("salvage", store, store_opt)
    version = O.broker_version("salvage", broker)
    t_since = O.parsed("rmqdump salvage: --since", parse_time, since or None)
    t_until = O.parsed("rmqdump salvage: --until", parse_time, until or None)
    root = os.path.realpath(store)  # only to refuse an output inside it; messages name the store as given
    if not os.path.isdir(root):
        raise InputError(NOT_A_STORE, str(store), "not a directory")
    if not os.path.isdir(commitlog_path(root)):
        raise InputError(NO_COMMITLOG, commitlog_path(str(store)), "a store root holds commitlog/: nothing to salvage from")
    check_target(str(out), force=force, stores=[root], kind="dir")
    st = Store.open(str(store), version)
    cl_bytes = sum(f.size for f in st.commitlog.files)
    with O.range_mapper(engine, workers, cl_bytes, master, spark_conf, ship) as mapper, render.progress(preview_bytes(st) + cl_bytes, "salvage") as advance:
        res = salvage(
            st,
            str(out),
            fmt=fmt.value,
            force=force,
            check_crc=not no_crc,
            topics=topic or None,
            since=t_since,
            until=t_until,
            broker=default_name(root),
            on_bytes=advance,
            mapper=mapper,
            sync=not no_sync,
        )
    _print_table(res.to_dict())
    raise typer.Exit(1 if res.salvaged or res.damage_count or res.recovery.get("load_errors") else 0)


def register(app, guarded) -> None:
    app.command("salvage")(guarded(salvage_cmd))
