"""ConsumeQueue files built from dispatch columns, byte for byte as the broker writes them.

The broker appends one 20-byte unit per dispatched message of transaction
type none or commit (ConsumeQueue.putMessagePositionInfo); the unit's index is
the message's queueOffset, and files of N units are named by their byte
offset. Here each batch is grouped by queue with one stable sort and each
queue's units go to their files in slices (os.pwrite at unit * 20), so any
number of queues costs no more memory than one batch.

Kept from the broker: a queue whose first unit is not at offset 0 gets
filler units (0, Integer.MAX_VALUE, 0) from the start of that unit's file
(fillPreBlank); a unit whose queueOffset is not above the last one written
is not written again (the broker's "build consume queue repeatedly" skip).
Not the broker's: when queueOffsets jump (the messages between were in a
damaged CommitLog region), units still go to index = queueOffset and the hole
is filled with filler units, in the files that exist, and reported; the broker
would append at the next index instead and log "[BUG]".
"""

from __future__ import annotations

import os

import numpy as np

from rmqdump.builders.queuefiles import QueueFiles, QueueResult
from rmqdump.common.problems import Problem
from rmqdump.readers.fastpath import numpy_dtype
from rmqdump.scan.queueorder import above_earlier, queue_members
from rmqdump.schemas import ConsumeQueueUnit
from rmqdump.schemas import constants as C

UNIT = numpy_dtype(ConsumeQueueUnit)

# stable problem codes
CQ_QUEUE_OFFSET_GAP = "cq_queue_offset_gap"
CQ_DUPLICATE_QUEUE_OFFSET = "cq_duplicate_queue_offset"
CQ_BAD_QUEUE_OFFSET = "cq_bad_queue_offset"
CQ_UNSAFE_TOPIC = "cq_unsafe_topic_name"


def filler_units(n: int) -> np.ndarray:
    u = np.zeros(n, dtype=UNIT)
    u["size"] = C.CQ_FILLER_SIZE
    return u


def safe_topic_dir(topic: str) -> bool:
    """A topic name usable as one directory name (the broker only allows [%|a-zA-Z0-9_-])."""
    return bool(topic) and topic not in (".", "..") and "/" not in topic and "\0" not in topic and "\\" not in topic


class ConsumeQueueBuilder:
    """Feed `add()` the queued messages of each batch in CommitLog order; `finish()` closes the files."""

    def __init__(self, out_dir: str, units_per_file: int, *, sync: bool = True, display_dir: str | None = None):
        self.display_dir = display_dir or out_dir  # where the files will be, for problem reports
        self.units_per_file = units_per_file
        self.file_size = units_per_file * C.CQ_UNIT_SIZE
        self.queues: dict[tuple[str, int], QueueResult] = {}
        self.problems: list[Problem] = []
        self._unsafe: set[str] = set()
        self._files = QueueFiles(out_dir, self.file_size, sync=sync)
        self._last: dict[tuple[str, int], int] = {}  # last unit index written per queue

    # --- files ---

    def _name(self, q: QueueResult, file_no: int) -> str:
        return os.path.join(q.topic, str(q.queue_id), f"{file_no * self.file_size:020d}")

    def _shown(self, q: QueueResult, file_no: int) -> str:
        return os.path.join(self.display_dir, self._name(q, file_no))

    def _fd(self, q: QueueResult, file_no: int, *, create: bool) -> int | None:
        return self._files.fd(q, file_no * self.file_size, create=create)

    def _write(self, q: QueueResult, first_unit: int, units: np.ndarray, *, create: bool = True) -> None:
        """Write units at unit index first_unit (all inside one file)."""
        if len(units) == 0:
            return
        file_no, at = divmod(first_unit, self.units_per_file)
        fd = self._fd(q, file_no, create=create)
        if fd is not None:
            os.pwrite(fd, memoryview(units).cast("B"), at * C.CQ_UNIT_SIZE)

    # --- building ---

    def add(
        self, topics: list[str], topic_id: np.ndarray, queue_id: np.ndarray, queue_offset: np.ndarray, phys: np.ndarray, size: np.ndarray, tags_code: np.ndarray
    ) -> None:
        """Messages that get a unit, in CommitLog order; topic_id indexes `topics`."""
        if len(phys) == 0:
            return
        for sel in queue_members(len(topics), topic_id, queue_id):
            i0 = int(sel[0])
            topic, qid = topics[int(topic_id[i0])], int(queue_id[i0])
            if not safe_topic_dir(topic):
                if topic not in self._unsafe:
                    self._unsafe.add(topic)
                    self.problems.append(
                        Problem(
                            CQ_UNSAFE_TOPIC,
                            self.display_dir,
                            None,
                            f"topic {topic!r} cannot be a directory name: its messages get no ConsumeQueue",
                            phys_offset=int(phys[i0]),
                        )
                    )
                continue
            self._add_queue(topic, qid, queue_offset[sel], phys[sel], size[sel], tags_code[sel])

    def _add_queue(self, topic: str, qid: int, qo: np.ndarray, phys: np.ndarray, size: np.ndarray, tags: np.ndarray) -> None:
        q = self.queues.setdefault((topic, qid), QueueResult(topic, qid))
        last = self._last.get((topic, qid), -1)
        bad = qo < 0
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            self.problems.append(
                Problem(
                    CQ_BAD_QUEUE_OFFSET,
                    self._shown(q, 0),
                    None,
                    f"{int(bad.sum())} messages of {topic}/{qid} have a negative queueOffset (first {int(qo[i])}): no unit",
                    phys_offset=int(phys[i]),
                )
            )
        keep = above_earlier(qo, last)
        dup = ~keep & ~bad
        if dup.any():
            i = int(np.flatnonzero(dup)[0])
            q.duplicates += int(dup.sum())
            if q.first_dup is None:
                q.first_dup = (int(qo[i]), int(phys[i]))
        if not keep.all():
            qo, phys, size, tags = qo[keep], phys[keep], size[keep], tags[keep]
        if len(qo) == 0:
            return
        U = self.units_per_file
        units = np.empty(len(qo), dtype=UNIT)
        units["commit_log_offset"] = phys
        units["size"] = size
        units["tags_code"] = tags
        # holes between consecutive units of this batch (and the last unit before it)
        expected = np.empty(len(qo), dtype=np.int64)
        expected[0] = last + 1
        expected[1:] = qo[:-1] + 1
        hole = qo > expected
        if last < 0:
            hole[0] = False
            q.first_offset = int(qo[0])
        if hole.any():
            idx = np.flatnonzero(hole)
            q.gaps += len(idx)
            q.gap_units += int((qo[idx] - expected[idx]).sum())
            q.gap_ranges.extend(zip(expected[idx].tolist(), qo[idx].tolist(), strict=True))
            if q.first_gap is None:
                q.first_gap = (int(expected[idx[0]]), int(qo[idx[0]]), int(phys[idx[0]]))
        file_no = qo // U
        cuts = np.flatnonzero(np.diff(file_no)) + 1
        starts = np.concatenate([[0], cuts])
        ends = np.concatenate([cuts, [len(qo)]])
        prev = last
        for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
            lo, hi = int(qo[s]), int(qo[e - 1])
            fs = lo - lo % U
            if prev >= 0 and prev // U < lo // U and (prev + 1) % U:
                # a hole that starts in an earlier file: fill that file to its end
                self._write(q, prev + 1, filler_units(U - (prev + 1) % U), create=False)
            head_from = fs if prev < fs else prev + 1
            if head_from < lo:
                if prev < 0:
                    q.pre_blank += lo - head_from  # fillPreBlank
                self._write(q, head_from, filler_units(lo - head_from))
            span = qo[s:e]
            if hi - lo + 1 == e - s:
                self._write(q, lo, units[s:e])
            else:
                block = filler_units(hi - lo + 1)
                block[span - lo] = units[s:e]
                self._write(q, lo, block)
            prev = hi
        self._last[(topic, qid)] = prev
        q.units += len(qo)
        q.next_offset = prev + 1

    def finish(self) -> list[QueueResult]:
        self._files.close()
        for q in self.queues.values():
            if q.gaps:
                a, b, phys = q.first_gap
                self.problems.append(
                    Problem(
                        CQ_QUEUE_OFFSET_GAP,
                        self._shown(q, a // self.units_per_file),
                        a % self.units_per_file * C.CQ_UNIT_SIZE,
                        f"{q.topic}/{q.queue_id}: {q.gap_units} queue offsets have no message in the CommitLog ({q.gaps} holes, first {a}..{b - 1}); filled with filler units",
                        phys_offset=phys,
                        extra={"topic": q.topic, "queue_id": q.queue_id, "units": q.gap_units},
                    )
                )
            if q.duplicates:
                off, phys = q.first_dup
                self.problems.append(
                    Problem(
                        CQ_DUPLICATE_QUEUE_OFFSET,
                        self._shown(q, max(off, 0) // self.units_per_file),
                        None,
                        f"{q.topic}/{q.queue_id}: {q.duplicates} messages repeat a queueOffset already used (first {off}); the first message keeps the unit",
                        phys_offset=phys,
                        extra={"topic": q.topic, "queue_id": q.queue_id, "messages": q.duplicates},
                    )
                )
        return sorted(self.queues.values(), key=lambda q: (q.topic, q.queue_id))

    def abort(self) -> None:
        self._files.abort()
