"""What a consumer of a compaction topic gets, the history of one key, and the compaction files in brief (for `info`).

A compacted queue serves its SparseConsumeQueue's units in order, each the
compaction-log record it points at (CompactionStore.getMessage): up to the
checkpoint the survivors of the compaction rounds, after it every keyed put.
A put of a key is absent from that view for one of the retention rule's
reasons: a tombstone (empty body), superseded by a newer put of its key up to
the checkpoint, or sent without KEYS; anything else absent is lost.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from rmqdump.common.problems import Problem
from rmqdump.readers.commitlog import CommitLog
from rmqdump.readers.compaction import CompactionFiles, compaction_key, end_unit_mask, is_tombstone, queue_units_bounds
from rmqdump.readers.message import Message
from rmqdump.scan import scanner
from rmqdump.scan.compaction import Original, batch_records, originals, part_of, served_records
from rmqdump.scan.ranges import SERIAL, Mapper


def consumer_view(
    cf: CompactionFiles,
    cl: CommitLog,
    topic: str | None,
    queue_id: int | None = None,
    *,
    on_bytes: Callable[[int], None] | None = None,
    mapper: Mapper = SERIAL,
) -> Iterator[dict | Problem]:
    """Rows of kind `message`, queue by queue in unit order (every compaction topic's when topic is None); a Problem where a unit's record cannot be read."""
    queues = cf.select(topic, queue_id)
    orig = originals(cl, {q.topic for q in queues}, on_bytes=on_bytes, mapper=mapper) if cl.files and queues else {}
    for q in queues:
        cp = cf.checkpoint.offset(q.topic, q.queue_id)
        mine = orig.get((q.topic, q.queue_id), {})
        for f, pos, u, got in served_records(q):
            if isinstance(got, Problem):
                yield q.located(got, f.path, u["base_offset"])
                continue
            yield _row(got, mine.get(got.queue_offset), cp, f.path, pos)


def _row(m: Message, o: Original | None, cp: int, cq_file: str | None, cq_pos: int | None) -> dict:
    return {
        "kind": "message",
        "topic": m.topic,  # the record's own (verify tells a record of another queue)
        "queue_id": m.queue_id,
        "queue_offset": m.queue_offset,
        "keys": compaction_key(m.properties),
        "uniq_key": m.uniq_key,
        "phys_offset": None if o is None else o.phys,
        "compaction_log_offset": m.phys_offset,
        "part": part_of(m.queue_offset, cp),
        "size": m.total_size,
        "store_timestamp": m.store_timestamp,
        "tags": m.tags,
        "body_length": m.body_length,
        "file": m.file,
        "cq_file": cq_file,
        "cq_file_offset": cq_pos,
    }


def key_history(
    cf: CompactionFiles,
    cl: CommitLog,
    topic: str,
    key: str,
    queue_id: int | None = None,
    *,
    on_bytes: Callable[[int], None] | None = None,
    mapper: Mapper = SERIAL,
) -> list[dict]:
    """Every put of one key (the whole KEYS string) the CommitLog or the compaction log holds, oldest first, with what became of it."""
    queues = cf.select(topic, queue_id)
    orig = originals(cl, {topic}, on_bytes=on_bytes, mapper=mapper) if cl.files and queues else {}
    rows: list[dict] = []
    for q in queues:
        cp = cf.checkpoint.offset(q.topic, q.queue_id)
        served = {}
        for f, pos, _u, m in served_records(q):
            if isinstance(m, Message) and compaction_key(m.properties) == key:
                served[m.queue_offset] = (m, f.path, pos)
        puts = sorted((o for o in orig.get((q.topic, q.queue_id), {}).values() if o.key == key), key=lambda o: o.queue_offset)
        newest_upto_cp = max((o.queue_offset for o in puts if o.queue_offset <= cp), default=None)
        seen = set()
        for o in puts:
            seen.add(o.queue_offset)
            hit = served.get(o.queue_offset)
            served_as = None if hit is None else hit[0]
            rows.append(_put_row(q, key, cp, o, o.phys, served_as, _why(o, hit is not None, cp, newest_upto_cp)))
        for qo, (m, _, _) in sorted(served.items()):
            if qo not in seen:  # served, its CommitLog record gone (or never found)
                rows.append(_put_row(q, key, cp, m, None, m, "served; the CommitLog no longer holds the original"))
    rows.sort(key=lambda r: (r["queue_id"], r["queue_offset"]))
    return rows


def _put_row(q, key: str, cp: int, put: Original | Message, phys_offset: int | None, served_as: Message | None, why: str) -> dict:
    """One put of a key as key_history lists it: `put` is its CommitLog original, or the served record when the original is gone."""
    return {
        "kind": "put",
        "topic": q.topic,
        "queue_id": q.queue_id,
        "queue_offset": put.queue_offset,
        "keys": key,
        "uniq_key": put.uniq_key,
        "phys_offset": phys_offset,
        "compaction_log_offset": None if served_as is None else served_as.phys_offset,
        "part": part_of(put.queue_offset, cp),
        "tombstone": is_tombstone(put.body_length),
        "store_timestamp": put.store_timestamp,
        "served": served_as is not None,
        "why": why,
    }


def _why(o: Original, served: bool, cp: int, newest_upto_cp: int | None) -> str:
    if o.queue_offset > cp:
        return "served: after the checkpoint, not compacted yet" if served else "missing: a put after the checkpoint is not in the compaction log"
    if served:
        return "served: the key's newest put up to the checkpoint survived compaction"
    if is_tombstone(o.body_length):
        return "dropped: a tombstone (empty body) is never kept by compaction"
    if newest_upto_cp is not None and newest_upto_cp > o.queue_offset:
        return f"dropped: superseded by the put at queue offset {newest_upto_cp}"
    return "missing: the key's newest put up to the checkpoint should have survived"


def compaction_summary(cf: CompactionFiles) -> list[dict]:
    """One row per compaction queue (files, sizes, units, offsets, checkpoint) and one for the checkpoint file."""
    rows = []
    for q in cf.queues:
        units, lo, hi = queue_units_bounds(q)
        rows.append(
            {
                "kind": "compaction_queue",
                "topic": q.topic,
                "queue_id": q.queue_id,
                "checkpoint": cf.checkpoint.offset(q.topic, q.queue_id),
                "log_files": [f.name for f in q.log.files],
                "log_bytes": sum(f.size for f in q.log.files),
                "log_file_size": q.log_file_size,
                "cq_files": [f.name for f in q.cq_files],
                "cq_bytes": sum(f.size for f in q.cq_files),
                "cq_file_size": q.cq_file_size,
                "units": units,
                "min_offset": lo,
                "max_offset": hi,
            }
        )
    rows.append(cf.checkpoint.to_dict())
    return rows


def log_rows(
    cf: CompactionFiles,
    cl: CommitLog,
    topic: str,
    queue_id: int | None = None,
    *,
    on_bytes: Callable[[int], None] | None = None,
    mapper: Mapper = SERIAL,
) -> Iterator[dict | Problem]:
    """Every compaction-log record as `commitlog` lists a message, with `compaction_log_offset` (its own offset) and
    `phys_offset` (its original's CommitLog offset, None when the CommitLog no longer holds it); the scan's problems in place."""
    queues = cf.select(topic, queue_id)
    orig = originals(cl, {topic}, on_bytes=on_bytes, mapper=mapper) if cl.files and queues else {}
    for q in queues:
        mine = orig.get((q.topic, q.queue_id), {})
        for b in scanner.batches(q.log):
            for i, r in batch_records(b):
                d = r.message.to_dict()
                o = mine.get(r.queue_offset) if r.message.topic == q.topic and r.message.queue_id == q.queue_id else None
                d["file_offset"] = int(b.cols["_pos"][i])
                d["compaction_log_offset"] = r.offset
                d["phys_offset"] = None if o is None else o.phys
                d["compaction_key"] = r.key
                yield d
            yield from (q.located(p) for p in b.problems())


def unit_rows(cf: CompactionFiles, topic: str, queue_id: int | None = None) -> Iterator[dict]:
    """Every unit of the compaction queues as written: valid ones, end units and any other non-zero unit (the zero tail left out)."""
    for q in cf.select(topic, queue_id):
        for u in q.unit_files():
            valid, end, zero = u.valid_mask(), end_unit_mask(u), u.zero_mask()
            for k in range(len(u)):
                if zero[k] and int(u.compacted_offset[k]) == 0 and int(u.reserved[k]) == 0:
                    continue
                r = u.row(k)
                yield {
                    "kind": "unit",
                    "topic": q.topic,
                    "queue_id": q.queue_id,
                    "cq_file": u.file.path,
                    "file_offset": r["pos"],
                    "compaction_log_offset": r["offset"],
                    "size": r["size"],
                    "tags_code": r["tags_code"],
                    "store_time": r["store_time"],
                    "queue_offset": r["base_offset"],
                    "batch_num": r["batch_size"],
                    "compacted_offset": r["compacted_offset"],
                    "reserved": r["reserved"],
                    "valid": bool(valid[k]),
                    "end": bool(end[k]),
                }
