"""Compaction logs and the CommitLog records they were copied from, read through the walk.

A compaction log is read as a CommitLog (rmqdump.readers.compaction); its
records and their originals in the CommitLog (the records of the compaction
topics, per queue by queue offset) are what `compaction verify`, `compaction
view` and the rebuild of the compaction ConsumeQueue compare and write.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from rmqdump.common.problems import Problem
from rmqdump.readers.commitlog import CommitLog
from rmqdump.readers.compaction import CompactionFiles, CompactionQueue, LogRecord, compaction_key, find_compaction, tags_code
from rmqdump.readers.mapped import OffsetFile
from rmqdump.readers.message import Message, decode_properties
from rmqdump.scan._walk import Batch, read_at
from rmqdump.scan.ranges import SERIAL, Mapper, map_ranges, range_batches
from rmqdump.scan.splits import Split, StoreRef, commitlog_splits
from rmqdump.schemas import constants as C


def batch_records(batch: Batch) -> Iterator[tuple[int, LogRecord]]:
    """(index in the batch, record) for every record of a batch of a compaction log."""
    for i in range(len(batch)):
        m = batch.message(i)
        yield i, LogRecord(m, compaction_key(m.properties), tags_code(m.properties))


def record_props(batch: Batch, i: int) -> dict[str, str]:
    return decode_properties(batch.properties_bytes(i))[0]


@dataclass(frozen=True)
class Original:
    """A CommitLog record of a compaction topic: where it is and what compaction reads of it."""

    file: str
    pos: int  # in its CommitLog file
    phys: int
    size: int
    queue_offset: int
    key: str | None
    body_length: int
    store_timestamp: int
    tags_code: int
    uniq_key: str | None


def originals(cl: CommitLog, topics: set[str], *, on_bytes=None, mapper: Mapper = SERIAL) -> dict[tuple[str, int], dict[int, Original]]:
    """Every CommitLog record of these topics, per (topic, queue id), by queue offset: one pass over the CommitLog's
    ranges, `mapper` mapping them (builtin map, or an engine's), folded in range order."""
    out: dict[tuple[str, int], dict[int, Original]] = {}
    lengths = np.array(sorted({len(t.encode()) for t in topics}), dtype=np.int64)
    splits = commitlog_splits(cl, check_crc=False)
    for _sp, found in map_ranges(splits, functools.partial(_range_originals, topics=frozenset(topics), lengths=lengths), mapper, progress=on_bytes):
        for t, qid, o in found:
            out.setdefault((t, qid), {})[o.queue_offset] = o
    return out


def _range_originals(split: Split, topics: frozenset[str], lengths: np.ndarray) -> list[tuple[str, int, Original]]:
    """(topic, queue id, original) of the records of these topics that start in one range, in offset order."""
    found = []
    for b in range_batches(split, keys=False):
        c = b.cols
        for i in np.flatnonzero(np.isin(c["topic_length"], lengths)).tolist():
            t = b.topic(i)
            if t not in topics:
                continue
            props = record_props(b, i)
            pos = int(c["_pos"][i])
            o = Original(
                b.seg.path,
                pos,
                b.seg.base + pos,
                int(c["total_size"][i]),
                int(c["queue_offset"][i]),
                compaction_key(props),
                int(c["body_length"][i]),
                int(c["store_timestamp"][i]),
                tags_code(props),
                props.get(C.PROPERTY_UNIQ_KEY),
            )
            found.append((t, int(c["queue_id"][i]), o))
    return found


COMPACTED, AFTER_CHECKPOINT, NOT_SERVED = "compacted", "after_checkpoint", "not_served"


def part_of(queue_offset: int, cp: int) -> str:
    """Where a served message lies in its compacted queue: at or before the compaction checkpoint, or after it."""
    return COMPACTED if queue_offset <= cp else AFTER_CHECKPOINT


def served_records(q: CompactionQueue) -> Iterator[tuple[OffsetFile, int, dict, Message | Problem]]:
    """What a consumer of one compacted queue is served, in order (CompactionStore.getMessage): each
    SparseConsumeQueue unit with the compaction-log record it points at, or the Problem reading it."""
    for f, pos, u in q.units():
        yield f, pos, u, read_at(q.log, u["offset"])


@dataclass(frozen=True)
class ServedQueue:
    """The messages one compacted queue serves, by queue offset (sorted): their compaction-log offsets and parts."""

    queue_offsets: np.ndarray  # int64, ascending
    log_offsets: np.ndarray  # int64
    compacted: np.ndarray  # bool: at or before the checkpoint


@dataclass(frozen=True)
class ServedView:
    """Per compaction topic and queue id, what its consumers get: enough to tell, for any CommitLog record of a
    compaction topic, whether it is served and where (rmqdump export's compaction columns). Small: a few
    bytes per served message, so Spark tasks receive it in their closure."""

    queues: dict[str, dict[int, ServedQueue]]

    def topics(self) -> set[str]:
        return set(self.queues)

    def lookup(self, topic: str, queue_id: np.ndarray, queue_offset: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(served, compacted, log offset) for records of `topic` at these queue ids and offsets."""
        n = len(queue_id)
        served, compacted, log = np.zeros(n, bool), np.zeros(n, bool), np.zeros(n, np.int64)
        for qid, sq in self.queues.get(topic, {}).items():
            rows = np.flatnonzero(queue_id == qid)
            if not len(rows) or not len(sq.queue_offsets):
                continue
            at = np.searchsorted(sq.queue_offsets, queue_offset[rows])
            inside = at < len(sq.queue_offsets)
            hit = np.zeros(len(rows), bool)
            hit[inside] = sq.queue_offsets[at[inside]] == queue_offset[rows][inside]
            rows, at = rows[hit], at[hit]
            served[rows] = True
            compacted[rows] = sq.compacted[at]
            log[rows] = sq.log_offsets[at]
        return served, compacted, log


def served_view(cf: CompactionFiles) -> ServedView:
    """What every compacted queue of a store serves (units whose record cannot be read are left out, as the broker cannot serve them)."""
    queues: dict[str, dict[int, ServedQueue]] = {}
    for q in cf.queues:
        cp = cf.checkpoint.offset(q.topic, q.queue_id)
        got = {}
        for _f, _pos, _u, m in served_records(q):
            if isinstance(m, Message) and m.topic == q.topic and m.queue_id == q.queue_id:
                got[m.queue_offset] = m.phys_offset
        qo = np.array(sorted(got), dtype=np.int64)
        queues.setdefault(q.topic, {})[q.queue_id] = ServedQueue(qo, np.array([got[o] for o in qo.tolist()], dtype=np.int64), qo <= cp)
    return ServedView(queues)


def served_views(stores: list[StoreRef]) -> dict[str, ServedView]:
    """Per broker, what its compacted queues serve (stores without compaction topics left out): read once
    on the driver from the compaction files, small enough to hand to every task."""
    views = {}
    for ref in stores:
        cf = find_compaction(ref.root)
        if cf is not None and cf.queues:
            views[ref.name] = served_view(cf)
    return views
