"""Two stores that were one (a master and its slave after a failover or a lag): where they part and who holds what.

The common prefix comes from rmqdump.checks.diffprefix (range CRCs, then bytes). Past it each side's records
are decoded into Arrow columns and paired by UNIQ_KEY (a message without one by its topic, body CRC, born time
and host): the same message at another offset (`moved`), at the same offset (`same`), or on one side `only`.
Queue offsets that both sides' records past the prefix name with different messages are the divergent offsets;
what a consumer with a committed offset among them skips or reads twice when it moves to the other side follows
from them. Everything stays columnar, so a long divergence costs Arrow columns, not Python objects per message.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from rmqdump.checks.diffepochs import EpochDiff, data_end_of, epoch_diff
from rmqdump.checks.diffprefix import Prefix, common_prefix
from rmqdump.checks.offsets import consumer_offsets
from rmqdump.common.problems import InputError
from rmqdump.readers.commitlog import CommitLog
from rmqdump.readers.epochfile import EPOCH_FILE
from rmqdump.readers.store import Store
from rmqdump.scan.ranges import Mapper
from rmqdump.scan.walk import scan_commitlog

SIDES = ("a", "b")
COLUMNS = [
    "phys_offset", "total_size", "topic", "queue_id", "queue_offset", "keys", "uniq_key", "tags",
    "store_timestamp", "born_timestamp", "born_host", "msg_id", "body_crc",
]  # fmt: skip
MESSAGE_FIELDS = [
    "phys_offset", "total_size", "topic", "queue_id", "queue_offset", "uniq_key", "msg_id", "keys", "tags", "store_timestamp",
]  # fmt: skip
QUEUE_KEY = ["topic", "queue_id", "queue_offset"]
OUTPUT_ROWS = 8192  # message rows turned into Python objects at a time


# --- the messages past the prefix -----------------------------------------------------------------


def decoded_past(cl: CommitLog, start: int, *, check_crc: bool = True, to_offset: int | None = None):
    """The records from `start` on, decoded (COLUMNS) as an Arrow table, the problems the walk met (Problem objects),
    and (DLedger) the (index, term) of the first entry."""
    import pyarrow as pa

    from rmqdump.export.arrowbatch import record_batches, schema

    parts, problems, first = [], [], None
    frame = cl.files[0].frame if cl.files else 0  # DLedger: a message lies past its entry header
    for batch in scan_commitlog(cl, from_offset=start + frame, to_offset=None if to_offset is None else to_offset + frame, check_crc=check_crc):
        problems.extend(batch.problems())
        if first is None and len(batch) and batch.entries is not None:
            first = (int(batch.entries["index"][0]), int(batch.entries["term"][0]))
        parts.extend(record_batches(batch, "", columns=COLUMNS))
    if not parts:
        s = schema()
        return pa.table({c: pa.array([], s.field(c).type) for c in COLUMNS}), problems, first
    return pa.Table.from_batches(parts), problems, first


def identities(t):
    """What names a message on both sides: its UNIQ_KEY, else `~|topic|body CRC|born time|born host`."""
    import pyarrow as pa
    import pyarrow.compute as pc

    fallback = pc.binary_join_element_wise(
        pa.scalar("~"),
        t["topic"],
        pc.cast(t["body_crc"], pa.string()),
        pc.cast(t["born_timestamp"], pa.string()),
        pc.fill_null(t["born_host"], ""),
        "|",
    )
    uniq = t["uniq_key"]
    return pc.if_else(pc.and_(pc.is_valid(uniq), pc.not_equal(pc.fill_null(uniq, ""), "")), uniq, fallback)


def paired(mine, theirs):
    """`mine` with `ident`, `status` (only, moved, same) and `other_phys_offset` (where `theirs` holds the message)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    idx = pc.index_in(mine["ident"], value_set=theirs["ident"])
    other = pc.take(theirs["phys_offset"], idx)
    status = pc.if_else(pc.is_null(idx), pa.scalar("only"), pc.if_else(pc.equal(other, mine["phys_offset"]), pa.scalar("same"), pa.scalar("moved")))
    return mine.append_column("status", status).append_column("other_phys_offset", other)


def message_dicts(side: str, t) -> Iterator[dict]:
    """The `message` JSON Lines objects of one side's table, a slice at a time (columns to lists, then zipped)."""
    names = ["status", *MESSAGE_FIELDS, "other_phys_offset"]
    for rb in t.select(names).to_batches(max_chunksize=OUTPUT_ROWS):
        cols = [rb.column(i).to_pylist() for i in range(len(names))]
        for values in zip(*cols, strict=True):
            d = {"kind": "message", "side": side}
            d.update(zip(names, values, strict=True))
            if d["keys"] is None:
                d["keys"] = []
            yield d


# --- queues and consumers -------------------------------------------------------------------------


def ranges(offsets) -> list[list[int]]:
    """Sorted integers as [start, end) runs."""
    a = np.asarray(offsets, dtype=np.int64)
    if not len(a):
        return []
    cut = np.flatnonzero(np.diff(a) != 1) + 1
    return [[int(run[0]), int(run[-1]) + 1] for run in np.split(a, cut)]


@dataclass
class QueueDiff:
    topic: str
    queue_id: int
    a_max_offset: int | None  # from the side's ConsumeQueue (None: no queue there)
    b_max_offset: int | None
    divergent: object  # Arrow table: queue_offset and each side's phys_offset, total_size, uniq_key, msg_id (suffix _a, _b)
    only_a: np.ndarray  # queue offsets of A's records past the prefix that B's records do not name
    only_b: np.ndarray

    def divergent_offsets(self) -> list[int]:
        return self.divergent["queue_offset"].to_pylist()

    def to_dict(self) -> dict:
        div = self.divergent.to_pylist()
        return {
            "kind": "queue",
            "topic": self.topic,
            "queue_id": self.queue_id,
            "a_max_offset": self.a_max_offset,
            "b_max_offset": self.b_max_offset,
            "divergent_offsets": [{"queue_offset": r["queue_offset"], **{s: {k: r[f"{c}_{s}"] for k, c in _BRIEF} for s in SIDES}} for r in div],
            "divergent_ranges": ranges([r["queue_offset"] for r in div]),
            "only_a_offsets": ranges(self.only_a),
            "only_b_offsets": ranges(self.only_b),
        }


_BRIEF = (("phys_offset", "phys_offset"), ("size", "total_size"), ("uniq_key", "uniq_key"), ("msg_id", "msg_id"))


def _max_offset(st: Store, topic: str, qid: int) -> int | None:
    q = st.queue(topic, qid)
    return None if q is None else q.bounds()[1]


def _by_queue(t) -> dict[tuple[str, int], np.ndarray]:
    """Row indices of a table per (topic, queue id), each sorted by queue offset."""
    import pyarrow.compute as pc

    if not len(t):
        return {}
    order = pc.sort_indices(t, sort_keys=[("topic", "ascending"), ("queue_id", "ascending"), ("queue_offset", "ascending")]).to_numpy()
    topics = pc.dictionary_encode(t["topic"].take(order).combine_chunks())
    codes, qids = topics.indices.to_numpy(zero_copy_only=False), t["queue_id"].take(order).to_numpy()
    cut = np.flatnonzero((np.diff(codes) != 0) | (np.diff(qids) != 0)) + 1
    names = topics.dictionary.to_pylist()
    return {(names[codes[s]], int(qids[s])): order[s:e] for s, e in zip(np.r_[0, cut], np.r_[cut, len(order)], strict=True)}


def queue_diffs(stores: dict[str, Store], tables: dict) -> list[QueueDiff]:
    """Per queue named by either side (its ConsumeQueue or its records past the prefix): max offsets and divergence."""
    import pyarrow.compute as pc

    keep = ["ident", "phys_offset", "total_size", "uniq_key", "msg_id"]
    side = {s: tables[s].select([*QUEUE_KEY, *keep]).rename_columns([*QUEUE_KEY, *(f"{c}_{s}" for c in keep)]) for s in SIDES}
    both = side["a"].join(side["b"], keys=QUEUE_KEY, join_type="inner")
    div = both.filter(pc.not_equal(both["ident_a"], both["ident_b"]))
    only = {
        "a": side["a"].join(side["b"].select(QUEUE_KEY), keys=QUEUE_KEY, join_type="left anti"),
        "b": side["b"].join(side["a"].select(QUEUE_KEY), keys=QUEUE_KEY, join_type="left anti"),
    }
    div_rows, only_rows = _by_queue(div), {s: _by_queue(only[s]) for s in SIDES}
    named = set(div_rows) | set(only_rows["a"]) | set(only_rows["b"]) | set(_by_queue(both))
    empty = np.zeros(0, np.int64)
    out = []
    for topic, qid in sorted(named | set(stores["a"].queues) | set(stores["b"].queues)):
        rows = div_rows.get((topic, qid))
        d = div.take(rows if rows is not None else empty)
        d = d.select(["queue_offset", *(f"{c}_{s}" for s in SIDES for c in ("phys_offset", "total_size", "uniq_key", "msg_id"))])
        offs = {s: only[s]["queue_offset"].take(only_rows[s][(topic, qid)]).to_numpy() if (topic, qid) in only_rows[s] else empty for s in SIDES}
        out.append(QueueDiff(topic, qid, _max_offset(stores["a"], topic, qid), _max_offset(stores["b"], topic, qid), d, offs["a"], offs["b"]))
    return out


@dataclass
class ConsumerImpact:
    """A committed offset on one side, as a consumer moving to the other side lives it."""

    side: str  # where the offset was committed
    group: str
    topic: str
    queue_id: int
    committed: int
    other_max_offset: int | None
    skipped: np.ndarray  # the other side's queue offsets below the committed one holding messages this side never had
    read_twice: np.ndarray  # the other side's queue offsets from the committed one on holding messages already consumed here
    beyond_max: bool  # the committed offset is past the other side's max: the broker resets it (OFFSET_OVERFLOW)

    def to_dict(self) -> dict:
        return {
            "kind": "consumer",
            "side": self.side,
            "group": self.group,
            "topic": self.topic,
            "queue_id": self.queue_id,
            "committed": self.committed,
            "other_max_offset": self.other_max_offset,
            "skipped": len(self.skipped),
            "skipped_offsets": ranges(self.skipped),
            "read_twice": len(self.read_twice),
            "read_twice_offsets": ranges(self.read_twice),
            "beyond_max": self.beyond_max,
        }


def committed_offsets(st: Store) -> list[tuple[str, str, int, int]]:
    """(group, topic, queue id, committed offset) from the store's config/consumerOffset.json (none when absent)."""
    try:
        rep = consumer_offsets(st)
    except InputError:
        return []
    return [(r.group, r.topic, r.queue_id, r.committed) for r in rep.rows if r.committed is not None]


def consumer_impacts(stores: dict[str, Store], tables: dict, queues: list[QueueDiff]) -> list[ConsumerImpact]:
    """For each committed offset of a queue whose sides differ past the prefix: what moving to the other side skips or repeats."""
    import pyarrow.compute as pc

    maxes = {(q.topic, q.queue_id): {"a": q.a_max_offset, "b": q.b_max_offset} for q in queues}
    wanted = {(t, q) for s in SIDES for _, t, q, _ in committed_offsets(stores[s])}
    if not wanted:
        return []
    rows = {s: _by_queue(tables[s]) for s in SIDES}
    empty = np.zeros(0, np.int64)

    def named(s: str, key: tuple[str, int]):
        idx = rows[s].get(key)
        t = tables[s].take(idx if idx is not None else empty)
        return t["queue_offset"].to_numpy(), t["ident"]

    out = []
    for s, o in (("a", "b"), ("b", "a")):
        for group, topic, qid, c in committed_offsets(stores[s]):
            mine_off, mine_id = named(s, (topic, qid))
            their_off, their_id = named(o, (topic, qid))
            if not len(mine_off) and not len(their_off):
                continue
            if c <= min(np.concatenate([mine_off, their_off])):
                continue  # it has consumed nothing the two sides disagree on
            consumed = mine_id.filter(mine_off < c)
            had = pc.is_in(their_id, value_set=mine_id).to_numpy(zero_copy_only=False)
            again = pc.is_in(their_id, value_set=consumed).to_numpy(zero_copy_only=False)
            skipped = their_off[(their_off < c) & ~had]
            twice = their_off[(their_off >= c) & again]
            other_max = maxes.get((topic, qid), {}).get(o)
            out.append(ConsumerImpact(s, group, topic, qid, c, other_max, skipped, twice, other_max is not None and c > other_max))
    return out


# --- the whole comparison -------------------------------------------------------------------------


@dataclass
class StoreDiff:
    prefix: Prefix
    tables: dict  # per side: its records past the prefix (COLUMNS + ident, status, other_phys_offset)
    queues: list[QueueDiff]
    consumers: list[ConsumerImpact]
    data_end: dict[str, int]  # end of each side's last record (identical_up_to when none past it)
    problems: dict[str, list]  # per side: the problems its walk past the prefix met (rmqdump.common.problems.Problem)
    notes: list[str]
    first_entries: dict[str, tuple[int, int] | None] = field(default_factory=dict)  # DLedger: each side's first entry past the prefix
    epochs: EpochDiff | None = None  # controller mode: both sides' epoch histories

    @property
    def identical(self) -> bool:
        return self.prefix.first_differing_byte is None

    def prefix_of(self) -> str | None:
        """'a' when A's records are all in the common prefix (A is a prefix of B), 'b' the other way, None otherwise."""
        if self.identical:
            return None
        more = {s: len(self.tables[s]) > 0 for s in SIDES}
        if not more["a"] and more["b"]:
            return "a"
        if not more["b"] and more["a"]:
            return "b"
        return None

    def count(self, side: str, status: str) -> int:
        import pyarrow.compute as pc

        t = self.tables[side]
        return int(pc.sum(pc.equal(t["status"], status)).as_py() or 0) if len(t) else 0

    def phys_offsets(self, side: str, status: str) -> np.ndarray:
        import pyarrow.compute as pc

        t = self.tables[side]
        return t["phys_offset"].filter(pc.equal(t["status"], status)).to_numpy() if len(t) else np.zeros(0, np.int64)

    def prefix_dict(self) -> dict:
        p = self.prefix
        return {
            "kind": "prefix",
            "identical": self.identical,
            "start": p.start,
            "identical_up_to": p.identical_up_to,
            "first_differing_byte": p.first_differing_byte,
            "prefix_of": self.prefix_of(),
            "a_data_end": self.data_end["a"],
            "b_data_end": self.data_end["b"],
            "last_common_entry": _entry(p.last_common_entry),
            "a_first_entry": _entry(self.first_entries.get("a")),
            "b_first_entry": _entry(self.first_entries.get("b")),
            "ranges_hashed": p.ranges,
            "bytes_hashed": p.bytes_hashed,
            "bytes_skipped": p.bytes_skipped,
            "bytes_compared": p.bytes_compared,
        }

    def summary(self) -> dict:
        return {
            "kind": "summary",
            "identical": self.identical,
            "identical_up_to": self.prefix.identical_up_to,
            "prefix_of": self.prefix_of(),
            "a_messages_past_prefix": len(self.tables["a"]),
            "b_messages_past_prefix": len(self.tables["b"]),
            "only_a": self.count("a", "only"),
            "only_b": self.count("b", "only"),
            "moved": self.count("a", "moved"),
            "same_offset": self.count("a", "same"),
            "queues_divergent": sum(1 for q in self.queues if len(q.divergent)),
            "divergent_offsets": sum(len(q.divergent) for q in self.queues),
            "consumers_affected": sum(1 for c in self.consumers if len(c.skipped) or len(c.read_twice) or c.beyond_max),
            "consistent_point": None if self.epochs is None else self.epochs.consistent_point,
            "a_problems": len(self.problems["a"]),
            "b_problems": len(self.problems["b"]),
            "notes": self.notes,
        }

    def records(self) -> Iterator[dict]:
        """The JSON Lines objects, in order: prefix, messages (A's then B's), queues, consumers, epochs, summary."""
        yield self.prefix_dict()
        for s in SIDES:
            yield from message_dicts(s, self.tables[s])
        for s in SIDES:
            for p in self.problems[s]:
                yield p.to_dict(side=s)
        for q in self.queues:
            yield q.to_dict()
        for c in self.consumers:
            yield c.to_dict()
        if self.epochs is not None:
            yield self.epochs.to_dict()
            for p in self.epochs.problems():
                yield p.to_dict()
        yield self.summary()


def _entry(e: tuple[int, int] | None) -> dict | None:
    return None if e is None else {"index": e[0], "term": e[1]}


def _notes(stores: dict[str, Store]) -> list[str]:
    notes = []
    for s in SIDES:
        if stores[s].dledger is not None:
            notes.append(f"{s}: DLedger CommitLog: entries compared as bytes; the ledgers part after last_common_entry (index, term)")
    lo = {s: stores[s].commitlog.min_offset for s in SIDES}
    for s, o in (("a", "b"), ("b", "a")):
        if lo[s] < lo[o]:
            notes.append(f"{s} alone holds [{lo[s]}, {lo[o]}) (the other side's older files are gone): not compared")
    return notes


def unit_before(st: Store, d: int) -> int | None:
    """The largest CommitLog offset at or before `d` that a ConsumeQueue unit of the store names (a record start, if
    the queues are right: the caller checks it), or None."""
    best = None
    for q in st.queues.values():
        u = q.units()
        off = u.offset[u.valid_mask()]
        i = int(np.searchsorted(off, d, side="right")) - 1
        if i >= 0 and (best is None or off[i] > best):
            best = int(off[i])
    return best


def _load_kernel(cl: CommitLog, check_crc: bool) -> None:
    """Load what decoding needs (pyarrow, the scan kernel from its compile cache) by decoding the first record.

    Run in a thread while the ranges are hashed: imports and loading hold the GIL, reads and CRC32 release it.
    """
    decoded_past(cl, cl.min_offset, check_crc=check_crc, to_offset=cl.min_offset + 1)


def diff_stores(a: Store, b: Store, *, check_crc: bool = True, progress: Callable[[int], None] | None = None, mapper: Mapper = map) -> StoreDiff:
    """Compare two stores that were one; see the module docstring."""
    import pyarrow.compute as pc

    stores = {"a": a, "b": b}
    warm = threading.Thread(target=_load_kernel, args=(a.commitlog, check_crc), daemon=True)
    warm.start()  # loading the compiled scan kernel holds the GIL; the CRC pass releases it, so the two overlap
    pre = common_prefix(a.commitlog, b.commitlog, progress=progress, record_start_before=lambda s, d: unit_before(stores[s], d), mapper=mapper)
    warm.join()
    tables, problems, first, data_end = {}, {}, {}, {}
    for s in SIDES:
        start = pre.identical_up_to if pre.first_differing_byte is not None else pre.end  # identical: nothing past the prefix
        t, problems[s], first[s] = decoded_past(stores[s].commitlog, start, check_crc=check_crc)
        tables[s] = t.append_column("ident", identities(t)) if len(t) else t.append_column("ident", t["uniq_key"])
        ends = pc.add(tables[s]["phys_offset"], pc.cast(tables[s]["total_size"], "int64"))
        data_end[s] = max(pre.identical_up_to, pc.max(ends).as_py() or 0) if len(t) else pre.identical_up_to
    tables = {"a": paired(tables["a"], tables["b"]), "b": paired(tables["b"], tables["a"])}
    queues = queue_diffs(stores, tables)
    if pre.first_differing_byte is None and any(os.path.exists(os.path.join(st.root, EPOCH_FILE)) for st in stores.values()):
        data_end = dict.fromkeys(SIDES, data_end_of(a.commitlog))  # identical: both end where A's last record does
    epochs = epoch_diff(stores, data_end)
    return StoreDiff(pre, tables, queues, consumer_impacts(stores, tables, queues), data_end, problems, _notes(stores), first, epochs)
