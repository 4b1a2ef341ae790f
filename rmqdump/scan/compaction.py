"""Compaction logs and the CommitLog records they were copied from, read through the walk.

A compaction log is read as a CommitLog (rmqdump.readers.compaction); its
records and their originals in the CommitLog (the records of the compaction
topics, per queue by queue offset) are what `compaction verify`, `compaction
view` and the rebuild of the compaction ConsumeQueue compare and write.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from rmqdump.readers.commitlog import CommitLog
from rmqdump.readers.compaction import LogRecord, compaction_key, tags_code
from rmqdump.readers.message import decode_properties
from rmqdump.scan.walk import Batch, scan_commitlog
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


def originals(cl: CommitLog, topics: set[str], *, on_bytes=None) -> dict[tuple[str, int], dict[int, Original]]:
    """Every CommitLog record of these topics, per (topic, queue id), by queue offset (one scan of the CommitLog)."""
    out: dict[tuple[str, int], dict[int, Original]] = {}
    lengths = np.array(sorted({len(t.encode()) for t in topics}), dtype=np.int64)
    done = cl.min_offset
    for b in scan_commitlog(cl, check_crc=False):
        c = b.cols
        n = len(b)
        if n:
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
                out.setdefault((t, int(c["queue_id"][i])), {})[o.queue_offset] = o
            end = b.seg.base + int(c["_pos"][n - 1]) + int(c["total_size"][n - 1])
            if on_bytes is not None and end > done:
                on_bytes(end - done)
                done = end
    return out
