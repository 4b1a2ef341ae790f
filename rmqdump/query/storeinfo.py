"""`rmqdump info`: the one screen an operator reads first.

Cheap by design: the ConsumeQueues give the per-queue counts and offsets, two
record reads per queue give its time range, headers give the index picture,
and only the newest CommitLog file with data is scanned to find where the data
ends. The recovery preview is the one part that walks records (from where the
broker would start).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from rmqdump.checks.dledgerindex import check_index
from rmqdump.checks.recovery import RecoveryPreview, preview, preview_bytes
from rmqdump.common.jsontext import fields_of
from rmqdump.common.problems import Problem
from rmqdump.query.cqseek import RecordReader
from rmqdump.query.timers import timer_summary
from rmqdump.readers.batchcq import BatchConsumeQueue
from rmqdump.readers.checkpoint import Checkpoint
from rmqdump.readers.configfiles import ConfigFile, problem_of, read_config
from rmqdump.readers.dledger import UNIT_SIZE
from rmqdump.readers.lifecycle import is_own_topic
from rmqdump.readers.message import Message
from rmqdump.readers.recordprops import is_lmq
from rmqdump.readers.store import IndexFileInfo, Store, Unsupported
from rmqdump.readers.timerlog import TimerStore
from rmqdump.scan.dataend import data_end_bytes, data_end_of
from rmqdump.scan.ranges import SERIAL, Mapper


@dataclass
class QueueInfo:
    topic: str
    queue_id: int
    files: int
    bytes: int
    min_offset: int
    max_offset: int
    units: int
    first_store_timestamp: int | None
    last_store_timestamp: int | None
    last_phys_offset: int | None
    queue_type: str = "SimpleCQ"  # SimpleCQ (20-byte units) or BatchCQ (batchconsumequeue/, 46-byte units)
    ext: bool = False  # the queue has consumequeue_ext files (tagsCode holds ext addresses)
    lmq: bool = False  # a Light Message Queue (%LMQ%name): units point at its parent topics' records

    def to_dict(self) -> dict:
        return {"kind": "queue", **fields_of(self)}


@dataclass
class CommitLogInfo:
    files: int
    file_size: int | None
    bytes: int
    min_offset: int
    files_end: int
    data_end: int
    data_is_records: bool = True  # data_end is a record's end; False: no record decodes in the newest file with data

    def to_dict(self) -> dict:
        return {"kind": "commitlog", **fields_of(self, rename={"data_is_records": "data_end_is_record"})}

    def summary(self) -> str:
        """The CommitLog in one line, for `info` and the report: files, offsets, where the data ends."""
        sizes = f"x {self.file_size} bytes " if self.file_size is not None else "(of no common size) "
        if self.data_is_records:
            end = f"data ends at {self.data_end} ({self.files_end - self.data_end} bytes unwritten)"
        else:
            end = f"no record decodes: {self.files_end - self.data_end} bytes from {self.data_end} on hold none (see the problems)"
        return f"{self.files} files {sizes}= {self.bytes} bytes; offsets {self.min_offset}..{self.files_end}; {end}"


@dataclass
class DLedgerInfo:
    """A DLedger CommitLog's own state: checkpoint, term, entry index files, and the index checked against the entries."""

    path: str
    self_id: str
    committed_index: int | None
    end_index: int | None
    current_term: int | None
    vote_leader: str | None
    index_files: list[dict]
    entries: int
    first_index: int | None
    last_index: int | None
    units_checked: int

    def to_dict(self) -> dict:
        return {"kind": "dledger", **fields_of(self, rename={"units_checked": "index_units_checked"})}


def dledger_info(store: Store, on_bytes: Callable[[int], None] | None = None) -> tuple[DLedgerInfo, list[Problem]]:
    """Walks every entry of the data files to check the index files against them (on_bytes: the file bytes walked)."""
    dl = store.dledger
    chk = check_index(dl, store.commitlog, on_bytes=on_bytes)
    files = []
    for f in dl.index_files:
        st = os.stat(f.path)
        files.append({"file": f.name, "size": f.size, "allocated": st.st_blocks * 512, "first_index": f.base // UNIT_SIZE})
    info = DLedgerInfo(
        path=dl.path,
        self_id=dl.self_id,
        committed_index=dl.committed_index,
        end_index=dl.end_index,
        current_term=dl.current_term,
        vote_leader=dl.term.get("voteLeader"),
        index_files=files,
        entries=chk.entries,
        first_index=chk.first_index,
        last_index=chk.last_index,
        units_checked=chk.units_checked,
    )
    return info, chk.problems


@dataclass
class StoreInfo:
    root: str
    commitlog: CommitLogInfo
    queues: list[QueueInfo]
    cq_file_size: int | None
    index_files: list[IndexFileInfo]
    checkpoint: Checkpoint | None
    abort: bool
    lock: bool
    configs: list[ConfigFile]
    other_files: list[str]
    unsupported: list[Unsupported]
    problems: list[Problem]
    recovery: RecoveryPreview | None
    notes: list[str] = field(default_factory=list)
    timer: dict | None = None  # query/timers.timer_summary of a 5.x timer store
    dledger: DLedgerInfo | None = None


def walk_bytes(store: Store, *, with_recovery: bool = True) -> int:
    """The CommitLog bytes store_info() walks (and tells its `on_bytes` of): data_end's file and the recovery preview's span."""
    dledger = sum(f.size for f in store.commitlog.files) if store.dledger is not None else 0  # dledger_info's entry walk
    return data_end_bytes(store.commitlog) + (preview_bytes(store) if with_recovery else 0) + dledger


def queue_info(q, reader: RecordReader) -> QueueInfo:
    lo, hi = q.bounds()
    first = last = last_phys = None
    if hi > lo:  # the store times of its first and last unit's records
        units = [q.unit_at(lo), q.unit_at(hi - 1)]
        first, last = (m.store_timestamp if isinstance(m, Message) else None for m in (u and reader.read(u[0]) for u in units))
        last_phys = units[1] and units[1][0]
    return QueueInfo(q.topic, q.queue_id, len(q.files), sum(f.size for f in q.files), lo, hi, hi - lo, first, last, last_phys)


def batch_queue_info(q: BatchConsumeQueue) -> QueueInfo:
    """A Batch ConsumeQueue's offsets and times from its own units (they carry the store time): no record reads."""
    lo, hi = q.bounds()
    first = last = last_phys = None
    for u in q.chunks():
        v = np.flatnonzero(u.valid_mask())
        if v.size:
            if first is None:
                first = int(u.store_time[v[0]])
            last, last_phys = int(u.store_time[v[-1]]), int(u.offset[v[-1]])
    return QueueInfo(q.topic, q.queue_id, len(q.files), sum(f.size for f in q.files), lo, hi, hi - lo, first, last, last_phys, queue_type="BatchCQ")


def store_info(
    store: Store, *, with_recovery: bool = True, check_crc: bool = True, on_bytes: Callable[[int], None] | None = None, mapper: Mapper = SERIAL
) -> StoreInfo:
    """The `info` summary; on_bytes(n) is told of the CommitLog bytes walked (walk_bytes() in all), for a progress bar;
    the recovery preview reads ahead on `mapper.on_driver` (this machine's workers)."""
    checkpoint = store.checkpoint()  # a damaged one is recorded in store.problems
    cl = store.commitlog
    end = data_end_of(cl, on_bytes) if cl.files else 0
    cli = CommitLogInfo(
        files=len(cl.files),
        file_size=cl.file_size,
        bytes=sum(f.size for f in cl.files),
        min_offset=cl.min_offset,
        files_end=(cl.files[-1].base + cl.files[-1].size) if cl.files else 0,
        data_end=end,
        data_is_records=end > cl.min_offset or data_end_bytes(cl) == 0,
    )
    with RecordReader(cl) as reader:
        queues = [queue_info(q, reader) for q in store.select_queues()]
    for qi in queues:
        qi.ext = (qi.topic, qi.queue_id) in store.ext_queues
        qi.lmq = is_lmq(qi.topic)
    queues += [batch_queue_info(q) for q in store.select_batch_queues()]
    queues.sort(key=lambda qi: (qi.topic, qi.queue_id))
    configs = [read_config(p) for p in store.configs]
    notes = []
    if store.abort:
        notes.append("abort file present: the broker did not shut down cleanly (abnormal recovery on restart)")
    if os.path.exists(os.path.join(store.root, "abort.bak")):
        notes.append("abort.bak present: left by a 5.x clean shutdown")
    ts = TimerStore.open(store.root)
    timer = None
    if ts is not None:
        timer = timer_summary(ts, cl)
        store.problems.extend(ts.problems)  # file-level timer damage; `timer verify` checks the rest
    problems = list(store.problems) + [problem_of(cf) for cf in configs if cf.error is not None]  # a config no broker could load
    dl = None
    if store.dledger is not None:
        dl, dl_problems = dledger_info(store, on_bytes)
        problems.extend(dl_problems)
        notes.append("DLedger CommitLog: a restart recovers it by DLedger's own rules (entries and index); the preview walks its entries")
    return StoreInfo(
        root=store.root,
        commitlog=cli,
        queues=queues,
        cq_file_size=store.cq_file_size,
        index_files=store.index_files,
        checkpoint=checkpoint,
        abort=store.abort,
        lock=store.lock,
        configs=configs,
        other_files=store.other_files,
        unsupported=store.unsupported,
        problems=problems,
        recovery=preview(store, check_crc=check_crc, on_bytes=on_bytes, mapper=mapper.on_driver) if with_recovery else None,
        notes=notes,
        timer=timer,
        dledger=dl,
    )


def has_lifecycle(store: Store) -> bool:
    """Whether the store has a queue the broker moves messages through, and a CommitLog to read them in: `info` asks
    before its lifecycle line, whose journeys (rmqdump.query.lifecyclesummary) most stores need not load."""
    return bool(store.commitlog.files) and any(not is_own_topic(t) for t, _ in store.queues)
