"""Every journey of a store in bounded memory: two passes over the CommitLog's ranges, most messages never made objects.

Most messages of a store were put once and never moved: one copy, no record about them. Those journeys need nothing
but their own record, and building a Copy for each (and holding them all to link them) costs a hundred times the scan
and gigabytes at a few million messages. So:

1. survey (mapped over the ranges): the records the broker wrote about messages (moved copies, transaction records,
   evidence) are read whole; of every other record only a 64-bit hash of its UNIQ_KEY is kept (8 bytes a record);
2. on the driver: the hashes seen twice, or also carried by a moved copy, mark the messages whose journey needs linking;
3. render (mapped again): each range writes the JSON Lines of its single-copy journeys (the verdict `PutJudge` gives,
   the same `judge` would) and hands back as Copies only the records of messages to link; those are linked last.
   The rows are spelled column by column with Arrow's string kernels (a Python loop per row cost 10 us a journey and
   held the GIL); a batch whose topic, group, key or tag strings JSON must escape is spelled row by row instead.

A record whose UNIQ_KEY is not 32 hex characters, or whose topic a POP group reads, is always linked: the hash and the
one-copy verdict are for the common case only. Hash collisions only send messages down the linking path.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from rmqdump.checks.journey import PutJudge, committed_status, committed_wording, link, orphan_checkpoints
from rmqdump.common.jsontext import encode
from rmqdump.common.problems import Problem
from rmqdump.readers.lifecycle import Copy, Evidence, is_own_topic, read_record, wants_body
from rmqdump.readers.store import Store
from rmqdump.scan.ranges import SERIAL, Mapper, ScanOptions, map_ranges, scan_range
from rmqdump.scan.splits import RANGE_BYTES, commitlog_splits, held_range_bytes
from rmqdump.schemas import UniqKeyV4
from rmqdump.schemas import constants as C
from rmqdump.schemas import lifecycle as L

if TYPE_CHECKING:
    import pyarrow as pa

_HEX = np.full(256, 255, dtype=np.uint8)
for _i, _ch in enumerate(b"0123456789ABCDEF"):
    _HEX[_ch] = _i
for _i, _ch in enumerate(b"abcdef"):
    _HEX[_ch] = 10 + _i
_SHIFTS = np.arange(60, -4, -4, dtype=np.uint64)  # 16 nibbles, most significant first
_MIX = np.uint64(0x9E3779B97F4A7C15)
_MOVED = {p.encode() for p in L.MOVED_PROPERTIES}
KEY_HEX = 2 * UniqKeyV4.sizeof()  # a UNIQ_KEY of an IPv4 producer, as hex: the common case the fast path takes
SURVEY_SPLIT = RANGE_BYTES  # the survey's ranges: the planner's (tests make them small)
RENDER_SPLIT = held_range_bytes("text")  # the render pass's ranges: their JSON text waits whole, a few in flight


def key_hashes(keys: np.ndarray) -> np.ndarray:
    """64-bit hashes of UNIQ_KEYs given as an (n, 32) array of hex characters (the survey's and the driver's alike)."""
    nib = _HEX[keys].astype(np.uint64)
    hi = (nib[:, :16] << _SHIFTS).sum(axis=1, dtype=np.uint64)
    lo = (nib[:, 16:] << _SHIFTS).sum(axis=1, dtype=np.uint64)
    with np.errstate(over="ignore"):
        return hi ^ (lo * _MIX)


def text_hashes(keys: list[str]) -> np.ndarray:
    ok = [k for k in keys if len(k) == KEY_HEX and all(c in "0123456789ABCDEFabcdef" for c in k)]
    if not ok:
        return np.zeros(0, np.uint64)
    return key_hashes(np.frombuffer("".join(ok).encode(), np.uint8).reshape(-1, KEY_HEX))


@dataclass
class _Plain:
    """A batch's records put once by a producer (no moving property, own topic, no transaction type, a 32-hex UNIQ_KEY)."""

    mask: np.ndarray
    hashes: np.ndarray  # of the masked records
    props: tuple


def _plain(b, topics: list[str]) -> _Plain:
    n = len(b)
    props = b.property_columns()
    rows, noffs, nbuf = props[0], props[1], props[2]
    uoffs, ubuf, uniq = props[8], props[9], props[10]
    moved = np.zeros(n, bool)
    if len(noffs) > 1:
        starts, lens = noffs[:-1], np.diff(noffs)
        item_row = np.repeat(np.arange(n), np.diff(rows))
        for name in _MOVED:  # compared in place: candidates of the name's length, then their bytes
            cand = np.flatnonzero(lens == len(name))
            if len(cand):
                got = nbuf[starts[cand][:, None] + np.arange(len(name))]
                moved[item_row[cand[(got == np.frombuffer(name, np.uint8)).all(axis=1)]]] = True
    own = np.array([is_own_topic(t) for t in topics], bool)[b.found["topic_id"]] if topics else np.zeros(n, bool)
    tx = (np.asarray(b.cols["sys_flag"]) & C.TRANSACTION_MASK) != 0
    ulen = np.diff(uoffs)
    mask = own & ~tx & ~moved & (uniq == 1) & (ulen == KEY_HEX)
    idx = np.flatnonzero(mask)
    if len(idx):
        keys = ubuf[uoffs[idx][:, None] + np.arange(KEY_HEX)]
        ok = (_HEX[keys] != 255).all(axis=1)
        if not ok.all():
            mask[idx[~ok]] = False
            idx, keys = idx[ok], keys[ok]
        hashes = key_hashes(keys)
    else:
        hashes = np.zeros(0, np.uint64)
    return _Plain(mask, hashes, props)


def _topics(b) -> list[str]:
    return [b.topic(int(r)) for r in b.found["topic_first"].tolist()]


def lifecycle_records(b, rows) -> tuple[list[Copy], list[Evidence]]:
    """Records `rows` of a batch read as copies of messages and as evidence about them (bodies read where needed)."""
    copies, evidence = [], []
    for i in rows:
        m = b.message(int(i))
        r = read_record(m, b.body(int(i)) if wants_body(m) else None)
        if isinstance(r, Evidence):
            evidence.append(r)
        elif r is not None:
            copies.append(r)
    return copies, evidence


def _survey_fold(b, _cols):
    p = _plain(b, _topics(b))
    copies, evidence = lifecycle_records(b, np.flatnonzero(~p.mask))
    return p.hashes, copies, evidence


def survey(split):
    """Pass 1 of one range: the hashes of its plain records, its other records as Copies and Evidence."""
    rs = scan_range(split, ScanOptions(topics=frozenset(), fold=_survey_fold))
    hashes = [h for h, _, _ in rs.folded]
    return (
        np.concatenate(hashes) if hashes else np.zeros(0, np.uint64),
        [c for _, cs, _ in rs.folded for c in cs],
        [e for _, _, es in rs.folded for e in es],
        rs.problems,
        rs.nbytes,
    )


@dataclass
class Rendered:
    """A range's single-copy journeys as JSON Lines (copy and verdict rows), and the Copies of its records to link."""

    text: str
    journeys: int
    states: Counter = field(default_factory=Counter)
    groups: Counter = field(default_factory=Counter)  # (group, status) -> journeys
    copies: list[Copy] = field(default_factory=list)
    nbytes: int = 0


def _text(v: str | None) -> str:
    return "null" if v is None else encode(v)


def _plain_text(buf: np.ndarray) -> bool:
    """Whether every string in this buffer is spelled in JSON as it is: valid UTF-8 with no quote, backslash or control
    character (the encoder leaves UTF-8 as is)."""
    if not len(buf):
        return True
    if ((buf < 0x20) | (buf == 0x22) | (buf == 0x5C)).any():
        return False
    try:
        buf.tobytes().decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


_COPY = (
    '{"kind":"copy","uniq_key":"', '","hop":"put","topic":', ',"queue_id":', ',"queue_offset":', ',"phys_offset":',
    ',"store_time":', ',"total_size":', ',"msg_id":"', '","real_topic":null,"real_queue_id":null,"delay_level":null,'
    '"due_time":null,"reconsume_times":', ',"check_times":null,"prepared_offset":null,"origin_msg_id":null,'
    '"retry_topic":null,"producer_group":null,"keys":', ',"tags":', ',"recovery_drops":false',
)  # fmt: skip  # the text around a single-copy row's values (key, topic JSON, queue id, queue offset, phys, time, size, msgId, reconsume times, keys JSON, tags JSON)
_VERDICT = ('{"kind":"verdict","uniq_key":"', '","state":"delivered","groups":{', '},"why":')


class _Speller:
    """The JSON Lines of a single-copy journey, spelled from pieces escaped once per topic, queue and group: the same text
    as encoding Copy.to_dict() and PutJudge.verdict() (tests/test_journey.py holds the two to the same bytes)."""

    def __init__(self, judge: PutJudge, file: str, broker: str | None):
        self.judge = judge
        self.tail = f',"file":{encode(file)}' + ("" if broker is None else f',"broker":{encode(broker)}') + "}"
        self.vtail = f',"due_time":null,"evidence_caveats":{encode(judge.caveats)}' + ("" if broker is None else f',"broker":{encode(broker)}') + "}"
        self.topics: dict[str, str] = {}
        self.queues: dict[tuple[str, int], list] = {}

    def copy(self, key, topic, qid, qo, phys, ts, size, msg_id, reconsume, keys_json, tag_json) -> str:
        t = self.topics.get(topic)
        if t is None:
            t = self.topics[topic] = encode(topic)
        values = (key, t, qid, qo, phys, ts, size, msg_id, reconsume, keys_json, tag_json)
        return "".join(x for pair in zip(_COPY[:-1], values, strict=True) for x in (pair[0], str(pair[1]))) + _COPY[-1] + self.tail

    def verdict(self, key, topic, qid, qo) -> tuple[str, list]:
        q = self.queues.get((topic, qid))
        if q is None:
            groups = [(g, encode(g), self.judge.offsets.get((g, topic, qid))) for g in self.judge.readers.get(topic, ())]
            where = encode(f"Delivered to {topic} queue {qid} offset ")[:-1]
            plain = all(encode(x)[1:-1] == x for x in [topic, *(g for g, _, _ in groups)])  # the notes need no escaping
            q = self.queues[(topic, qid)] = [groups, where, plain]
        groups, where, plain = q
        parts, notes, statuses = [], [], []
        for g, gj, committed in groups:
            status, note = committed_status(g, topic, qid, qo, committed)
            parts.append(f'{gj}:"{status}"')
            notes.append(note)
            statuses.append((g, status))
        joined = " ".join(notes)
        why = f"{where}{qo}." + ("" if not notes else " " + (joined if plain else encode(joined)[1:-1])) + '"'
        line = f'{_VERDICT[0]}{key}{_VERDICT[1]}{",".join(parts)}{_VERDICT[2]}{why}{self.vtail}'
        return line, statuses


@dataclass(frozen=True)
class _Render:
    linked: np.ndarray  # sorted hashes of the messages to link
    judge: PutJudge
    pop_topics: frozenset[str]
    recovery_end: int | None
    broker: str | None
    spell: bool = True  # False: only the records of messages to link are wanted (the store-wide views)


def _render_fold(r: _Render, b, _cols):
    topics = _topics(b)
    p = _plain(b, topics)
    idx = np.flatnonzero(p.mask)
    keep = np.ones(len(idx), bool)
    if len(r.linked):
        pos = np.searchsorted(r.linked, p.hashes)
        keep &= ~((pos < len(r.linked)) & (r.linked[np.minimum(pos, len(r.linked) - 1)] == p.hashes))
    tid = b.found["topic_id"][idx]
    keep &= ~np.array([t in r.pop_topics for t in topics], bool)[tid] if topics else keep
    c = b.cols
    phys = b.phys[idx]
    size = np.asarray(c["total_size"])[idx]
    if r.recovery_end is not None:
        keep &= phys + size <= r.recovery_end
    link_rows = idx[~keep]
    copies, _ = lifecycle_records(b, link_rows)
    fast = idx[keep]
    out = Rendered("", 0, nbytes=0, copies=copies)
    if not len(fast) or not r.spell:
        return out
    speller = _Speller(r.judge, b.seg.path, r.broker)
    text = _spell_columns(speller, b, p.props, topics, fast, out.groups)
    out.text = _spell_rows(speller, b, p.props, topics, fast, out.groups) if text is None else text
    out.states[L.STATE_DELIVERED] += len(fast)
    out.journeys = len(fast)
    return out


def _spell_rows(speller: _Speller, b, props: tuple, topics: list[str], fast: np.ndarray, groups: Counter) -> str:
    """The single-copy journeys of these rows spelled one by one: the path for strings JSON must escape."""
    _, _, _, _, _, toffs, tbuf, tags, uoffs, ubuf, _, krows, koffs, kbuf, _ = props
    c = b.cols
    topic_of = [topics[t] for t in b.found["topic_id"][fast].tolist()]
    cols = {k: np.asarray(c[k])[fast].tolist() for k in ("queue_id", "queue_offset", "store_timestamp", "total_size", "reconsume_times")}
    phys_l = b.phys[fast].tolist()
    ids = b.msg_ids(fast)
    lines = []
    toffs_l, uoffs_l, krows_l, koffs_l, tags_l = toffs.tolist(), uoffs.tolist(), krows.tolist(), koffs.tolist(), tags.tolist()
    tb, ub, kb = tbuf.tobytes(), ubuf.tobytes(), kbuf.tobytes()
    plain_tags, plain_keys = _plain_text(tbuf), _plain_text(kbuf)
    for j, i in enumerate(fast.tolist()):
        key = ub[uoffs_l[i] : uoffs_l[i + 1]].decode()
        tag = tb[toffs_l[i] : toffs_l[i + 1]].decode("utf-8", "replace") if tags_l[i] else None
        keys = [kb[koffs_l[k] : koffs_l[k + 1]].decode("utf-8", "replace") for k in range(krows_l[i], krows_l[i + 1])]
        topic, qid, qo = topic_of[j], cols["queue_id"][j], cols["queue_offset"][j]
        keys_json = ('["' + '","'.join(keys) + '"]' if keys else "[]") if plain_keys else encode(keys)
        tag_json = ("null" if tag is None else f'"{tag}"') if plain_tags else _text(tag)
        lines.append(speller.copy(key, topic, qid, qo, phys_l[j], cols["store_timestamp"][j], cols["total_size"][j], ids[j], cols["reconsume_times"][j], keys_json, tag_json))
        line, statuses = speller.verdict(key, topic, qid, qo)
        lines.append(line)
        for g_s in statuses:
            groups[g_s] += 1
    return "\n".join(lines) + "\n"


def _strings(offsets: np.ndarray, buf: np.ndarray) -> pa.StringArray | None:
    """Arrow strings over the kernel's offsets and bytes, or None if one of them is not UTF-8 on its own."""
    import pyarrow as pa
    arr = pa.StringArray.from_buffers(len(offsets) - 1, pa.py_buffer(np.ascontiguousarray(offsets, np.int32)), pa.py_buffer(np.ascontiguousarray(buf)))
    try:
        arr.validate(full=True)
    except pa.ArrowInvalid:
        return None
    return arr


def _fixed(chars: np.ndarray) -> pa.StringArray:
    """An (n, w) array of ASCII characters as n strings."""
    import pyarrow as pa
    n, w = chars.shape
    return pa.StringArray.from_buffers(n, pa.py_buffer(np.arange(0, n * w + 1, w, dtype=np.int32)), pa.py_buffer(np.ascontiguousarray(chars)))


def _msg_ids(b, fast: np.ndarray) -> pa.StringArray:
    """The offset msgIds of these rows (rmqdump.scan.hosts.msg_id_text)."""
    import pyarrow as pa
    offsets, text = b.msg_id_text(fast)
    return pa.Array.from_buffers(pa.string(), len(fast), [None, pa.py_buffer(offsets), pa.py_buffer(text)], null_count=0)


def _join(*parts) -> pa.Array:
    import pyarrow.compute as pc
    return pc.binary_join_element_wise(*parts, "")


def _spell_columns(speller: _Speller, b, props: tuple, topics: list[str], fast: np.ndarray, groups: Counter) -> str | None:
    """The single-copy journeys of these rows spelled column by column with Arrow's string kernels (the same bytes as
    _spell_rows), or None when a string needs JSON escaping: tags, keys, topic or group names."""
    import pyarrow as pa  # loaded when the first journey is spelled: the survey's peak memory stays without its 50 MB
    import pyarrow.compute as pc
    _, _, _, _, _, toffs, tbuf, tags, uoffs, ubuf, _, krows, koffs, kbuf, _ = props
    if not (_plain_text(tbuf) and _plain_text(kbuf)):
        return None
    tid = b.found["topic_id"][fast]
    used = np.unique(tid).tolist()
    judge = speller.judge
    if not all(encode(x)[1:-1] == x for t in used for x in (topics[t], *judge.readers.get(topics[t], ()))):
        return None
    tag_values, key_values = _strings(toffs, tbuf), _strings(koffs, kbuf)
    if tag_values is None or key_values is None:
        return None
    m = len(fast)
    c = b.cols
    ix = pa.array(fast)
    num = {k: np.asarray(c[k])[fast] for k in ("queue_id", "queue_offset", "store_timestamp", "total_size", "reconsume_times")}
    text = {k: pc.cast(pa.array(v), pa.string()) for k, v in num.items()}
    key = _fixed(ubuf[uoffs[fast][:, None] + np.arange(KEY_HEX)])
    keys = pa.ListArray.from_arrays(pa.array(krows), key_values).take(ix)
    keys_json = pc.if_else(pc.equal(pc.list_value_length(keys), 0), "[]", _join('["', pc.binary_join(keys, '","'), '"]'))
    tag_json = pc.if_else(pa.array(tags[fast] != 0), _join('"', tag_values.take(ix), '"'), "null")
    topic_json = pa.array([encode(t) for t in topics]).take(pa.array(tid))
    qo_text = text["queue_offset"]
    copy = (
        _COPY[0], key, _COPY[1], topic_json, _COPY[2], text["queue_id"], _COPY[3], qo_text, _COPY[4], pc.cast(pa.array(b.phys[fast]), pa.string()),
        _COPY[5], text["store_timestamp"], _COPY[6], text["total_size"], _COPY[7], _msg_ids(b, fast), _COPY[8], text["reconsume_times"],
        _COPY[9], keys_json, _COPY[10], tag_json, _COPY[11] + speller.tail + "\n" + _VERDICT[0],
    )  # fmt: skip  # the copy row's pieces, then the verdict row's start: each line is built in one pass
    # the verdict's middle (its groups and why) per topic and queue: the groups reading the topic, their committed offsets
    qid, qo = num["queue_id"], num["queue_offset"]
    queue = tid.astype(np.int64) * (1 << 32) + qid.astype(np.int64)
    order = np.argsort(queue, kind="stable")
    starts = np.flatnonzero(np.r_[True, queue[order][1:] != queue[order][:-1]])
    chunks = []
    for lo, hi in zip(starts.tolist(), [*starts[1:].tolist(), m], strict=True):
        rows = order[lo:hi]
        topic, q = topics[int(tid[rows[0]])], int(qid[rows[0]])
        sub_qo = qo_text.take(pa.array(rows))
        parts, notes = [], []
        for g in judge.readers.get(topic, ()):
            committed = judge.offsets.get((g, topic, q))
            below = np.zeros(len(rows), bool) if committed is None else committed > qo[rows]
            n_below = int(np.count_nonzero(below))
            words = committed_wording(g, topic, q, committed)
            for (status, _, _), n in zip(words, (n_below, len(rows) - n_below), strict=True):
                if n:
                    groups[(g, status)] += n
            mask = pa.array(below)
            parts.append(pc.if_else(mask, f'{encode(g)}:"{words[0][0]}"', f'{encode(g)}:"{words[1][0]}"'))
            notes.append(pc.if_else(mask, *(head if tail is None else _join(head, sub_qo, tail) for _, head, tail in words)))
        where = f"Delivered to {topic} queue {q} offset "
        middle = [pc.binary_join_element_wise(*parts, ",") if parts else "", _VERDICT[2] + '"' + where, sub_qo, "."]
        if notes:
            middle += [" ", pc.binary_join_element_wise(*notes, " ")]
        chunks.append(_join(*middle))
    inverse = np.empty(m, np.int64)
    inverse[order] = np.arange(m)
    middle = pa.concat_arrays(chunks).take(pa.array(inverse))
    lines = _join(*copy, key, _VERDICT[1], middle, '"' + speller.vtail + "\n")
    offs = np.frombuffer(lines.buffers()[1], np.int32)[lines.offset : lines.offset + m + 1]
    return str(memoryview(lines.buffers()[2])[int(offs[0]) : int(offs[-1])], "utf-8")


def render(split, r: _Render) -> Rendered:
    """Pass 2 of one range."""
    rs = scan_range(split, ScanOptions(topics=frozenset(), fold=functools.partial(_render_fold, r)))
    parts = rs.folded
    out = Rendered("".join(x.text for x in parts), sum(x.journeys for x in parts), nbytes=rs.nbytes)
    for x in parts:
        out.states.update(x.states)
        out.groups.update(x.groups)
        out.copies += x.copies
    return out


def every_journey(store: Store, ctx_of, *, mapper: Mapper = SERIAL, check_crc: bool = True, recovery_end: int | None = None,
                  broker: str | None = None, on_bytes=None, prepare=None, spell: bool = True) -> Iterator:
    """Rendered chunks (single-copy journeys, in CommitLog order), then the linked Journeys in the order of their first
    copy, then the Context they were judged against, then the problems (scan damage, config files that do not parse, orphan checkpoints) as one list. `ctx_of(evidence)` makes the Context;
    `prepare(copies)` completes the Copies to link before they are linked."""  # fmt: skip
    splits = commitlog_splits(store.commitlog, SURVEY_SPLIT, check_crc=check_crc)
    hashes, copies, evidence, problems = [], [], [], []
    # each pass reads every byte: half of a range's bytes told after each
    for _sp, (h, cs, es, ps, _nbytes) in map_ranges(splits, survey, mapper, progress=on_bytes and (lambda n: on_bytes(n // 2))):
        hashes.append(h)
        copies += cs
        evidence += es
        problems += ps
    ctx = ctx_of(evidence)
    allh = np.sort(np.concatenate(hashes)) if hashes else np.zeros(0, np.uint64)
    del hashes
    twice = allh[1:][allh[1:] == allh[:-1]] if len(allh) > 1 else allh[:0]
    del allh
    linked = np.unique(np.concatenate([twice, text_hashes([c.uniq_key for c in copies])]))
    spec = _Render(linked, PutJudge.of(ctx), frozenset(ctx.pop.groups_of_topic), recovery_end, broker, spell)
    told = on_bytes and (lambda n: on_bytes(n - n // 2))
    for _sp, part in map_ranges(commitlog_splits(store.commitlog, RENDER_SPLIT, check_crc=check_crc), functools.partial(render, r=spec), mapper, progress=told):
        copies += part.copies
        yield part
    for c in copies:
        if recovery_end is not None and c.phys_offset + c.total_size > recovery_end:
            c.recovery_drops = True
    if prepare is not None:
        prepare(copies)
    yield from link(copies, ctx)
    known = {c.pos for c in copies}
    bounds = {k: q.bounds() for k, q in store.queues.items()}
    yield ctx
    yield problems + ctx.offsets_problems + ctx.config_problems + orphan_checkpoints(ctx, known, bounds)


__all__ = ["Problem", "Rendered", "every_journey", "key_hashes", "render", "survey"]
