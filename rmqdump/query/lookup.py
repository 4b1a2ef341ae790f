"""Find messages by key or UNIQ_KEY through the index, as the broker's queryMessage does, and explain the walk.

The index only stores a 31-bit hash of topic#key, and slots are shared by
many hashes, so every candidate is read from the CommitLog and kept only when
its own topic and KEYS or UNIQ_KEY really say KEY. Only the slot and the
entries of its chain are touched: a lookup costs a few page reads however
large the index files are.

The index stops where the broker's dispatch stopped (a crash leaves the
CommitLog running further), so the CommitLog past the index's end is scanned
once per store, through the planner's ranges, for the keys the index would
have taken: a lookup is complete, or its summary says which stretch was not
readable.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
from collections import OrderedDict
from dataclasses import dataclass, field, replace

import numpy as np

from rmqdump.common.closing import Closing
from rmqdump.common.javahash import index_hash_many
from rmqdump.common.jsontext import fields_of
from rmqdump.common.problems import Problem
from rmqdump.readers.commitlog import CommitLog, commitlog_path
from rmqdump.readers.indexfile import IndexFile, key_hash, open_all
from rmqdump.readers.message import Message
from rmqdump.readers.msgid import OffsetMsgId, UniqKey, id_bytes
from rmqdump.readers.readable import prove_readable
from rmqdump.scan import scanner
from rmqdump.scan.ranges import SERIAL, Mapper, ScanOptions, map_ranges, scan_range
from rmqdump.scan.splits import Split, splits_past

SECOND = 1000
RECORD_CACHE = 4096
RELEASE_EVERY_TOPICS = 16


def store_topics(store: str) -> list[str]:
    """Topics the store knows: consumequeue/ directory names and config/topics.json (read leniently)."""
    found: set[str] = set()
    cq = os.path.join(str(store), "consumequeue")
    if os.path.isdir(cq):
        with contextlib.suppress(OSError):
            found.update(n for n in os.listdir(cq) if os.path.isdir(os.path.join(cq, n)))
    for name in ("topics.json", "topics.json.bak"):
        found.update(_topics_json(os.path.join(str(store), "config", name)))
    return sorted(found)


def _topics_json(path: str) -> set[str]:
    """Keys of topicConfigTable; fastjson output is plain JSON here, anything else is ignored."""
    try:
        with open(path, "rb") as f:
            doc = json.loads(f.read().decode("utf-8", errors="replace"))
    except (OSError, ValueError):
        return set()
    table = doc.get("topicConfigTable") if isinstance(doc, dict) else None
    return {k for k in table if isinstance(k, str)} if isinstance(table, dict) else set()


@dataclass
class Candidate:
    """One chain entry whose hash equals the key's, and what its record turned out to be."""

    index_file: str
    entry: int
    phys_offset: int
    index_time: int
    verdict: str  # "match", "collision" (same hash, other key), "outside_window", "unreadable", "duplicate"
    detail: str = ""
    store_timestamp: int | None = None  # of the record, when it was read

    @property
    def time_delta_ms(self) -> int | None:
        """Record store time minus the entry's index time: 0..999 normally, more on a file's entry 1."""
        return None if self.store_timestamp is None else self.store_timestamp - self.index_time

    def to_dict(self) -> dict:
        d = dict(self.__dict__)
        d["time_delta_ms"] = self.time_delta_ms
        return d


@dataclass
class FileWalk:
    """The walk of one index file for one topic#key."""

    index_file: str
    topic: str
    slot: int
    head: int
    steps: int
    stop: str
    skipped: str = ""  # why the file was not walked (time window)
    other_hashes: int = 0  # entries of the same slot under another hash
    candidates: list[Candidate] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"kind": "explain", **fields_of(self), "skipped": self.skipped or None, "candidates": [c.to_dict() for c in self.candidates]}


@dataclass
class TailScan:
    """The CommitLog past the index's end, read once: the index keys (hash of topic#key) of every record there."""

    after: int  # records at or before this offset are the index's (its last indexed record); -1: no index entries
    from_offset: int  # first byte scanned
    to_offset: int  # end of the CommitLog's data
    records: int  # records found past `after`
    problems: list[Problem]  # damage met in the stretch: a record there may be unreadable
    hashes: np.ndarray  # index hashes of topic#key (as IndexFile entries hold them), sorted
    phys: np.ndarray  # the record of each hash
    topics: frozenset[str]

    @property
    def nbytes(self) -> int:
        return max(0, self.to_offset - self.from_offset)

    def offsets_of(self, h: int) -> list[int]:
        """Records past the index's end with an index key of hash h (one per record, in offset order)."""
        lo, hi = np.searchsorted(self.hashes, [h, h + 1])
        return sorted(set(self.phys[lo:hi].tolist()))

    def to_dict(self, found: int) -> dict:
        return {
            "from_offset": self.from_offset,
            "to_offset": self.to_offset,
            "bytes": self.nbytes,
            "records": self.records,
            "found": found,
            "problems": len(self.problems),
            "why": "no index entries: the whole CommitLog was scanned"
            if self.after < 0
            else f"the index ends at offset {self.after}" + (", the CommitLog's last record: nothing follows it" if self.nbytes == 0 and not self.records else ""),
        }


def index_end(files: list[IndexFile]) -> int:
    """The offset of the last record the index holds (the newest endPhyOffset of a file with entries), -1 when none."""
    return max((f.header.end_phy_offset for f in files if f.count > 1), default=-1)


def _tail_range(split: Split, after: int) -> tuple[np.ndarray, np.ndarray, set[str], int, list[Problem]]:
    """One range's index keys of the records past `after`: (hashes, their records, topics, records, problems)."""
    rs = scan_range(split, ScanOptions(keys=True))
    c = rs.columns
    past = c.phys > after
    keep = past[c.key_rec] if len(c.key_rec) else np.zeros(0, dtype=bool)
    topics = {c.topics[t] for t in np.unique(c.topic_id[past]).tolist()}
    return index_hash_many(c.key_hash[keep]).astype(np.int32), c.phys[c.key_rec[keep]].astype(np.int64), topics, int(past.sum()), rs.problems


def scan_tail(cl: CommitLog, after: int, mapper: Mapper = SERIAL) -> TailScan:
    """Every index key of the records after offset `after`, by the planner's ranges from that record on."""
    start = max(after, 0)
    splits = splits_past(cl, start)
    end = max((sp.base + sp.size for sp in splits), default=start)
    parts = [part for _sp, part in map_ranges(splits, functools.partial(_tail_range, after=after), mapper)]
    hashes = np.concatenate([p[0] for p in parts]) if parts else np.zeros(0, dtype=np.int32)
    phys = np.concatenate([p[1] for p in parts]) if parts else np.zeros(0, dtype=np.int64)
    order = np.argsort(hashes, kind="stable")
    topics = frozenset().union(*(p[2] for p in parts))
    problems = [q for p in parts for q in p[4]]
    return TailScan(after, start if splits else end, end, sum(p[3] for p in parts), problems, hashes[order], phys[order], topics)


@dataclass
class LookupResult:
    key: str
    keys: list[dict]  # {"topic", "index_key", "hash"} per topic tried
    messages: list[Message]
    walks: list[FileWalk]
    collisions: int = 0  # same hash, record has another key or topic
    outside_window: int = 0
    unreadable: list[Problem] = field(default_factory=list)
    truncated: bool = False  # --max reached
    tail: TailScan | None = None  # the CommitLog past the index's end, scanned
    found_in_tail: int = 0

    @property
    def found(self) -> bool:
        return bool(self.messages)


def _matches(m: Message, topic: str, key: str) -> bool:
    return m.topic == topic and (m.uniq_key == key or key in m.keys)


def _in_window(ts: int, begin: int | None, end: int | None) -> bool:
    return (begin is None or ts >= begin) and (end is None or ts <= end)


class Index(Closing):
    """The index files and CommitLog of one store, opened once for many lookups."""

    def __init__(
        self,
        store: str,
        hash_slots: int | None = None,
        index_entries: int | None = None,
        files: list[IndexFile] | None = None,
        *,
        tail: bool = True,
        mapper: Mapper = SERIAL,
    ):
        """`tail`: also scan the CommitLog past the index's end (once, on the first lookup), with `mapper` over its ranges."""
        self.store = str(store)
        if files is None:
            prove_readable(self.store)
        self.files = files if files is not None else open_all(self.store, hash_slots, index_entries)
        self.commitlog = CommitLog.open(commitlog_path(self.store)) if os.path.isdir(commitlog_path(self.store)) else CommitLog([], [], None)
        self._topics: list[str] | None = None
        self._records: OrderedDict[int, Message | Problem] = OrderedDict()
        self._want_tail, self._mapper = tail, mapper
        self._tail: TailScan | None = None

    @property
    def topics(self) -> list[str]:
        """Topics the store names; with the tail scanned, also those only its records name (dispatch never saw them)."""
        if self._topics is None:
            self._topics = store_topics(self.store)
        if self.tail is not None and not self.tail.topics <= set(self._topics):
            self._topics = sorted(set(self._topics) | self.tail.topics)
        return self._topics

    @property
    def tail(self) -> TailScan | None:
        """The CommitLog past the index's end, scanned on first use (None when not asked for)."""
        if self._want_tail and self._tail is None:
            end = index_end(self.files)
            if end >= 0 and self.commitlog.nothing_after(end):  # the index holds the CommitLog's last record: no tail
                self._tail = TailScan(end, end, end, 0, [], np.zeros(0, np.int32), np.zeros(0, np.int64), frozenset())
            else:
                self._tail = scan_tail(self.commitlog, end, self._mapper)
        return self._tail

    def close(self) -> None:
        for f in self.files:
            f.close()

    def lookup(
        self, key: str, topics: list[str] | None = None, *, begin: int | None = None, end: int | None = None, max_messages: int | None = None
    ) -> LookupResult:
        """Messages whose KEYS or UNIQ_KEY is `key`, in the given topics (default: every topic the store knows)."""
        topics = list(topics) if topics else self.topics
        res = LookupResult(key, [], [], [], tail=self.tail)
        seen: set[int] = set()
        for i, topic in enumerate(topics):
            h = key_hash(topic, key)
            res.keys.append({"topic": topic, "index_key": f"{topic}#{key}", "hash": h})
            if res.tail is not None:  # newest first: the records the index never took
                self._tail_hits(res.tail, topic, key, h, begin, end, max_messages, seen, res)
            for f in reversed(self.files):  # newest first, like IndexService.queryOffset
                if res.truncated:
                    break
                res.walks.append(self._walk_file(f, topic, key, h, begin, end, max_messages, seen, res))
            if i % RELEASE_EVERY_TOPICS == RELEASE_EVERY_TOPICS - 1 or i == len(topics) - 1:
                for f in self.files:  # give back the walked pages (0.5 ms a file), not after every walk
                    f.release()
        res.messages.sort(key=lambda m: m.phys_offset)
        return res

    def _tail_hits(self, tail: TailScan, topic, key, h, begin, end, max_messages, seen: set[int], res: LookupResult) -> None:
        """The records past the index's end with a key of hash h, kept when they really are topic#key."""
        for phys in tail.offsets_of(h):
            if phys in seen:
                continue
            if max_messages is not None and len(res.messages) >= max_messages:
                res.truncated = True
                return
            verdict, m, _ = self._candidate(phys, topic, key, begin, end, res)
            if verdict == "match":
                seen.add(phys)
                m.extra["source"] = "unindexed_tail"
                res.messages.append(m)
                res.found_in_tail += 1

    def _candidate(self, phys: int, topic, key, begin, end, res: LookupResult) -> tuple[str, Message | Problem, str]:
        """The record a hash led to, its verdict (unreadable, collision, outside_window: counted on `res`; or match) and why."""
        m = self.read_record(phys)
        if isinstance(m, Problem):
            res.unreadable.append(m)
            return "unreadable", m, m.line()
        if not _matches(m, topic, key):
            res.collisions += 1
            return "collision", m, f"record is {m.topic}#{' '.join([*m.keys, m.uniq_key or ''])}"
        if not _in_window(m.store_timestamp, begin, end):
            res.outside_window += 1
            return "outside_window", m, "record stored outside the window"
        return "match", m, ""

    def _walk_file(self, f: IndexFile, topic, key, h, begin, end, max_messages, seen: set[int], res: LookupResult) -> FileWalk:
        hd = f.header
        if f.count <= 1:
            return FileWalk(f.name, topic, f.slot_of(h), 0, 0, "empty", skipped="no entries")
        # Entry 1's timeDiff may count from the previous file's end (it is written before
        # the header's begin is set), so the file's own range is taken from the header only.
        if (end is not None and hd.begin_timestamp > end) or (begin is not None and hd.end_timestamp < begin):
            return FileWalk(f.name, topic, f.slot_of(h), 0, 0, "skipped", skipped="header time range outside the window")
        w = f.walk(h)
        fw = FileWalk(f.name, topic, w.slot, w.head, len(w.steps), w.stop)
        for st in w.steps:
            if st.key_hash != h:
                fw.other_hashes += 1
                continue
            if max_messages is not None and len(res.messages) >= max_messages:
                res.truncated = True
                break
            # The entry's time is the record's store time rounded down to the second
            # (entry 1 of a file may read later): only read records that may be inside.
            if begin is not None and st.entry != 1 and st.time + SECOND <= begin:
                fw.candidates.append(Candidate(f.name, st.entry, st.phys_offset, st.time, "outside_window", "index time before --begin"))
                res.outside_window += 1
                continue
            if end is not None and st.time > end and st.entry != 1:
                fw.candidates.append(Candidate(f.name, st.entry, st.phys_offset, st.time, "outside_window", "index time after --end"))
                res.outside_window += 1
                continue
            if st.phys_offset in seen:
                fw.candidates.append(Candidate(f.name, st.entry, st.phys_offset, st.time, "duplicate", "message already found through another entry"))
                continue
            verdict, m, why = self._candidate(st.phys_offset, topic, key, begin, end, res)
            fw.candidates.append(Candidate(f.name, st.entry, st.phys_offset, st.time, verdict, why, None if verdict == "unreadable" else m.store_timestamp))
            if verdict != "match":
                continue
            seen.add(st.phys_offset)
            m.extra["source"] = "index"
            m.extra["index_file"] = f.name
            m.extra["index_entry"] = st.entry
            res.messages.append(m)
        return fw

    def read_record(self, phys: int) -> Message | Problem:
        """The record at phys; the last few thousand are kept, as one message is found under each of its keys."""
        m = self._records.get(phys)
        if m is None:
            m = scanner.record_at(self.commitlog, phys)
            self._records[phys] = m
            if len(self._records) > RECORD_CACHE:
                self._records.popitem(last=False)
        else:
            self._records.move_to_end(phys)
        return replace(m, extra=dict(m.extra)) if isinstance(m, Message) else m

    def read_offset_id(self, text: str) -> Message | None:
        """The record an offset msgId names, if a record starts there and carries that msgId."""
        oid = OffsetMsgId.decode(text)
        if oid.phys_offset < 0 or self.commitlog.file_for(oid.phys_offset) is None:
            return None
        m = scanner.record_at(self.commitlog, oid.phys_offset)
        if isinstance(m, Message) and m.msg_id == oid.text:
            return m
        return None


@dataclass
class IdResult:
    """What a msgId or UNIQ_KEY turned out to be, and the messages it names."""

    text: str
    kind: str  # "offset" or "uniq_key"
    offset_id: OffsetMsgId
    uniq_key: UniqKey
    messages: list[Message]
    lookup: LookupResult | None = None

    def decoded(self, now_ms: int) -> dict:
        d = {"kind": "msgid", "id": self.text, "type": self.kind}
        if self.kind == "offset":
            d.update(self.offset_id.to_dict())
        else:
            d.update(self.uniq_key.to_dict())
            d.update(self.uniq_key.time_near(self.messages[0].born_timestamp) if self.messages else self.uniq_key.time_assumed_utc(now_ms))
            d["time_anchor"] = "born_timestamp" if self.messages else "now_utc"
        d["found"] = len(self.messages)
        return d


def resolve_id(index: Index, text: str, topics: list[str] | None = None, **kw) -> IdResult:
    """An offset msgId read directly, else a UNIQ_KEY looked up through the index. Raises MsgIdError on bad text."""
    id_bytes(text)
    text = text.strip().upper()
    oid, uk = OffsetMsgId.decode(text), UniqKey.decode(text)
    m = index.read_offset_id(text)
    if m is not None and (not topics or m.topic in topics):
        return IdResult(text, "offset", oid, uk, [m])
    res = index.lookup(text, topics, **kw)
    return IdResult(text, "uniq_key", oid, uk, res.messages, res)
