"""Two stores that were one (a master and its slave after a failover or a lag): where they part and who holds what.

The common prefix comes from rmqdump.checks.diffprefix (range CRCs, then bytes). Past it each side's records
are decoded a batch at a time into a table on disk (rmqdump.checks.diffspill) and paired there by UNIQ_KEY (a
message without one by its topic, body CRC, born time and host): the same message at another offset (`moved`),
at the same offset (`same`), or on one side `only`. Queue offsets that both sides' records past the prefix name
with different messages are the divergent offsets; what a consumer with a committed offset among them skips or
reads twice when it moves to the other side follows from them. The joins and sorts run on disk within a memory
limit and every listing is read back a batch at a time, so memory does not grow with the size of the divergence;
what stays in memory is per queue or per committed offset (figures and [start, end) runs of offsets).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from rmqdump.checks.diffepochs import EpochDiff, epoch_diff
from rmqdump.checks.diffprefix import Prefix, common_prefix
from rmqdump.checks.diffspill import Spill
from rmqdump.checks.offsets import consumer_offsets
from rmqdump.common.closing import Closing
from rmqdump.common.jsontext import fields_of
from rmqdump.common.problems import InputError
from rmqdump.readers.commitlog import CommitLog
from rmqdump.readers.epochfile import EPOCH_FILE
from rmqdump.readers.store import Store
from rmqdump.scan import scanner
from rmqdump.scan.dataend import data_end_of
from rmqdump.scan.ranges import SERIAL, Mapper

SIDES = ("a", "b")
COLUMNS = [
    "phys_offset", "total_size", "topic", "queue_id", "queue_offset", "keys", "uniq_key", "tags",
    "store_timestamp", "born_timestamp", "born_host", "msg_id", "body_crc",
]  # fmt: skip
MESSAGE_FIELDS = [
    "phys_offset", "total_size", "topic", "queue_id", "queue_offset", "uniq_key", "msg_id", "keys", "tags", "store_timestamp",
]  # fmt: skip
NO_OFFSETS = "holds no config/consumerOffset.json"
_BRIEF = (("phys_offset", "phys_offset"), ("size", "total_size"), ("uniq_key", "uniq_key"), ("msg_id", "msg_id"))


# --- the messages past the prefix -----------------------------------------------------------------


class Walk:
    """One side's records from `start` on, decoded (COLUMNS) a batch at a time; what the walk met is kept as it goes."""

    def __init__(self, cl: CommitLog, start: int, *, check_crc: bool = True, to_offset: int | None = None):
        self.cl, self.start, self.check_crc, self.to_offset = cl, start, check_crc, to_offset
        self.problems: list = []  # Problem objects
        self.first: tuple[int, int] | None = None  # DLedger: (index, term) of the first entry
        self.count = 0
        self.data_end = 0  # end of the last record (0: none)

    def batches(self):
        """Arrow record batches with COLUMNS."""
        from rmqdump.export.arrowbatch import record_batches

        frame = self.cl.files[0].frame if self.cl.files else 0  # DLedger: a message lies past its entry header
        to = None if self.to_offset is None else self.to_offset + frame
        for batch in scanner.batches(self.cl, from_offset=self.start + frame, to_offset=to, check_crc=self.check_crc):
            self.problems.extend(batch.problems())
            if not len(batch):
                continue
            if self.first is None and batch.entries is not None:
                self.first = (int(batch.entries["index"][0]), int(batch.entries["term"][0]))
            self.count += len(batch)
            self.data_end = max(self.data_end, int((batch.phys + batch.cols["total_size"].astype(np.int64)).max()))
            yield from record_batches(batch, "", columns=COLUMNS)


def side_schema():
    """The Arrow schema of a side's decoded records (the columns diff compares)."""
    import pyarrow as pa

    from rmqdump.export.arrowbatch import schema

    s = schema()
    return pa.schema([s.field(c) for c in COLUMNS])


def decoded_past(cl: CommitLog, start: int, *, check_crc: bool = True, to_offset: int | None = None):
    """The records from `start` on as one Arrow table (COLUMNS), the problems the walk met and (DLedger) the first entry."""
    import pyarrow as pa

    w = Walk(cl, start, check_crc=check_crc, to_offset=to_offset)
    return pa.Table.from_batches(list(w.batches()), schema=side_schema()), w.problems, w.first


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
    return pc.cast(pc.if_else(pc.and_(pc.is_valid(uniq), pc.not_equal(pc.fill_null(uniq, ""), "")), uniq, fallback), pa.string())


SPILLED = ["phys_offset", "total_size", "topic", "queue_id", "queue_offset", "keys", "uniq_key", "tags", "store_timestamp", "msg_id"]
STATUS_SQL = "CASE WHEN other IS NULL THEN 'only' WHEN other = phys_offset THEN 'same' ELSE 'moved' END"


def spill_side(sp: Spill, side: str, walk: Walk) -> None:
    """Decode one side's records past the prefix into its Parquet file rec_{side} (SPILLED + ident), a batch at a
    time, in physical offset order (the walk's)."""
    import pyarrow as pa

    sch = side_schema()
    out = pa.schema([sch.field(c) for c in SPILLED]).append(pa.field("ident", pa.string()))
    with sp.writer(f"rec_{side}", out) as w:
        for rb in walk.batches():
            t = pa.Table.from_batches([rb])
            w.write_table(t.select(SPILLED).append_column("ident", identities(t)).cast(out))


def _both(sp: Spill, columns: str = "*") -> str:
    """Both sides' records past the prefix as one DuckDB table expression with a `side` column."""
    return f"(SELECT {columns}, 'a' AS side FROM {sp.file('rec_a')} UNION ALL SELECT {columns}, 'b' AS side FROM {sp.file('rec_b')})"


def pair_sides(sp: Spill, rows: int) -> None:
    """pair_a, pair_b: each side's records (phys_offset) with `other`, where the other side holds the same message
    (its first record of that identity; null: nowhere). One aggregation by identity over both sides of plain
    minimums and counts, which DuckDB spills; only an identity a side holds more than once (a retried send) is
    joined back to that side's records for its later ones."""
    per_side = ", ".join(f"min(phys_offset) FILTER (side = '{s}') AS first_{s}, count(*) FILTER (side = '{s}') AS n_{s}" for s in SIDES)
    sp.copy_parts("idents", f"SELECT ident, {per_side} FROM {_both(sp, 'ident, phys_offset')} WHERE {{part}} GROUP BY ident", "ident", rows)
    for s, o in (("a", "b"), ("b", "a")):
        once = f"SELECT first_{s} AS phys_offset, first_{o} AS other FROM {sp.file('idents')} WHERE n_{s} = 1"
        again = f"SELECT r.phys_offset, i.first_{o} AS other FROM {sp.file(f'rec_{s}')} r JOIN (SELECT ident, first_{o} FROM {sp.file('idents')} WHERE n_{s} > 1) i ON r.ident = i.ident"
        sp.copy(f"pair_{s}_unsorted", f"{once} UNION ALL {again}")
        sp.copy_sorted(f"pair_{s}", f"SELECT phys_offset, other FROM {sp.file(f'pair_{s}_unsorted')} ORDER BY phys_offset")


def _aligned(left, right) -> Iterator[tuple]:
    """Two streams of record batches holding the same number of rows, as pairs of equally long slices."""
    left, right = iter(left), iter(right)
    a = b = None
    while True:
        while a is None or not a.num_rows:
            a = next(left, None)
            if a is None:
                return
        while b is None or not b.num_rows:
            b = next(right, None)
            if b is None:
                raise RuntimeError("the paired streams hold different numbers of rows")
        n = min(a.num_rows, b.num_rows)
        yield a.slice(0, n), b.slice(0, n)
        a, b = a.slice(n), b.slice(n)


def message_dicts(side: str, batches) -> Iterator[dict]:
    """The `message` JSON Lines objects of one side, from Arrow batches (columns to lists, then zipped)."""
    for rb in batches:
        names = rb.schema.names
        cols = [rb.column(i).to_pylist() for i in range(len(names))]
        for values in zip(*cols, strict=True):
            d = {"kind": "message", "side": side}
            d.update(zip(names, values, strict=True))
            if d["keys"] is None:
                d["keys"] = []
            yield d


# --- queues and consumers -------------------------------------------------------------------------


def runs_by_key(batches, nkey: int) -> dict[tuple, list[list[int]]]:
    """[start, end) runs of the last column per key (the first `nkey` columns), from batches sorted by key then value,
    read a batch at a time: a run is values each one more than the one before."""
    out: dict[tuple, list[list[int]]] = {}
    last_key, last = None, None
    for rb in batches:
        if not rb.num_rows:
            continue
        keys = [rb.column(i) for i in range(nkey)]
        vals = rb.column(nkey).to_numpy(zero_copy_only=False).astype(np.int64)
        change = np.diff(vals) != 1
        for k in keys:
            arr = k.to_numpy(zero_copy_only=False)
            change |= arr[1:] != arr[:-1]
        starts = np.r_[0, np.flatnonzero(change) + 1]
        ends = np.r_[starts[1:], len(vals)]
        key_rows = [k.take(starts).to_pylist() for k in keys]
        for j, (s, e) in enumerate(zip(starts, ends, strict=True)):
            key = tuple(col[j] for col in key_rows)
            lo, hi = int(vals[s]), int(vals[e - 1]) + 1
            if key == last_key and last is not None and last[1] == lo:
                last[1] = hi
                continue
            last_key, last = key, [lo, hi]
            out.setdefault(key, []).append(last)
    return out


def _length(runs: list[list[int]]) -> int:
    return sum(hi - lo for lo, hi in runs)


@dataclass
class QueueDiff:
    topic: str
    queue_id: int
    a_max_offset: int | None  # from the side's ConsumeQueue (None: no queue there)
    b_max_offset: int | None
    divergent_ranges: list[list[int]]  # queue offsets both sides' records past the prefix name with different messages
    only_a: list[list[int]]  # queue offsets (runs) of A's records past the prefix that B's records do not name
    only_b: list[list[int]]

    @property
    def divergent_count(self) -> int:
        return _length(self.divergent_ranges)

    def differs(self) -> bool:
        return bool(self.divergent_ranges or self.only_a or self.only_b or self.a_max_offset != self.b_max_offset)

    def to_dict(self, divergent: Iterator[dict] | list[dict]) -> dict:
        """The `queue` object; `divergent` the divergent offsets with both sides' messages (an iterator is written as it is read)."""
        return {
            "kind": "queue",
            **fields_of(self, omit=("divergent_ranges", "only_a", "only_b")),
            "divergent_offsets": divergent,
            "divergent_ranges": self.divergent_ranges,
            "only_a_offsets": self.only_a,
            "only_b_offsets": self.only_b,
        }


def _max_offset(st: Store, topic: str, qid: int) -> int | None:
    q = st.queue(topic, qid)
    return None if q is None else q.bounds()[1]


_DETAIL = ("phys_offset", "total_size", "uniq_key", "msg_id")


def join_queues(sp: Spill, rows: int) -> None:
    """by_offset: per queue offset either side's records past the prefix name, each side's first record there (lowest
    physical offset; null when the side names none) and the 64-bit hash of its identity (the smallest, should the
    side name the offset more than once): one aggregation over both sides of plain minimums, which DuckDB spills,
    no join. Two identities are taken as the same only if their hashes are (different ones collide 1 in 2^64).
    div: the divergent offsets with each side's record (_DETAIL, suffixed _a and _b), sorted by queue and offset
    (absent when there are none)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    firsts = ", ".join(f"min(phys_offset) FILTER (side = '{s}') AS phys_offset_{s}, min(hash(ident)) FILTER (side = '{s}') AS ident_hash_{s}" for s in SIDES)
    cols = "topic, queue_id, queue_offset, phys_offset, ident"
    key = "topic, queue_id, queue_offset"
    sp.copy_parts("by_offset", f"SELECT {key}, {firsts} FROM {_both(sp, cols)} WHERE {{part}} GROUP BY {key}", key, rows)
    for s in SIDES:
        wanted = sp.batches(
            f"SELECT phys_offset_{s} AS phys_offset, topic, queue_id, queue_offset FROM {sp.file('by_offset')} WHERE {_WHERE['div']} ORDER BY 1"
        )
        w = None
        for keys, rec in _matching(wanted, sp.scan(f"rec_{s}", list(_DETAIL))):
            t = (
                pa.Table.from_batches([rec])
                .append_column("topic", keys.column(1))
                .append_column("queue_id", keys.column(2))
                .append_column("queue_offset", keys.column(3))
            )
            w = w or sp.writer(f"div_{s}_unsorted", t.schema)
            w.write_table(t)
        if w is None:
            sp.copy(f"div_{s}", f"SELECT {', '.join(_DETAIL)}, topic, queue_id, queue_offset FROM {sp.file(f'rec_{s}')} LIMIT 0")
            continue
        w.close()
        sp.copy_sorted(f"div_{s}", f"SELECT * FROM {sp.file(f'div_{s}_unsorted')} ORDER BY topic, queue_id, queue_offset")
    w = None
    for a, b in _aligned(*(sp.scan(f"div_{s}", ["topic", "queue_id", "queue_offset", *_DETAIL]) for s in SIDES)):
        if not pc.all(pc.equal(a.column(2), b.column(2))).as_py():
            raise RuntimeError("the two sides' divergent offsets are out of step")
        t = pa.Table.from_batches([a]).rename_columns(["topic", "queue_id", "queue_offset", *(f"{c}_a" for c in _DETAIL)])
        for i, c in enumerate(_DETAIL):
            t = t.append_column(f"{c}_b", b.column(3 + i))
        w = w or sp.writer("div", t.schema)
        w.write_table(t)
    if w is not None:
        w.close()


def _matching(wanted, records) -> Iterator[tuple]:
    """Pairs of equally long Arrow batches: rows of `wanted` and the rows of `records` at their physical offsets (column
    0 of both, ascending; every wanted offset is a record's)."""
    import pyarrow as pa

    wanted = iter(wanted)
    pend = None  # what is left of the current wanted batch
    for rb in records:
        if not rb.num_rows:
            continue
        phys = rb.column(0).to_numpy(zero_copy_only=False)
        parts = []
        while True:
            if pend is None or not pend.num_rows:
                pend = next(wanted, None)
                if pend is None:
                    break
                continue
            k = int(np.searchsorted(pend.column(0).to_numpy(zero_copy_only=False), phys[-1], side="right"))
            parts.append(pend.slice(0, k))
            pend = pend.slice(k)
            if pend.num_rows:
                break
        parts = [p for p in parts if p.num_rows]
        if parts:
            keys = pa.Table.from_batches(parts).combine_chunks().to_batches()[0]
            want = keys.column(0).to_numpy(zero_copy_only=False)
            idx = np.searchsorted(phys, want)
            if (idx >= len(phys)).any() or (phys[np.minimum(idx, len(phys) - 1)] != want).any():
                raise RuntimeError("a wanted physical offset is no record's")
            yield keys, rb.take(pa.array(idx))
        if pend is None:
            return


_WHERE = {
    "div": "phys_offset_a IS NOT NULL AND phys_offset_b IS NOT NULL AND ident_hash_a <> ident_hash_b",
    "only_a": "phys_offset_b IS NULL",
    "only_b": "phys_offset_a IS NULL",
}


def queue_diffs(stores: dict[str, Store], sp: Spill, named: set[tuple[str, int]]) -> list[QueueDiff]:
    """Per queue named by either side (its ConsumeQueue or its records past the prefix): max offsets and divergence runs."""
    runs = {
        k: runs_by_key(sp.batches(f"SELECT topic, queue_id, queue_offset FROM {sp.file('by_offset')} WHERE {w} ORDER BY 1, 2, 3"), 2) for k, w in _WHERE.items()
    }
    out = []
    for topic, qid in sorted(named | set(stores["a"].queues) | set(stores["b"].queues)):
        key = (topic, qid)
        a_max, b_max = _max_offset(stores["a"], topic, qid), _max_offset(stores["b"], topic, qid)
        out.append(QueueDiff(topic, qid, a_max, b_max, runs["div"].get(key, []), runs["only_a"].get(key, []), runs["only_b"].get(key, [])))
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
    skipped: list[list[int]]  # runs of the other side's queue offsets below the committed one holding messages this side never had
    read_twice: list[list[int]]  # runs of the other side's queue offsets from the committed one on holding messages already consumed here
    beyond_max: bool  # the committed offset is past the other side's max: the broker resets it (OFFSET_OVERFLOW)

    def affected(self) -> bool:
        return bool(self.skipped or self.read_twice or self.beyond_max)

    def to_dict(self) -> dict:
        return {
            "kind": "consumer",
            **fields_of(self, omit=("skipped", "read_twice", "beyond_max")),
            "skipped": _length(self.skipped),
            "skipped_offsets": self.skipped,
            "read_twice": _length(self.read_twice),
            "read_twice_offsets": self.read_twice,
            "beyond_max": self.beyond_max,
        }


def committed_offsets(st: Store) -> tuple[list[tuple[str, str, int, int]], str | None]:
    """(group, topic, queue id, committed offset) from the store's config/consumerOffset.json, and why there are
    none to look at (no such file, or one that cannot be read), else None: no offsets is not "no consumer"."""
    try:
        rep = consumer_offsets(st)
    except InputError as e:
        return [], NO_OFFSETS if e.code == "not_found" else f"has an unreadable {os.path.basename(e.path)} ({e.code})"
    return [(r.group, r.topic, r.queue_id, r.committed) for r in rep.rows if r.committed is not None], None


def consumers_unknown(whys: dict[str, str | None]) -> str | None:
    """Why consumers_affected is not the whole answer (None when both sides' committed offsets were read)."""
    missing = [s for s in SIDES if whys.get(s)]
    if not missing:
        return None
    if len(missing) == len(SIDES) and whys["a"] == whys["b"] == NO_OFFSETS:
        return "neither store holds config/consumerOffset.json"
    text = "; ".join(f"{s.upper()} {whys[s]}" for s in missing)
    return text + (": no committed offset to judge" if len(missing) == len(SIDES) else f": {missing[0].upper()}'s consumers are not counted")


def consumer_impacts(
    stores: dict[str, Store], sp: Spill, lowest: dict[tuple[str, int], int], queues: list[QueueDiff], rows: int, whys: dict[str, str | None]
) -> list[ConsumerImpact]:
    """For each committed offset of a queue whose sides differ past the prefix: what moving to the other side skips or repeats.

    lowest: per queue the lowest queue offset either side's records past the prefix name. Per (queue, identity)
    one aggregation gives each side's lowest queue offset and all its queue offsets; a committed offset c on
    side s then skips the other side's offsets below c whose message s never had, and reads twice those from
    c on whose message s had below c. whys: filled per side with why it has no committed offsets (or None)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    maxes = {(q.topic, q.queue_id): {"a": q.a_max_offset, "b": q.b_max_offset} for q in queues}
    wanted = []  # committed offsets past something the two sides disagree on, in output order
    for s in SIDES:
        held, whys[s] = committed_offsets(stores[s])
        for group, topic, qid, c in held:
            if (topic, qid) in lowest and c > lowest[(topic, qid)]:
                wanted.append((s, group, topic, qid, c))
    if not wanted:
        return []
    pq.write_table(
        pa.table({
            "idx": pa.array(range(len(wanted)), pa.int64()), "side": [w[0] for w in wanted], "topic": [w[2] for w in wanted],
            "queue_id": pa.array([w[3] for w in wanted], pa.int32()), "committed": pa.array([w[4] for w in wanted], pa.int64()),
        }),
        sp.path("committed"),
    )  # fmt: skip
    committed = sp.file("committed")
    sp.copy_parts(
        "by_ident",
        f"""SELECT topic, queue_id, min(queue_offset) FILTER (side = 'a') AS min_a, min(queue_offset) FILTER (side = 'b') AS min_b,
                   list(queue_offset) FILTER (side = 'a') AS offs_a, list(queue_offset) FILTER (side = 'b') AS offs_b
            FROM {_both(sp, "topic, queue_id, queue_offset, ident")} r
            WHERE {{part}} AND EXISTS (SELECT 1 FROM {committed} c WHERE c.topic = r.topic AND c.queue_id = r.queue_id)
            GROUP BY topic, queue_id, ident""",
        "ident",
        rows,
    )
    found: dict[str, dict] = {"skipped": {}, "twice": {}}
    for s, o in (("a", "b"), ("b", "a")):
        theirs = f"(SELECT topic, queue_id, unnest(offs_{o}) AS off, min_{s} AS mine FROM {sp.file('by_ident')} WHERE len(offs_{o}) > 0)"
        base = f"SELECT c.idx, t.off FROM {committed} c JOIN {theirs} t ON t.topic = c.topic AND t.queue_id = c.queue_id WHERE c.side = '{s}'"
        found["skipped"].update(runs_by_key(sp.batches(f"{base} AND t.off < c.committed AND t.mine IS NULL ORDER BY 1, 2"), 1))
        found["twice"].update(runs_by_key(sp.batches(f"{base} AND t.off >= c.committed AND t.mine < c.committed ORDER BY 1, 2"), 1))
    out = []
    for i, (s, group, topic, qid, c) in enumerate(wanted):
        o = "b" if s == "a" else "a"
        other_max = maxes.get((topic, qid), {}).get(o)
        skipped, twice = found["skipped"].get((i,), []), found["twice"].get((i,), [])
        out.append(ConsumerImpact(s, group, topic, qid, c, other_max, skipped, twice, other_max is not None and c > other_max))
    return out


# --- the whole comparison -------------------------------------------------------------------------


@dataclass
class StoreDiff(Closing):
    """The comparison; the listings past the prefix are read from `spill` (close it: `with diff_stores(...) as d`)."""

    prefix: Prefix
    spill: Spill
    counts: dict[str, dict[str, int]]  # per side: records past the prefix per status (only, moved, same)
    queues: list[QueueDiff]
    consumers: list[ConsumerImpact]
    data_end: dict[str, int]  # end of each side's last record (identical_up_to when none past it)
    problems: dict[str, list]  # per side: the problems its walk past the prefix met (rmqdump.common.problems.Problem)
    notes: list[str]
    first_entries: dict[str, tuple[int, int] | None] = field(default_factory=dict)  # DLedger: each side's first entry past the prefix
    epochs: EpochDiff | None = None  # controller mode: both sides' epoch histories
    offsets_missing: dict[str, str | None] = field(default_factory=dict)  # per side: why it has no committed offsets, else None

    def close(self) -> None:
        self.spill.close()

    @property
    def identical(self) -> bool:
        return self.prefix.first_differing_byte is None

    def past(self, side: str) -> int:
        """Records of `side` past the prefix."""
        return sum(self.counts[side].values())

    def prefix_of(self) -> str | None:
        """'a' when A's records are all in the common prefix (A is a prefix of B), 'b' the other way, None otherwise."""
        if self.identical:
            return None
        more = {s: self.past(s) > 0 for s in SIDES}
        if not more["a"] and more["b"]:
            return "a"
        if not more["b"] and more["a"]:
            return "b"
        return None

    def count(self, side: str, status: str) -> int:
        return self.counts[side].get(status, 0)

    def _paired(self, side: str) -> Iterator:
        """`side`'s records past the prefix (MESSAGE_FIELDS) with `status` and `other_phys_offset`, by physical offset:
        the side's file (written in that order) beside its pairing sorted the same way."""
        import pyarrow as pa
        import pyarrow.compute as pc

        for rec, pair in _aligned(self.spill.scan(f"rec_{side}", MESSAGE_FIELDS), self.spill.scan(f"pair_{side}", ["phys_offset", "other"])):
            if not pc.all(pc.equal(rec.column("phys_offset"), pair.column(0))).as_py():
                raise RuntimeError(f"the pairing of side {side} is out of step with its records")
            other = pair.column(1)
            status = pc.if_else(pc.is_null(other), "only", pc.if_else(pc.equal(other, rec.column("phys_offset")), "same", "moved"))
            cols = [status, *rec.columns, other]
            yield pa.RecordBatch.from_arrays(cols, names=["status", *MESSAGE_FIELDS, "other_phys_offset"])

    def messages(self, side: str, status: str | None = None, limit: int | None = None) -> Iterator[dict]:
        """`side`'s records past the prefix (only those of `status` if given, at most `limit`) as `message` objects, by physical offset."""
        import pyarrow.compute as pc

        left = limit
        for rb in self._paired(side):
            if status is not None:
                rb = rb.filter(pc.equal(rb.column(0), status))
            if left is not None:
                rb = rb.slice(0, left)
                left -= rb.num_rows
            yield from message_dicts(side, [rb])
            if left == 0:
                return

    def timeline(self, bins: int = 120) -> tuple[np.ndarray, dict[str, dict[str, np.ndarray]]]:
        """Both sides' records past the prefix binned by store time: the bin edges (ms, bins + 1 of them, equal
        widths) and per side per status (only, moved, same) the counts; read a batch at a time."""
        both = " UNION ALL ".join(f"SELECT store_timestamp FROM {self.spill.file(f'rec_{s}')}" for s in SIDES)
        lo, hi = self.spill.rows(f"SELECT min(store_timestamp), max(store_timestamp) FROM ({both})")[0]
        counts = {s: {k: np.zeros(bins, np.int64) for k in ("only", "moved", "same")} for s in SIDES}
        if lo is None:
            return np.zeros(0, np.int64), counts
        edges = np.linspace(lo, max(hi, lo + 1), bins + 1)
        for s in SIDES:
            for rb in self._paired(s):
                status = np.asarray(rb.column(0).to_pylist(), dtype=object)
                t = rb.column(MESSAGE_FIELDS.index("store_timestamp") + 1).to_numpy(zero_copy_only=False)
                for k in counts[s]:
                    counts[s][k] += np.histogram(t[status == k], bins=edges)[0]
        return edges, counts

    def phys_offsets(self, side: str, status: str) -> Iterator[np.ndarray]:
        """The physical offsets of `side`'s records of `status`, ascending, a chunk at a time."""
        import pyarrow.compute as pc

        for rb in self.spill.scan(f"pair_{side}", ["phys_offset", "other"]):
            phys, other = rb.column(0), rb.column(1)
            keep = {"only": pc.is_null(other), "same": pc.fill_null(pc.equal(other, phys), False), "moved": pc.fill_null(pc.not_equal(other, phys), False)}[
                status
            ]
            yield phys.filter(keep).to_numpy(zero_copy_only=False).astype(np.int64)

    def divergent(self, q: QueueDiff, limit: int | None = None) -> list[dict]:
        """The queue's first `limit` divergent offsets (all if None) with both sides' messages, by queue offset."""
        if not q.divergent_ranges:
            return []
        lim = "" if limit is None else f" LIMIT {int(limit)}"
        sql = f"SELECT * FROM {self.spill.file('div')} WHERE topic = ? AND queue_id = ? ORDER BY queue_offset{lim}"
        return [_divergent_row(r) for rb in self.spill.batches(sql, [q.topic, q.queue_id]) for r in rb.to_pylist()]

    def _divergent_by_queue(self) -> Iterator[tuple[tuple[str, int], Iterator[dict]]]:
        """Every queue's divergent offsets, queue by queue in (topic, queue id) order: the div file read once, in its order."""
        if not os.path.exists(self.spill.path("div")):
            return
        rows = (r for rb in self.spill.scan("div", None) for r in rb.to_pylist())
        head = next(rows, None)
        while head is not None:
            key = (head["topic"], head["queue_id"])
            box = [head]

            def same(key=key, box=box):
                while box[0] is not None and (box[0]["topic"], box[0]["queue_id"]) == key:
                    yield _divergent_row(box[0])
                    box[0] = next(rows, None)

            yield key, same()
            for _ in same():  # what the caller left unread
                pass
            head = box[0]

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
            "a_messages_past_prefix": self.past("a"),
            "b_messages_past_prefix": self.past("b"),
            "only_a": self.count("a", "only"),
            "only_b": self.count("b", "only"),
            "moved": self.count("a", "moved"),
            "same_offset": self.count("a", "same"),
            "queues_divergent": sum(1 for q in self.queues if q.divergent_ranges),
            "divergent_offsets": sum(q.divergent_count for q in self.queues),
            **self.consumers_affected(),
            "consistent_point": None if self.epochs is None else self.epochs.consistent_point,
            "a_problems": len(self.problems["a"]),
            "b_problems": len(self.problems["b"]),
            "notes": self.notes,
        }

    def consumers_affected(self) -> dict:
        """How many committed offsets move badly to the other side; null when neither side has offsets to look at
        (0 would read as "no impact"), with why."""
        why = consumers_unknown(self.offsets_missing)
        if not (self.past("a") or self.past("b")):
            return {"consumers_affected": 0, "consumers_affected_why": None}  # nothing past the prefix: no consumer can be
        known = not all(self.offsets_missing.get(s) for s in SIDES)
        return {"consumers_affected": sum(1 for c in self.consumers if c.affected()) if known else None, "consumers_affected_why": why}

    def records(self) -> Iterator[dict]:
        """The JSON Lines objects, in order: prefix, messages (A's then B's), queues, consumers, epochs, summary.
        A queue's `divergent_offsets` is an iterator, read as it is written (a queue may hold millions)."""
        yield self.prefix_dict()
        for s in SIDES:
            yield from self.messages(s)
        for s in SIDES:
            for p in self.problems[s]:
                yield p.to_dict(side=s)
        div = self._divergent_by_queue()
        pending = next(div, None)
        for q in self.queues:
            rows: Iterator[dict] | list = []
            if pending is not None and pending[0] == (q.topic, q.queue_id):
                rows, pending = pending[1], None
            yield q.to_dict(rows)
            if pending is None:
                for _ in rows:  # left unread by the caller
                    pass
                pending = next(div, None)
        if pending is not None:
            raise RuntimeError(f"divergent offsets of {pending[0]} came in another order than the queues")
        for c in self.consumers:
            yield c.to_dict()
        if self.epochs is not None:
            yield self.epochs.to_dict()
            for p in self.epochs.problems():
                yield p.to_dict()
        yield self.summary()


def _divergent_row(r: dict) -> dict:
    return {"queue_offset": r["queue_offset"], **{s: {k: r[f"{c}_{s}"] for k, c in _BRIEF} for s in SIDES}}


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


def diff_stores(
    a: Store,
    b: Store,
    *,
    check_crc: bool = True,
    progress: Callable[[int], None] | None = None,
    mapper: Mapper = SERIAL,
    temp_dir: str | None = None,
    decode: Callable | None = None,
) -> StoreDiff:
    """Compare two stores that were one; see the module docstring. The records past the prefix go to a temporary
    directory in `temp_dir` (default: the system's), removed when the StoreDiff is closed. `decode(spill, side,
    commitlog, start, check_crc)`, when given, writes a side's table rec_{side} itself (an engine's tasks) and
    returns (records, data end, problems), or None to leave the side to the local walk."""
    stores = {"a": a, "b": b}
    warm = threading.Thread(target=_load_kernel, args=(a.commitlog, check_crc), daemon=True)
    warm.start()  # loading the compiled scan kernel holds the GIL; the CRC pass releases it, so the two overlap
    pre = common_prefix(a.commitlog, b.commitlog, progress=progress, record_start_before=lambda s, d: unit_before(stores[s], d), mapper=mapper)
    warm.join()
    sp = Spill(temp_dir, [a.root, b.root])
    try:
        problems, first, data_end, counted = {}, {}, {}, {}
        start = pre.identical_up_to if pre.first_differing_byte is not None else pre.end  # identical: nothing past the prefix
        for s in SIDES:
            done = None if decode is None else decode(sp, s, stores[s].commitlog, start, check_crc)
            if done is not None:
                counted[s], end, problems[s] = done
                first[s], data_end[s] = None, max(pre.identical_up_to, end)
                continue
            w = Walk(stores[s].commitlog, start, check_crc=check_crc)
            spill_side(sp, s, w)
            problems[s], first[s], data_end[s], counted[s] = w.problems, w.first, max(pre.identical_up_to, w.data_end), w.count
        rows = sum(counted.values())
        pair_sides(sp, rows)
        join_queues(sp, rows)
        counts = {s: dict(sp.rows(f"SELECT {STATUS_SQL} AS status, count(*) FROM {sp.file(f'pair_{s}')} GROUP BY status")) for s in SIDES}
        lowest = {
            (t, q): lo
            for t, q, lo in sp.rows(f"SELECT topic, queue_id, min(queue_offset) FROM {_both(sp, 'topic, queue_id, queue_offset')} GROUP BY topic, queue_id")
        }
        queues = queue_diffs(stores, sp, set(lowest))
        whys: dict[str, str | None] = {}
        consumers = consumer_impacts(stores, sp, lowest, queues, rows, whys)
        if pre.first_differing_byte is None and any(os.path.exists(os.path.join(st.root, EPOCH_FILE)) for st in stores.values()):
            data_end = dict.fromkeys(SIDES, data_end_of(a.commitlog))  # identical: both end where A's last record does
        epochs = epoch_diff(stores, data_end)
    except BaseException:
        sp.close()
        raise
    return StoreDiff(pre, sp, counts, queues, consumers, data_end, problems, _notes(stores), first, epochs, whys)
