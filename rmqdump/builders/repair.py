"""Repair a damaged store into a new directory, so that a broker restarts from it without losing an intact message.

The broker's recovery stops at the first CommitLog record it cannot prove
and truncates there, deleting every later file: one bad record costs every
intact message after it. A repair keeps the CommitLog's layout and replaces
each damaged byte range, in a copy, by a record of exactly its length that
the recovery accepts and no consumer receives (rmqdump.builders.filler), so every
intact record keeps its physical offset. The original bytes of each range go
to a quarantine file with a JSON index. ConsumeQueues and IndexFiles are
built by rebuild's builders (rmqdump.builders.rebuild.build_into) from the
records the repaired copy holds, so each message keeps its queue offset; the
queue offset of a destroyed message becomes a hole, a filler unit (0,
Integer.MAX_VALUE, 0) the broker's pull path reads no message from and steps
over. One scan does it all (_Scan): each range is scanned with CRCs on while
a thread copies it (rmqdump.builders.sparsecopy.direct_copy_range), and its
records are handed to the builders; the self-check then reads the files
written and the repaired copy back.

The damaged ranges are where the scan (check_crc on, as the broker's
checkCRCOnRecover) stops or flags a record the recovery would stop at: bad
magic, size mismatch, zeroed range, bad BLANK marker, records running past
their file, body CRC mismatch; and a file's zero tail when later files hold
data. Damage after the last intact record is left: the broker's truncation
there loses nothing. A range too short for a filler (or, at a file's end,
for a BLANK marker) is left too, and said so: the broker truncates there.

compaction/ and the timer files are carried over (rmqdump.builders.repair_state):
they hold physical and queue offsets a repair keeps; a timer log unit whose record
was destroyed is voided.

The new store has no `abort` file, so the broker takes the normal recovery
path (CommitLog.recoverNormally from the ConsumeQueues' max physical offset:
nothing is re-dispatched over the rebuilt queues) and keeps every index file.
Everything is written under a temporary directory beside NEWDIR and renamed
into place at the end (rmqdump.common.publish).
"""

from __future__ import annotations

import bisect
import functools
import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace

import numpy as np

from rmqdump.builders.filler import BLANKED, FILLER, MIN_BLANK, MIN_FILLER, REPAIR_DIR, REPORT, RESTORED, blank_marker, filler_record
from rmqdump.builders.rebuild import (
    VERIFY_FROM_COLUMNS,
    RangeResult,
    RebuildOptions,
    RebuildReport,
    build_into,
    check_paths,
    dispatch_options,
    range_result,
    self_check,
)
from rmqdump.builders.selfcheck import ScanColumns
from rmqdump.builders.settings import StoreSettings
from rmqdump.builders.sparsecopy import direct_copy_range
from rmqdump.common import problems as P
from rmqdump.common.background import Background
from rmqdump.common.jsontext import fields_of
from rmqdump.common.problems import InputError, Problem
from rmqdump.common.publish import fsync_path, publishing
from rmqdump.readers.commitlog import CommitLog, SegmentFile, commitlog_path
from rmqdump.readers.mapped import MappedFile
from rmqdump.readers.message import Message
from rmqdump.scan import scanner
from rmqdump.scan.dispatch import DispatchJoin, dispatch_columns
from rmqdump.scan.headerfix import Restored, restore_stretches, store_units, unit_agrees
from rmqdump.scan.ranges import SERIAL, Mapper, RangeScan, ScanOptions, map_ranges, scan_range
from rmqdump.scan.scanner import Batch
from rmqdump.scan.splits import Split, commitlog_splits
from rmqdump.schemas import constants as C

REPAIR_DLEDGER = "repair_dledger_unsupported"

QUARANTINE = "quarantine.bin"
QUARANTINE_INDEX = "quarantine.json"
COPIED_DIRS = ("config",)  # broker state kept as it was (consumer offsets, topics, delay offsets)

LEFT = "left"

BEFORE_WINDOW = 4 << 20  # the broker's default maxMessageSize: the record before a range starts within it


@dataclass
class DamagedRange:
    """One byte range of one CommitLog file that the broker's recovery would stop at."""

    start: int  # physical offsets [start, end)
    end: int
    file: str  # the source CommitLog file
    file_offset: int
    codes: list[str]
    details: list[str]
    action: str = LEFT  # filler, blank, or left (the broker truncates there)
    why: str = ""
    before: dict | None = None  # the intact record ending where the range starts
    after: dict | None = None  # the record (or marker) where it ends
    quarantine_offset: int | None = None
    sha256: str | None = None
    destroyed: list[dict] = field(default_factory=list)  # records in the range whose header still reads (a body CRC mismatch)
    restored: Restored | None = None  # the range is one record whose header alone was damaged (rmqdump.scan.headerfix)

    @property
    def length(self) -> int:
        return self.end - self.start

    def to_dict(self) -> dict:
        return {
            "kind": "range",
            "phys_offset": self.start,
            "end": self.end,
            "length": self.length,
            **fields_of(self, omit=("start", "end", "details", "restored")),
            "restored": None if self.restored is None else self.restored.to_dict(),
            "details": self.details,
        }


@dataclass
class RepairOptions:
    force: bool = False
    sync: bool = True
    verify: bool = True
    mapper: Mapper = SERIAL  # how the CommitLog's ranges are mapped (rmqdump.engines.local.LocalMap: threads)
    check_crc: bool = True  # False: body CRC mismatches are not looked for (a recovery walking them would still stop there)


@dataclass
class RepairReport:
    store: str
    out: str
    ranges: list[DamagedRange] = field(default_factory=list)
    data_end: int = 0  # end of the last intact record
    records: int = 0  # records scanned in the source
    commitlog_files: int = 0
    commitlog_bytes: int = 0
    layout: list[Problem] = field(default_factory=list)  # CommitLog layout problems (not repaired)
    resized: list[str] = field(default_factory=list)  # CommitLog files of another size than the others: their copies padded or cut
    flagged: list[Problem] = field(default_factory=list)  # records the broker accepts, with a problem (property CRC, phys field)
    rebuild: RebuildReport | None = None
    holes: list[dict] = field(default_factory=list)  # queue offsets left without a message
    copied: list[str] = field(default_factory=list)
    voided_timer_units: list[dict] = field(default_factory=list)  # timer log units whose record was destroyed (sizePy set to 0)
    notes: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def repaired(self) -> list[DamagedRange]:
        return [r for r in self.ranges if r.action != LEFT]

    @property
    def replaced(self) -> list[DamagedRange]:
        """Ranges whose record is gone from the copy (a filler or a BLANK marker in its place)."""
        return [r for r in self.ranges if r.action in (FILLER, BLANKED)]

    @property
    def left(self) -> list[DamagedRange]:
        return [r for r in self.ranges if r.action == LEFT]

    @property
    def found_damage(self) -> bool:
        """Whether anything was found to repair or to report: damaged ranges, files of another size, layout problems
        (a missing file: not repaired), flagged records, queue offsets left without a message (exit 1)."""
        return bool(self.ranges or self.resized or self.layout or self.flagged or self.holes)

    def summary(self) -> dict:
        rb = self.rebuild
        return {
            "kind": "summary",
            "store": self.store,
            "out": self.out,
            "commitlog_files": self.commitlog_files,
            "commitlog_bytes": self.commitlog_bytes,
            "records": self.records,
            "data_end": self.data_end,
            "ranges": len(self.ranges),
            "repaired": len(self.repaired),
            "repaired_bytes": sum(r.length for r in self.repaired),
            "headers_restored": sum(r.action == RESTORED for r in self.ranges),
            "left": len(self.left),
            "queue_holes": sum(h["to"] - h["from"] for h in self.holes),
            "flagged_records": len(self.flagged),
            "layout_problems": [p.line() for p in self.layout],
            "resized_files": self.resized,
            "copied": self.copied,
            "voided_timer_units": len(self.voided_timer_units),
            "recovery_path": "normal (no abort file)",
            "rebuild": None if rb is None else {k: v for k, v in rb.summary().items() if k not in ("kind", "store", "out", "settings")},
            "notes": self.notes,
            "timings": {k: round(v, 3) for k, v in self.timings.items()},
            "seconds": round(self.seconds, 3),
        }

    def to_json(self) -> dict:
        return {
            "summary": self.summary(),
            "ranges": [r.to_dict() for r in self.ranges],
            "holes": self.holes,
            "voided_timer_units": self.voided_timer_units,
            "flagged": [p.to_dict() for p in self.flagged],
        }


# --- finding the ranges, in the scan that feeds the builders ---


@dataclass
class _Finds:
    """What the broker's recovery would stop at among one range's records."""

    records: int = 0
    good_end: int = -1  # physical end of the last intact record
    spans: list[tuple[int, int, str, str, str]] = field(default_factory=list)  # (start, end, code, detail, file)
    zero_tails: list[tuple[int, int, str]] = field(default_factory=list)  # (start, end, file)
    flagged: list[Problem] = field(default_factory=list)
    destroyed: list[dict] = field(default_factory=list)
    crc_failed: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # physical offsets
    restored: list[Restored] = field(default_factory=list)  # records of damaged stretches whose header alone was wrong


def _crc_failed(b: Batch, cols) -> tuple[np.ndarray, np.ndarray, list[dict]]:
    """The scan's fold: the batch's records whose body CRC fails (as the broker checks it: the kernel's verdict),
    their physical offsets, ends and descriptions."""
    if b.crc_ok is None:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), []
    idx = np.flatnonzero(~b.crc_ok)
    return b.phys[idx], b.cols["_end"][idx] + b.seg.base, [_describe(b.message(i)) for i in idx.tolist()]


def _finds(rs: RangeScan, restored: list[Restored]) -> _Finds:
    sp = rs.split
    file_end = sp.base + sp.size
    out = _Finds(records=rs.records, flagged=[p for p in rs.flagged if p.code != P.BODY_CRC_MISMATCH], restored=restored)
    path = sp.path
    for phys, ends, described in rs.folded:
        out.spans += [(a, e, P.BODY_CRC_MISMATCH, "body CRC does not match bodyCRC", path) for a, e in zip(phys.tolist(), ends.tolist(), strict=True)]
        out.destroyed += described
    if rs.folded:
        out.crc_failed = np.concatenate([f[0] for f in rs.folded])
    c = rs.columns
    intact = ~np.isin(c.phys, out.crc_failed)
    if intact.any():
        out.good_end = int((c.phys[intact] + c.size[intact]).max())
    for e in rs.damaged:
        skipped = e.extra.get("skipped")
        out.spans.append((e.phys_offset, file_end if skipped is None else min(file_end, e.phys_offset + int(skipped)), e.code, e.detail, e.file))
    out.zero_tails += [(e.phys_offset, file_end, e.file) for e in rs.blanks if e.marker == "zeros"]
    return out


def _restore_headers(rs: RangeScan, root: str | None) -> list[Restored]:
    """The records at the start of the range's damaged stretches whose header alone is wrong, proven (rmqdump.scan.headerfix),
    and named by the store's ConsumeQueue unit where one exists (`root`: the store; None: no queues to ask)."""
    sp = rs.split
    found = restore_stretches(SegmentFile(sp.path, sp.base, sp.size), rs.damaged)
    if found and root is not None:
        from rmqdump.readers.store import Store

        unit_at = store_units(Store.open(root))
        found = [r for r in found if unit_agrees(r, unit_at)]
    return found


def _with_restored(rs: RangeScan, restored: list[Restored], scan: ScanOptions) -> RangeScan:
    """The range's dispatch columns with the restored records in their places (physical order), for the builders."""
    join = DispatchJoin()
    c = rs.columns
    done = np.zeros(len(c), dtype=bool)
    for r in sorted(restored, key=lambda r: r.phys):
        before = ~done & (c.phys < r.phys)
        join.add(c.select(before))
        done |= before
        join.add(dispatch_columns(r.batch(), scan.delays, keys=scan.keys).of_topics(scan.topics))
    join.add(c.select(~done))
    return replace(rs, columns=join.take(), records=rs.records + len(restored))


def _scan_range(split: Split, scan: ScanOptions, copies: dict[str, str], root: str | None = None) -> tuple[RangeResult, _Finds]:
    """One range's dispatch columns (rmqdump.builders.rebuild) and what the recovery would stop at in it; with a
    copy of its file named in `copies`, that byte range is also copied there, on a thread beside the scan.
    A record whose header alone is damaged is restored and given to the builders (`root`: the store, whose queues
    must agree). A pure function of the range: any engine's worker runs it (a Spark executor writes the copy where
    it sees NEWDIR)."""
    dst = copies.get(split.path)
    # the copy goes to the disk (waiting on it, without the GIL) while this thread scans the same bytes
    copying = Background(lambda args: direct_copy_range(*args), ahead=1, name="rmqdump-copy") if dst is not None else None
    try:
        if copying is not None:
            copying.put((split.path, dst, split.start, split.end))
        rs = scan_range(split, scan)
        restored = _restore_headers(rs, root) if split.check_crc else []  # proven by the body CRC: never without it
        if restored:
            rs = _with_restored(rs, restored, scan)
        out = range_result(rs), _finds(rs, restored)
    except BaseException:
        if copying is not None:
            copying.close(quiet=True)
        raise
    if copying is not None:
        copying.close()  # the copy done (or its error raised) before the range counts as done
    return out


def _merge(spans: list[tuple[int, int, str, str, str]], apart: frozenset[int] = frozenset()) -> list[DamagedRange]:
    """Spans in offset order, overlapping or touching ones of one file joined; a span starting at an offset of `apart`
    (a record restored, already given to the builders) is only ever joined by one that overlaps it, never by a
    neighbour that merely touches it."""
    out: list[DamagedRange] = []
    for start, end, code, detail, path in sorted(spans):
        last = out[-1] if out else None
        touching_only = start == last.end if last is not None else False
        if last is not None and last.file == path and start <= last.end and not (touching_only and (start in apart or last.start in apart)):
            last.end = max(last.end, end)
            if code not in last.codes:
                last.codes.append(code)
            last.details.append(detail)
            continue
        base = int(os.path.basename(path))
        out.append(DamagedRange(start, end, path, start - base, [code], [detail]))
    return out


def _within(offsets: np.ndarray, ranges: list[tuple[int, int]]) -> np.ndarray:
    """Which offsets lie in one of the sorted, disjoint [start, end) ranges."""
    if not ranges or not len(offsets):
        return np.zeros(len(offsets), dtype=bool)
    starts = np.array([a for a, _ in ranges], dtype=np.int64)
    ends = np.array([b for _, b in ranges], dtype=np.int64)
    i = np.searchsorted(starts, offsets, side="right") - 1
    return (i >= 0) & (offsets < ends[np.clip(i, 0, None)])


class _Scan:
    """A repair's one pass over the CommitLog: the ranges' dispatch columns for the builders, the damage found, the copy.

    Whether a record whose body CRC fails is replaced (and so left out of the
    queues and the index) depends on whether an intact record follows it
    anywhere later (plan): known only at the end. So those records are held
    back; after the last range the damage is planned, and the held records
    left to the broker's truncation (all after the last intact record, so
    still in CommitLog order) are given to the builders last.
    """

    def __init__(self, cl: CommitLog, mapper: Mapper, scan: ScanOptions, check_crc: bool, copies: dict[str, str] | None = None, root: str | None = None):
        self.cl, self.mapper, self.scan, self.check_crc, self.copies, self.root = cl, mapper, scan, check_crc, copies or {}, root
        self.ranges: list[DamagedRange] = []
        self.data_end = -1
        self.records = 0
        self.flagged: list[Problem] = []

    def results(self) -> Iterator[RangeResult]:
        finds: list[_Finds] = []
        held: list[RangeResult] = []
        splits = commitlog_splits(self.cl, check_crc=self.check_crc)
        for _, (r, f) in map_ranges(splits, functools.partial(_scan_range, scan=self.scan, copies=self.copies, root=self.root), self.mapper):
            finds.append(f)
            if len(f.crc_failed):
                bad = np.isin(r.phys, f.crc_failed)
                held.append(r.select(bad))
                r = replace(r.select(~bad), nbytes=r.nbytes, records=r.records, damaged=r.damaged, flagged=r.flagged, last_ts=r.last_ts)
            yield r
        self._finish(finds)
        plan(self.cl, self.ranges, self.data_end)
        left = [(d.start, d.end) for d in self.ranges if d.action == LEFT]
        for h in held:
            keep = _within(h.phys, left)
            if keep.any():
                yield h.select(keep)

    def _finish(self, finds: list[_Finds]) -> None:
        spans = [s for f in finds for s in f.spans]
        data_end = max(max((f.good_end for f in finds), default=-1), self.cl.min_offset)
        # a zero tail before the last intact record: the recovery would stop there (magic 0) and drop every later file
        spans += [(a, b, P.ZEROED_RANGE, f"{b - a} zero bytes to the end of the file, intact records in later files", path)
                  for f in finds for a, b, path in f.zero_tails if a < data_end]  # fmt: skip
        # a file shorter than the others (a copy cut short): its copy is padded to the configured size (the broker
        # loads no CommitLog file of another size), and its missing bytes read as zeros there, where the walk would stop
        spans += [(a, b, P.CL_FILE_SIZE, f"{b - a} bytes missing: the file is {f.size} bytes, the others {self.cl.file_size}", f.path)
                  for f, a, b in short_files(self.cl) if a < data_end]  # fmt: skip
        restored = {(r.phys, r.phys + r.length): r for f in finds for r in f.restored}
        self.ranges = _merge(spans, frozenset(a for a, _ in restored))
        destroyed = sorted((d for f in finds for d in f.destroyed), key=lambda d: d["phys_offset"])
        at = [d["phys_offset"] for d in destroyed]
        for r in self.ranges:  # both in offset order: each range's records found by bisection, not a pass over all
            r.destroyed = destroyed[bisect.bisect_left(at, r.start) : bisect.bisect_left(at, r.end)]
            r.restored = restored.get((r.start, r.end))  # only a range that is exactly the one record restored
        self.data_end = data_end
        self.records = sum(f.records for f in finds)
        self.flagged = [p for f in finds for p in f.flagged]


def _describe(m: Message | None) -> dict | None:
    if not isinstance(m, Message):
        return None
    return {
        "phys_offset": m.phys_offset,
        "size": m.total_size,
        "topic": m.topic,
        "queue_id": m.queue_id,
        "queue_offset": m.queue_offset,
        "uniq_key": m.properties.get(C.PROPERTY_UNIQ_KEY),
        "store_timestamp": m.store_timestamp,
    }


def _record_before(seg: SegmentFile, mf: MappedFile, at: int) -> Message | None:
    """The record ending exactly at file offset `at` (the last intact one before a range), if the scan finds it:
    looked for in the 64 KiB before `at` first (most records are smaller), then in the broker's largest record size."""
    for window in (64 << 10, BEFORE_WINDOW):
        for b in scanner.file_batches_from(seg, mf, start=max(0, at - window), end=at, check_crc=False):
            hit = np.flatnonzero(b.cols["_end"] == at) if len(b) else []
            if len(hit):
                return b.message(int(hit[-1]))
        if at <= window:
            break
    return None


def _neighbours(cl: CommitLog, r: DamagedRange) -> tuple[dict | None, dict | None]:
    seg = next(f for f in cl.files if f.path == r.file)
    with MappedFile(seg.path, limit=cl.file_size) as mf:
        before = _describe(_record_before(seg, mf, r.file_offset)) if r.file_offset > 0 else None
        end_off = r.end - seg.base
        if end_off + 8 <= mf.size:
            m = scanner.file_record_at(seg, mf, end_off, check_crc=True)
            after = _describe(m) if isinstance(m, Message) else {"phys_offset": r.end, "not_a_message": m.line() if isinstance(m, Problem) else str(m)}
            return before, after
    nxt = next((f for f in cl.files if f.base > seg.base), None)
    if nxt is None:
        return before, None
    m = scanner.record_at(cl, nxt.base)
    return before, _describe(m) if isinstance(m, Message) else {"phys_offset": nxt.base, "not_a_message": m.line()}


def plan(cl: CommitLog, ranges: list[DamagedRange], data_end: int) -> None:
    """Decide each range's action (filler, BLANK marker, or left to the broker's truncation) and find its neighbours."""
    for r in ranges:
        seg = next(f for f in cl.files if f.path == r.file)
        r.before, r.after = _neighbours(cl, r)
        to_file_end = r.end >= seg.base + seg.size
        if r.restored is not None:
            r.action = RESTORED
            r.why = (
                f"{' and '.join(r.restored.fields)} restored: the rest of the record is proven (body CRC, the size its fields add up to "
                "equals the distance to the next record, its physicalOffset, properties, its ConsumeQueue unit)"
            )
        elif r.start >= data_end:
            r.action, r.why = LEFT, "no intact record after it: the broker's truncation there loses nothing"
        elif to_file_end:
            if r.length >= MIN_BLANK:
                r.action, r.why = BLANKED, "reaches the end of its file: closed with a BLANK marker, the walk goes on at the next file"
            else:
                r.action, r.why = (
                    LEFT,
                    f"{r.length} bytes at the end of the file: shorter than a BLANK marker ({MIN_BLANK} bytes); a recovery that walks it truncates here",
                )
        elif r.length >= MIN_FILLER:
            r.action, r.why = FILLER, "replaced by a rolled-back filler record of the same length"
        else:
            r.action, r.why = LEFT, f"shorter than the smallest record ({MIN_FILLER} bytes): no filler fits; a recovery that walks it truncates here"


def _bytes_for(r: DamagedRange) -> bytes:
    if r.action == RESTORED:
        return r.restored.data
    if r.action == BLANKED:
        return blank_marker(r.length)
    ts = (r.before or {}).get("store_timestamp") or (r.after or {}).get("store_timestamp") or 0
    return filler_record(r.start, r.length, int(ts))


# --- writing ---


def short_files(cl: CommitLog) -> list[tuple[SegmentFile, int, int]]:
    """(file, physical offset where it ends, where it should end) of each file shorter than the configured size."""
    size = cl.file_size or 0
    return [(f, f.base + f.size, f.base + size) for f in cl.files if f.size < size]


def long_files(cl: CommitLog) -> list[tuple[SegmentFile, int]]:
    """(file, the configured size) of each file longer than the configured size: its copy is cut there."""
    size = cl.file_size or 0
    return [(f, size) for f in cl.files if size and f.size > size]


def _presized(cl: CommitLog, into: str) -> dict[str, str]:
    """An empty file of the configured size for each CommitLog file in `into` (holes until the scan copies the data;
    the broker loads no file of another size): source -> copy."""
    out = {}
    for f in cl.files:
        out[f.path] = os.path.join(into, os.path.basename(f.path))
        fd = os.open(out[f.path], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.ftruncate(fd, cl.file_size or f.size)
        finally:
            os.close(fd)
    return out


def _start_fsync(d: str) -> Background:
    """fsync every file of d on a thread of its own: the copy's writeback runs while the rebuild computes (fsync
    waits on the disk without the GIL); close() waits for it."""
    bg = Background(fsync_path, ahead=1 << 16, name="rmqdump-fsync")
    for name in sorted(os.listdir(d)):
        bg.put(os.path.join(d, name))
    return bg


def _quarantine(tmp: str, store: str, ranges: list[DamagedRange], cuts: list[tuple[SegmentFile, int]], sync: bool) -> None:
    """The original bytes of each replaced range, then of each file's bytes past the configured size (`cuts`: the file
    and that size), one after the other, and their index (JSON)."""
    qdir = os.path.join(tmp, REPAIR_DIR)
    os.makedirs(qdir, exist_ok=True)
    index = []
    with open(os.path.join(qdir, QUARANTINE), "wb") as q:

        def put(path: str, at: int, n: int, phys: int | None, codes: list[str], by: str, missing: bool) -> tuple[int, str]:
            """Bytes [at, at + n) of a source file appended to the quarantine and indexed; (where they went, their SHA-256)."""
            with open(path, "rb") as src:
                src.seek(at)
                data = src.read(n)  # shorter where the source file ends inside the range (a file cut short)
            where, digest = q.tell(), hashlib.sha256(data).hexdigest()
            q.write(data)
            short = {"missing": n - len(data)} if missing else {}
            index.append(
                {
                    "phys_offset": phys,
                    "length": len(data),
                    **short,
                    "file": os.path.relpath(path, store),
                    "file_offset": at,
                    "quarantine_offset": where,
                    "sha256": digest,
                    "codes": codes,
                    "replaced_by": by,
                }
            )
            return where, digest

        for r in ranges:
            if r.action != LEFT:
                r.quarantine_offset, r.sha256 = put(r.file, r.file_offset, r.length, r.start, r.codes, r.action, missing=True)
        for f, size in cuts:  # phys_offset None: past the file's configured end, these offsets are the next file's
            put(f.path, size, f.size - size, None, [P.CL_FILE_SIZE], "cut", missing=False)
        if sync:
            q.flush()
            os.fsync(q.fileno())
    _write_json(os.path.join(qdir, QUARANTINE_INDEX), {"quarantine": QUARANTINE, "ranges": index}, sync)


def _write_json(path: str, obj, sync: bool) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1)
        f.write("\n")
        if sync:
            f.flush()
            os.fsync(f.fileno())


def _patch(dst_dir: str, r: DamagedRange, data: bytes) -> None:
    assert len(data) == r.length
    fd = os.open(os.path.join(dst_dir, os.path.basename(r.file)), os.O_WRONLY)
    try:
        os.pwrite(fd, data, r.file_offset)
    finally:
        os.close(fd)


def _build(
    tmp: str, cl: CommitLog, settings: StoreSettings, options: RepairOptions, report: RepairReport, copies: dict[str, str], on_bytes, t0: float
) -> ScanColumns | None:
    """The one scan: the CommitLog copied into tmp, its damage found and planned, and the ConsumeQueues, IndexFiles
    and checkpoint built from the records the repaired copy holds (rmqdump.builders.rebuild.build_into).
    Returns the scan's columns for the self-check (None without one)."""
    rb_options = RebuildOptions(mapper=options.mapper, sync=options.sync, verify=options.verify)
    rb = RebuildReport(report.store, report.out, settings, rb_options, report.commitlog_files, report.commitlog_bytes)
    rb.damaged.extend(report.layout)
    columns = ScanColumns(tmp) if options.verify and VERIFY_FROM_COLUMNS else None
    scan = _Scan(cl, options.mapper, dispatch_options(settings, rb_options, fold=_crc_failed), options.check_crc, copies, root=report.store)
    build_into(tmp, cl, settings, rb_options, rb, on_bytes, columns, results=scan.results())
    report.ranges, report.data_end, report.records, report.flagged = scan.ranges, scan.data_end, scan.records, scan.flagged
    # what the repaired copy no longer holds: the damage replaced, the body CRCs (its records are not checked again)
    replaced = [(r.start, r.end) for r in report.repaired]

    def stays(p: Problem) -> bool:
        return p.code != P.BODY_CRC_MISMATCH and not (p.phys_offset is not None and _within(np.array([p.phys_offset]), replaced)[0])

    rb.damaged = [p for p in rb.damaged if stays(p)]
    rb.flagged = [p for p in rb.flagged if stays(p)]
    if columns is not None:
        columns.problems = [p for p in columns.problems if stays(p)]
    rb.seconds = time.perf_counter() - t0
    report.rebuild = rb
    return columns


def queue_holes(root: str, queues: list, first_file_size: int, starts_at_zero: bool) -> list[dict]:
    """The queue offsets the rebuilt queues hold no message at, with the unit after each.

    Holes between units are the rebuild's filler units; with a CommitLog that
    still starts at 0, a queue whose first unit is not at 0 lost its first
    messages too (the broker gives every queue offsets from 0). A pull that
    starts at a hole misses at CommitLog offset 0 and then skips, within that
    pull, the units below the end of the first CommitLog file
    (DefaultMessageStore.getMessage: rollNextFile(0)): flagged per hole.
    """
    from rmqdump.readers.store import Store

    st = Store.open(root)
    out = []
    for q in queues:
        runs = list(q.gap_ranges)
        if starts_at_zero and q.first_offset > 0:
            runs.insert(0, (0, q.first_offset))
        for a, b in runs:
            cq = st.queue(q.topic, q.queue_id)
            nxt = cq.unit_at(b) if cq is not None else None
            h = {"kind": "hole", "topic": q.topic, "queue_id": q.queue_id, "from": a, "to": b, "next_phys_offset": nxt[0] if nxt else None}
            if nxt is not None and nxt[0] < first_file_size:
                h["caveat"] = (
                    f"a pull from queue offset {a}..{b - 1} also skips the following units below CommitLog offset {first_file_size} "
                    "(the broker's rollNextFile after the miss at offset 0); consumers behind this hole should be checked"
                )
            out.append(h)
    return out


def check_repairable(store: str, out: str, force: bool) -> tuple[str, str, CommitLog]:
    """(store, output, its CommitLog); InputError when there is nothing to repair, it cannot be repaired, or writing there is not safe."""
    s, o = check_paths(store, out, force)
    cl = CommitLog.open(commitlog_path(s))
    if not cl.files:
        raise InputError("no_commitlog", commitlog_path(store), "no CommitLog files: nothing to repair")
    if cl.files[0].frame:
        raise InputError(REPAIR_DLEDGER, commitlog_path(store), "a DLedger CommitLog: repair writes plain CommitLog records only")
    return s, o, cl


def repair(
    store: str,
    out: str,
    settings: StoreSettings,
    options: RepairOptions | None = None,
    on_bytes: Callable[[int], None] | None = None,
) -> RepairReport:
    """Write the repaired copy of `store` to `out`; returns every range found, what was done with it, and the rebuild."""
    options = options or RepairOptions()
    t0 = time.perf_counter()
    s, o, cl = check_repairable(store, out, options.force)
    report = RepairReport(store=s, out=o)
    report.commitlog_files = len(cl.files)
    report.commitlog_bytes = sum(f.size for f in cl.files)
    resized = {f.path for f, _, _ in short_files(cl)} | {f.path for f, _ in long_files(cl)}
    report.resized = sorted(os.path.basename(p) for p in resized)
    report.layout = [p for p in cl.problems if not (p.code == P.CL_FILE_SIZE and p.file in resized)]  # resized in the copy
    report.notes += [
        f"{os.path.basename(f.path)}: {f.size} bytes, the others {cl.file_size}: its copy is padded with zeros to {cl.file_size} "
        "(the broker loads no CommitLog file of another size)"
        for f, _, _ in short_files(cl)
    ]
    report.notes += [
        f"{os.path.basename(f.path)}: {f.size} bytes, the others {size}: its copy is cut to {size} (the broker loads no CommitLog file "
        f"of another size; the scan never reads past it); the {f.size - size} bytes past it are in the quarantine"
        for f, size in long_files(cl)
    ]
    with publishing(o, force=options.force, stores=[s], kind="dir", sync=options.sync) as tmp:
        cl_out = os.path.join(tmp, "commitlog")
        os.makedirs(cl_out)
        copies = _presized(cl, cl_out)
        t = time.perf_counter()
        columns = _build(tmp, cl, settings, options, report, copies, on_bytes, t0)
        report.timings["scan_copy_build"] = time.perf_counter() - t
        _quarantine(tmp, s, report.ranges, long_files(cl), options.sync)
        for r in report.repaired:
            _patch(cl_out, r, _bytes_for(r))
        syncing = _start_fsync(cl_out) if options.sync else None  # the copy is final: on to the disk, beside the self-check
        report.holes = queue_holes(tmp, report.rebuild.queues, cl.file_size or cl.files[0].size, cl.min_offset == 0)
        if options.verify:
            t = time.perf_counter()
            self_check(tmp, tmp, settings, report.rebuild, columns)  # over the repaired copy
            report.timings["verify"] = time.perf_counter() - t
        for d in COPIED_DIRS:
            if os.path.isdir(os.path.join(s, d)):
                shutil.copytree(os.path.join(s, d), os.path.join(tmp, d))
                report.copied.append(d)
        from rmqdump.builders.repair_state import CarriedState, carry_compaction, carry_timer

        carried = CarriedState()
        carry_compaction(s, tmp, report.rebuild.queues if report.rebuild else [], carried)
        carry_timer(s, tmp, [(r.start, r.end) for r in report.replaced], report.holes, carried)
        report.copied += carried.copied
        report.voided_timer_units = carried.voided_timer_units
        report.notes += carried.notes
        skipped = sorted(set(os.listdir(s)) - {"commitlog", "consumequeue", "index", "checkpoint", "abort", "abort.bak", "lock", *COPIED_DIRS, *carried.copied})
        if skipped:
            report.notes.append(f"not copied (not rebuilt from the CommitLog): {', '.join(skipped)}")
        from rmqdump.readers.rocksdbcq import is_rocksdb

        if is_rocksdb(os.path.join(s, "consumequeue")):
            report.notes.append(
                "the store's ConsumeQueue is a RocksDB database (storeType=defaultRocksDB): NEWDIR holds the file-based ConsumeQueue; "
                "start the broker on it with storeType=default"
            )
        if not options.check_crc:
            report.notes.append("--no-crc: body CRCs were not checked; a record whose body CRC does not match is left, and a recovery walking it stops there")
        report.notes.append("no abort file: the broker takes the normal recovery path (recoverNormally) and keeps the rebuilt queues and index files")
        if syncing is not None:
            t = time.perf_counter()
            syncing.close()
            report.timings["fsync_wait"] = time.perf_counter() - t
        report.seconds = time.perf_counter() - t0
        _write_json(os.path.join(tmp, REPAIR_DIR, REPORT), report.to_json(), options.sync)
    report.seconds = time.perf_counter() - t0
    return report
