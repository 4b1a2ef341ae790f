"""Where a message went and why a consumer did or did not get it: its copies and the records about it, linked.

A message's copies (every record carrying its UNIQ_KEY, rmqdump.readers.lifecycle) say where it has been; the records
about it say what was decided: an op record settles a transaction's half, POP checkpoints and acks say who popped it
and whether they acked. With the committed offsets (config/consumerOffset.json), the delay levels' progress
(config/delayOffset.json) and the groups' retry limits (config/subscriptionGroup.json), that is where it stands (the
verdict's state), what each consumer group did with it, and what is odd about it (problems with stable codes).
Nothing here reads a store: the caller hands the records and the context over.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from rmqdump.common.jsontext import fields_of
from rmqdump.common.problems import Problem
from rmqdump.common.timeutil import iso
from rmqdump.readers.lifecycle import Copy, Evidence, QueuePos
from rmqdump.readers.msgid import OffsetMsgId
from rmqdump.schemas import lifecycle as L

# problem codes
DOUBLE_COMMIT = "journey_double_commit"
COMMIT_WITHOUT_HALF = "journey_commit_without_half"
DELAY_UNDELIVERED = "journey_delay_undelivered"
ORIGIN_MISSING = "journey_origin_missing"
DLQ_BEFORE_LIMIT = "journey_dlq_before_retry_limit"
ORPHAN_CHECKPOINT = "journey_orphan_checkpoint"
BAD_EVIDENCE = "journey_bad_evidence"

_READABLE = (L.HOP_PUT, L.HOP_DELIVERED, L.HOP_COMMIT, L.HOP_RETRY, L.HOP_POP_RETRY)


@dataclass
class PopLedger:
    """Every POP checkpoint and ack in the store, as the revive service matches them (group, topic, queue, start, pop time)."""

    checkpoints: dict[tuple, Evidence] = field(default_factory=dict)
    covering: dict[tuple[str, QueuePos], list[tuple]] = field(default_factory=lambda: defaultdict(list))  # (group, pos) -> ck keys
    acks: set[tuple] = field(default_factory=set)  # ck key + (queue offset,)
    groups_of_topic: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))

    def add(self, ev: Evidence) -> None:
        key = ev.ck_key()
        if key is None:
            return
        if ev.hop == L.EVIDENCE_CHECKPOINT:
            held = self.checkpoints.get(key)
            if held is None or (held.held_in_timer and not ev.held_in_timer):
                self.checkpoints[key] = ev  # the copy in the revive topic is the one the revive service reads
            for pos in ev.names:
                if key not in self.covering[(ev.group, pos)]:
                    self.covering[(ev.group, pos)].append(key)
            for qo in ev.acked:
                self.acks.add((*key, qo))
            self.groups_of_topic[key[1]].add(ev.group)
        else:
            for _, _, qo in ev.names:
                self.acks.add((*key, qo))

    @property
    def groups(self) -> set[str]:
        return {g for gs in self.groups_of_topic.values() for g in gs}


@dataclass
class Context:
    """What a journey is judged against besides its own records: config files, the POP ledger, the op records."""

    offsets: dict[tuple[str, str, int], int] = field(default_factory=dict)  # (group, topic, queue id) -> committed offset
    offsets_file: str | None = None  # None: the store has no consumerOffset.json that parses
    offsets_unreadable: str | None = None  # why the file and its .bak do not parse, when they are there
    delay_offsets: dict[int, int] = field(default_factory=dict)  # delay level -> next schedule queue offset to deliver
    delay_file: str | None = None
    retry_limits: dict[str, int] = field(default_factory=dict)  # group -> retryMaxTimes
    offsets_problems: list[Problem] = field(default_factory=list)  # bad_config: consumerOffset.json and its .bak, neither parsing (offsets_unreadable)
    config_problems: list[Problem] = field(default_factory=list)  # bad_config: a config file read that does not parse, or its entries that are damage
    abnormal: bool = False  # the broker did not shut down cleanly: config files as last persisted
    recovery_end: int | None = None  # where the broker's recovery would cut the CommitLog (abnormal stores)
    min_phys: int = 0  # records below this were deleted with their files
    pop: PopLedger = field(default_factory=PopLedger)
    settled: dict[QueuePos, list[Evidence]] = field(default_factory=lambda: defaultdict(list))  # half position -> op records
    evidence: list[Evidence] = field(default_factory=list)

    def add_evidence(self, evs: Iterable[Evidence]) -> None:
        for ev in evs:
            self.evidence.append(ev)
            if ev.hop == L.EVIDENCE_OP:
                for pos in ev.names:
                    self.settled[pos].append(ev)
            else:
                self.pop.add(ev)

    def readers_of(self, topic: str) -> set[str]:
        """Consumer groups with a committed offset on the topic."""
        return self._readers().get(topic, set())

    def _readers(self) -> dict[str, set[str]]:
        got = getattr(self, "_readers_cache", None)
        if got is None:
            got = defaultdict(set)
            for g, t, _ in self.offsets:
                got[t].add(g)
            self._readers_cache = got
        return got


@dataclass
class Verdict:
    uniq_key: str
    state: str
    groups: dict[str, str]
    why: str
    due_time: int | None = None
    weaker: list[str] = field(default_factory=list)  # where the evidence is weaker (crash: files as last persisted)

    def to_dict(self) -> dict:
        return {"kind": "verdict", **fields_of(self, omit=("weaker",)), "evidence_caveats": self.weaker}


@dataclass
class Journey:
    uniq_key: str
    copies: list[Copy]
    evidence: list[tuple[Evidence, QueuePos]]
    verdict: Verdict
    problems: list[Problem]

    def rows(self) -> list[dict]:
        """Copies and evidence in store order, then the verdict, then the problems: the JSON Lines of one journey."""
        items = [(c.phys_offset, 0, c.to_dict()) for c in self.copies]
        items += [(ev.phys_offset, 1, ev.to_dict(self.uniq_key, name)) for ev, name in self.evidence]
        out = [d for _, _, d in sorted(items, key=lambda x: (x[0], x[1]))]
        out.append(self.verdict.to_dict())
        out += [{**p.to_dict(), "uniq_key": self.uniq_key} for p in self.problems]
        return out


def _n(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _file_offset(file: str, phys: int) -> int | None:
    name = os.path.basename(file)
    return phys - int(name) if name.isdigit() else None


def _problem(code: str, c: Copy | Evidence, detail: str) -> Problem:
    """A finding at a copy's record, or at the record of a piece of evidence."""
    return Problem(code, c.file, _file_offset(c.file, c.phys_offset), detail, phys_offset=c.phys_offset)


def link(copies: Iterable[Copy], ctx: Context) -> list[Journey]:
    """The journeys of the messages these copies belong to, in the order of each message's first copy."""
    by_key: dict[str, list[Copy]] = {}
    for c in copies:
        by_key.setdefault(c.uniq_key, []).append(c)
    where: dict[QueuePos, str] = {}
    for key, cs in by_key.items():
        for c in cs:
            where.setdefault(c.pos, key)
    named: dict[str, list[tuple[Evidence, QueuePos]]] = defaultdict(list)
    for ev in ctx.evidence:
        for pos in ev.names:
            key = where.get(pos)
            if key is not None:
                named[key].append((ev, pos))
    out = [judge(sorted(cs, key=lambda c: c.phys_offset), named.get(key, []), ctx) for key, cs in by_key.items()]
    out.sort(key=lambda j: j.copies[0].phys_offset)
    return out


def orphan_checkpoints(ctx: Context, known: set[QueuePos], queue_bounds: dict[tuple[str, int], tuple[int, int]]) -> list[Problem]:
    """POP checkpoints naming a queue position no message holds any more, within the queue's range: the ack that would
    settle it can never come (whole-store passes only: a lookup of one message does not know every position)."""
    out = []
    for ev in ctx.evidence:
        if ev.hop != L.EVIDENCE_CHECKPOINT:
            continue
        for t, q, qo in ev.names:
            lo, _hi = queue_bounds.get((t, q), (None, None))
            if (t, q, qo) in known or (lo is not None and qo < lo):
                continue  # present, or below the queue's minimum: deleted with its files, as the broker expects
            detail = f"POP checkpoint of {ev.group} names {t} queue {q} offset {qo}, which holds no message: its ack can never come"
            out.append(_problem(ORPHAN_CHECKPOINT, ev, detail))
    for ev in ctx.evidence:
        if ev.problem:
            out.append(_problem(BAD_EVIDENCE, ev, ev.problem))
    return out


def judge(copies: list[Copy], evidence: list[tuple[Evidence, QueuePos]], ctx: Context) -> Journey:
    key = copies[0].uniq_key
    problems: list[Problem] = []
    hops = [c.hop for c in copies]
    state, why, due = _state(copies, hops, ctx, problems)
    groups, why = _with_groups(why, {g: _group_status(g, copies, ctx) for g in sorted(_groups(copies, ctx))})
    weaker = store_caveats(ctx)
    dropped = [c for c in copies if c.recovery_drops]
    if dropped:
        weaker.insert(
            len(weaker) - (ctx.offsets_file is None),
            f"the broker's recovery would drop {len(dropped)} of its copies (from CommitLog offset {dropped[0].phys_offset})",
        )
    _problems(copies, ctx, problems)
    return Journey(key, copies, evidence, Verdict(key, state, groups, why, due, weaker), problems)


def _with_groups(why: str, statuses: dict[str, tuple[str, str]]) -> tuple[dict[str, str], str]:
    """Each group's status, from (status, note) per group, and the verdict's `why` with the groups' notes after it."""
    notes = [note for _, note in statuses.values()]
    return {g: status for g, (status, _) in statuses.items()}, why + ("" if not notes else " " + " ".join(notes))


def store_caveats(ctx: Context) -> list[str]:
    """What weakens every verdict of the store: files as last persisted after a crash, no committed offsets at all."""
    out = []
    if ctx.abnormal:
        out.append(
            "the broker did not shut down cleanly: committed offsets and delay progress are as last persisted "
            "(a message shown not_consumed may have been consumed and not yet committed: a restart delivers it again)"
        )
    if ctx.offsets_file is None:
        out.append(
            f"config/consumerOffset.json does not parse ({ctx.offsets_unreadable}): no group's progress is known"
            if ctx.offsets_unreadable
            else "the store has no config/consumerOffset.json: no group's progress is known"
        )
    return out


def delivered_why(topic: str, queue_id: int, queue_offset: int) -> str:
    return f"Delivered to {topic} queue {queue_id} offset {queue_offset}."


def committed_wording(g: str, topic: str, queue_id: int, committed: int | None) -> tuple[tuple[str, str, str | None], ...]:
    """The (status, text before the queue offset, text after it) of a push group's note for a queue offset below its
    committed offset and for one at or above it; None after: the note does not name the queue offset. One home for
    the wording, which the whole-store pass spells column-wise (rmqdump.query.journeyscan)."""
    if committed is None:
        none = (L.GROUP_NOT_CONSUMED, f"{g}: not consumed (no committed offset on {topic} queue {queue_id}).", None)
        return none, none
    return (
        (L.GROUP_CONSUMED, f"{g}: consumed ({topic} queue {queue_id} committed to {committed} > ", ")."),
        (L.GROUP_NOT_CONSUMED, f"{g}: not consumed ({topic} queue {queue_id} committed to {committed} <= ", ")."),
    )


def committed_status(g: str, topic: str, queue_id: int, queue_offset: int, committed: int | None) -> tuple[str, str]:
    """A push group's status on the copy it reads last, from its committed offset on that queue."""
    status, head, tail = committed_wording(g, topic, queue_id, committed)[committed is None or committed <= queue_offset]
    return status, head if tail is None else f"{head}{queue_offset}{tail}"


@dataclass
class PutJudge:
    """The verdict `judge` gives a message stored once, as put, in a topic no POP group reads, without building its
    journey: what a whole-store pass needs for most messages. Picklable (a Spark task takes it along)."""

    readers: dict[str, list[str]]  # topic -> push groups with a committed offset on it, sorted
    offsets: dict[tuple[str, str, int], int]
    caveats: list[str]

    @classmethod
    def of(cls, ctx: Context) -> PutJudge:
        readers = {t: sorted(g for g in ctx.readers_of(t) if g not in (L.TRANS_GROUP, L.REVIVE_GROUP)) for t in ctx._readers()}
        return cls(readers, dict(ctx.offsets), store_caveats(ctx))

    def verdict(self, key: str, topic: str, queue_id: int, queue_offset: int) -> dict:
        statuses = {g: committed_status(g, topic, queue_id, queue_offset, self.offsets.get((g, topic, queue_id))) for g in self.readers.get(topic, ())}
        groups, why = _with_groups(delivered_why(topic, queue_id, queue_offset), statuses)
        return Verdict(key, L.STATE_DELIVERED, groups, why, None, list(self.caveats)).to_dict()


def _where(c: Copy) -> str:
    return f"{c.topic} queue {c.queue_id} offset {c.queue_offset}"


def _state(copies: list[Copy], hops: list[str], ctx: Context, problems: list[Problem]) -> tuple[str, str, int | None]:
    last = copies[-1]
    dlq = [c for c in copies if c.hop == L.HOP_DLQ]
    if dlq:
        d = dlq[-1]
        return (
            L.STATE_DEAD_LETTER,
            f"Dead-lettered into {_where(d)} after {_n(d.reconsume_times, 'delivery attempt')}; no consumer gets it unless the DLQ is consumed.",
            None,
        )
    if any(h in L.TX_HOPS for h in hops):
        halves = [c for c in copies if c.hop in (L.HOP_HALF, L.HOP_HALF_CHECK, L.HOP_PREPARED)]
        checks = max((c.check_times or 0 for c in copies), default=0)
        commits = [c for c in copies if c.hop == L.HOP_COMMIT]
        ops = [ev for c in halves for ev in ctx.settled.get(c.pos, [])]
        if commits:
            cm = commits[0]
            return L.STATE_TX_COMMITTED, f"Transaction committed after {checks} broker checks: delivered to {_where(cm)}.", None
        if ops or L.HOP_ROLLBACK in hops:
            at = f" (op record at CommitLog offset {ops[0].phys_offset})" if ops else ""
            return (
                L.STATE_TX_ROLLED_BACK,
                f"Transaction rolled back after {checks} broker checks{at}: never delivered to {halves[-1].target_topic if halves else last.topic}.",
                None,
            )
        cm = [c for c in copies if c.hop == L.HOP_CHECK_MAX]
        if cm:
            return (
                L.STATE_TX_DISCARDED,
                f"Transaction never settled: discarded into {cm[-1].topic} after {checks} broker checks; never delivered to {cm[-1].target_topic}.",
                None,
            )
        return (
            L.STATE_TX_PENDING,
            f"Half message waiting for its transaction's end ({checks} broker checks so far, latest at {_where(halves[-1]) if halves else _where(last)}); "
            f"consumers of {last.target_topic} see nothing until it is committed.",
            None,
        )
    if last.hop in L.HOLDING_HOPS:
        due = last.due_time
        how = f"delay level {last.delay_level}" if last.hop == L.HOP_SCHEDULED else "the timer wheel"
        return (
            L.STATE_SCHEDULED,
            f"Waiting in {last.topic} ({how}) until {iso(due) if due is not None else 'an unknown time'}; then it goes to {last.real_topic} queue {last.real_queue_id}.",
            due,
        )
    readable = [c for c in copies if c.hop in _READABLE]
    at = readable[-1] if readable else last
    return L.STATE_DELIVERED, delivered_why(at.topic, at.queue_id, at.queue_offset), None


def _groups(copies: list[Copy], ctx: Context) -> set[str]:
    out: set[str] = set()
    for c in copies:
        if c.hop in (L.HOP_RETRY, L.HOP_DLQ):
            out.add(c.topic[len(L.RETRY_PREFIX if c.hop == L.HOP_RETRY else L.DLQ_PREFIX) :])
        elif c.hop == L.HOP_SCHEDULED and (c.real_topic or "").startswith(L.RETRY_PREFIX):
            out.add(c.real_topic[len(L.RETRY_PREFIX) :])
        elif c.hop == L.HOP_POP_RETRY:
            out.update(ctx.pop.groups_of_topic.get(c.topic, set()))
        else:
            t = c.target_topic
            out.update(ctx.readers_of(t))
            out.update(ctx.pop.groups_of_topic.get(t, set()))
    return {g for g in out if g not in (L.TRANS_GROUP, L.REVIVE_GROUP)}


def _group_status(g: str, copies: list[Copy], ctx: Context) -> tuple[str, str]:
    if g in ctx.pop.groups:
        return _pop_status(g, copies, ctx)
    retry, dlq = L.RETRY_PREFIX + g, L.DLQ_PREFIX + g
    mine = [
        c
        for c in copies
        if (c.hop in _READABLE and (c.topic == retry or g in ctx.readers_of(c.topic))) or c.topic == dlq or (c.hop == L.HOP_SCHEDULED and c.real_topic == retry)
    ]
    if not mine:
        return L.GROUP_NOT_CONSUMED, f"{g}: not consumed (it never reached a queue {g} reads)."
    last = mine[-1]
    if last.hop == L.HOP_DLQ:
        return L.GROUP_NOT_CONSUMED, f"{g}: not consumed (it gave up after {_n(last.reconsume_times, 'attempt')})."
    if last.hop == L.HOP_SCHEDULED:
        return L.GROUP_NOT_CONSUMED, f"{g}: not consumed yet (retry {last.reconsume_times} waits in {last.topic})."
    return committed_status(g, last.topic, last.queue_id, last.queue_offset, ctx.offsets.get((g, last.topic, last.queue_id)))


def _pop_status(g: str, copies: list[Copy], ctx: Context) -> tuple[str, str]:
    latest = None
    for c in copies:
        if c.hop not in _READABLE:
            continue
        for key in ctx.pop.covering.get((g, c.pos), []):
            ck = ctx.pop.checkpoints[key]
            cand = (ck.pop_time, ck.phys_offset, key, c)
            if latest is None or cand[:2] > latest[:2]:
                latest = cand
    if latest is None:
        return L.GROUP_NOT_CONSUMED, f"{g}: never popped."
    _, _, key, c = latest
    if (*key, c.queue_offset) in ctx.pop.acks:
        return L.GROUP_ACKED, f"{g}: popped at {iso(key[4])} from {_where(c)} and acked."
    ck = ctx.pop.checkpoints[key]
    return L.GROUP_UNACKED, f"{g}: popped at {iso(key[4])} from {_where(c)}, never acked (invisible until {iso(ck.revive_time)}, then revived)."


def _problems(copies: list[Copy], ctx: Context, problems: list[Problem]) -> None:
    commits = [c for c in copies if c.hop == L.HOP_COMMIT]
    for c in commits[1:]:
        problems.append(_problem(DOUBLE_COMMIT, c, f"the transaction is committed again (first commit at CommitLog offset {commits[0].phys_offset})"))
    halves = {c.phys_offset for c in copies if c.hop in (L.HOP_HALF, L.HOP_HALF_CHECK, L.HOP_PREPARED)}
    for c in commits:
        if c.prepared_offset not in halves and c.prepared_offset is not None and c.prepared_offset >= ctx.min_phys:
            problems.append(_problem(COMMIT_WITHOUT_HALF, c, f"commit names a half at CommitLog offset {c.prepared_offset}, where no half of this message is"))
    for i, c in enumerate(copies):
        if c.hop != L.HOP_SCHEDULED or c.delay_level is None or ctx.delay_file is None:
            continue
        done = ctx.delay_offsets.get(c.delay_level)
        if done is None or c.queue_offset >= done:
            continue
        if not any(later.topic == c.real_topic for later in copies[i + 1 :]):
            problems.append(
                _problem(
                    DELAY_UNDELIVERED, c,
                    f"delay level {c.delay_level} is delivered up to schedule offset {done} ({ctx.delay_file}), past this copy's {c.queue_offset}, "
                    f"but no copy reached {c.real_topic}",
                )
            )  # fmt: skip
    phys = {c.phys_offset for c in copies}
    for c in copies:
        if c.hop in (L.HOP_RETRY, L.HOP_DLQ) and c.origin_msg_id:
            try:
                origin = OffsetMsgId.decode(c.origin_msg_id).phys_offset
            except Exception:
                origin = None
            if origin is None or (origin >= ctx.min_phys and origin not in phys):
                problems.append(_problem(ORIGIN_MISSING, c, f"its ORIGIN_MESSAGE_ID {c.origin_msg_id} names no copy of this message in the store"))
        if c.hop == L.HOP_DLQ:
            g = c.topic[len(L.DLQ_PREFIX) :]
            limit = ctx.retry_limits.get(g)
            if limit is not None and c.reconsume_times <= limit:
                problems.append(
                    _problem(
                        DLQ_BEFORE_LIMIT, c,
                        f"dead-lettered after {_n(c.reconsume_times, 'attempt')}, before {g}'s retry limit of {limit} "
                        "(the consumer asked for it, or the limit changed)",
                    )
                )  # fmt: skip
