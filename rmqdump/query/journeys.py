"""Gather what a journey is made of from a store: the copies of the asked messages, every record about messages, and
the config files it is judged against; then link them (rmqdump.checks.journey).

One message is found through the IndexFile (its UNIQ_KEY under every topic the store knows) plus a scan of the
CommitLog past the index's end; the records about messages through their own queues (op, revive, timer topics) plus
the same tail. `--all` (and a store small enough or without an index) is one scan of the CommitLog, mapped over its
ranges like every other CommitLog-wide pass, so -j1, -jN and Spark give the same journeys.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from rmqdump.checks.journey import Context, Journey, link, orphan_checkpoints
from rmqdump.checks.offsets import OFFSETS_FILE, offset_table
from rmqdump.common.problems import InputError, Problem
from rmqdump.query.lookup import Index
from rmqdump.readers.configfiles import CONFIG_DIR, read_config
from rmqdump.readers.lifecycle import Copy, Evidence, read_record, wants_body
from rmqdump.readers.message import Message
from rmqdump.readers.msgid import id_bytes
from rmqdump.readers.store import Store
from rmqdump.scan.dispatch import DelayLevels
from rmqdump.scan.ranges import Mapper, ScanOptions, scan_range
from rmqdump.scan.splits import DEFAULT_SPLIT, commitlog_splits
from rmqdump.scan.walk import read_at, scan_commitlog
from rmqdump.schemas import lifecycle as L

DELAY_FILE = "delayOffset.json"
GROUPS_FILE = "subscriptionGroup.json"
SCAN_BELOW = 64 << 20  # a CommitLog holding less than this is scanned whole rather than looked up


@dataclass
class Gathered:
    """What one store gave: copies (of the asked messages, or all), the records about messages, what was not found."""

    copies: list[Copy] = field(default_factory=list)
    evidence: list[Evidence] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)  # CommitLog damage met on the way
    scanned_bytes: int = 0
    how: str = ""  # "index", "scan"


def _config(store: Store, name: str) -> tuple[object, str | None]:
    path = os.path.join(store.root, CONFIG_DIR, name)
    for p in (path, path + ".bak"):
        if os.path.isfile(p):
            cf = read_config(p)
            if cf.error is None:
                return cf.data, p
    return None, None


def context(store: Store, evidence: Iterable[Evidence], *, recovery_end: int | None = None) -> Context:
    """The config files a journey is judged against, read leniently (a file that does not parse counts as absent)."""
    ctx = Context(abnormal=store.abort, recovery_end=recovery_end, min_phys=store.commitlog.min_offset if store.commitlog.files else 0)
    data, path = _config(store, OFFSETS_FILE)
    if path is not None:
        ctx.offsets = offset_table(data)
        ctx.offsets_file = path
    data, path = _config(store, DELAY_FILE)
    if isinstance(data, dict) and isinstance(data.get("offsetTable"), dict):
        for k, v in data["offsetTable"].items():
            try:
                ctx.delay_offsets[int(k)] = int(v)
            except (TypeError, ValueError):
                continue
        ctx.delay_file = path
    data, _ = _config(store, GROUPS_FILE)
    table = data.get("subscriptionGroupTable") if isinstance(data, dict) else None
    if isinstance(table, dict):
        for g, conf in table.items():
            if isinstance(conf, dict) and isinstance(conf.get("retryMaxTimes"), int):
                ctx.retry_limits[g] = conf["retryMaxTimes"]
    ctx.add_evidence(evidence)
    return ctx


def _records(batch) -> Iterator[tuple[Message, bytes | None]]:
    for i in range(len(batch)):
        m = batch.message(i)
        yield m, (batch.body(i) if wants_body(m) else None)


def _fold(keys: frozenset[str] | None, batch, _cols) -> tuple[list[Copy], list[Evidence]]:
    """One batch's copies (of `keys`, or all) and evidence: the range function's share of a journey scan."""
    copies, evidence = [], []
    for m, body in _records(batch):
        r = read_record(m, body)
        if isinstance(r, Evidence):
            evidence.append(r)
        elif r is not None and (keys is None or r.uniq_key in keys):
            copies.append(r)
    return copies, evidence


def _scan_range(split, keys: frozenset[str] | None):
    rs = scan_range(split, ScanOptions(topics=frozenset(), fold=functools.partial(_fold, keys)))
    copies = [c for cs, _ in rs.folded for c in cs]
    evidence = [e for _, es in rs.folded for e in es]
    return copies, evidence, rs.problems, rs.nbytes


def scan_store(store: Store, keys: frozenset[str] | None = None, *, mapper: Mapper = map, check_crc: bool = True, on_bytes=None) -> Gathered:
    """Every copy (of `keys`, or of every message) and every record about messages, in one scan of the CommitLog."""
    g = Gathered(how="scan")
    splits = commitlog_splits(store.commitlog, DEFAULT_SPLIT, check_crc=check_crc)
    for copies, evidence, problems, nbytes in mapper(functools.partial(_scan_range, keys=keys), splits):
        g.copies += copies
        g.evidence += evidence
        g.problems += problems
        g.scanned_bytes += nbytes
        if on_bytes is not None:
            on_bytes(nbytes)
    return g


def _data_bytes(store: Store) -> int:
    return sum(f.size for f in store.commitlog.files)


def _indexed_end(index: Index) -> int:
    """The CommitLog offset the IndexFiles reach (0 with none)."""
    return max((f.header.end_phy_offset for f in index.files if f.count > 1), default=0)


def _evidence_queues(store: Store) -> list:
    return [
        q
        for (t, _), q in sorted(store.queues.items())
        if t == L.TRANS_OP_HALF_TOPIC or t.startswith(L.REVIVE_TOPIC_PREFIX) or t == L.TIMER_TOPIC
    ]


def lookup_store(store: Store, ids: list[str], *, check_crc: bool = True) -> Gathered:
    """The copies of the messages `ids` name (UNIQ_KEYs or offset msgIds) through the index, the records about messages
    through their queues, and both in the CommitLog past where the index and those queues reach."""
    g = Gathered(how="index")
    keys = set()
    with Index(store.root) as index:
        for text in ids:
            keys.add(resolve_key(index, text))
        for key in sorted(keys):
            res = index.lookup(key)
            g.problems += res.unreadable
            for m in res.messages:
                if m.uniq_key == key or (m.uniq_key is None and m.msg_id == key):
                    r = read_record(m)
                    if isinstance(r, Copy):
                        g.copies.append(r)
        tail = _indexed_end(index)
    reached = tail
    for q in _evidence_queues(store):
        lo, hi = q.bounds()
        for i in range(lo, hi):
            u = q.unit_at(i)
            if u is None:
                continue
            phys = u[0]
            reached = max(reached, phys + 1)
            m = read_at(store.commitlog, phys, check_crc=check_crc, with_body=True)
            if isinstance(m, Problem):
                g.problems.append(m)
                continue
            r = read_record(m, m.body)
            if isinstance(r, Evidence):
                g.evidence.append(r)
    start = min(tail, reached)
    seen = {c.phys_offset for c in g.copies} | {e.phys_offset for e in g.evidence}
    for b in scan_commitlog(store.commitlog, from_offset=start, check_crc=check_crc):
        g.problems += b.problems()
        g.scanned_bytes += int(b.phys[-1]) - int(b.phys[0]) if len(b) else 0
        copies, evidence = _fold(frozenset(keys), b, None)
        g.copies += [c for c in copies if c.phys_offset not in seen]
        g.evidence += [e for e in evidence if e.phys_offset not in seen]
    return g


def resolve_key(index: Index, text: str) -> str:
    """The UNIQ_KEY a journey ID names: an offset msgId is read (its record's UNIQ_KEY), anything else is a UNIQ_KEY."""
    try:
        id_bytes(text)
    except Exception as e:
        raise InputError("bad_msgid", text, str(e)) from None
    text = text.strip().upper()
    m = index.read_offset_id(text)
    if m is not None:
        return m.uniq_key or m.msg_id
    return text


def by_keys(store: Store, keys: list[str]) -> list[str]:
    """UNIQ_KEYs of the messages whose KEYS hold any of `keys` (through the index, or a scan without one)."""
    out: list[str] = []
    with Index(store.root) as index:
        for k in keys:
            for m in index.lookup(k).messages:
                if m.uniq_key and k in m.keys and m.uniq_key not in out:
                    out.append(m.uniq_key)
    return out


def journeys(store: Store, ids: list[str] | None = None, *, mapper: Mapper = map, check_crc: bool = True, use_index: bool | None = None, on_bytes=None):
    """The journeys of the messages `ids` name (None: every message), the store-wide problems, and how it was read."""
    recovery_end = recovery_end_of(store, check_crc)
    if ids is None:
        g = scan_store(store, None, mapper=mapper, check_crc=check_crc, on_bytes=on_bytes)
    else:
        small = _data_bytes(store) < SCAN_BELOW
        indexed = use_index if use_index is not None else (not small and bool(store.index_files))
        if indexed:
            g = lookup_store(store, ids, check_crc=check_crc)
        else:
            with Index(store.root, files=[]) as index:
                keys = frozenset(resolve_key(index, t) for t in ids)
            g = scan_store(store, keys, mapper=mapper, check_crc=check_crc, on_bytes=on_bytes)
    ctx = context(store, g.evidence, recovery_end=recovery_end)
    for c in g.copies:
        if recovery_end is not None and c.phys_offset + c.total_size > recovery_end:
            c.recovery_drops = True
    _due_times(store, g.copies)
    found = link(g.copies, ctx)
    problems = list(g.problems)
    if ids is None:
        known = {c.pos for c in g.copies}
        bounds = {k: q.bounds() for k, q in store.queues.items()}
        problems += orphan_checkpoints(ctx, known, bounds)
    return found, problems, g


def recovery_end_of(store: Store, check_crc: bool = True) -> int | None:
    """Where the broker's recovery would cut the CommitLog, for a store it would recover abnormally (None otherwise)."""
    if not (store.abort and store.commitlog.files):
        return None
    from rmqdump.checks.recovery import preview

    return preview(store, check_crc=check_crc, count_after=False).valid_end


def all_journeys(store: Store, *, mapper: Mapper = map, check_crc: bool = True, broker: str | None = None, on_bytes=None):
    """Every journey of the store in bounded memory (rmqdump.query.journeyscan): Rendered chunks, then linked Journeys,
    then the list of problems."""
    from rmqdump.query.journeyscan import every_journey

    end = recovery_end_of(store, check_crc)
    return every_journey(
        store, lambda ev: context(store, ev, recovery_end=end), mapper=mapper, check_crc=check_crc, recovery_end=end, broker=broker,
        on_bytes=on_bytes, prepare=lambda copies: _due_times(store, copies),
    )  # fmt: skip


def _due_times(store: Store, copies: list[Copy]) -> None:
    """A delay-level copy falls due at its ConsumeQueue unit's tagsCode (what the broker computed with its levels);
    without the unit, at its store time plus the default level's delay."""
    levels = DelayLevels.parse()
    for c in copies:
        if c.hop != L.HOP_SCHEDULED or c.due_time is not None:
            continue
        q = store.queues.get((c.topic, c.queue_id))
        u = q.unit_at(c.queue_offset) if q is not None else None
        if u is not None and u[0] == c.phys_offset:
            c.due_time = int(u[2])
        elif c.delay_level:
            c.due_time = levels.deliver_time(c.delay_level, c.store_timestamp)


__all__ = ["Gathered", "Journey", "by_keys", "journeys", "lookup_store", "scan_store"]
