"""`rmqdump index lookup|verify|dump`: the IndexFile, read the way the broker's queryMessage reads it."""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from rmqdump.cli import render
from rmqdump.cli.commands import options as O
from rmqdump.cli.commands.options import ListFormat, store_option
from rmqdump.cli.fleet import FLEET_HELP, fleet, fleet_answers
from rmqdump.cli.helptext import WholeSentenceGroup
from rmqdump.common.problems import InputError
from rmqdump.common.timeutil import iso, parse_time

if TYPE_CHECKING:
    from rmqdump.query.lookup import FileWalk, LookupResult
    from rmqdump.readers.message import Message

index_app = typer.Typer(
    name="index",
    help="IndexFile: find messages by key or id, verify the index against the CommitLog, dump a file.",
    no_args_is_help=True,
    cls=WholeSentenceGroup, rich_markup_mode=None,  # plain click help: rich and markdown-it cost start-up time
)

MESSAGE_COLUMNS = ["offset", "size", "topic", "q", "qoffset", "stored (UTC)", "tags", "keys", "uniq_key", "index entry"]


HASH_SLOTS = "The broker's maxHashSlotNum (default: inferred from the file)."
INDEX_ENTRIES = "The broker's maxIndexNum (default: inferred from the file)."


def print_messages(messages: list[Message], brokers: bool = False) -> None:
    t = render.table(*(["broker"] if brokers else []), *MESSAGE_COLUMNS, pad_edge=False)
    for m in messages:
        where = f"{m.extra.get('index_file', '')}#{m.extra.get('index_entry', '')}" if "index_file" in m.extra else m.extra.get("source", "-")
        t.add_row(*([m.extra.get("broker", "")] if brokers else []), *render.message_cells(m), where)
    render.out.print(t)


def print_explain(res: LookupResult) -> None:
    for k in res.keys:
        render.out.print(f"key {k['index_key']!r}: hash {k['hash']}", markup=False)
        for w in (w for w in res.walks if w.topic == k["topic"]):
            render.out.print("  " + _walk_line(w), markup=False)
            for c in w.candidates:
                delta = "" if c.time_delta_ms is None else f", stored {c.time_delta_ms:+d} ms after the index time"
                render.out.print(f"    entry {c.entry} -> phyOffset {c.phys_offset}: {c.verdict}{delta}{': ' + c.detail if c.detail else ''}", markup=False)


def _walk_line(w: FileWalk) -> str:
    if w.skipped:
        return f"{w.index_file}: slot {w.slot}: not walked ({w.skipped})"
    return f"{w.index_file}: slot {w.slot} -> entry {w.head}, {w.steps} entries walked (ended: {w.stop}), {w.other_hashes} of other hashes"


def _summary(res: LookupResult) -> dict:
    return {
        "kind": "summary",
        "key": res.key,
        "found": len(res.messages),
        "discarded_collisions": res.collisions,
        "same_slot_other_hashes": sum(w.other_hashes for w in res.walks),
        "outside_window": res.outside_window,
        "unreadable": len(res.unreadable),
        "truncated": res.truncated,
        "unindexed_tail": None if res.tail is None else res.tail.to_dict(res.found_in_tail),
    }


def lookup(
    key: str = typer.Argument(None, metavar="KEY", help="A key (one KEYS token) or a UNIQ_KEY."),
    msg_id: str = typer.Option(None, "--id", help="A message id instead of KEY: an offset msgId is read directly, a UNIQ_KEY looked up in the index."),
    store: list[str] = O.stores_option(FLEET_HELP),
    topics: list[str] = O.topic_option("Topic of the message (repeatable). Default: every topic in consumequeue/ and config/topics.json."),
    since: str = O.since_option(),
    until: str = O.until_option(),
    limit: int = O.limit_option("Stop after this many messages (newest index files first)."),
    fmt: ListFormat = O.format_option(ListFormat.table, "table or jsonl (the `kind: message` objects of `rmqdump commitlog`)."),
    explain: bool = typer.Option(False, "--explain", help="Show the hash, slot, chain walk and time differences per index file."),
    hash_slots: int = O.hash_slots_option(HASH_SLOTS),
    index_entries: int = O.index_entries_option(INDEX_ENTRIES, min=1),
    workers: int = O.workers_option(),
    engine: O.Engine = O.engine_option("the CommitLog past the index's end read as Spark tasks"),
    master: str = O.master_option(),
    spark_conf: list[str] = O.spark_conf_option(),
    ship: O.Ship = O.ship_option(),
):
    """Find messages by key or UNIQ_KEY through the index files, newest first, and read them from the CommitLog.

    Every candidate is read and kept only if its topic and KEYS or UNIQ_KEY
    really equal KEY (the index stores only a hash). Exit 0 found, 1 not
    found, 2 bad input.

    Example:  rmqdump index lookup k1_0 --store fixtures/real/rmq4-basic/store -t orders --explain
    """
    if (key is None) == (msg_id is None):
        render.fail("usage: give either KEY or --id ID", 2)
    b, e = (O.parsed(None, parse_time, t or None) for t in (since, until))
    e = None if e is None else e - 1  # the index walk's end is inclusive (like queryMessage); --until is not
    refs = fleet(store)
    with tail_mappers(engine, workers, master, spark_conf, ship) as tails:
        if refs is None:
            got = lookup_quiet(str(store[0] if store else "."), key, msg_id, topics, b, e, limit, hash_slots, index_entries, tails)
            raise typer.Exit(0 if emit_store(got, fmt, explain) else 1)
        raise typer.Exit(fleet_lookup(refs, lambda ref: lookup_quiet(ref.root, key, msg_id, topics, b, e, limit, hash_slots, index_entries, tails), fmt, explain))


def emit_store(got, fmt: ListFormat, explain: bool, broker: str | None = None) -> list:
    """One store's answer (lookup_quiet's): its decoded id (JSON Lines), then what emit_lookup prints; its messages.
    A fleet's store (`broker`) names its broker and its error is one line of the answer; a single store's error ends
    the command."""
    if isinstance(got, InputError):
        if broker is None:
            raise got
        if fmt is ListFormat.jsonl:
            render.jsonl({"kind": "problem", "broker": broker, "code": got.code, "file": got.path, "file_offset": got.offset, "detail": got.detail})
        else:
            render.err.print(f"{broker}: {got.line()}", highlight=False, markup=False)
        return []
    messages, res, decoded = got
    more = {} if broker is None else {"broker": broker}
    for m in messages:
        m.extra.update(more)
    if decoded is not None and fmt is ListFormat.jsonl:
        render.jsonl({**more, **decoded})
    emit_lookup(messages, res, fmt, explain, broker)
    return messages


def lookup_quiet(root: str, key, msg_id, topics, b, e, limit, hash_slots, index_entries, tails):
    """One store's lookup, printing nothing: (messages, lookup result, decoded id); InputError when it cannot be read.

    Without index files the whole CommitLog is scanned; without either there is nothing to look in. `tails(root)`:
    the mapper over the ranges past the index (tail_mappers)."""
    from rmqdump.query.lookup import Index
    from rmqdump.readers.indexfile import list_index_files

    if not list_index_files(root) and not _commitlog_files(root):
        raise InputError("index_no_files", os.path.join(root, "index"), "no index files and no CommitLog files to scan (is this a store root?)")
    with Index(root, hash_slots, index_entries, mapper=tails(root)) as idx:
        if msg_id is not None:  # an offset msgId is read directly: no topics, no scan past the index
            r = resolve_msgid(idx, msg_id, topics, begin=b, end=e, max_messages=limit)
            if r.kind == "uniq_key":
                _need_topics(root, topics, idx)
            return r.messages, r.lookup, r.decoded(_now_ms())
        _need_topics(root, topics, idx)
        res = idx.lookup(key, topics or None, begin=b, end=e, max_messages=limit)
        return res.messages, res, None


def _need_topics(root: str, topics, idx) -> None:
    if not topics and not idx.topics:
        raise InputError("no_topics", root, "the store names no topics (no consumequeue/ directories, no config/topics.json, no records): pass --topic")


def resolve_msgid(idx, text: str, topics, **kw):
    """resolve_id, a malformed id as the input error msgid_bad."""
    from rmqdump.query.lookup import resolve_id
    from rmqdump.readers.msgid import MsgIdError

    try:
        return resolve_id(idx, text, topics or None, **kw)
    except MsgIdError as err:
        raise InputError("msgid_bad", text, str(err)) from None


def _commitlog_files(root: str) -> list[tuple[str, int]]:
    """A store's CommitLog files (named by their offset, in commitlog_dir) and their sizes, each proven readable (the
    input error `unreadable` names the first that is not, or the directory); none without a CommitLog directory."""
    from rmqdump.readers.commitlog import commitlog_dir
    from rmqdump.readers.mapped import offset_files

    d = commitlog_dir(root)
    if d is None:
        return []
    try:
        files, _ = offset_files(d)
    except OSError as e:
        raise InputError("unreadable", d, e.strerror or str(e), 0) from None
    return [(f.path, f.size) for f in files]


@contextmanager
def tail_mappers(engine: O.Engine, workers: int | None, master: str, spark_conf: list[str], ship: O.Ship):
    """root -> the mapper a lookup scans past that store's index with: the local engine's threads per store (-j, or
    by its CommitLog's size), or one Spark session's tasks for every store of the command."""
    if engine is O.Engine.local:
        from rmqdump.engines.local import local_map

        yield lambda root: local_map(workers, sum(size for _, size in _commitlog_files(root)))
        return
    with O.range_mapper(engine, workers, 0, master, spark_conf, ship) as mapper:
        yield lambda root: mapper


def fleet_lookup(refs, one, fmt: ListFormat, explain: bool) -> int:
    """`one(ref)` (lookup_quiet of a store) over the fleet, side by side; every broker's answer emitted; the exit code."""
    found: list = []
    for ref, got in fleet_answers(refs, one):
        found += emit_store(got, fmt, explain, ref.name)
    if fmt is not ListFormat.jsonl and found:
        print_messages(found, brokers=True)
    return 0 if found else 1


def _now_ms() -> int:
    import time

    return int(time.time() * 1000)


def emit_lookup(messages: list[Message], res: LookupResult | None, fmt: ListFormat, explain: bool, broker: str | None = None) -> None:
    """Messages found through the index, the walk (--explain) and a summary; shared with `rmqdump msgid`. A fleet's
    store (`broker`): every row and line names its broker, and its messages are left to the fleet's one table."""
    more = {} if broker is None else {"broker": broker}
    if fmt is ListFormat.jsonl:
        if explain and res is not None:
            for w in res.walks:
                render.jsonl({**more, **w.to_dict()})
        for m in messages:
            render.jsonl({**more, **m.to_dict()})
        if res is not None:
            render.jsonl({**more, **_summary(res)})
        return
    if explain and res is not None:
        if broker is not None:
            render.out.print(f"broker {broker}:", markup=False, highlight=False)
        print_explain(res)
    if messages and broker is None:
        print_messages(messages)
    if res is not None:
        render.err.print(("" if broker is None else f"{broker}: ") + _summary_line(_summary(res)), highlight=False, markup=False)


def _summary_line(s: dict) -> str:
    return (
        f"{s['found']} messages; discarded {s['discarded_collisions']} hash collisions and {s['same_slot_other_hashes']} same-slot entries of other keys"
        + (f"; {s['outside_window']} outside the time window" if s["outside_window"] else "")
        + (f"; {s['unreadable']} entries point at unreadable records" if s["unreadable"] else "")
        + ("; stopped at --limit" if s["truncated"] else "")
        + _tail_line(s["unindexed_tail"])
    )


def _tail_line(t: dict | None) -> str:
    """How much of the CommitLog past the index's end was scanned, and whether all of it could be read."""
    if t is None:
        return ""
    return (
        f"; {t['found']} of them past the index ({t['why']}; scanned {t['from_offset']}..{t['to_offset']}: {t['bytes']} bytes, {t['records']} records)"
        + (f"; {t['problems']} damaged stretches there: keys in them cannot be read" if t["problems"] else "")
    )


def verify_cmd(
    store: Path = store_option(),
    fmt: ListFormat = O.format_option(ListFormat.table, "table or jsonl (one problem object per finding, then a summary)."),
    hash_slots: int = O.hash_slots_option(HASH_SLOTS),
    index_entries: int = O.index_entries_option(INDEX_ENTRIES, min=1),
    workers: int = O.workers_option(),
    engine: O.Engine = O.engine_option("the CommitLog's ranges read by Spark tasks; the index files checked on this machine"),
    master: str = O.master_option(),
    spark_conf: list[str] = O.spark_conf_option(),
    ship: O.Ship = O.ship_option(),
):
    """Check every index file against itself and against the CommitLog, both ways.

    Header counts, begin/end offsets and times; slots within the count; chains
    that go backwards, stay in their slot and end; every entry at a record
    start with a key of its hash and the right timeDiff; every key the broker
    would index present. Not damage: entry 1's timeDiff counted from the
    previous file, the re-indexed message after an abnormal recovery.
    Exit 0 clean, 1 problems, 2 unusable input.

    Example:  rmqdump index verify --store fixtures/real/rmq4-crash/store -f jsonl
    """
    from rmqdump.checks.indexverify import PROBLEM_COLUMNS, IndexVerifySummary, verify
    from rmqdump.readers.commitlog import commitlog_path

    if not os.path.isdir(str(store)):
        raise InputError("not_found", str(store), "no such store directory")
    files = _commitlog_files(str(store))
    if not files:
        raise InputError("no_commitlog", commitlog_path(str(store)), "no CommitLog files: the index is checked against them (is this a store root?)")
    s = IndexVerifySummary()
    total = sum(size for _, size in files)
    with O.range_mapper(engine, workers, total, master, spark_conf, ship) as mapper, render.progress(total, "index verify") as advance:
        found = verify(str(store), hash_slots=hash_slots, index_entries=index_entries, summary=s, on_bytes=advance, mapper=mapper)
        rows = (p.to_dict(PROBLEM_COLUMNS) for p in found)
        if fmt is ListFormat.jsonl:
            for d in rows:
                render.jsonl(d)
        else:
            keys = ("code", "index_file", "entry", "slot", "phys_offset", "detail")
            cells = ([render.cell(d.get(c)) for c in keys] for d in rows)
            render.tables(("code", "index file", "entry", "slot", "phys_offset", "detail"), cells, pad_edge=False)
    if fmt is ListFormat.jsonl:
        render.jsonl(s.to_dict())
    else:
        render.err.print(
            f"{s.problems} problems in {s.index_files} index files ({s.entries} entries; {s.messages} messages, {s.indexed_keys} keys to index)"
            + ("".join(f"\n  {c}: {n}" for c, n in sorted(s.codes.items()))),
            highlight=False,
        )
    raise typer.Exit(1 if s.problems else 0)


def dump(
    file: Path = typer.Argument(..., metavar="FILE", help="One index file (store/index/yyyyMMddHHmmssSSS)."),
    fmt: ListFormat = O.format_option(ListFormat.table, "table or jsonl."),
    slots: bool = typer.Option(True, "--slots/--no-slots", help="List the non-empty slots."),
    entries: bool = typer.Option(True, "--entries/--no-entries", help="List the written entries."),
    from_entry: int = typer.Option(1, "--from", min=0, help="First entry to list."),
    limit: int = O.limit_option("List at most this many entries."),
    hash_slots: int = O.hash_slots_option(HASH_SLOTS),
    index_entries: int = O.index_entries_option(INDEX_ENTRIES, min=1),
):
    """Print an index file's header, its non-empty slots and its entries, decoded.

    Example:  rmqdump index dump fixtures/real/rmq4-flags/store/index/20261121235455699 -n 10
    """
    from rmqdump.readers.indexfile import IndexFile

    if not file.is_file():
        raise InputError("not_found", str(file), "no such index file")
    with IndexFile(str(file), hash_slots, index_entries) as f:
        head = {
            "kind": "header",
            "file": f.path,
            **f.header.to_dict(),
            "hash_slots": f.layout.hash_slots,
            "index_entries": f.layout.index_entries,
            "sizing": f.layout.source,
        }
        if fmt is ListFormat.jsonl:
            render.jsonl(head)
        else:
            for k, v in head.items():
                if k != "kind":
                    render.out.print(f"{k}: {v}" + (f" ({iso(v)})" if k.endswith("timestamp") and v else ""), markup=False)
        if slots:
            used = f.used_slots()
            rows = [{"kind": "slot", "slot": int(s), "entry": int(f.slots[s])} for s in used.tolist()]
            _rows(rows, fmt, ["slot", "entry"], None)
        if entries:
            stop = f.count if limit is None else min(f.count, from_entry + limit)
            cols = ["entry", "key_hash", "slot", "phys_offset", "time_diff", "time", "prev_index"]
            _rows((_entry(f, k) for k in range(max(from_entry, 0), stop)), fmt, cols, 1000)


def _entry(f, k: int) -> dict:
    st = f.step(k)
    return {
        "kind": "entry",
        "entry": k,
        "key_hash": st.key_hash,
        "slot": f.slot_of(st.key_hash) if st.key_hash >= 0 else None,
        "phys_offset": st.phys_offset,
        "time_diff": st.time_diff,
        "time": st.time,
        "prev_index": st.prev_index,
    }


def _rows(rows, fmt: ListFormat, cols: list[str], every: int | None) -> None:
    """JSON Lines, or tables of `every` rows printed as they come (render.tables)."""
    if fmt is ListFormat.jsonl:
        for r in rows:
            render.jsonl(r)
        return
    render.tables(cols, ([iso(r[c]) if c == "time" else str(r[c]) for c in cols] for r in rows), every, pad_edge=False)


def register(app, guarded) -> None:
    index_app.command("lookup")(guarded(lookup))
    index_app.command("verify")(guarded(verify_cmd))
    index_app.command("dump")(guarded(dump))
    app.add_typer(index_app, name="index")
