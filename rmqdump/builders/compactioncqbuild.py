"""The compaction topics' SparseConsumeQueues (`compaction/compactionCq/`), written again from their compaction logs.

CompactionLog appends one unit per record it copies (its compaction-log
offset, totalSize, the TAGS hashCode, storeTimestamp, queue offset, batchNum
1, compactedOffset -1, reserved 0) to the queue file named like the log file.
When the log file or the queue file is full it writes a BLANK record in the
log and the end unit (offset -1) in the queue file; a file a compaction round
rewrote ends in zeros and gets no end unit. So each log file gives its queue
file: its records' units, then the end unit when the log file ends in a BLANK.
Files are written whole (zero-filled to the queue file size) under a temporary
directory beside OUT/compaction/compactionCq and renamed into place.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from rmqdump.common.problems import InputError, Problem
from rmqdump.common.publish import publishing
from rmqdump.readers.commitlog import Blank
from rmqdump.readers.compaction import CompactionQueue, find_compaction
from rmqdump.readers.fastpath import struct_format
from rmqdump.scan import scanner
from rmqdump.scan.compaction import batch_records
from rmqdump.schemas import SparseConsumeQueueUnit
from rmqdump.schemas import constants as C

UNIT = struct_format(SparseConsumeQueueUnit)
END_UNIT = UNIT.pack(C.SCQ_END_OFFSET, 0, 0, 0, 0, 0, C.BCQ_COMPACTED_OFFSET_NONE, 0)
DEFAULT_CQ_FILE_SIZE = 10 * 1024 * 1024 // UNIT.size * UNIT.size  # compactionCqMappedFileSize, rounded down to whole units as CompactionLog does
COMPACTION_CQ_OVERFLOW = "compaction_cq_overflow"


@dataclass
class BuiltQueue:
    topic: str
    queue_id: int
    files: list[str] = field(default_factory=list)
    units: int = 0
    end_units: int = 0

    def to_dict(self) -> dict:
        return {"kind": "compaction_cq", "topic": self.topic, "queue_id": self.queue_id, "files": self.files, "units": self.units, "end_units": self.end_units}


@dataclass
class CompactionCqBuild:
    out: str
    cq_file_size: int
    queues: list[BuiltQueue]
    problems: list[Problem]


def queue_files(q: CompactionQueue, cq_file_size: int) -> tuple[dict[str, bytes], BuiltQueue, list[Problem]]:
    """The bytes of each queue file of one compaction queue, by name, built from its log."""
    built = BuiltQueue(q.topic, q.queue_id)
    probs: list[Problem] = []
    files: dict[str, bytearray] = {}
    for b in scanner.batches(q.log, check_crc=False):
        probs.extend(b.problems())
        name = b.seg.name
        buf = files.setdefault(name, bytearray())
        for _, r in batch_records(b):
            m = r.message
            if len(buf) + UNIT.size > cq_file_size:
                probs.append(Problem(COMPACTION_CQ_OVERFLOW, m.file, m.phys_offset - b.seg.base, f"no room for its unit in a {cq_file_size}-byte queue file"))
                continue
            buf += UNIT.pack(m.phys_offset, m.total_size, r.tags_code, m.store_timestamp, m.queue_offset, 1, C.BCQ_COMPACTED_OFFSET_NONE, 0)
            built.units += 1
        if any(isinstance(e, Blank) and e.marker == "blank" for e in b.events) and len(buf) + UNIT.size <= cq_file_size:
            buf += END_UNIT
            built.end_units += 1
    for f in q.log.files:  # a log file with no record (all zeros) still has its queue file
        files.setdefault(f.name, bytearray())
    built.files = sorted(files)
    return {n: bytes(v) + bytes(cq_file_size - len(v)) for n, v in files.items()}, built, probs


def rebuild_compaction_cq(
    store: str, out: str, *, force: bool, sync: bool = True, cq_file_size: int | None = None, topics: frozenset[str] | None = None
) -> CompactionCqBuild | None:
    """Write OUT/compaction/compactionCq from the store's compaction logs (of `topics`); None when there is none to write.

    The queue file size is `cq_file_size`, else the one the store's queue files have, else the broker's default.
    """
    cf = find_compaction(store)
    queues = [] if cf is None else [q for q in cf.queues if topics is None or q.topic in topics]
    if not queues:
        return None
    if cq_file_size is None:
        sizes = [q.cq_file_size for q in queues if q.cq_file_size]
        cq_file_size = max(set(sizes), key=sizes.count) if sizes else DEFAULT_CQ_FILE_SIZE
    if cq_file_size < UNIT.size:
        raise InputError("usage", store, f"a compaction queue file of {cq_file_size} bytes holds no unit")
    target = os.path.join(out, C.COMPACTION_DIR, C.COMPACTION_CQ_DIR)
    result = CompactionCqBuild(target, cq_file_size, [], [])
    with publishing(target, force=force, stores=[store], kind="dir", sync=sync) as tmp:
        for q in queues:
            data, built, probs = queue_files(q, cq_file_size)
            d = os.path.join(tmp, q.topic, str(q.queue_id))
            os.makedirs(d, exist_ok=True)
            for name, raw in data.items():
                with open(os.path.join(d, name), "xb") as f:
                    f.write(raw)
            result.queues.append(built)
            result.problems.extend(probs)
    return result
