"""`rmqdump info`: what is in a store, its state, and what a restart would do."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from rmqdump.cli import render
from rmqdump.cli.commands import options as O
from rmqdump.cli.commands.options import ListFormat
from rmqdump.cli.fleet import fleet, fleet_answers
from rmqdump.common import problems as P
from rmqdump.common.timeutil import iso

if TYPE_CHECKING:
    from rmqdump.checks.recovery import DroppedRecord
    from rmqdump.query.storeinfo import StoreInfo


def _jsonl(info: StoreInfo) -> None:
    ck = info.checkpoint
    render.jsonl(
        {
            "kind": "store",
            "root": info.root,
            "abort": info.abort,
            "lock": info.lock,
            "cq_file_size": info.cq_file_size,
            "checkpoint": ck.to_dict() if ck else None,
            "other_files": info.other_files,
            "notes": info.notes,
        }
    )
    render.jsonl(info.commitlog.to_dict())
    if info.dledger is not None:
        render.jsonl(info.dledger.to_dict())
    for q in info.queues:
        render.jsonl(q.to_dict())
    for f in info.index_files:
        render.jsonl({"kind": "index", **f.to_dict()})
    for c in info.configs:
        render.jsonl({"kind": "config", **c.to_dict()})
    for u in info.unsupported:
        render.jsonl(u.to_dict())
    if info.timer is not None:
        render.jsonl(info.timer)
    for p in info.problems:
        render.jsonl(p.to_dict())
    if info.recovery is not None:
        d = info.recovery.to_dict()
        if _drops_intact(info.recovery):
            d["salvage"] = _salvage_hint(info.root)
        render.jsonl(d)


def _drops_intact(r) -> bool:
    """The restart drops at least one record that is intact: `rmqdump salvage` gives those back."""
    return any(d.state == "intact" for d in r.dropped)


def _salvage_hint(root: str) -> str:
    return f"rmqdump salvage {shlex.quote(root)} --out DIR"


DROPPED_SHOWN = 20


def _dropped_line(d: DroppedRecord) -> str:
    """One lost record as the operator re-sends it: where, what it was, and what of it is unreadable."""

    def val(v) -> str:
        return "?" if v is None else str(v)

    keys = "?" if d.keys is None else (" ".join(d.keys) or "-")
    what = f"{d.state} record" if d.state in ("intact", "torn") else f"bad record ({d.state})"  # the report's damage map row
    return (
        f"{what} at {d.phys_offset} ({d.total_size} bytes): topic {val(d.topic)}, queue {val(d.queue_id)}, "
        f"queue offset {val(d.queue_offset)}, stored {iso(d.store_timestamp) if d.store_timestamp is not None else '?'}, "
        f"keys {keys}, UNIQ_KEY {val(d.uniq_key)}"
    )


def _table(info: StoreInfo) -> None:
    o = render.out
    cl = info.commitlog
    o.print(f"[bold]Store[/bold] {info.root}")
    state = "[red]abort present: unclean shutdown[/red]" if info.abort else "clean shutdown (no abort file)"
    o.print(f"  state: {state}; lock file: {'yes' if info.lock else 'no'}")
    o.print(f"  CommitLog: {cl.summary()}")
    dl = info.dledger
    if dl is not None:
        o.print(
            f"  DLedger: {dl.path} (self id {dl.self_id}): entries {dl.first_index}..{dl.last_index} ({dl.entries}), "
            f"checkpoint committedIndex {dl.committed_index} endIndex {dl.end_index}, term {dl.current_term}, leader {dl.vote_leader}"
        )
        for f in dl.index_files:
            o.print(f"  DLedger index {f['file']}: {f['size']} bytes ({f['allocated']} on disk), {dl.units_checked} units checked against the entries")
    ck = info.checkpoint
    if ck is not None:
        o.print(
            f"  checkpoint: physic {iso(ck.physic_msg_timestamp)}, logics {iso(ck.logics_msg_timestamp)}, index {iso(ck.index_msg_timestamp)}"
            f" (recovery bound {iso(ck.min_timestamp)})"
        )
    else:
        o.print("  checkpoint: [yellow]missing[/yellow]")
    t = render.table("topic", "queue", "files", "min", "max", "units", "first stored (UTC)", "last stored (UTC)")
    for q in info.queues:
        kind = " (batch)" if q.queue_type == "BatchCQ" else " (ext)" if q.ext else ""
        t.add_row(
            q.topic + kind,
            str(q.queue_id),
            str(q.files),
            str(q.min_offset),
            str(q.max_offset),
            str(q.units),
            iso(q.first_store_timestamp),
            iso(q.last_store_timestamp),
        )
    size = "" if info.cq_file_size is None else f", file size {info.cq_file_size}"
    o.print(f"[bold]ConsumeQueues[/bold] ({len(info.queues)} queues{size})")
    o.print(t)
    t = render.table("index file", "size", "begin (UTC)", "end (UTC)", "begin phys", "end phys", "slots used", "indexCount")
    for f in info.index_files:
        h = f.header or {}
        t.add_row(
            f.name,
            str(f.size),
            iso(h.get("begin_timestamp")),
            iso(h.get("end_timestamp")),
            str(h.get("begin_phy_offset", "")),
            str(h.get("end_phy_offset", "")),
            str(h.get("hash_slot_count", "")),
            str(h.get("index_count", "")),
        )
    o.print(f"[bold]Index files[/bold] ({len(info.index_files)})")
    o.print(t)
    if info.configs:
        o.print("[bold]Config files[/bold]")
        for c in info.configs:
            o.print(f"  {Path(c.path).name} ({c.size} bytes){'' if c.error is None else ' [red]' + c.error + '[/red]'}")
    if info.other_files:
        o.print(f"other files: {', '.join(Path(p).name for p in info.other_files)}")
    if info.timer is not None:
        tm = info.timer
        o.print(
            f"[bold]Timers[/bold] {tm['pending']} pending, {tm['fired']} fired ({tm['units']} timer log units, {tm['wheel_slots']} wheel slots, "
            f"precision {tm['precision_ms']} ms); read up to {iso(tm['last_read_time_ms'])}; next delivery {iso(tm['next_deliver_ms']) or '-'}"
        )
        t = render.table("real topic", "pending", "next delivery (UTC)")
        for row in tm["topics"]:
            t.add_row(row["topic"], str(row["pending"]), iso(row["next_deliver_ms"]))
        o.print(t)
    for u in info.unsupported:
        o.print(f"[yellow]not decoded[/yellow]: {u.kind} at {u.path}: {u.detail}")
    for n in info.notes:
        o.print(f"note: {n}")
    for p in info.problems:
        o.print(f"[red]{p.code}[/red]: {p.file}{'' if p.file_offset is None else '@' + str(p.file_offset)}: {p.detail}", markup=True)
    r = info.recovery
    if r is not None:
        o.print("[bold]Recovery preview[/bold] (what the broker would do on restart)")
        o.print(f"  {'ABNORMAL' if r.abnormal else 'normal'} recovery (rules: {r.rules}, {r.rules_why}): scan from {r.scan_from} (file {r.scan_from_file}), stops at {r.valid_end}: {r.stop}")
        o.print(
            f"  dropped on restart: {r.truncated_bytes} bytes, {r.truncated_messages} messages after {r.valid_end} (logical truncation; the bytes stay on disk)"
        )
        for d in r.dropped[:DROPPED_SHOWN]:
            o.print(f"    {_dropped_line(d)}", markup=False, highlight=False)
        if r.truncated_messages > min(len(r.dropped), DROPPED_SHOWN):
            from rmqdump.checks.recovery import DROPPED_LISTED

            o.print(f"    ... {r.truncated_messages - min(len(r.dropped), DROPPED_SHOWN)} more (every one, up to {DROPPED_LISTED}, in -f jsonl)")
        if _drops_intact(r):
            o.print(f"  give the intact ones back first: {_salvage_hint(info.root)}", markup=False, highlight=False)
        if r.commitlog_files_dropped:
            o.print(f"  CommitLog files deleted: {', '.join(r.commitlog_files_dropped)}")
        o.print(f"  re-dispatch into ConsumeQueues from {r.redispatch_from}; index rebuilt from {r.index_redispatch_from}")
        o.print(f"  index files deleted on load: {', '.join(r.index_files_dropped) or 'none'}")
        for e in r.load_errors:
            o.print(f"  [red]the broker would refuse to load[/red]: {e}")
        if any(p.code == P.CL_FILE_SIZE for p in info.problems):  # repair pads or cuts those files' copies
            o.print(f"  a copy it loads (files padded or cut to size): rmqdump repair {shlex.quote(info.root)} --out NEWDIR", markup=False, highlight=False)


def _compaction(st, fmt: ListFormat) -> bool:
    """Compaction topics (compaction/): per queue its files, sizes, units and checkpoint; True when their layout has problems."""
    from rmqdump.readers.compaction import find_compaction

    cf = find_compaction(st.root)
    if cf is None or not (cf.queues or cf.checkpoint.entries or cf.problems):  # 5.x brokers leave an empty compaction/ in every store
        return False
    from rmqdump.query.compaction import compaction_summary

    rows = compaction_summary(cf)
    if fmt is ListFormat.jsonl:
        for row in rows:
            render.jsonl(row)
        for p in cf.problems:
            render.jsonl(p.to_dict())
        return bool(cf.problems)
    o = render.out
    t = render.table("topic", "queue", "checkpoint", "log files", "log bytes", "cq files", "cq bytes", "units", "min", "max")
    for r in rows[:-1]:
        t.add_row(
            r["topic"],
            str(r["queue_id"]),
            str(r["checkpoint"]),
            " ".join(n.lstrip("0") or "0" for n in r["log_files"]),
            str(r["log_bytes"]),
            str(len(r["cq_files"])),
            str(r["cq_bytes"]),
            str(r["units"]),
            str(r["min_offset"]),
            str(r["max_offset"]),
        )
    ck = rows[-1]
    o.print(f"[bold]Compaction topics[/bold] ({len(rows) - 1} queues; checkpoint {ck['used'] or ck['path'] + ' missing'}: {ck['queue_offsets']})", markup=True)
    o.print(t)
    for p in cf.problems:
        o.print(p.line(), markup=False)
    return bool(cf.problems)


def _lifecycle(st, fmt: ListFormat, store_arg: str, check_crc: bool, engine: O.Engine, workers, master, spark_conf, ship) -> None:
    """One line on the messages the broker holds back or gave up on (delays, timers, transactions, DLQs, POP): the one
    pass of `info` over the whole CommitLog, so the one --engine and -j take."""
    from rmqdump.query.storeinfo import has_lifecycle

    if not has_lifecycle(st):  # most stores: the journeys' modules are not loaded
        return
    from rmqdump.query.lifecyclesummary import lifecycle_line, lifecycle_summary

    total = sum(f.size for f in st.commitlog.files)
    with O.range_mapper(engine, workers, total, master, spark_conf, ship) as mapper:
        d = lifecycle_summary(st, check_crc=check_crc, mapper=mapper)
    if d is None:
        return
    if fmt is ListFormat.jsonl:
        render.jsonl(d)
    else:
        render.out.print(f"[bold]Lifecycle[/bold] {lifecycle_line(d, store_arg)}", highlight=False)


def info(
    store: list[str] = O.stores_option(
        "Store root (default: .). Repeat it, or give a glob such as 'brokers/*/store' (NAME=DIR names a broker): one summary row per broker, "
        "and the totals."
    ),
    fmt: ListFormat = O.format_option(ListFormat.table, "table or jsonl."),
    no_recovery: bool = typer.Option(False, "--no-recovery", help="Skip the recovery preview (it walks the CommitLog from where the broker would)."),
    no_crc: bool = O.no_crc_option("Recovery preview without the body CRC check (the broker checks it by default)."),
    broker: str = O.broker_version_option(),
    workers: int = O.workers_option(),
    engine: O.Engine = O.engine_option("the lifecycle line's pass over the CommitLog's ranges as Spark tasks; the recovery preview stays on this machine"),
    master: str = O.master_option(),
    spark_conf: list[str] = O.spark_conf_option(),
    ship: O.Ship = O.ship_option(),
):
    """Files, offsets, per-queue counts and times, index headers, checkpoint, abort, config files, and a recovery preview.

    Exit 0, or 1 when the store has layout problems or a restart would drop data.

    Example:  rmqdump info -s /data/rocketmq/store --format jsonl
    """
    from rmqdump.query.storeinfo import store_info, walk_bytes
    from rmqdump.readers.store import Store

    version = O.broker_version("info", broker)
    refs = fleet(store)
    if refs is not None:
        raise typer.Exit(_fleet(refs, fmt, not no_recovery, not no_crc, version))
    st = Store.open(store[0] if store else ".", version)
    from rmqdump.engines.local import local_map

    walked = walk_bytes(st, with_recovery=not no_recovery)
    with render.progress(walked, "info") as advance:  # on a terminal only
        inf = store_info(st, with_recovery=not no_recovery, check_crc=not no_crc, on_bytes=advance, mapper=local_map(workers, walked))
    if fmt is ListFormat.jsonl:
        _jsonl(inf)
    else:
        _table(inf)
    compaction_bad = _compaction(st, fmt)
    _lifecycle(st, fmt, store[0] if store else ".", not no_crc, engine, workers, master, spark_conf, ship)
    r = inf.recovery
    bad = bool(inf.problems) or compaction_bad or (r is not None and (r.truncated_bytes > 0 or bool(r.load_errors)))
    raise typer.Exit(1 if bad else 0)


FLEET_COLUMNS = ["broker", "state", "CommitLog files", "data bytes", "queues", "units", "index files", "problems", "restart drops", "recovery"]
_COUNTS = ("commitlog_files", "data_bytes", "queues", "units", "index_files", "problems")  # a broker row's counts, summed in the total


def broker_row(broker: str, inf: StoreInfo) -> dict:
    """One broker's line of a fleet summary."""
    r = inf.recovery
    cl = inf.commitlog
    return {
        "kind": "broker",
        "broker": broker,
        "root": inf.root,
        "abort": inf.abort,
        "commitlog_files": cl.files,
        "data_bytes": cl.data_end - cl.min_offset,
        "queues": len(inf.queues),
        "units": sum(q.units for q in inf.queues),
        "index_files": len(inf.index_files),
        "problems": len(inf.problems),
        "restart_drops_messages": None if r is None else r.truncated_messages,
        "restart_drops_bytes": None if r is None else r.truncated_bytes,
        "recovery": None if r is None else ("abnormal" if r.abnormal else "normal"),
        "recovery_stop": None if r is None else r.stop,
    }


def _fleet(refs, fmt: ListFormat, with_recovery: bool, check_crc: bool, version: tuple[int, ...] | None = None) -> int:
    """info over several stores, side by side: a row per broker and the totals; 1 when any has problems or would drop data."""
    from rmqdump.common.problems import InputError
    from rmqdump.query.storeinfo import store_info
    from rmqdump.readers.store import Store

    def one(ref):
        return store_info(Store.open(ref.root, version), with_recovery=with_recovery, check_crc=check_crc)

    rows, errors = [], []
    for ref, got in fleet_answers(refs, one):
        if isinstance(got, InputError):
            errors.append({"kind": "problem", "broker": ref.name, "code": got.code, "file": got.path, "file_offset": got.offset, "detail": got.detail})
        else:
            rows.append(broker_row(ref.name, got))
    total = {
        "kind": "fleet",
        "brokers": len(refs),
        "unreadable": len(errors),
        "unclean": sum(r["abort"] for r in rows),
        **{k: sum(r[k] or 0 for r in rows) for k in (*_COUNTS, "restart_drops_messages")},
    }
    if fmt is ListFormat.jsonl:
        for d in (*rows, *errors, total):
            render.jsonl(d)
    else:
        t = render.table(*FLEET_COLUMNS)
        for r in rows:
            drops = "-" if r["restart_drops_messages"] is None else f"{r['restart_drops_messages']} msgs / {r['restart_drops_bytes']} B"
            t.add_row(r["broker"], "abort (unclean)" if r["abort"] else "clean", *(str(r[k]) for k in _COUNTS), drops, r["recovery"] or "-")
        t.add_row(
            f"total ({total['brokers']})",
            f"{total['unclean']} unclean",
            *(str(total[k]) for k in _COUNTS),
            f"{total['restart_drops_messages']} msgs",
            "",
            style="bold",
        )
        render.out.print(t)
        for e in errors:
            render.err.print(f"{e['broker']}: {e['code']}: {e['file']}: {e['detail']}", highlight=False, markup=False)
    bad = errors or any(r["problems"] or r["restart_drops_bytes"] for r in rows)
    return 1 if bad else 0


def register(app, guarded) -> None:
    app.command("info")(guarded(info))
