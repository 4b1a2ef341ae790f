"""Two stores that were one (a master and its slave after a failover or a lag): where they part and who holds what.

The CommitLogs are compared as byte streams (a file's absent bytes read as
zeros, as a preallocated file's unwritten tail): range by range by CRC32
first, bytes only inside the first range whose CRCs differ, so identical
stretches are hashed in one pass and never compared twice. The common
prefix ends at the start of the record that holds the first differing byte
(found by walking that file's records); past it each side's records are
decoded and paired by UNIQ_KEY: the same message at another offset, or a
message only on one side. Queue offsets named by both sides' records past
the prefix with different messages are the divergent offsets; what a
consumer with a committed offset among them skips or reads twice when it
moves to the other side follows from them.
"""

from __future__ import annotations

import itertools
import os
import threading
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from rmqdump.checks.offsets import consumer_offsets
from rmqdump.common.problems import InputError, Problem
from rmqdump.readers.commitlog import CommitLog
from rmqdump.readers.epochfile import EPOCH_FILE, EPOCH_FILE_DAMAGED, Epoch, EpochFile, read_epoch_file
from rmqdump.readers.store import Store

RANGE_BYTES = 64 << 20  # bytes per compared range (its CRC32 on each side)
READ_BYTES = 1 << 20  # bytes per read inside a range (small reads: no fresh pages to fault in per read)
SIDES = ("a", "b")
COLUMNS = [
    "phys_offset", "total_size", "topic", "queue_id", "queue_offset", "keys", "uniq_key", "tags",
    "store_timestamp", "born_timestamp", "born_host", "msg_id", "body_crc",
]  # fmt: skip


# --- the common prefix ----------------------------------------------------------------------------


@dataclass
class Prefix:
    """Where two CommitLogs part: bytes [start, identical_up_to) hold the same records on both sides."""

    start: int  # the first offset both sides hold (their min offsets' max)
    identical_up_to: int  # end of the last record before the first differing byte (or the end when identical)
    first_differing_byte: int | None  # None: the byte streams are identical
    end: int  # the end of the longer stream (its last file's end)
    ranges: int = 0  # ranges whose CRCs were compared
    bytes_hashed: int = 0  # bytes read for CRCs (both sides)
    bytes_compared: int = 0  # bytes read again to find the first differing byte (both sides)
    same_files: bool = False  # both sides are the same files: nothing read
    last_common_entry: tuple[int, int] | None = None  # DLedger: (index, term) of the last entry both ledgers hold


def _files(cl: CommitLog) -> list[tuple[int, int, str]]:
    return [(f.base, f.size, f.path) for f in cl.files]


class _Stream:
    """A CommitLog's files as one byte stream read with pread; offsets in no file read as zeros."""

    def __init__(self, cl: CommitLog):
        self.files = _files(cl)
        self.fds: dict[str, int] = {}

    def read(self, lo: int, hi: int) -> bytes:
        parts, pos = [], lo
        for base, size, path in self.files:
            if base + size <= pos or base >= hi:
                continue
            if base > pos:
                parts.append(bytes(base - pos))
                pos = base
            stop = min(hi, base + size)
            fd = self.fds.get(path)
            if fd is None:
                try:
                    fd = self.fds[path] = os.open(path, os.O_RDONLY)
                except OSError as e:
                    raise InputError("unreadable", path, e.strerror or str(e)) from None
            data = os.pread(fd, stop - pos, pos - base)
            parts.append(data + bytes(stop - pos - len(data)))  # a file that shrank under us: zeros
            pos = stop
        if pos < hi:
            parts.append(bytes(hi - pos))
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def close(self) -> None:
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()


def _cuts(a: list, b: list, lo: int, hi: int, step: int) -> list[tuple[int, int]]:
    """Ranges of at most `step` bytes covering [lo, hi), cut at every file boundary of either side."""
    bounds = {lo, hi}
    for base, size, _ in a + b:
        bounds.update(x for x in (base, base + size) if lo < x < hi)
    edges = sorted(bounds)
    out = []
    for s, e in itertools.pairwise(edges):
        out.extend((p, min(e, p + step)) for p in range(s, e, step))
    return out


def _crc(stream: _Stream, lo: int, hi: int) -> int:
    crc = 0
    for p in range(lo, hi, READ_BYTES):
        crc = zlib.crc32(stream.read(p, min(hi, p + READ_BYTES)), crc)
    return crc


def _first_difference(sa: _Stream, sb: _Stream, lo: int, hi: int) -> tuple[int | None, int]:
    """The first offset in [lo, hi) where the streams differ (None if nowhere) and the bytes read."""
    read = 0
    for p in range(lo, hi, READ_BYTES):
        q = min(hi, p + READ_BYTES)
        x, y = sa.read(p, q), sb.read(p, q)
        read += 2 * (q - p)
        if x != y:
            ne = np.flatnonzero(np.frombuffer(x, np.uint8) != np.frombuffer(y, np.uint8))
            return p + int(ne[0]), read
    return None, read


def _same_files(a: CommitLog, b: CommitLog) -> bool:
    """Both CommitLogs are the very same files (one store given twice, or hard links)."""
    if len(a.files) != len(b.files):
        return False
    try:
        return all(x.base == y.base and x.size == y.size and os.path.samefile(x.path, y.path) for x, y in zip(a.files, b.files, strict=True))
    except OSError:
        return False


def common_prefix(a: CommitLog, b: CommitLog, *, range_bytes: int = RANGE_BYTES, progress: Callable[[int], None] | None = None) -> Prefix:
    """Compare two CommitLogs range by range (CRC32 first, bytes in the first range that differs)."""
    fa, fb = _files(a), _files(b)
    start = max(a.min_offset if fa else 0, b.min_offset if fb else 0)
    end = max([base + size for base, size, _ in fa + fb] or [start])
    if _same_files(a, b):
        return Prefix(start, end, None, end, same_files=True)
    sa, sb = _Stream(a), _Stream(b)
    pre = Prefix(start, end, None, end)
    pool = ThreadPoolExecutor(1)  # B's CRC of a range in a thread while A's runs here: both release the GIL
    try:
        for lo, hi in _cuts(fa, fb, start, end, range_bytes):
            pre.ranges += 1
            pre.bytes_hashed += 2 * (hi - lo)
            other = pool.submit(_crc, sb, lo, hi)
            equal = _crc(sa, lo, hi) == other.result()
            if progress:
                progress(hi - lo)
            if equal:
                continue
            d, read = _first_difference(sa, sb, lo, hi)
            pre.bytes_compared += read
            if d is not None:  # (a CRC collision on different bytes is caught here; equal bytes with unequal CRCs cannot be)
                pre.first_differing_byte = d
                pre.identical_up_to, pre.last_common_entry = _record_start(a if a.file_for(d) else b, d)
                break
    finally:
        pool.shutdown()
        sa.close()
        sb.close()
    return pre


def _record_start(cl: CommitLog, d: int) -> tuple[int, tuple[int, int] | None]:
    """The end of the last whole record before byte `d`, walking the records of the file that holds `d`;
    for a DLedger CommitLog also that record's entry (index, term)."""
    seg = cl.file_for(d)
    if seg is None:
        return d, None
    end, entry = seg.base, None
    for batch in cl.scan(from_offset=seg.base, to_offset=d, check_crc=False):
        if not len(batch):
            continue
        ends = batch.phys + batch.cols["total_size"].astype(np.int64)
        whole = np.flatnonzero(ends <= d)
        if len(whole) and int(ends[whole[-1]]) >= end:
            end = int(ends[whole[-1]])
            if batch.entries is not None:
                entry = (int(batch.entries["index"][whole[-1]]), int(batch.entries["term"][whole[-1]]))
    return end, entry


# --- the messages past the prefix -----------------------------------------------------------------


def decoded_past(cl: CommitLog, start: int, *, check_crc: bool = True, to_offset: int | None = None):
    """The records from `start` on, decoded (COLUMNS) as an Arrow table, how many problems the walk met, and
    (DLedger) the (index, term) of the first entry."""
    import pyarrow as pa

    from rmqdump.export.arrowbatch import record_batches

    parts, problems, first = [], 0, None
    frame = cl.files[0].frame if cl.files else 0  # DLedger: a message lies past its entry header
    for batch in cl.scan(from_offset=start + frame, to_offset=None if to_offset is None else to_offset + frame, check_crc=check_crc):
        problems += len(batch.problems())
        if first is None and len(batch) and batch.entries is not None:
            first = (int(batch.entries["index"][0]), int(batch.entries["term"][0]))
        parts.extend(record_batches(batch, "", columns=COLUMNS))
    if not parts:
        return pa.table({c: pa.array([], t) for c, t in _schema()}), problems, first
    return pa.Table.from_batches(parts), problems, first


def _schema():
    from rmqdump.export.arrowbatch import schema

    s = schema()
    return [(c, s.field(c).type) for c in COLUMNS]


def identity(row: dict) -> str:
    """What names a message on both sides: its UNIQ_KEY, else its topic, body CRC, born time and host."""
    u = row.get("uniq_key")
    return u if u else f"~{row['topic']}|{row['body_crc']}|{row['born_timestamp']}|{row['born_host']}"


@dataclass
class SideMessage:
    side: str
    row: dict
    status: str  # only (on this side only), moved (on the other side at another offset), same (at the same offset there)
    other_phys_offset: int | None = None

    def to_dict(self) -> dict:
        r = self.row
        return {
            "kind": "message",
            "side": self.side,
            "status": self.status,
            "phys_offset": r["phys_offset"],
            "total_size": r["total_size"],
            "topic": r["topic"],
            "queue_id": r["queue_id"],
            "queue_offset": r["queue_offset"],
            "uniq_key": r["uniq_key"],
            "msg_id": r["msg_id"],
            "keys": r["keys"] or [],
            "tags": r["tags"],
            "store_timestamp": r["store_timestamp"],
            "other_phys_offset": self.other_phys_offset,
        }


def pair_messages(rows: dict[str, list[dict]]) -> dict[str, list[SideMessage]]:
    """Each side's messages past the prefix, with where (if anywhere) the other side holds the same message."""
    where = {s: {} for s in SIDES}
    for s in SIDES:
        for r in rows[s]:
            where[s].setdefault(identity(r), r["phys_offset"])
    out: dict[str, list[SideMessage]] = {}
    for s, o in (("a", "b"), ("b", "a")):
        msgs = []
        for r in rows[s]:
            other = where[o].get(identity(r))
            status = "only" if other is None else ("same" if other == r["phys_offset"] else "moved")
            msgs.append(SideMessage(s, r, status, other))
        out[s] = msgs
    return out


# --- queues and consumers -------------------------------------------------------------------------


def _ranges(offsets: list[int]) -> list[list[int]]:
    """Sorted integers as [start, end) runs."""
    out: list[list[int]] = []
    for x in offsets:
        if out and out[-1][1] == x:
            out[-1][1] = x + 1
        else:
            out.append([x, x + 1])
    return out


def _brief(r: dict) -> dict:
    return {"phys_offset": r["phys_offset"], "size": r["total_size"], "uniq_key": r["uniq_key"], "msg_id": r["msg_id"]}


@dataclass
class QueueDiff:
    topic: str
    queue_id: int
    a_max_offset: int | None  # from the side's ConsumeQueue (None: no queue there)
    b_max_offset: int | None
    divergent: list[tuple[int, dict, dict]]  # (queue offset, A's message, B's message) naming different messages
    only_a: list[int]  # queue offsets of A's records past the prefix that B's records do not name
    only_b: list[int]
    a_ids: dict[int, str] = field(default_factory=dict, repr=False)  # queue offset -> identity, past the prefix
    b_ids: dict[int, str] = field(default_factory=dict, repr=False)

    def to_dict(self) -> dict:
        return {
            "kind": "queue",
            "topic": self.topic,
            "queue_id": self.queue_id,
            "a_max_offset": self.a_max_offset,
            "b_max_offset": self.b_max_offset,
            "divergent_offsets": [{"queue_offset": q, "a": _brief(x), "b": _brief(y)} for q, x, y in self.divergent],
            "divergent_ranges": _ranges([q for q, _, _ in self.divergent]),
            "only_a_offsets": _ranges(self.only_a),
            "only_b_offsets": _ranges(self.only_b),
        }


def _max_offset(st: Store, topic: str, qid: int) -> int | None:
    q = st.queue(topic, qid)
    return None if q is None else q.bounds()[1]


def queue_diffs(stores: dict[str, Store], rows: dict[str, list[dict]]) -> list[QueueDiff]:
    """Per queue named by either side (its ConsumeQueue or its records past the prefix): max offsets and divergence."""
    by_q: dict[tuple[str, int], dict[str, dict[int, dict]]] = {}
    for s in SIDES:
        for r in rows[s]:
            by_q.setdefault((r["topic"], r["queue_id"]), {"a": {}, "b": {}})[s].setdefault(r["queue_offset"], r)
    keys = set(by_q) | set(stores["a"].queues) | set(stores["b"].queues)
    out = []
    for topic, qid in sorted(keys):
        named = by_q.get((topic, qid), {"a": {}, "b": {}})
        na, nb = named["a"], named["b"]
        div = [(q, na[q], nb[q]) for q in sorted(set(na) & set(nb)) if identity(na[q]) != identity(nb[q])]
        out.append(
            QueueDiff(
                topic,
                qid,
                _max_offset(stores["a"], topic, qid),
                _max_offset(stores["b"], topic, qid),
                div,
                sorted(set(na) - set(nb)),
                sorted(set(nb) - set(na)),
                {q: identity(r) for q, r in na.items()},
                {q: identity(r) for q, r in nb.items()},
            )
        )
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
    skipped: list[int]  # the other side's queue offsets below the committed one holding messages this side never had
    read_twice: list[int]  # the other side's queue offsets from the committed one on holding messages already consumed here
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
            "skipped_offsets": _ranges(self.skipped),
            "read_twice": len(self.read_twice),
            "read_twice_offsets": _ranges(self.read_twice),
            "beyond_max": self.beyond_max,
        }


def committed_offsets(st: Store) -> list[tuple[str, str, int, int]]:
    """(group, topic, queue id, committed offset) from the store's config/consumerOffset.json (none when absent)."""
    try:
        rep = consumer_offsets(st)
    except InputError:
        return []
    return [(r.group, r.topic, r.queue_id, r.committed) for r in rep.rows if r.committed is not None]


def consumer_impacts(stores: dict[str, Store], queues: list[QueueDiff]) -> list[ConsumerImpact]:
    """For each committed offset of a queue whose sides differ past the prefix: what moving to the other side skips or repeats."""
    qd = {(q.topic, q.queue_id): q for q in queues}
    out = []
    for s, o in (("a", "b"), ("b", "a")):
        for group, topic, qid, c in committed_offsets(stores[s]):
            q = qd.get((topic, qid))
            if q is None:
                continue
            mine, theirs = getattr(q, f"{s}_ids"), getattr(q, f"{o}_ids")
            if not mine and not theirs:
                continue
            lo = min([*mine, *theirs])
            if c <= lo:
                continue  # it has consumed nothing the two sides disagree on
            consumed = {v for k, v in mine.items() if k < c}
            present = set(mine.values())
            skipped = sorted(k for k, v in theirs.items() if k < c and v not in present)
            twice = sorted(k for k, v in theirs.items() if k >= c and v in consumed)
            other_max = getattr(q, f"{o}_max_offset")
            out.append(ConsumerImpact(s, group, topic, qid, c, other_max, skipped, twice, other_max is not None and c > other_max))
    return out


# --- controller mode: the epoch histories ---------------------------------------------------------

JAVA_LONG_MAX = (1 << 63) - 1


def epoch_ends(entries: list[Epoch], max_offset: int) -> list[tuple[int, int, int]]:
    """(epoch, start, end) per entry as EpochFileCache holds them: an epoch ends where the next (in file order) starts,
    the last at the store's max offset (left open, Long.MAX_VALUE, when that lies before its start)."""
    out = []
    for i, e in enumerate(entries):
        if i + 1 < len(entries):
            end = entries[i + 1].start_offset
        else:
            end = max_offset if e.start_offset <= max_offset else JAVA_LONG_MAX
        out.append((e.epoch, e.start_offset, end))
    return out


def consistent_point(local: list[tuple[int, int, int]], other: list[tuple[int, int, int]]) -> int:
    """EpochFileCache.findConsistentPoint: from local's newest epoch down, the first epoch `other` holds with the same
    start offset gives the smaller of the two ends; -1 when there is none. (Later entries of one epoch replace earlier ones.)"""
    mine = {e: (s, end) for e, s, end in local}
    theirs = {e: (s, end) for e, s, end in other}
    for epoch in sorted(mine, reverse=True):
        if epoch in theirs and theirs[epoch][0] == mine[epoch][0]:
            return min(mine[epoch][1], theirs[epoch][1])
    return -1


@dataclass
class EpochDiff:
    files: dict[str, EpochFile | None]
    ends: dict[str, list[tuple[int, int, int]]]
    consistent_point: int | None  # None: a side has no usable history

    def problems(self) -> list[Problem]:
        return [Problem(EPOCH_FILE_DAMAGED, f.path, f.error_offset, f.error) for f in self.files.values() if f is not None and f.error]

    def to_dict(self) -> dict:
        d: dict = {"kind": "epochs"}
        for s in SIDES:
            f = self.files[s]
            d[f"{s}_file"] = None if f is None else f.path
            d[f"{s}_epochs"] = [{"epoch": e, "start_offset": st, "end_offset": end} for e, st, end in self.ends[s]]
        d["consistent_point"] = self.consistent_point
        return d


def _data_end(cl: CommitLog) -> int:
    """The end of the CommitLog's last record (its newest file holding one)."""
    for seg in reversed(cl.files):
        end = None
        for batch in cl.scan(from_offset=seg.base, to_offset=seg.base + seg.size, check_crc=False):
            if len(batch):
                end = int(batch.phys[-1]) + int(batch.cols["total_size"][-1])
        if end is not None:
            return end
    return cl.min_offset


def epoch_diff(stores: dict[str, Store], data_end: dict[str, int]) -> EpochDiff | None:
    """Each side's epoch history and the point the broker would keep when A rejoins B (A's epochs searched newest first)."""
    files = {s: read_epoch_file(stores[s].root) for s in SIDES}
    if all(f is None for f in files.values()):
        return None
    ends = {s: [] if f is None or f.error else epoch_ends(f.entries, data_end[s]) for s, f in files.items()}
    point = consistent_point(ends["a"], ends["b"]) if all(ends.values()) else None
    return EpochDiff(files, ends, point)


# --- the whole comparison -------------------------------------------------------------------------


@dataclass
class StoreDiff:
    prefix: Prefix
    messages: dict[str, list[SideMessage]]
    queues: list[QueueDiff]
    consumers: list[ConsumerImpact]
    data_end: dict[str, int]  # end of each side's last record (identical_up_to when none past it)
    problems: dict[str, int]  # problems each side's walk past the prefix met
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
        only = {s: bool(self.messages[s]) for s in SIDES}
        if not only["a"] and only["b"]:
            return "a"
        if not only["b"] and only["a"]:
            return "b"
        return None

    def count(self, side: str, status: str) -> int:
        return sum(1 for m in self.messages[side] if m.status == status)

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
            "bytes_compared": p.bytes_compared,
        }

    def summary(self) -> dict:
        return {
            "kind": "summary",
            "identical": self.identical,
            "identical_up_to": self.prefix.identical_up_to,
            "prefix_of": self.prefix_of(),
            "a_messages_past_prefix": len(self.messages["a"]),
            "b_messages_past_prefix": len(self.messages["b"]),
            "only_a": self.count("a", "only"),
            "only_b": self.count("b", "only"),
            "moved": self.count("a", "moved"),
            "same_offset": self.count("a", "same"),
            "queues_divergent": sum(1 for q in self.queues if q.divergent),
            "divergent_offsets": sum(len(q.divergent) for q in self.queues),
            "consumers_affected": sum(1 for c in self.consumers if c.skipped or c.read_twice or c.beyond_max),
            "consistent_point": None if self.epochs is None else self.epochs.consistent_point,
            "a_problems": self.problems["a"],
            "b_problems": self.problems["b"],
            "notes": self.notes,
        }

    def records(self) -> Iterator[dict]:
        """The JSON Lines objects, in order: prefix, messages (A's then B's), queues, consumers, summary."""
        yield self.prefix_dict()
        for s in SIDES:
            for m in self.messages[s]:
                yield m.to_dict()
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
        st = stores[s]
        if st.dledger is not None:
            notes.append(f"{s}: DLedger CommitLog: entries compared as bytes; the ledgers part after last_common_entry (index, term)")
    return notes


def _load_kernel(cl: CommitLog, check_crc: bool) -> None:
    """Load what decoding needs (pyarrow, the scan kernel from its compile cache) by decoding the first record.

    Run in a thread while the ranges are hashed: imports and loading hold the GIL, reads and CRC32 release it.
    """
    decoded_past(cl, cl.min_offset, check_crc=check_crc, to_offset=cl.min_offset + 1)


def diff_stores(a: Store, b: Store, *, check_crc: bool = True, progress: Callable[[int], None] | None = None) -> StoreDiff:
    """Compare two stores that were one; see the module docstring."""
    stores = {"a": a, "b": b}
    warm = threading.Thread(target=_load_kernel, args=(a.commitlog, check_crc), daemon=True)
    warm.start()  # loading the compiled scan kernel holds the GIL; the CRC pass releases it, so the two overlap
    pre = common_prefix(a.commitlog, b.commitlog, progress=progress)
    warm.join()
    rows: dict[str, list[dict]] = {}
    problems: dict[str, int] = {}
    data_end: dict[str, int] = {}
    first: dict[str, tuple[int, int] | None] = {}
    for s in SIDES:
        if pre.first_differing_byte is None:
            rows[s], problems[s], first[s] = [], 0, None
        else:
            table, problems[s], first[s] = decoded_past(stores[s].commitlog, pre.identical_up_to, check_crc=check_crc)
            rows[s] = table.to_pylist()
        data_end[s] = max([pre.identical_up_to] + [r["phys_offset"] + r["total_size"] for r in rows[s]])
    messages = pair_messages(rows)
    queues = queue_diffs(stores, rows)
    if pre.first_differing_byte is None and any(os.path.exists(os.path.join(st.root, EPOCH_FILE)) for st in stores.values()):
        data_end = dict.fromkeys(SIDES, _data_end(a.commitlog))  # identical: both end where A's last record does
    epochs = epoch_diff(stores, data_end)
    return StoreDiff(pre, messages, queues, consumer_impacts(stores, queues), data_end, problems, _notes(stores), first, epochs)
