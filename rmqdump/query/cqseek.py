"""Reading one queue the way a consumer does: its units, their records, a time lookup.

`seek` answers "where was this queue at 3 am?": the queue offset of the first
message stored at or after a time, by binary search over the units with one
record read per probe, as ConsumeQueue.getOffsetInQueueByTime does with
BoundaryType.LOWER (5.x; 4.x returned the nearer neighbour instead).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from rmqdump.common.closing import Closing
from rmqdump.common.jsontext import fields_of
from rmqdump.common.problems import InputError, Problem
from rmqdump.readers.batchcq import BatchConsumeQueue, BatchUnits, read_batch_units
from rmqdump.readers.commitlog import CommitLog
from rmqdump.readers.consumequeue import UNIT_SIZE, ConsumeQueue, QueueUnits, read_units, unit_row
from rmqdump.readers.cqext import ConsumeQueueExt
from rmqdump.readers.mapped import MappedFile
from rmqdump.readers.message import Message
from rmqdump.readers.recordprops import is_lmq, multi_dispatch
from rmqdump.scan import scanner
from rmqdump.schemas import constants as C

SEEK_UNREADABLE = "seek_record_unreadable"


class RecordReader(Closing):
    """Reads single records at physical offsets, keeping each CommitLog file mapped once."""

    def __init__(self, cl: CommitLog, *, check_crc: bool = False):
        self.cl = cl
        self.check_crc = check_crc
        self._open: dict[str, MappedFile] = {}

    def read(self, phys: int) -> Message | Problem:
        seg = self.cl.file_for(phys)
        if seg is None:
            return self.cl.out_of_range("cq_offset_out_of_range", phys)
        mf = self._open.get(seg.path)
        if mf is None:
            mf = self._open[seg.path] = MappedFile(seg.path, limit=self.cl.file_size)
        return scanner.file_record_at(seg, mf, phys - seg.base, check_crc=self.check_crc)

    def close(self) -> None:
        for mf in self._open.values():
            mf.close()
        self._open.clear()


_SUMMARY = ("total_size", "topic", "queue_id", "queue_offset", "store_timestamp", "tags", "keys", "uniq_key", "msg_id", "transaction")


def record_summary(m: Message | Problem) -> dict:
    """A unit's record as `cq dump` shows it beside the unit: the Message's own fields of _SUMMARY, or why it is unreadable."""
    if isinstance(m, Problem):
        return {"ok": False, "code": m.code, "detail": m.detail}
    return {"ok": True, **{k: getattr(m, k) for k in _SUMMARY}}


def dump_units(
    q: ConsumeQueue,
    *,
    start: int | None = None,
    limit: int | None = None,
    reader: RecordReader | None = None,
    ext: ConsumeQueueExt | None = None,
    all_units: bool = False,
) -> Iterator[dict]:
    """The units of one queue from queue offset `start` up to the queue's end, as rows; with a reader, each unit's record next to it.

    The queue ends at its last valid unit (where the broker's recovery puts
    its end); the unwritten units after it are left out unless `all_units`
    (`queue_tail` counts them). An invalid unit before the end is a hole and is listed.
    With the queue's ext files, a tagsCode that is an ext address is shown
    resolved (the real tagsCode), with the address, the ext unit's store
    time and filter bitmap next to it.
    """
    n = 0
    seen_real = False
    end = None if all_units else q.last_valid_index()
    for f in q.files:
        if end is not None and f.first_index > end:
            return
        if start is not None and f.base + f.size <= start * UNIT_SIZE:
            # a skipped file still decides whether fillers are over
            seen_real = seen_real or bool((QueueUnits.from_array(read_units(f), f.first_index).valid_mask()).any())
            continue
        u = QueueUnits.from_array(read_units(f), f.first_index)
        ext_k = ext.lookup(u.tags_code) if ext is not None else None
        lmq = is_lmq(q.topic)
        filler = u.filler_mask()
        valid = u.valid_mask()
        for k in range(len(u)):
            idx = int(u.index[k])
            if end is not None and idx > end:
                return
            is_filler = bool(filler[k]) and not seen_real
            if valid[k] and not filler[k]:
                seen_real = True
            if start is not None and idx < start:
                continue
            row = unit_row(q, idx, f.path, idx * UNIT_SIZE - f.base, u.offset[k], u.size[k], u.tags_code[k])
            row.update(filler=is_filler, valid=bool(valid[k]) and not is_filler)
            if ext is not None and int(u.tags_code[k]) <= C.EXT_ADDRESS_MAX:  # without ext files the broker reads it as a plain tagsCode
                row.update(_ext_fields(ext, int(u.tags_code[k]), -1 if ext_k is None else int(ext_k[k])))
            if reader is not None and row["valid"]:
                m = reader.read(row["phys_offset"])
                row["record"] = record_summary(m)
                if lmq and isinstance(m, Message):
                    row["record"]["lmq_offsets"] = [o for name, o in multi_dispatch(m.topic, m.properties) if name == q.topic]
            yield row
            n += 1
            if limit is not None and n >= limit:
                return


def queue_tail(q) -> dict:
    """The row that ends a `cq dump` listing: the unwritten units after the queue's end, counted.

    The end is the last valid unit (offset >= 0, size > 0; for a Batch
    ConsumeQueue also msgBaseOffset >= 0, batchSize > 0), as the broker's
    recovery finds it; `not_zero` counts those units holding anything but
    zeros. A RocksDB ConsumeQueue has keys only for written units: none.
    """
    row = {"kind": "unwritten", "topic": q.topic, "queue_id": q.queue_id, "first_unit": None, "units": 0, "not_zero": 0, "cq_file": None, "file_offset": None}
    if isinstance(q, BatchConsumeQueue):
        fi, k = q.last_valid()
        fi, k = (0, 0) if fi < 0 else (fi, k + 1)
        for i in range(fi, len(q.files)):
            u = BatchUnits.from_array(q.files[i], read_batch_units(q.files[i]))
            lo = k if i == fi else 0
            if lo < len(u) and row["cq_file"] is None:
                row.update(cq_file=q.files[i].path, file_offset=int(u.pos[lo]))
            row["units"] += len(u) - lo
            row["not_zero"] += int((~u.zero_mask()[lo:]).sum())
        return row
    if not isinstance(q, ConsumeQueue):  # RocksDB
        return row
    last = q.last_valid_index()
    first = last + 1 if last >= 0 else (q.files[0].first_index if q.files else 0)
    row["first_unit"] = first
    for f in q.files:
        if f.first_index + f.units <= first:
            continue
        lo = max(0, first - f.first_index)
        if row["cq_file"] is None:
            row.update(cq_file=f.path, file_offset=lo * UNIT_SIZE)
        arr = read_units(f)[lo:]
        row["units"] += len(arr)
        row["not_zero"] += int(arr.view(np.uint8).reshape(len(arr), UNIT_SIZE).any(axis=1).sum()) if len(arr) else 0
    return row


def _ext_fields(ext: ConsumeQueueExt | None, address: int, k: int) -> dict:
    """A unit's ext address resolved: the real tagsCode, the ext unit's store time and bitmap (None where it does not resolve)."""
    d = {"ext_address": address, "tags_code": None, "store_time": None, "filter_bitmap": None, "ext_file": None, "ext_file_offset": None}
    if ext is None or k < 0:
        return d
    eu = ext.units()
    d.update(
        tags_code=int(eu.tags_code[k]),
        store_time=int(eu.store_time[k]),
        filter_bitmap=ext.bitmap(k).hex(),
        ext_file=ext.files[int(eu.file_index[k])].path,
        ext_file_offset=int(eu.pos[k]),
    )
    return d


def dump_batch_units(
    q: BatchConsumeQueue, *, start: int | None = None, limit: int | None = None, reader: RecordReader | None = None, all_units: bool = False
) -> Iterator[dict]:
    """The units of one Batch ConsumeQueue from the unit covering queue offset `start` up to the queue's end, as rows.

    As for `dump_units`: the units after the last valid one are left out unless `all_units`; an invalid unit before it is listed.
    """
    n = 0
    end = (len(q.files), 0) if all_units else q.last_valid()
    shown = False
    for fi, u in enumerate(q.chunks()):
        valid = u.valid_mask()
        for k in range(len(u)):
            if (fi, k) > end:
                return
            base, batch = int(u.base_offset[k]), int(u.batch_size[k])
            if start is not None and not shown and (not valid[k] or base + batch <= start):
                continue
            shown = True
            row = unit_row(q, base, u.file.path, u.pos[k], u.offset[k], u.size[k], u.tags_code[k])
            row.update(store_time=int(u.store_time[k]), batch_size=batch, compacted_offset=int(u.compacted_offset[k]), filler=False, valid=bool(valid[k]))
            if reader is not None and row["valid"]:
                row["record"] = record_summary(reader.read(row["phys_offset"]))
            yield row
            n += 1
            if limit is not None and n >= limit:
                return


@dataclass
class SeekResult:
    topic: str
    queue_id: int
    timestamp: int
    queue_offset: int  # first unit stored at or after `timestamp`; max_offset when none is
    min_offset: int
    max_offset: int
    phys_offset: int | None  # of that unit's record
    store_timestamp: int | None
    probes: int

    def to_dict(self) -> dict:
        return {"kind": "seek", **fields_of(self, omit=("probes",)), "found": self.queue_offset < self.max_offset, "probes": self.probes}


def seek(q: ConsumeQueue, cl: CommitLog, timestamp: int) -> SeekResult:
    """Binary search the queue's units for the first message stored at or after `timestamp` (ms)."""
    lo, hi = q.bounds()
    probes = 0
    cache: dict[int, tuple[int, int]] = {}

    with RecordReader(cl) as reader:

        def time_at(index: int) -> tuple[int, int]:
            nonlocal probes
            if index in cache:
                return cache[index]
            unit = q.unit_at(index)
            if unit is None:
                raise InputError(SEEK_UNREADABLE, q.expected_path(index), f"unit {index} is in no file", offset=None)
            m = reader.read(unit[0])
            probes += 1
            if isinstance(m, Problem):
                raise InputError(SEEK_UNREADABLE, m.file or q.path, f"unit {index} points at {unit[0]}: {m.code}: {m.detail}", offset=m.file_offset)
            cache[index] = (m.store_timestamp, unit[0])
            return cache[index]

        a, b = lo, hi  # answer in [a, b]
        while a < b:
            mid = (a + b) // 2
            if time_at(mid)[0] >= timestamp:
                b = mid
            else:
                a = mid + 1
        if a < hi:
            ts, phys = time_at(a)
            return SeekResult(q.topic, q.queue_id, timestamp, a, lo, hi, phys, ts, probes)
        return SeekResult(q.topic, q.queue_id, timestamp, a, lo, hi, None, None, probes)


def seek_batch(q: BatchConsumeQueue, timestamp: int) -> SeekResult:
    """The first message stored at or after `timestamp` (ms) in a Batch ConsumeQueue: the msgBaseOffset of the first
    valid unit whose storeTime is at or after it (a unit holds the store time, as the broker's search reads it).

    The files are read one at a time, in order, each once; `probes` counts the files read. No record is read: the
    unit gives the record's offset and store time.
    """
    lo = hi = None
    answer: tuple[int, int, int] | None = None  # (msgBaseOffset, commitLogOffset, storeTime)
    files = 0
    for u in q.chunks():
        files += 1
        v = np.flatnonzero(u.valid_mask())
        if not v.size:
            continue
        if lo is None:
            lo = int(u.base_offset[v[0]])
        hi = int(u.base_offset[v[-1]]) + int(u.batch_size[v[-1]])
        if answer is None:
            at = v[u.store_time[v] >= timestamp]
            if at.size:
                k = int(at[0])
                answer = (int(u.base_offset[k]), int(u.offset[k]), int(u.store_time[k]))
    lo, hi = (lo, hi) if lo is not None else (0, 0)
    if answer is None:
        return SeekResult(q.topic, q.queue_id, timestamp, hi, lo, hi, None, None, files)
    return SeekResult(q.topic, q.queue_id, timestamp, answer[0], lo, hi, answer[1], answer[2], files)
