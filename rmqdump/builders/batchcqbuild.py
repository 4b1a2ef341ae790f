"""Batch ConsumeQueue and LMQ units built from the CommitLog, byte for byte as the broker writes them.

Batch ConsumeQueue (BatchConsumeQueue.putBatchMessagePositionInfo): one
46-byte unit per dispatched record of a BatchCQ topic, appended (no position
from the queue offset): commitLogOffset, size, tagsCode, storeTime,
msgBaseOffset (INNER_BASE when the record has INNER_NUM and INNER_BASE, else
its queueOffset), batchSize (INNER_NUM, else 1), compactedOffset -1, reserved
0; a unit at or below the last commitLogOffset written is not written again.
A file holds file_size // 46 units. Which topics are BatchCQ is not in the
CommitLog: they are the topics that have a batchconsumequeue/ directory in
the source store.

LMQ (ConsumeQueue.multiDispatchLmqQueue): after a record's own unit, one
20-byte unit (offset, size, tagsCode) per LMQ queue its
INNER_MULTI_DISPATCH names, in queue %LMQ%name/0 at the offset
INNER_MULTI_QUEUE_OFFSET gives. Those two properties are read from the few
records that hold them (found by one substring search over each range).
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass

import numpy as np

from rmqdump.builders.cqbuild import safe_topic_dir
from rmqdump.builders.queuefiles import QueueFiles, QueueResult
from rmqdump.checks.lmqverify import dispatching_records
from rmqdump.common.problems import Problem
from rmqdump.readers.batchcq import BCQ_DTYPE, BCQ_UNIT_SIZE
from rmqdump.readers.commitlog import CommitLog, SegmentFile
from rmqdump.readers.recordprops import RecordProps, multi_dispatch
from rmqdump.schemas import constants as C

CQ_BATCH_OFFSET_GAP = "cq_batch_offset_gap"

class BatchConsumeQueueBuilder:
    """Feed `add()` each BatchCQ queue's records in CommitLog order; `finish()` closes the files."""

    def __init__(self, out_dir: str, file_size: int, *, sync: bool = True, display_dir: str | None = None):
        self.display_dir = display_dir or out_dir
        self.file_size = file_size
        self.units_per_file = file_size // BCQ_UNIT_SIZE
        if self.units_per_file < 1:
            raise ValueError(f"a Batch ConsumeQueue file of {file_size} bytes holds no 46-byte unit")
        self.queues: dict[tuple[str, int], QueueResult] = {}
        self.problems: list[Problem] = []
        self._count: dict[tuple[str, int], int] = {}
        self._last_phys: dict[tuple[str, int], int] = {}
        self._next: dict[tuple[str, int], int] = {}
        self._files = QueueFiles(out_dir, file_size, sync=sync)

    def add(
        self,
        topic: str,
        queue_id: int,
        phys: np.ndarray,
        size: np.ndarray,
        tags_code: np.ndarray,
        store_ts: np.ndarray,
        base: np.ndarray,
        batch: np.ndarray,
    ) -> None:
        """Records of one queue, in CommitLog order."""
        key = (topic, queue_id)
        if len(phys) == 0 or not safe_topic_dir(topic):
            return
        q = self.queues.setdefault(key, QueueResult(topic, queue_id))
        last = self._last_phys.get(key, -1)
        prior = np.maximum.accumulate(np.concatenate([[last], phys[:-1]]))
        keep = phys > prior  # "build batch consume queue repeatedly": skipped
        q.duplicates += int((~keep).sum())
        phys, size, tags_code, store_ts, base, batch = (a[keep] for a in (phys, size, tags_code, store_ts, base, batch))
        if len(phys) == 0:
            return
        units = np.zeros(len(phys), dtype=BCQ_DTYPE)
        units["commit_log_offset"] = phys
        units["size"] = size
        units["tags_code"] = tags_code
        units["store_time"] = store_ts
        units["msg_base_offset"] = base
        units["batch_size"] = batch
        units["compacted_offset"] = C.BCQ_COMPACTED_OFFSET_NONE
        expect = np.concatenate([[self._next.get(key, base[0])], (base + batch)[:-1]])
        gaps = np.flatnonzero(base != expect)
        if gaps.size:
            q.gaps += int(gaps.size)
            if q.first_gap is None:
                g = int(gaps[0])
                q.first_gap = (int(expect[g]), int(base[g]), int(phys[g]))
        if q.first_offset < 0:
            q.first_offset = int(base[0])
        n = self._count.get(key, 0)
        at = 0
        while at < len(units):
            file_no, slot = divmod(n + at, self.units_per_file)
            k = min(len(units) - at, self.units_per_file - slot)
            os.pwrite(self._files.fd(q, file_no * self.file_size), memoryview(units[at : at + k]).cast("B"), slot * BCQ_UNIT_SIZE)
            at += k
        self._count[key] = n + len(units)
        self._last_phys[key] = int(phys[-1])
        self._next[key] = int(base[-1] + batch[-1])
        q.units += len(units)
        q.next_offset = self._next[key]

    def finish(self) -> list[QueueResult]:
        self.close()
        for q in self.queues.values():
            if q.first_gap is not None:
                a, b, phys = q.first_gap
                self.problems.append(
                    Problem(
                        CQ_BATCH_OFFSET_GAP,
                        os.path.join(self.display_dir, q.topic, str(q.queue_id)),
                        None,
                        f"{q.topic}/{q.queue_id}: {q.gaps} units do not start where the previous one ended (first: queue offset {b}, expected {a})",
                        phys_offset=phys,
                        extra={"topic": q.topic, "queue_id": q.queue_id},
                    )
                )
        return sorted(self.queues.values(), key=lambda q: (q.topic, q.queue_id))

    def close(self) -> None:
        self._files.close()

    def abort(self) -> None:
        self._files.abort()


@dataclass
class Extras:
    """What the CommitLog's dispatch columns do not carry, read per range from the few records that need it."""

    cl: CommitLog
    batch_topics: frozenset[str]
    props: RecordProps

    @classmethod
    def open(cls, cl: CommitLog, batch_topics: frozenset[str]) -> Extras:
        return cls(cl, batch_topics, RecordProps(cl))

    def close(self) -> None:
        self.props.close()

    def batch_fields(self, phys: np.ndarray, size: np.ndarray, queue_offset: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(msgBaseOffset, batchSize) of records of BatchCQ topics, as the dispatcher computes them."""
        base = queue_offset.astype(np.int64).copy()
        batch = np.ones(len(phys), dtype=np.int64)
        for i, pr in self.props.each(phys, size):
            if pr and C.PROPERTY_INNER_NUM in pr and C.PROPERTY_INNER_BASE in pr:
                with contextlib.suppress(ValueError):  # the dispatcher would fail on it too: left as a plain record
                    base[i], batch[i] = int(pr[C.PROPERTY_INNER_BASE]), int(pr[C.PROPERTY_INNER_NUM])
        return base, batch

    def lmq_units(self, seg: SegmentFile, phys: np.ndarray, size: np.ndarray, queued: np.ndarray, topic_of) -> list[tuple[str, int, int, int]]:
        """(LMQ queue, queue offset, record index, ...) for the records of one file (one range's) that name LMQ queues."""
        out = []
        recs = dispatching_records([seg], phys, size)
        recs = recs[queued[recs]]
        for k, props in self.props.each(phys[recs], size[recs]):
            r = int(recs[k])
            for name, off in multi_dispatch(topic_of(r), props):
                out.append((name, off, r, 0))
        return out


def source_batch_topics(store: str) -> frozenset[str]:
    """The BatchCQ topics of a store: those with a batchconsumequeue/ directory."""
    base = os.path.join(store, "batchconsumequeue")
    if not os.path.isdir(base):
        return frozenset()
    return frozenset(t for t in os.listdir(base) if os.path.isdir(os.path.join(base, t)))
