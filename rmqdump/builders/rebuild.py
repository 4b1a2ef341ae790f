"""Rebuild a store's ConsumeQueues, IndexFiles and checkpoint from its CommitLog, offline.

The broker's only cure for damaged queues or index is to rebuild them in
place on start-up, on the live copy. This writes them into a new directory
instead, so that OUTDIR plus the original commitlog/ is a store a broker can
start on, and never writes into the source.

Speed: the CommitLog is cut into byte ranges (the scan resyncs at a range's
start, so ranges can be read independently) and scan threads (the compiled
kernel runs without the GIL) turn each range into dispatch columns
(rmqdump.scan.dispatch.dispatch_columns); the main thread takes the ranges
back in CommitLog order and feeds the ConsumeQueue and IndexFile builders,
which write as they go.

Safety: everything is written under a hidden temporary directory next to
OUTDIR and renamed into place at the end (rmqdump.common.publish), so an
interrupted rebuild leaves OUTDIR absent (or as it was), never half-written.
The result is then checked with the `cq verify` and `index verify` analyses:
the files written, read back, against the columns of this same scan
(rmqdump.builders.selfcheck), after a quick proof that they equal those columns
exactly, which spares the analyses on a clean rebuild.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np
from construct import ConstructError

from rmqdump.builders.cqbuild import ConsumeQueueBuilder
from rmqdump.builders.indexbuild import IndexBuilder, IndexFileResult
from rmqdump.builders.queuefiles import QueueResult
from rmqdump.builders.selfcheck import ScanColumns
from rmqdump.builders.settings import StoreSettings
from rmqdump.common.background import Background
from rmqdump.common.javahash import index_hash_many
from rmqdump.common.problems import InputError, Problem
from rmqdump.common.publish import check_target, publishing
from rmqdump.readers.commitlog import CommitLog, SegmentFile, commitlog_path
from rmqdump.readers.readable import prove_readable
from rmqdump.scan.queueorder import queue_members
from rmqdump.scan.ranges import SERIAL, Mapper, RangeScan, ScanOptions, map_ranges, scan_range
from rmqdump.scan.splits import RANGE_BYTES, Split, commitlog_splits
from rmqdump.schemas import Checkpoint as CheckpointLayout
from rmqdump.schemas import constants as C

NOT_A_STORE = "not_a_store"
NO_COMMITLOG = "no_commitlog"

PARTS = ("consumequeue", "index")
SCOPED_QUEUES = 4  # up to this many queues with holes are analysed one by one (a pass over the records each), the rest proven
VERIFY_FROM_COLUMNS = True  # the self-check compares with the build's own scan (False: it scans the CommitLog again, as the commands do)


@dataclass
class RebuildOptions:
    only: tuple[str, ...] = PARTS
    topics: frozenset[str] | None = None
    check_crc: bool = False
    mapper: Mapper = SERIAL  # how ranges are mapped: one thread, or an engine's (rmqdump.engines.local.LocalMap, Spark's)
    force: bool = False
    verify: bool = True
    sync: bool = True
    index_after: tuple[int, int] | None = None  # see IndexBuilder.after (library use)
    to_offset: int | None = None  # stop before this physical offset (library use)
    range_bytes: int = RANGE_BYTES  # bytes of CommitLog per range the mapper is given


@dataclass
class RebuildReport:
    store: str
    out: str
    settings: StoreSettings
    options: RebuildOptions
    commitlog_files: int = 0
    commitlog_bytes: int = 0
    records: int = 0  # records scanned
    messages: int = 0  # records taken (after --topic)
    queues: list[QueueResult] = field(default_factory=list)
    index_files: list[IndexFileResult] = field(default_factory=list)
    index_keys: int = 0
    damaged: list[Problem] = field(default_factory=list)  # CommitLog regions skipped, layout problems
    flagged: list[Problem] = field(default_factory=list)  # records kept and dispatched, with a problem (CRC, phys field)
    problems: list[Problem] = field(default_factory=list)  # what the builders met
    checkpoint: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # what was left out on purpose, and why
    verify: dict | None = None
    workers: int = 1
    seconds: float = 0.0  # scan and write
    verify_seconds: float = 0.0

    @property
    def skipped_bytes(self) -> int:
        return sum(int(p.extra.get("skipped", 0)) for p in self.damaged)

    @property
    def ok(self) -> bool:
        return not self.damaged and not self.flagged and not self.problems and (self.verify is None or self.verify.get("ok", False))

    def summary(self) -> dict:
        cq_units = sum(q.units for q in self.queues)
        return {
            "kind": "summary",
            "store": self.store,
            "out": self.out,
            "settings": self.settings.to_dict(),
            "built": list(self.options.only),
            "topics": sorted(self.options.topics) if self.options.topics else None,
            "commitlog_files": self.commitlog_files,
            "commitlog_bytes": self.commitlog_bytes,
            "records": self.records,
            "messages": self.messages,
            "queues": len(self.queues),
            "cq_files": sum(len(q.files) for q in self.queues),
            "cq_units": cq_units,
            "cq_filler_units": sum(q.pre_blank + q.gap_units for q in self.queues),
            "index_files": len(self.index_files),
            "index_entries": sum(f.entries for f in self.index_files),
            "damaged_regions": len(self.damaged),
            "flagged_records": len(self.flagged),
            "skipped_bytes": self.skipped_bytes,
            "problems": len(self.problems),
            "checkpoint": self.checkpoint,
            "notes": self.notes,
            "verify": self.verify,
            "workers": self.workers,
            "seconds": round(self.seconds, 3),
            "verify_seconds": round(self.verify_seconds, 3),
            "messages_per_second": round(self.records / self.seconds) if self.seconds > 0 else None,
        }


# --- where to write ---


def check_paths(store: str, out: str, force: bool) -> tuple[str, str]:
    """The store and output as absolute paths; InputError when there is nothing to rebuild from or writing there is not safe."""
    s = os.path.realpath(os.path.abspath(store))
    if not os.path.isdir(s):
        raise InputError(NOT_A_STORE, store, "not a directory")
    if not os.path.isdir(commitlog_path(s)):
        raise InputError(NO_COMMITLOG, commitlog_path(store), "a store root holds commitlog/: nothing to rebuild from")
    prove_readable(s)
    return s, check_target(out, force=force, stores=[store], kind="dir")


# --- the scan, in ranges ---


@dataclass
class RangeResult:
    """Dispatch columns of the records of one byte range, reduced to what the builders take."""

    nbytes: int
    records: int
    topics: list[str]
    phys: np.ndarray
    size: np.ndarray
    store_ts: np.ndarray
    tags_code: np.ndarray
    queue_offset: np.ndarray
    queue_id: np.ndarray
    topic_id: np.ndarray
    queued: np.ndarray
    key_rec: np.ndarray
    key_hash: np.ndarray  # the index hash (abs of hashCode) of each key, in put order
    damaged: list
    flagged: list
    last_ts: int | None
    split: Split | None = None
    indexed: np.ndarray | None = None  # records the IndexFile takes (not rolled back)

    def select(self, keep: np.ndarray) -> RangeResult:
        """The records of `keep` (a mask) only, with their keys, as a result of no bytes, records scanned or problems
        of its own (a repair leaves out the records it replaces, and feeds the builders those it leaves to the broker later)."""
        cols = {f: getattr(self, f)[keep] for f in _RECORD_COLUMNS}
        at = np.cumsum(keep) - 1  # a kept record's index among those kept
        k = keep[self.key_rec]
        return RangeResult(0, 0, self.topics, **cols, key_rec=at[self.key_rec[k]], key_hash=self.key_hash[k], damaged=[], flagged=[], last_ts=None, split=self.split)


_RECORD_COLUMNS = ("phys", "size", "store_ts", "tags_code", "queue_offset", "queue_id", "topic_id", "queued", "indexed")  # one value a record
_RANGE_COLUMNS = (*_RECORD_COLUMNS, "key_rec", "key_hash")


def range_result(scan: RangeScan) -> RangeResult:
    """What the builders take of a range's scan; the index hashes computed here, on the scan's worker."""
    d = scan.columns
    cols = {f: getattr(d, "store_timestamp" if f == "store_ts" else f) for f in _RANGE_COLUMNS}
    r = RangeResult(scan.nbytes, scan.records, d.topics, **cols, damaged=scan.damaged, flagged=scan.flagged, last_ts=scan.last_ts, split=scan.split)
    if len(r.key_hash):
        r.key_hash = index_hash_many(r.key_hash)
    return r


def _scan_and_reduce(options: ScanOptions):
    return lambda split: range_result(scan_range(split, options))


def dispatch_options(settings: StoreSettings, options: RebuildOptions, fold=None) -> ScanOptions:
    """What the builders take of each record: index keys when the index is built, the store's delay levels, the topics."""
    return ScanOptions(keys="index" in options.only, delays=settings.delays, topics=options.topics, fold=fold)


# --- the rebuild ---


def build_into(
    tmp: str,
    cl: CommitLog,
    settings: StoreSettings,
    options: RebuildOptions,
    report: RebuildReport,
    on_bytes: Callable[[int], None] | None = None,
    columns: ScanColumns | None = None,
    results: Iterable[RangeResult] | None = None,
) -> None:
    """Write consumequeue/, index/ and checkpoint under `tmp` from the CommitLog (and keep the scan's `columns` for the self-check).

    `results`: the ranges' results, in CommitLog order, when the caller scans (a repair: rmqdump.builders.repair);
    else the CommitLog's ranges are scanned here with `options.mapper`.
    """
    want_cq = "consumequeue" in options.only
    want_index = "index" in options.only
    cqb = None
    ixb = None
    if want_cq:
        os.makedirs(os.path.join(tmp, "consumequeue"))
        cqb = ConsumeQueueBuilder(
            os.path.join(tmp, "consumequeue"), settings.cq_units_per_file, sync=options.sync, display_dir=os.path.join(report.out, "consumequeue")
        )
    if want_index:
        os.makedirs(os.path.join(tmp, "index"))
        ixb = IndexBuilder(os.path.join(tmp, "index"), settings.hash_slots, settings.index_entries, after=options.index_after, sync=options.sync)
    if results is None:
        splits = commitlog_splits(cl, options.range_bytes, to_offset=options.to_offset, check_crc=options.check_crc)
        results = (r for _, r in map_ranges(splits, _scan_and_reduce(dispatch_options(settings, options)), options.mapper))
    workers = report.workers = options.mapper.workers
    last_ts = last_queued_ts = None
    five = _FiveX.open(tmp, cl, settings, options, report) if want_cq else None
    beside = _beside(ixb) if ixb is not None and workers > 1 else None  # the index built beside the ConsumeQueues
    try:
        for r in results:
            report.records += r.records
            report.damaged.extend(r.damaged)
            report.flagged.extend(r.flagged)
            if r.last_ts is not None:
                last_ts = r.last_ts
            if columns is not None:
                columns.add(r)
            n = len(r.phys)
            report.messages += n
            if n:
                if cqb is not None:
                    q = r.queued
                    if q.any():
                        last_queued_ts = int(r.store_ts[np.flatnonzero(q)[-1]])
                        q = five.add_batch(r, q)  # BatchCQ topics' records go to batchconsumequeue/
                        tags = five.ext_tags(r, q)  # ext addresses when consumequeue_ext/ is written
                        cqb.add(r.topics, r.topic_id[q], r.queue_id[q], r.queue_offset[q], r.phys[q], r.size[q], tags[q])
                        five.add_lmq(cqb, r)
                if ixb is not None:
                    if beside is not None:
                        beside.put((r.phys, r.store_ts, r.key_rec, r.key_hash))
                    else:
                        ixb.add(r.phys, r.store_ts, r.key_rec, r.key_hash)
                    report.index_keys += len(r.key_rec)
            if on_bytes is not None:
                on_bytes(r.nbytes)
        if cqb is not None:
            report.queues = cqb.finish()
            report.problems.extend(cqb.problems)
            five.finish()
        if beside is not None:
            report.index_files = beside.close()
        elif ixb is not None:
            report.index_files = ixb.finish()
    except BaseException:
        if beside is not None:
            beside.close(quiet=True)
        for b in (five, cqb, ixb):  # every builder opened: its files closed, unsynced
            if b is not None:
                b.abort()
        raise
    report.checkpoint = write_checkpoint(tmp, report, last_ts, last_queued_ts, options.sync)


def _beside(builder) -> Background:
    """A builder's add() calls, then its finish(), in order on a thread of its own (its big steps run without the GIL),
    a few ranges ahead at most: close() returns what finish() returned."""
    return Background(lambda args: builder.add(*args), builder.finish, ahead=4, name="rmqdump-build")


class _FiveX:
    """The 5.x queue kinds a rebuild writes besides consumequeue/: Batch ConsumeQueues and LMQ units (builders.batchcqbuild)."""

    def __init__(self, bcq, ext, extras, options: RebuildOptions, report: RebuildReport):
        self.bcq, self.ext, self.extras, self.options, self.report = bcq, ext, extras, options, report

    @classmethod
    def open(cls, tmp: str, cl: CommitLog, settings: StoreSettings, options: RebuildOptions, report: RebuildReport) -> _FiveX:
        from rmqdump.builders.batchcqbuild import BatchConsumeQueueBuilder, Extras, source_batch_topics

        topics = source_batch_topics(report.store)
        bcq = None
        if topics:
            bcq = BatchConsumeQueueBuilder(
                os.path.join(tmp, "batchconsumequeue"), settings.bcq_file_size, sync=options.sync, display_dir=os.path.join(report.out, "batchconsumequeue")
            )
        ext = None
        if settings.ext_bitmap_bits is not None:
            from rmqdump.builders.cqextbuild import ConsumeQueueExtBuilder

            ext = ConsumeQueueExtBuilder(os.path.join(tmp, "consumequeue_ext"), settings.ext_file_size, settings.ext_bitmap_bits, sync=options.sync)
            report.notes.append(
                "consumequeue_ext: filter bitmaps written all ones. The real bits come from the consumer filters registered when each message "
                "was dispatched, which the store does not keep; all ones means 'every filter may match', and the broker then evaluates "
                "each filter on the CommitLog record. Addresses, tagsCodes and store times are exact."
            )
        elif os.path.isdir(os.path.join(report.store, "consumequeue_ext")):
            report.notes.append(
                "consumequeue_ext: not written (pass --ext-bitmap-bits, the broker's bitMapLengthConsumeQueueExt, to write it). "
                "Units carry the plain tagsCode, as the broker writes them when an ext unit cannot be written."
            )
        return cls(bcq, ext, Extras.open(cl, topics), options, report)

    def ext_tags(self, r, q: np.ndarray) -> np.ndarray:
        """tagsCode for the ConsumeQueue units of the records in `q`: their ext addresses when ext files are written."""
        if self.ext is None or not q.any():
            return r.tags_code
        tags = r.tags_code.copy()
        idx = np.flatnonzero(q)
        for sel in queue_members(len(r.topics), r.topic_id[idx], r.queue_id[idx]):
            m = idx[sel]
            tags[m] = self.ext.put(r.topics[int(r.topic_id[m[0]])], int(r.queue_id[m[0]]), r.tags_code[m], r.store_ts[m])
        return tags

    def add_batch(self, r, q: np.ndarray) -> np.ndarray:
        """Send the BatchCQ topics' queued records to the batch builder; returns the rest of `q`."""
        if self.bcq is None:
            return q
        is_batch = np.array([t in self.extras.batch_topics for t in r.topics], dtype=bool)
        sel = q & is_batch[r.topic_id]
        if not sel.any():
            return q
        idx = np.flatnonzero(sel)
        for members in queue_members(len(r.topics), r.topic_id[idx], r.queue_id[idx]):
            m = idx[members]
            base, batch = self.extras.batch_fields(r.phys[m], r.size[m], r.queue_offset[m])
            self.bcq.add(r.topics[int(r.topic_id[m[0]])], int(r.queue_id[m[0]]), r.phys[m], r.size[m], r.tags_code[m], r.store_ts[m], base, batch)
        return q & ~sel

    def add_lmq(self, cqb: ConsumeQueueBuilder, r: RangeResult) -> None:
        """The LMQ units of the records of one range (queue id 0, at the offsets their properties give)."""
        if not self.report.settings.lmq:
            return
        sp = r.split
        units = self.extras.lmq_units(SegmentFile(sp.path, sp.base, sp.size), r.phys, r.size, r.queued, lambda i: r.topics[int(r.topic_id[i])])
        if self.options.topics:
            units = [u for u in units if u[0] in self.options.topics]
        if not units:
            return
        names = sorted({u[0] for u in units})
        nid = {n: i for i, n in enumerate(names)}
        rec = np.array([u[2] for u in units], dtype=np.int64)
        cqb.add(
            names,
            np.array([nid[u[0]] for u in units], dtype=np.int32),
            np.zeros(len(units), dtype=np.int32),
            np.array([u[1] for u in units], dtype=np.int64),
            r.phys[rec],
            r.size[rec],
            r.tags_code[rec],
        )

    def finish(self) -> None:
        self.extras.close()
        if self.ext is not None:
            self.ext.close()
        if self.bcq is not None:
            self.report.queues = sorted(self.report.queues + self.bcq.finish(), key=lambda q: (q.topic, q.queue_id))
            self.report.problems.extend(self.bcq.problems)

    def abort(self) -> None:
        self.extras.close()
        for b in (self.ext, self.bcq):
            if b is not None:
                b.abort()


def write_checkpoint(tmp: str, report: RebuildReport, last_ts: int | None, last_queued_ts: int | None, sync: bool) -> dict:
    """physic = the last record's store time, logics = the last queued one's, index = the last index file's end.

    masterFlushedOffset and confirmPhyOffset describe the CommitLog, which is
    unchanged: they are kept from the source checkpoint when it can be read.
    """
    kept = {"master_flushed_offset": 0, "confirm_phy_offset": 0}
    src = os.path.join(report.store, "checkpoint")
    with contextlib.suppress(OSError, ValueError, ConstructError):  # unreadable: the values stay 0
        with open(src, "rb") as f:
            raw = f.read(C.CHECKPOINT_SIZE)
        if len(raw) == C.CHECKPOINT_SIZE:
            old = CheckpointLayout.parse(raw)
            kept = {k: int(old[k]) for k in kept}
    values = {
        "physic_msg_timestamp": last_ts or 0,
        "logics_msg_timestamp": last_queued_ts or 0,
        "index_msg_timestamp": report.index_files[-1].end_timestamp if report.index_files else 0,
        **kept,
    }
    reserved = CheckpointLayout.sizeof() - 8 * len(values)
    data = CheckpointLayout.build({**values, "reserved": bytes(reserved)})
    path = os.path.join(tmp, "checkpoint")
    with open(path, "wb") as f:
        f.write(data)
        if sync:
            f.flush()
            os.fsync(f.fileno())
    return values


def verify_output(
    tmp: str, store: str, settings: StoreSettings, options: RebuildOptions, queues: list[QueueResult] | None = None, columns: ScanColumns | None = None
) -> dict:
    """Run the `cq verify` and `index verify` analyses on the new files, read back through the readers.

    They compare them with `columns`, the build's own scan, when given;
    else they scan the source CommitLog. A link tmp/commitlog -> the source
    commitlog/ (read-only use) lets them see the rebuilt store as a broker
    would; it is removed before publishing.
    """
    out: dict = {"ok": True}
    jobs = []
    holes = {(q.topic, q.queue_id): q.gap_ranges for q in queues if q.gap_ranges} if queues is not None else None
    # a few queues with holes (a repair's): the proof takes the others, the analysis only these
    scoped = frozenset(holes) if holes and len(holes) <= SCOPED_QUEUES else frozenset()
    quick = _quick_checks(tmp, settings, options, columns, scoped)
    proven = quick.get("consumequeue")
    if "consumequeue" in options.only:
        if proven is not None and not scoped:
            out["consumequeue"] = proven
        else:
            holes = holes if holes is not None else filler_holes(tmp)
            jobs.append(("consumequeue", _run_cq_verify, (tmp, settings, options, holes, columns, sorted(scoped) if proven is not None else None)))
    if "index" in options.only and not options.topics:
        if quick.get("index") is not None:
            out["index"] = quick["index"]
        else:
            jobs.append(("index", _run_index_verify, (tmp, settings, columns)))
    top = os.path.relpath(commitlog_path(store), store).split(os.sep)[0]  # commitlog, or dledger-<id> (holding data/)
    link = os.path.join(tmp, top)
    linked = not os.path.lexists(link)  # a repair's copy is there already: the analyses read that
    if linked:
        os.symlink(os.path.join(store, top), link)
    try:
        # side by side on the engine's workers (threads: numpy's big steps run without the GIL)
        for part, res in zip([j[0] for j in jobs], options.mapper.on_driver(_run_job, jobs), strict=True):
            out[part] = res
    finally:
        if linked:
            os.unlink(link)
    if proven is not None and scoped and "consumequeue" in out:  # the proven queues' clean counts beside the analysed ones
        out["consumequeue"]["queues"] += proven["queues"]
        out["consumequeue"]["units"] += proven["units"]
    for part in ("consumequeue", "index"):
        if part in out:
            out["ok"] = out["ok"] and out[part]["ok"]
    return out


def self_check(tmp: str, store: str, settings: StoreSettings, report: RebuildReport, columns: ScanColumns | None) -> None:
    """verify_output over the files written in tmp (against the scan's `columns`, which are then removed), timed:
    a rebuild's, and a repair's over its copy."""
    t = time.perf_counter()
    if columns is not None:
        columns.finish()
    report.verify = verify_output(tmp, store, settings, report.options, report.queues, columns)
    if columns is not None:
        columns.remove()
    report.verify_seconds = time.perf_counter() - t


def _quick_checks(tmp: str, settings: StoreSettings, options: RebuildOptions, columns: ScanColumns | None, analyzed: frozenset = frozenset()) -> dict:
    """The self-check's quick proofs (builders.selfcheck): a part proven clean needs no analysis; None where it cannot prove it.

    Taken only where the written files must equal the columns unit for unit
    and key for key: a whole-store build of plain ConsumeQueues and of the
    index from nothing.
    """
    if columns is None or options.topics or options.index_after is not None or settings.lmq:
        return {}
    if any(os.path.isdir(os.path.join(tmp, d)) for d in ("batchconsumequeue", "consumequeue_ext")):
        return {}
    jobs = {}
    if "consumequeue" in options.only:
        jobs["consumequeue"] = (columns.quick_cq, os.path.join(tmp, "consumequeue"), settings.cq_units_per_file, analyzed)
    if "index" in options.only:
        jobs["index"] = (columns.quick_index, os.path.join(tmp, "index"), settings.hash_slots, settings.index_entries)
    return dict(zip(jobs, options.mapper.on_driver(lambda job: job[0](*job[1:]), jobs.values()), strict=True))


def _run_job(job: tuple):
    """One (part, fn, args) analysis of the self-check."""
    _, fn, args = job
    return fn(*args)


def _of_commitlog(tmp: str):
    """Whether a finding is about the source CommitLog (its damage, reported with the rebuild), not about the files written."""
    cl = os.path.realpath(commitlog_path(tmp))
    return lambda p: os.path.realpath(p.file) == cl or os.path.realpath(os.path.dirname(p.file)) == cl


def filler_holes(root: str) -> dict[tuple[str, int], list[tuple[int, int]]]:
    """[from, to) runs of filler units after each queue's first real unit, read back from root/consumequeue."""
    from rmqdump.builders.cqbuild import UNIT
    from rmqdump.checks.cqunits import position_runs

    out: dict[tuple[str, int], list[tuple[int, int]]] = {}
    base = os.path.join(root, "consumequeue")
    if not os.path.isdir(base):
        return out
    for topic in sorted(os.listdir(base)):
        for qid in sorted(os.listdir(os.path.join(base, topic))):
            qdir = os.path.join(base, topic, qid)
            if not qid.lstrip("-").isdigit() or not os.path.isdir(qdir):
                continue
            seen_real = False
            runs: list[tuple[int, int]] = []
            for name in sorted(os.listdir(qdir), key=lambda n: int(n) if n.isdigit() else -1):
                if not name.isdigit():
                    continue
                units = np.fromfile(os.path.join(qdir, name), dtype=UNIT)
                first = int(name) // C.CQ_UNIT_SIZE
                filler = (units["size"] == C.CQ_FILLER_SIZE) & (units["commit_log_offset"] == 0) & (units["tags_code"] == 0)
                real = np.flatnonzero(~filler & (units["size"] > 0))
                if not seen_real:
                    if not len(real):
                        continue
                    filler[: real[0]] = False
                    seen_real = True
                runs += [(first + p, first + p + n) for p, n in position_runs(np.flatnonzero(filler))]
            if runs:
                out[(topic, int(qid))] = runs
    return out


def _run_cq_verify(
    tmp: str,
    settings: StoreSettings,
    options: RebuildOptions,
    holes: dict | None = None,
    columns: ScanColumns | None = None,
    queues: list[tuple[str, int]] | None = None,
) -> dict:
    """cq verify's findings by code; those at the filler units this rebuild put in holes are counted apart (expected).

    queues: only these (topic, queueId), each with a pass over the records (the others proven already)."""
    from rmqdump.checks import cqverify
    from rmqdump.readers.store import Store

    store = Store.open(tmp)
    nq = nu = 0
    scopes = [(t, None) for t in (sorted(options.topics) if options.topics else [None])] if queues is None else queues
    codes: dict[str, int] = {}
    at_fillers: dict[str, int] = {}
    holes = holes or {}
    of_commitlog = _of_commitlog(tmp)
    rebuilt = 0  # findings about the files written
    for k, (t, qid) in enumerate(scopes):
        summary = cqverify.VerifySummary()  # counts of this scope's queues (the summary's queue count is set per pass)
        windows = columns.record_windows(cqverify.WINDOW_RECORDS) if columns is not None else None
        for p in cqverify.verify(store, topic=t, queue_id=qid, check_crc=False, delays=settings.delays, summary=summary, windows=windows):
            if k and of_commitlog(p):
                continue  # every pass reports the CommitLog's own damage: counted once
            ranges = holes.get((p.extra.get("topic"), p.extra.get("queue_id")), ())
            i = p.extra.get("unit_index")
            expected = i is not None and any(a <= i < b for a, b in ranges)
            bucket = at_fillers if expected else codes
            bucket[p.code] = bucket.get(p.code, 0) + 1
            rebuilt += not expected and not of_commitlog(p)
        nq, nu = nq + summary.queues, nu + summary.units
    return {
        "queues": nq,
        "units": nu,
        "problems": sum(codes.values()),
        "codes": codes,
        "at_filler_units": at_fillers,
        "ok": rebuilt == 0,
    }


def _run_index_verify(tmp: str, settings: StoreSettings, columns: ScanColumns | None = None) -> dict:
    from rmqdump.checks import indexverify

    summary = indexverify.IndexVerifySummary()
    codes: dict[str, int] = {}
    records_in = columns.records_in if columns is not None else None
    of_commitlog = _of_commitlog(tmp)
    rebuilt = 0
    for p in indexverify.verify(
        tmp, hash_slots=settings.hash_slots, index_entries=settings.index_entries, delays=settings.delays, summary=summary, records_in=records_in
    ):
        codes[p.code] = codes.get(p.code, 0) + 1
        rebuilt += not of_commitlog(p)
    return {"files": summary.index_files, "entries": summary.entries, "problems": sum(codes.values()), "codes": codes, "ok": rebuilt == 0}


def rebuild(
    store: str,
    out: str,
    settings: StoreSettings,
    options: RebuildOptions | None = None,
    on_bytes: Callable[[int], None] | None = None,
    build: Callable[[str, CommitLog, RebuildReport], None] | None = None,
) -> RebuildReport:
    """Rebuild into OUTDIR; returns what was built, what was skipped, and the verification.

    build(tmp, CommitLog, report): another engine's scan and builders in place of build_into (Spark's: the self-check
    then reads the files it wrote, not the scan's columns)."""
    options = options or RebuildOptions()
    t0 = time.perf_counter()
    s, o = check_paths(store, out, options.force)
    cl = CommitLog.open(commitlog_path(s))
    if not cl.files:
        raise InputError(NO_COMMITLOG, commitlog_path(store), "no CommitLog files: nothing to rebuild from")
    report = RebuildReport(store=s, out=o, settings=settings, options=options)
    report.commitlog_files = len(cl.files)
    report.commitlog_bytes = sum(f.size for f in cl.files)
    report.damaged.extend(cl.problems)
    with publishing(o, force=options.force, stores=[s], kind="dir", sync=options.sync) as tmp:
        columns = ScanColumns(tmp) if options.verify and VERIFY_FROM_COLUMNS and build is None else None
        if build is None:
            build_into(tmp, cl, settings, options, report, on_bytes, columns)
        else:
            build(tmp, cl, report)
        report.seconds = time.perf_counter() - t0
        if options.verify:
            self_check(tmp, s, settings, report, columns)
    return report
