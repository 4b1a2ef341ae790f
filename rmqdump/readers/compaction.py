"""Compaction topics (5.x cleanup.policy=COMPACTION): the compaction log, its SparseConsumeQueue, the position checkpoint.

`compaction/compactionLog/TOPIC/QID/` holds copies of the queue's CommitLog
records, byte for byte but for the physicalOffset field, which holds the
record's own compaction-log offset: a compaction log is read as a CommitLog
(readers.commitlog), whose walk and resync rely on exactly that field.
`compaction/compactionCq/TOPIC/QID/` holds 46-byte units
(schemas.SparseConsumeQueueUnit) in files named like the log files they index.
`compaction/position-checkpoint` (fastjson) maps `TOPIC_QID` to the last
compacted queue offset; topics may contain `_`, so the queue id is what follows
the last one. A compaction round rewrites every log file but the active one
into new files from offset 0: the names jump from the compacted files to the
first file written after the checkpoint, which is not a gap in the data.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from rmqdump.common import problems as P
from rmqdump.common.javahash import java_hash
from rmqdump.common.problems import Problem
from rmqdump.readers.batchcq import BatchUnits
from rmqdump.readers.commitlog import CommitLog, SegmentFile
from rmqdump.readers.configfiles import loads_fastjson
from rmqdump.readers.consumequeue import QUEUE_ID_RE, queue_dirs, usual_size, whole_units
from rmqdump.readers.fastpath import numpy_dtype
from rmqdump.readers.mapped import OffsetFile, offset_files
from rmqdump.readers.message import Message
from rmqdump.schemas import SparseConsumeQueueUnit
from rmqdump.schemas import constants as C

SCQ_DTYPE = numpy_dtype(SparseConsumeQueueUnit)


def split_queue_key(key: str) -> tuple[str, int] | None:
    """`TOPIC_QID` -> (TOPIC, QID), split at the last `_` (topics contain `_`); None when it is not that shape (as the broker writes it)."""
    topic, sep, qid = key.rpartition("_")
    if not sep or not topic or not QUEUE_ID_RE.fullmatch(qid) or str(int(qid)) != qid:  # the broker looks up topic + "_" + queueId
        return None
    return topic, int(qid)


def tags_code(props: dict[str, str]) -> int:
    """The tagsCode the compaction CQ holds for a record: the TAGS string's Java hashCode, 0 without TAGS."""
    tags = props.get(C.PROPERTY_TAGS)
    return java_hash(tags) if tags else 0


def is_tombstone(body_length: int) -> bool:
    """A put with an empty body deletes its key: compaction never keeps it (CompactionLog.shouldRetainMsg)."""
    return body_length == 0


def compaction_key(props: dict[str, str]) -> str | None:
    """The compaction key: the whole KEYS string; None when blank (such a put never reaches the compaction log)."""
    keys = props.get(C.PROPERTY_KEYS)
    return keys if keys is not None and keys.strip() else None


@dataclass
class Checkpoint:
    """compaction/position-checkpoint: the last compacted queue offset per queue, as the broker loads it."""

    path: str
    used: str | None  # the file read: the checkpoint, or its .bak when the broker would fall back to it
    offsets: dict[tuple[str, int], int] = field(default_factory=dict)
    entries: dict[str, int] = field(default_factory=dict)  # TOPIC_QID as written
    problems: list[Problem] = field(default_factory=list)

    def offset(self, topic: str, queue_id: int) -> int:
        return self.offsets.get((topic, queue_id), C.COMPACTION_CHECKPOINT_NONE)

    def to_dict(self) -> dict:
        return {"kind": "compaction_checkpoint", "path": self.path, "used": self.used, "queue_offsets": dict(self.entries)}


def read_checkpoint(compaction_root: str) -> Checkpoint:
    """The checkpoint as ConfigManager.load reads it: the file, or its .bak when the file is missing, empty or not JSON."""
    path = os.path.join(compaction_root, C.COMPACTION_CHECKPOINT)
    ck = Checkpoint(path, None)
    for p in (path, path + ".bak"):
        if not os.path.isfile(p):
            continue
        data, at, error = _load_json(p)
        if error is not None:
            ck.problems.append(Problem(P.COMPACTION_CHECKPOINT_UNREADABLE, p, at, error + (" (the broker falls back to the .bak)" if p == path else "")))
            continue
        table = data.get("queueOffsetMap") if isinstance(data, dict) else None
        if not isinstance(table, dict):
            ck.problems.append(Problem(P.COMPACTION_CHECKPOINT_UNREADABLE, p, None, "no queueOffsetMap object"))
            continue
        ck.used = p
        for k, v in table.items():
            where = split_queue_key(k)
            if where is None or isinstance(v, bool) or not isinstance(v, int):
                ck.problems.append(Problem(P.COMPACTION_CHECKPOINT_UNREADABLE, p, None, f"entry {k!r}: {v!r} is not TOPIC_QID: queue offset"))
                continue
            ck.entries[k] = v
            ck.offsets[where] = v
        break
    return ck


def _load_json(path: str) -> tuple[object, int | None, str | None]:
    """(data, None, None), or (None, byte offset, why) for a file that is empty, not UTF-8 or not (fastjson) JSON."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        return None, None, e.strerror or str(e)
    if not raw.strip():
        return None, None, "empty file"
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return None, e.start, "not UTF-8"
    try:
        return loads_fastjson(text), None, None
    except json.JSONDecodeError as e:
        return None, len(text[: e.pos].encode()), f"not JSON: {e.msg}"


@dataclass
class LogRecord:
    """One record of a compaction log: the message (phys_offset = its compaction-log offset) and what compaction reads of it."""

    message: Message
    key: str | None
    tags_code: int

    @property
    def offset(self) -> int:
        return self.message.phys_offset

    @property
    def queue_offset(self) -> int:
        return self.message.queue_offset


@dataclass
class CompactionQueue:
    """One compaction topic queue: its log files (read as a CommitLog), its SparseConsumeQueue files, their layout problems."""

    topic: str
    queue_id: int
    log_dir: str
    cq_dir: str
    log: CommitLog
    cq_files: list[OffsetFile]
    cq_file_size: int | None
    problems: list[Problem] = field(default_factory=list)

    @property
    def log_file_size(self) -> int | None:
        return self.log.file_size

    def extra(self, cq_file: str | None = None, queue_offset: int | None = None) -> dict:
        return {"topic": self.topic, "queue_id": self.queue_id, "cq_file": cq_file, "unit_index": queue_offset}

    def located(self, p: Problem, cq_file: str | None = None, queue_offset: int | None = None) -> Problem:
        """A problem found in this queue's files, with the queue's location keys."""
        return Problem(p.code, p.file, p.file_offset, p.detail, phys_offset=p.phys_offset, extra={**self.extra(cq_file, queue_offset), **p.extra})

    def unit_files(self) -> Iterator[BatchUnits]:
        """The CQ's units, file by file (each file's whole 46-byte units)."""
        for f in self.cq_files:
            yield BatchUnits.from_array(f, whole_units(f, SCQ_DTYPE))

    def units(self) -> list[tuple[OffsetFile, int, dict]]:
        """(file, position, unit) of every valid unit, in order: what the broker serves from this queue."""
        out = []
        for u in self.unit_files():
            for k in np.flatnonzero(u.valid_mask()).tolist():
                out.append((u.file, int(u.pos[k]), u.row(k)))
        return out


def end_unit_mask(u: BatchUnits) -> np.ndarray:
    """The unit SparseConsumeQueue writes to close a full file: offset -1, compactedOffset -1, the rest 0."""
    return (
        (u.offset == C.SCQ_END_OFFSET)
        & (u.size == 0)
        & (u.tags_code == 0)
        & (u.store_time == 0)
        & (u.base_offset == 0)
        & (u.batch_size == 0)
        & (u.compacted_offset == C.BCQ_COMPACTED_OFFSET_NONE)
        & (u.reserved == 0)
    )


def _files(d: str, kind, extra: dict, probs: list[Problem]) -> list:
    """The offset-named files of directory d (none when it is missing); other names and an unreadable d go to probs."""
    if not os.path.isdir(d):
        return []
    try:
        files, others = offset_files(d, kind)
    except OSError as e:
        probs.append(Problem("unreadable", d, None, e.strerror or str(e), extra=extra))
        return []
    probs.extend(Problem(P.COMPACTION_BAD_FILE_NAME, o, None, "not a 20-digit offset name: ignored", extra=extra) for o in others)
    return files


def open_queue(topic: str, queue_id: int, log_dir: str, cq_dir: str) -> CompactionQueue:
    """One queue's two directories (either may be missing) and what is wrong with their files' names and sizes."""
    extra = {"topic": topic, "queue_id": queue_id, "cq_file": None, "unit_index": None}
    probs: list[Problem] = []
    log_files: list[SegmentFile] = _files(log_dir, SegmentFile, extra, probs)
    # files are preallocated to one size; their names jump after the compacted files, so the size is not the step between names
    log_size = usual_size([f.size for f in log_files])
    log = CommitLog(log_files, [], log_size)
    cq_files: list[OffsetFile] = _files(cq_dir, OffsetFile, extra, probs)
    cq_size = usual_size([f.size for f in cq_files])
    for f in log_files:
        if log_size and f.size != log_size:
            probs.append(Problem(P.COMPACTION_FILE_SIZE, f.path, f.size, f"file is {f.size} bytes, the queue's others {log_size}", extra=extra))
    for f in cq_files:
        if cq_size and f.size != cq_size:
            probs.append(
                Problem(P.COMPACTION_FILE_SIZE, f.path, f.size, f"file is {f.size} bytes, the queue's others {cq_size}", extra={**extra, "cq_file": f.path})
            )
    logs = {f.name: f for f in log.files}
    cqs = {f.name: f for f in cq_files}
    for name in sorted(set(logs) ^ set(cqs)):
        if name in logs:
            probs.append(Problem(P.COMPACTION_FILE_UNPAIRED, logs[name].path, None, f"no compactionCq file {name}: its records have no units", extra=extra))
        else:
            probs.append(Problem(P.COMPACTION_FILE_UNPAIRED, cqs[name].path, None, f"no compactionLog file {name}: its units point nowhere", extra=extra))
    return CompactionQueue(topic, queue_id, log_dir, cq_dir, log, cq_files, cq_size, probs)


@dataclass
class CompactionFiles:
    """Everything under a store's compaction/ directory."""

    root: str
    queues: list[CompactionQueue]
    checkpoint: Checkpoint
    problems: list[Problem]

    def select(self, topic: str | None = None, queue_id: int | None = None) -> list[CompactionQueue]:
        return [q for q in self.queues if (topic is None or q.topic == topic) and (queue_id is None or q.queue_id == queue_id)]


def find_compaction(store_root: str) -> CompactionFiles | None:
    """The compaction/ directory of a store root, or None when the store has none."""
    root = os.path.join(store_root, C.COMPACTION_DIR)
    if not os.path.isdir(root):
        return None
    log_base, cq_base = os.path.join(root, C.COMPACTION_LOG_DIR), os.path.join(root, C.COMPACTION_CQ_DIR)
    found: dict[tuple[str, int], None] = {}
    probs: list[Problem] = []
    for base in (log_base, cq_base):
        dirs, dprobs = queue_dirs(base)
        why = " (the broker fails to load compaction/ on it)" if base == log_base else ""
        probs.extend(Problem(P.COMPACTION_BAD_FILE_NAME, p.file, None, p.detail + why, extra=p.extra) for p in dprobs)
        for t, qid, _ in dirs:
            found[(t, qid)] = None
    queues = [open_queue(t, qid, os.path.join(log_base, t, str(qid)), os.path.join(cq_base, t, str(qid))) for t, qid in sorted(found)]
    for q in queues:
        probs.extend(q.problems)
    ck = read_checkpoint(root)
    probs.extend(ck.problems)
    return CompactionFiles(root, queues, ck, probs)


def queue_units_bounds(q: CompactionQueue) -> tuple[int, int, int]:
    """(units, min queue offset, max queue offset + 1) of a queue's valid units; (0, 0, 0) when it has none."""
    n, lo, hi = 0, None, 0
    for u in q.unit_files():
        v = np.flatnonzero(u.valid_mask())
        if v.size:
            n += int(v.size)
            lo = int(u.base_offset[v[0]]) if lo is None else lo
            hi = int(u.base_offset[v[-1]]) + 1
    return n, lo or 0, hi


