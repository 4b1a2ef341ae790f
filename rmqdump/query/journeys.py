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

from rmqdump.checks.cqunits import CQ_QUEUE_MISMATCH, CQ_SIZE_MISMATCH, CQ_TOPIC_MISMATCH
from rmqdump.checks.journey import BAD_EVIDENCE, ORPHAN_CHECKPOINT, Context, Journey, link, orphan_checkpoints
from rmqdump.checks.offsets import OFFSETS_FILE, offset_entries
from rmqdump.common.problems import InputError, Problem
from rmqdump.query.journeyscan import every_journey, lifecycle_records
from rmqdump.query.lookup import Index, index_end
from rmqdump.readers.configfiles import CONFIG_DIR, JAVA_INT, JAVA_LONG, bad_config, config_table, json_kind, problem_of, read_config, whole_number
from rmqdump.readers.lifecycle import Copy, Evidence, is_evidence_topic, is_own_topic, read_record
from rmqdump.readers.msgid import id_bytes
from rmqdump.readers.store import Store
from rmqdump.scan import scanner
from rmqdump.scan.dispatch import DelayLevels
from rmqdump.scan.ranges import SERIAL, Mapper, ScanOptions, map_ranges, scan_range
from rmqdump.scan.splits import commitlog_splits
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
    how: str = ""  # "index", "scan", "queues"
    reached: int = 0  # how far into the CommitLog the queues read reach


def _config(store: Store, name: str, why: list[str] | None = None, bad: list[Problem] | None = None) -> tuple[object, str | None]:
    """A config file's content (its .bak when the file does not parse, as the broker's ConfigManager falls back);
    (None, None) when neither parses, each failure noted on `why` as 'PATH: what is wrong' and on `bad` as the finding
    bad_config (a file read that does not parse is named, never taken for an absent one)."""
    path = os.path.join(store.root, CONFIG_DIR, name)
    for p in (path, path + ".bak"):
        if os.path.isfile(p):
            cf = read_config(p)
            if cf.error is None:
                return cf.data, p
            if why is not None:
                why.append(f"{p}: {cf.error}")
            if bad is not None:
                bad.append(problem_of(cf))
    return None, None


def context(store: Store, evidence: Iterable[Evidence], *, recovery_end: int | None = None) -> Context:
    """The config files a journey is judged against. A file that does not parse counts as absent for the judging, and is
    the finding bad_config on ctx.config_problems, as is each entry of the wrong type or out of range (left out)."""
    ctx = Context(abnormal=store.abort, recovery_end=recovery_end, min_phys=store.commitlog.min_offset if store.commitlog.files else 0)
    found = ctx.config_problems
    bad: list[str] = []
    unparsed: list[Problem] = []
    data, path = _config(store, OFFSETS_FILE, bad, unparsed)
    ctx.offsets_unreadable = "; ".join(bad) if path is None else None
    # neither file parses: every verdict's caveat names them (journey ID); the store-wide passes add these findings
    (ctx.offsets_problems if path is None else found).extend(unparsed)
    if path is not None:
        ctx.offsets, wrong = offset_entries(data)
        found += [bad_config(path, why) for why in wrong]
        ctx.offsets_file = path
    data, path = _config(store, DELAY_FILE, bad=found)
    if path is not None:
        ctx.delay_offsets, wrong = delay_entries(data)
        found += [bad_config(path, why) for why in wrong]
        ctx.delay_file = path
    data, path = _config(store, GROUPS_FILE, bad=found)
    if path is not None:
        ctx.retry_limits, wrong = retry_limits(data)
        found += [bad_config(path, why) for why in wrong]
    ctx.add_evidence(evidence)
    return ctx


def delay_entries(data) -> tuple[dict[int, int], list[str]]:
    """Delay level -> the next schedule queue offset to deliver, from a parsed delayOffset.json
    (ScheduleMessageService: `{"offsetTable":{LEVEL:OFFSET}}`, levels Java ints >= 1, offsets Java longs >= 0), and why
    each entry that is not that was left out, naming its key."""
    table, bad = config_table(data, "offsetTable")
    out: dict[int, int] = {}
    for k, v in table.items():
        level = int(k) if isinstance(k, str) and k.isascii() and k.isdigit() else None
        if level is None or not 1 <= level <= JAVA_INT[1]:
            bad.append(f"offsetTable: delay level {k!r} is not an integer in [1, {JAVA_INT[1]}]")
            continue
        why = whole_number(v, 0, JAVA_LONG[1])
        if why is not None:
            bad.append(f"offsetTable[{k!r}]: offset {why}")
            continue
        out[level] = v
    return out, bad


def retry_limits(data) -> tuple[dict[str, int], list[str]]:
    """Group -> retryMaxTimes, from a parsed subscriptionGroup.json (`{"subscriptionGroupTable":{GROUP:{...,
    "retryMaxTimes":N}}}`, N a Java int), and why each group's entry that is not that was left out, naming its key."""
    table, bad = config_table(data, "subscriptionGroupTable")
    out: dict[str, int] = {}
    for g, conf in table.items():
        if not isinstance(conf, dict):
            bad.append(f"subscriptionGroupTable[{g!r}] is not an object but {json_kind(conf)}")
            continue
        if "retryMaxTimes" not in conf:
            continue
        why = whole_number(conf["retryMaxTimes"], *JAVA_INT)
        if why is not None:
            bad.append(f"subscriptionGroupTable[{g!r}]: retryMaxTimes {why}")
            continue
        out[g] = conf["retryMaxTimes"]
    return out, bad


def _fold(keys: frozenset[str] | None, batch, _cols) -> tuple[list[Copy], list[Evidence]]:
    """One batch's copies (of `keys`, or all) and evidence: the range function's share of a journey scan."""
    copies, evidence = lifecycle_records(batch, range(len(batch)))
    return [c for c in copies if keys is None or c.uniq_key in keys], evidence


def _scan_range(split, keys: frozenset[str] | None):
    rs = scan_range(split, ScanOptions(topics=frozenset(), fold=functools.partial(_fold, keys)))
    copies = [c for cs, _ in rs.folded for c in cs]
    evidence = [e for _, es in rs.folded for e in es]
    return copies, evidence, rs.problems


def scan_store(store: Store, keys: frozenset[str] | None = None, *, mapper: Mapper = SERIAL, check_crc: bool = True, on_bytes=None) -> Gathered:
    """Every copy (of `keys`, or of every message) and every record about messages, in one scan of the CommitLog."""
    g = Gathered(how="scan")
    splits = commitlog_splits(store.commitlog, check_crc=check_crc)
    for _sp, (copies, evidence, problems) in map_ranges(splits, functools.partial(_scan_range, keys=keys), mapper, progress=on_bytes):
        g.copies += copies
        g.evidence += evidence
        g.problems += problems
    return g


def _data_bytes(store: Store) -> int:
    return sum(f.size for f in store.commitlog.files)


def _evidence_queues(store: Store) -> list:
    return [q for (t, _), q in sorted(store.queues.items()) if is_evidence_topic(t) or t == L.TIMER_TOPIC]


def _queue_records(store: Store, queues, g: Gathered, *, check_crc: bool, units=None) -> Iterator[Copy | Evidence]:
    """The records the units of these queues name (all units, or `units`: (queue, unit index) pairs), read whole; what
    cannot be read is a problem on `g`. Notes on `g.reached` how far into the CommitLog the queues go."""
    pairs = units if units is not None else ((q, i) for q in queues for i in range(*q.bounds()))
    for q, i in pairs:
        u = q.unit_at(i)
        if u is None:
            continue
        g.reached = max(g.reached, u[0] + 1)
        m = scanner.record_at(store.commitlog, u[0], check_crc=check_crc, with_body=True)
        if isinstance(m, Problem):
            g.problems.append(m)
            continue
        if (m.topic, m.queue_id, m.total_size) != (q.topic, q.queue_id, u[1]):  # the unit names no record of its queue
            where = getattr(q, "path", q.topic)
            detail = f"unit {i} names the record at {u[0]} ({m.topic} queue {m.queue_id}, {m.total_size} bytes), not one of {q.topic} queue {q.queue_id} of {u[1]} bytes"
            g.problems.append(Problem(CQ_TOPIC_MISMATCH if m.topic != q.topic else CQ_QUEUE_MISMATCH if m.queue_id != q.queue_id else CQ_SIZE_MISMATCH,
                                      where, None, detail, phys_offset=u[0], extra={"topic": q.topic, "queue_id": q.queue_id, "unit_index": i}))  # fmt: skip
            continue
        r = read_record(m, m.body)
        if r is not None:
            yield r


def lookup_store(store: Store, ids: list[str], *, check_crc: bool = True, moved: bool = False) -> Gathered:
    """The copies of the messages `ids` name (UNIQ_KEYs or offset msgIds) through the index, the records about messages
    through their queues, and both in the CommitLog past where the index and those queues reach. moved: every copy the
    broker moved found past there is wanted too (with its message's earlier copies, through the index)."""
    g = Gathered(how="index")
    with Index(store.root) as index:
        keys = {resolve_key(index, text) for text in ids}
        g.reached = tail = index_end(index.files)  # the last record the IndexFiles hold (-1 with none)
        g.evidence += [r for r in _queue_records(store, _evidence_queues(store), g, check_crc=check_crc) if isinstance(r, Evidence)]
        seen: set[int] = set()
        _indexed_copies(index, sorted(keys), g, seen)
        for e in g.evidence:
            seen.add(e.phys_offset)
        more: set[str] = set()
        start = max(0, min(tail, g.reached))
        done = tail >= 0 and g.reached <= tail and store.commitlog.nothing_after(tail)
        past = () if done else scanner.batches(store.commitlog, from_offset=start, check_crc=check_crc)
        for b in past:
            g.problems += b.problems()
            copies, evidence = _fold(None if moved else frozenset(keys), b, None)
            for c in copies:
                if c.phys_offset not in seen and (c.uniq_key in keys or (moved and c.hop != L.HOP_PUT)):
                    seen.add(c.phys_offset)
                    g.copies.append(c)
                    if c.uniq_key not in keys:
                        more.add(c.uniq_key)
            g.evidence += [e for e in evidence if e.phys_offset not in seen]
        _indexed_copies(index, sorted(more), g, seen)
    return g


def _indexed_copies(index: Index, keys: list[str], g: Gathered, seen: set[int]) -> None:
    for key in keys:
        res = index.lookup(key)
        g.problems += res.unreadable
        for m in res.messages:
            if m.phys_offset not in seen and (m.uniq_key == key or (m.uniq_key is None and m.msg_id == key)):
                r = read_record(m)
                if isinstance(r, Copy):
                    seen.add(m.phys_offset)
                    g.copies.append(r)


def _moved_queues(store: Store) -> list:
    """The queues the broker moves messages through (delays, the timer, transactions, retries, the DLQ)."""
    return [
        q
        for (t, _), q in sorted(store.queues.items())
        if not is_own_topic(t) and not is_evidence_topic(t)  # the broker's topics, less those holding records about messages
    ]


def lifecycle_keys(store: Store, *, check_crc: bool = True) -> tuple[list[str], Gathered]:
    """The UNIQ_KEYs of every message the broker moved or a POP consumer popped, read through the queues (their system
    and retry topics, and the positions POP checkpoints name); and what was met on the way."""
    g = Gathered(how="queues")
    keys: dict[str, None] = {}
    for r in _queue_records(store, _moved_queues(store), g, check_crc=check_crc):
        if isinstance(r, Copy):
            keys.setdefault(r.uniq_key)
    cks = [r for r in _queue_records(store, _evidence_queues(store), g, check_crc=check_crc) if isinstance(r, Evidence) and r.hop == L.EVIDENCE_CHECKPOINT]
    named = sorted({pos for ck in cks for pos in ck.names})
    units = [(store.queues[(t, q)], qo) for t, q, qo in named if (t, q) in store.queues]
    for r in _queue_records(store, (), g, check_crc=check_crc, units=units):
        if isinstance(r, Copy):
            keys.setdefault(r.uniq_key)
    return list(keys), g


def _interesting(j: Journey) -> bool:
    return len(j.copies) > 1 or j.copies[0].hop != L.HOP_PUT or bool(j.evidence)


def lifecycle_journeys(store: Store, *, mapper: Mapper = SERIAL, check_crc: bool = True, on_bytes=None, via: str | None = None):
    """The journeys of every message the broker moved or a POP consumer popped (the store-wide views' input). Returns
    the journeys, the problems (CommitLog damage met, evidence that is not what the broker writes, orphan checkpoints),
    the Gathered records (g.problems: the damage) and the Context.

    via "queues": through the system and retry queues, the positions POP checkpoints name and the index, plus the
    CommitLog past where they reach: a few reads however big the store. via "scan": the whole-store two-pass scan,
    which also finds what no queue names (a 4.x-style prepared or rolled back record). Default: the scan for a
    CommitLog under SCAN_BELOW or a store without ConsumeQueues, else the queues."""
    if via is None:
        via = "scan" if _data_bytes(store) < SCAN_BELOW or not store.queues else "queues"
    if via == "scan":
        found, problems, ctx = [], [], Context()
        g = Gathered(how="scan")
        for item in all_journeys(store, mapper=mapper, check_crc=check_crc, on_bytes=on_bytes, spell=False):
            if isinstance(item, list):
                problems = item
            elif isinstance(item, Context):
                ctx = item
            elif isinstance(item, Journey) and _interesting(item):
                found.append(item)
        config = {id(p) for p in ctx.offsets_problems + ctx.config_problems}
        g.problems = [p for p in problems if p.code not in (ORPHAN_CHECKPOINT, BAD_EVIDENCE) and id(p) not in config]
        g.copies = [c for j in found for c in j.copies]
        g.evidence = ctx.evidence
        return found, problems, g, ctx
    end = recovery_end_of(store, check_crc)
    keys, first = lifecycle_keys(store, check_crc=check_crc)
    g = lookup_store(store, keys, check_crc=check_crc, moved=True)
    g.how = "queues"
    g.problems = first.problems + [p for p in g.problems if p not in first.problems]
    ctx = _judged(store, g, end)
    found = [j for j in link(g.copies, ctx) if _interesting(j)]
    known = {c.pos for c in g.copies}
    problems = list(g.problems) + ctx.offsets_problems + ctx.config_problems + orphan_checkpoints(ctx, known, {k: q.bounds() for k, q in store.queues.items()})
    return found, problems, g, ctx


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


def journeys(store: Store, ids: list[str] | None = None, *, mapper: Mapper = SERIAL, check_crc: bool = True, use_index: bool | None = None, on_bytes=None):
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
    ctx = _judged(store, g, recovery_end)
    found = link(g.copies, ctx)
    problems = list(g.problems) + ctx.config_problems
    if ids is None:
        known = {c.pos for c in g.copies}
        bounds = {k: q.bounds() for k, q in store.queues.items()}
        problems += orphan_checkpoints(ctx, known, bounds)
    return found, problems, g


def _judged(store: Store, g: Gathered, recovery_end: int | None) -> Context:
    """The context the gathered copies are linked in; each copy marked if the broker's recovery would cut it, with its due time."""
    ctx = context(store, g.evidence, recovery_end=recovery_end)
    for c in g.copies:
        if recovery_end is not None and c.phys_offset + c.total_size > recovery_end:
            c.recovery_drops = True
    _due_times(store, g.copies)
    return ctx


def recovery_end_of(store: Store, check_crc: bool = True) -> int | None:
    """Where the broker's recovery would cut the CommitLog, for a store it would recover abnormally (None otherwise)."""
    if not (store.abort and store.commitlog.files):
        return None
    from rmqdump.checks.recovery import preview

    return preview(store, check_crc=check_crc, count_after=False).valid_end


def all_journeys(store: Store, *, mapper: Mapper = SERIAL, check_crc: bool = True, broker: str | None = None, on_bytes=None, spell: bool = True):
    """Every journey of the store in bounded memory (rmqdump.query.journeyscan): Rendered chunks, then linked Journeys,
    then the list of problems. spell=False: the single-copy journeys are only counted, not spelled."""
    end = recovery_end_of(store, check_crc)
    return every_journey(
        store, lambda ev: context(store, ev, recovery_end=end), mapper=mapper, check_crc=check_crc, recovery_end=end, broker=broker,
        on_bytes=on_bytes, prepare=lambda copies: _due_times(store, copies), spell=spell,
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
        if u is not None and u[0] == c.phys_offset and u[1] == c.total_size:  # the unit of this copy, not one that names another record
            c.due_time = int(u[2])
        elif c.delay_level:
            c.due_time = levels.deliver_time(c.delay_level, c.store_timestamp)


__all__ = ["Gathered", "Journey", "by_keys", "journeys", "lookup_store", "scan_store"]
