"""`compaction verify`: a compaction topic's files against each other, the CommitLog and the retention rule.

Both ways, per queue: every compaction-log record is the CommitLog record of
its queue offset byte for byte but for the physicalOffset field (when the
CommitLog still holds it), and has a unit; every SparseConsumeQueue unit
points at a record of its paired log file with that record's size, tagsCode,
store time and queue offset. The retention rule is CompactionLog's: a round
keeps a message of the files it rewrites only if it has a body and no newer
put of its key lies in the files written since the previous round, and the
checkpoint becomes the last queue offset it read. So up to the checkpoint (the
compacted part) a key has at most one survivor, never a tombstone, and it is
the key's newest put up to the checkpoint; after it every keyed put is there.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from rmqdump.common import problems as P
from rmqdump.common.jsontext import fields_of
from rmqdump.common.problems import Problem
from rmqdump.readers.commitlog import CommitLog
from rmqdump.readers.compaction import CompactionFiles, CompactionQueue, LogRecord, end_unit_mask, find_compaction, is_tombstone, split_queue_key
from rmqdump.readers.fastpath import field_offset
from rmqdump.readers.mapped import PreadFiles
from rmqdump.scan import scanner
from rmqdump.scan.compaction import Original, batch_records, originals
from rmqdump.scan.ranges import SERIAL, Mapper
from rmqdump.schemas import constants as C
from rmqdump.schemas import message_header

PHYS_FIELD = field_offset(message_header(), "phys_offset")  # the 8 bytes a compaction-log copy rewrites
PHYS_FIELD_END = PHYS_FIELD + 8


@dataclass
class Summary:
    queues: int = 0
    records: int = 0
    units: int = 0
    problems: int = 0
    codes: dict[str, int] = field(default_factory=dict)
    commitlog: bool = True  # False: no CommitLog files, so nothing was compared with the originals

    def count(self, p: Problem) -> None:
        self.problems += 1
        self.codes[p.code] = self.codes.get(p.code, 0) + 1

    def to_dict(self) -> dict:
        return {"kind": "summary", **fields_of(self, omit=("commitlog",)), "commitlog_compared": self.commitlog}


@dataclass
class _Rec:
    """A log record as the checks need it: where it is, what it says."""

    r: LogRecord
    file: str
    pos: int


def verify(
    root: str,
    cl: CommitLog,
    *,
    topic: str | None = None,
    queue_id: int | None = None,
    check_crc: bool = True,
    summary: Summary | None = None,
    on_bytes: Callable[[int], None] | None = None,
    mapper: Mapper = SERIAL,
) -> list[Problem]:
    """Every problem of the compaction topics of a store (those selected), in queue then file order; [] without compaction/.
    `mapper` maps the CommitLog's ranges read for the originals (builtin map, or an engine's)."""
    s = summary if summary is not None else Summary()
    cf = find_compaction(root)
    if cf is None:
        return []
    queues = cf.select(topic, queue_id)
    s.queues += len(queues)
    s.commitlog = bool(cl.files)
    picked = {(q.topic, q.queue_id) for q in queues}
    probs = [p for p in cf.problems if p.extra.get("topic") is None or (p.extra.get("topic"), p.extra.get("queue_id")) in picked]
    probs += _checkpoint_entries(cf, topic, queue_id)
    orig = originals(cl, {q.topic for q in queues}, on_bytes=on_bytes, mapper=mapper) if cl.files and queues else {}
    reader = PreadFiles()  # the CommitLog files of the originals, kept open for the run
    try:
        for q in queues:
            cp = cf.checkpoint.offset(q.topic, q.queue_id)
            found, last = check_queue(q, cp, orig.get((q.topic, q.queue_id), {}), bool(cl.files), reader, s, check_crc)
            probs += found
            if cp != C.COMPACTION_CHECKPOINT_NONE and (last is None or cp > last):
                key = next((k for k in cf.checkpoint.entries if split_queue_key(k) == (q.topic, q.queue_id)), f"{q.topic}_{q.queue_id}")
                probs.append(_ck_problem(cf, key, q.topic, q.queue_id, f"checkpoint {cp} is past the compaction log's last queue offset {last}"))
    finally:
        reader.close()
    for p in probs:
        s.count(p)
    return probs


def _checkpoint_entries(cf: CompactionFiles, topic: str | None, queue_id: int | None) -> list[Problem]:
    """Checkpoint entries for queues that have no compaction files."""
    have = {(q.topic, q.queue_id) for q in cf.queues}
    out = []
    for k, v in cf.checkpoint.entries.items():
        t, qid = split_queue_key(k)  # entries are the keys that split
        if (topic is None or t == topic) and (queue_id is None or qid == queue_id) and (t, qid) not in have:
            out.append(_ck_problem(cf, k, t, qid, f"checkpoint entry {k} ({v}) names a queue with no compaction files"))
    return out


def _ck_problem(cf: CompactionFiles, key: str, topic: str, qid: int, detail: str) -> Problem:
    """A problem at a checkpoint entry: the byte where its key is written."""
    path = cf.checkpoint.used or cf.checkpoint.path
    at = None
    try:
        with open(path, "rb") as f:
            found = f.read().find(f'"{key}"'.encode())
        at = found if found >= 0 else None
    except OSError:
        pass
    return Problem(P.COMPACTION_CHECKPOINT_MISMATCH, path, at, detail, extra={"topic": topic, "queue_id": qid, "cq_file": None, "unit_index": None})


def check_queue(
    q: CompactionQueue, cp: int, orig: dict[int, Original], has_commitlog: bool, reader: PreadFiles, s: Summary, check_crc: bool = True
) -> tuple[list[Problem], int | None]:
    """All checks of one queue, and the last queue offset of its log."""
    probs: list[Problem] = []
    recs = _records(q, orig, has_commitlog, reader, probs, check_crc)
    s.records += len(recs)
    by_offset = {x.r.offset: x for x in recs}
    covered = _units(q, by_offset, probs, s)
    for x in recs:
        if x.r.offset not in covered:
            probs.append(_at(q, P.COMPACTION_RECORD_NO_UNIT, x, f"record of queue offset {x.r.queue_offset} has no compactionCq unit: consumers never get it"))
    probs += _retention(q, cp, recs, orig, has_commitlog)
    probs += _checkpoint_vs_files(q, cp, recs)
    return probs, max((x.r.queue_offset for x in recs), default=None)


def _at(q: CompactionQueue, code: str, x: _Rec, detail: str, delta: int = 0) -> Problem:
    return Problem(code, x.file, x.pos + delta, detail, phys_offset=x.r.offset, extra=q.extra(None, x.r.queue_offset))


def _at_original(q: CompactionQueue, code: str, o: Original, detail: str) -> Problem:
    """A finding about a CommitLog original that the compaction log lacks, at the original's record."""
    return Problem(code, o.file, o.pos, detail, phys_offset=o.phys, extra=q.extra(None, o.queue_offset))


def _records(q: CompactionQueue, orig: dict[int, Original], has_commitlog: bool, reader: PreadFiles, probs: list[Problem], check_crc: bool) -> list[_Rec]:
    """The log's records, their scan problems, and each one against its CommitLog original."""
    held_from = min(orig) if orig else None
    recs: list[_Rec] = []
    for b in scanner.batches(q.log, check_crc=check_crc):
        probs.extend(q.located(p) for p in b.problems())
        for i, r in batch_records(b):
            m = r.message
            x = _Rec(r, b.seg.path, m.phys_offset - b.seg.base)
            recs.append(x)
            if m.topic != q.topic or m.queue_id != q.queue_id:
                probs.append(_at(q, P.COMPACTION_RECORD_WRONG_QUEUE, x, f"record of {m.topic}/{m.queue_id} in the compaction log of {q.topic}/{q.queue_id}"))
                continue
            o = orig.get(m.queue_offset)
            if o is None:
                if has_commitlog and held_from is not None and m.queue_offset >= held_from:
                    probs.append(
                        _at(q, P.COMPACTION_RECORD_NO_ORIGINAL, x, f"the CommitLog has no record of queue offset {m.queue_offset} (it holds {held_from} on)")
                    )
                continue
            mine = np.frombuffer(b.raw(int(b.cols["_pos"][i]), m.total_size), dtype=np.uint8)
            theirs = np.frombuffer(reader.pread(o.file, o.pos, o.size), dtype=np.uint8)
            n = min(len(mine), len(theirs))
            diff = np.flatnonzero(mine[:n] != theirs[:n])
            diff = diff[(diff < PHYS_FIELD) | (diff >= PHYS_FIELD_END)]
            if diff.size or len(mine) != len(theirs):
                d = int(diff[0]) if diff.size else n
                probs.append(
                    _at(
                        q,
                        P.COMPACTION_RECORD_DIFFERS,
                        x,
                        f"byte {d} of the record differs from the CommitLog record at {o.phys} (queue offset {m.queue_offset}, {o.size} bytes)",
                        d,
                    )
                )
    return recs


def _units(q: CompactionQueue, by_offset: dict[int, _Rec], probs: list[Problem], s: Summary) -> set[int]:
    """Unit checks; the log offsets the valid units cover."""
    covered: set[int] = set()
    log_files = {f.name: f for f in q.log.files}
    prev = None
    for u in q.unit_files():
        path = u.file.path
        paired = log_files.get(u.file.name)
        valid = u.valid_mask()
        vpos = np.flatnonzero(valid)
        last = int(vpos[-1]) if vpos.size else -1
        zero = u.zero_mask()
        end = end_unit_mask(u)
        s.units += int(vpos.size)

        def bad(k: int, code: str, detail: str, u=u, path=path) -> None:
            probs.append(Problem(code, path, int(u.pos[k]), detail, phys_offset=int(u.offset[k]), extra=q.extra(path, int(u.base_offset[k]))))

        for k in np.flatnonzero(~valid).tolist():
            if k < last:
                bad(k, P.COMPACTION_CQ_INVALID_UNIT, f"invalid unit (offset {int(u.offset[k])}, size {int(u.size[k])}) before the file's last valid unit")
            elif not zero[k] and not end[k]:
                bad(k, P.COMPACTION_CQ_INVALID_UNIT, "neither a unit, the end unit nor zeros after the file's last valid unit")
        for k in vpos.tolist():
            off, qo = int(u.offset[k]), int(u.base_offset[k])
            if prev is not None and qo <= prev:
                bad(k, P.COMPACTION_CQ_ORDER, f"queue offset {qo} is not above the previous unit's {prev}")
            prev = qo
            if int(u.batch_size[k]) != 1 or int(u.compacted_offset[k]) != C.BCQ_COMPACTED_OFFSET_NONE or int(u.reserved[k]) != 0:
                bad(
                    k,
                    P.COMPACTION_CQ_INVALID_UNIT,
                    f"batchNum {int(u.batch_size[k])}, compactedOffset {int(u.compacted_offset[k])}, reserved {int(u.reserved[k])}: the broker writes 1, -1, 0",
                )
            x = by_offset.get(off)
            if x is None or paired is None or x.file != paired.path:
                where = "no record of the compaction log" if x is None else f"a record of {os.path.basename(x.file)}, not of the paired log file"
                bad(k, P.COMPACTION_CQ_BAD_POINTER, f"offset {off} points at {where}")
                continue
            covered.add(off)
            m = x.r.message
            if int(u.size[k]) != m.total_size:
                bad(k, P.COMPACTION_CQ_SIZE_MISMATCH, f"unit size {int(u.size[k])}, record totalSize {m.total_size}")
            if int(u.tags_code[k]) != x.r.tags_code:
                bad(k, P.COMPACTION_CQ_TAGS_MISMATCH, f"unit tagsCode {int(u.tags_code[k])}, the record's TAGS give {x.r.tags_code}")
            if int(u.store_time[k]) != m.store_timestamp:
                bad(k, P.COMPACTION_CQ_STORE_TIME_MISMATCH, f"unit storeTime {int(u.store_time[k])}, record storeTimestamp {m.store_timestamp}")
            if qo != m.queue_offset:
                bad(k, P.COMPACTION_CQ_QUEUE_OFFSET_MISMATCH, f"unit queue offset {qo}, record queueOffset {m.queue_offset}")
    return covered


def _retention(q: CompactionQueue, cp: int, recs: list[_Rec], orig: dict[int, Original], has_commitlog: bool) -> list[Problem]:
    """The retention rule, on the records alone and against the CommitLog's puts."""
    probs: list[Problem] = []
    mine = [x for x in recs if x.r.message.topic == q.topic and x.r.message.queue_id == q.queue_id]
    compacted = [x for x in mine if x.r.queue_offset <= cp]
    newest: dict[str, _Rec] = {}
    for x in compacted:
        k = x.r.key
        if k is not None and (k not in newest or x.r.queue_offset > newest[k].r.queue_offset):
            newest[k] = x
    dup: set[int] = set()
    for x in compacted:
        if is_tombstone(x.r.message.body_length):
            probs.append(_at(q, P.COMPACTION_TOMBSTONE_KEPT, x, f"tombstone (empty body) of key {x.r.key!r} kept at or before the checkpoint {cp}"))
        n = newest.get(x.r.key) if x.r.key is not None else None
        if n is not None and n is not x:
            dup.add(x.r.offset)
            probs.append(
                _at(
                    q,
                    P.COMPACTION_DUPLICATE_SURVIVOR,
                    x,
                    f"key {x.r.key!r} also survives at queue offset {n.r.queue_offset} (both at or before the checkpoint {cp})",
                )
            )
    if not has_commitlog or not orig:
        return probs
    held_from = min(orig)
    latest: dict[str, Original] = {}  # each key's newest put up to the checkpoint
    for o in orig.values():
        if o.key is not None and o.queue_offset <= cp and (o.key not in latest or o.queue_offset > latest[o.key].queue_offset):
            latest[o.key] = o
    kept = {x.r.queue_offset for x in mine}
    for x in compacted:
        o = latest.get(x.r.key) if x.r.key is not None else None
        if o is not None and o.queue_offset > x.r.queue_offset and x.r.offset not in dup:
            probs.append(
                _at(
                    q,
                    P.COMPACTION_STALE_SURVIVOR,
                    x,
                    f"key {x.r.key!r} has a newer put at queue offset {o.queue_offset} (CommitLog {o.phys}), before the checkpoint {cp}",
                )
            )
    for o in sorted(latest.values(), key=lambda o: o.queue_offset):
        if not is_tombstone(o.body_length) and o.queue_offset not in kept:
            detail = f"newest put of key {o.key!r} up to the checkpoint {cp} (queue offset {o.queue_offset}) has a body but is not in the compaction log"
            probs.append(_at_original(q, P.COMPACTION_SURVIVOR_LOST, o, detail))
    for qo in sorted(orig):
        o = orig[qo]
        if qo > cp and qo >= held_from and o.key is not None and qo not in kept:
            probs.append(_at_original(q, P.COMPACTION_RECORD_MISSING, o, f"keyed put at queue offset {qo} (after the checkpoint {cp}) is not in the compaction log"))
    return probs


def _checkpoint_vs_files(q: CompactionQueue, cp: int, recs: list[_Rec]) -> list[Problem]:
    """Files hold either compacted records (up to the checkpoint) or later ones, compacted files first; names jump only between the two."""
    probs: list[Problem] = []
    by_file: dict[str, list[_Rec]] = {}
    for x in recs:
        by_file.setdefault(x.file, []).append(x)
    size = q.log_file_size
    prev_end, prev_compacted = None, None
    for f in q.log.files:
        xs = by_file.get(f.path, [])
        lo = min((x.r.queue_offset for x in xs), default=None)
        hi = max((x.r.queue_offset for x in xs), default=None)
        if lo is not None and lo <= cp < hi:
            first = next(x for x in xs if x.r.queue_offset > cp)
            probs.append(
                _at(
                    q,
                    P.COMPACTION_CHECKPOINT_MISMATCH,
                    first,
                    f"file holds queue offsets {lo}..{hi}: both sides of the checkpoint {cp} (a round rewrites whole files)",
                )
            )
        compacted = hi is not None and hi <= cp
        if prev_end is not None and f.base > prev_end and not (prev_compacted and not compacted):
            probs.append(
                Problem(
                    P.COMPACTION_LOG_GAP,
                    f.path,
                    None,
                    f"no log file for offsets {prev_end}..{f.base - 1}, and it is not where compacted files end (checkpoint {cp})",
                    phys_offset=prev_end,
                    extra=q.extra(),
                )
            )
        prev_end, prev_compacted = f.base + (size or f.size), compacted
    return probs
