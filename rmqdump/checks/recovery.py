"""What the broker would do with this store on its next start, without starting it.

Follows DefaultMessageStore.load/recover and CommitLog.recoverNormally /
recoverAbnormally (4.9.x to 5.3.x):

* `abort` present -> abnormal recovery. The scan starts at the newest CommitLog
  file whose first record has a V1/V2 magic and a storeTimestamp no later than
  the checkpoint's min(physicMsgTimestamp, logicsMsgTimestamp) - 3 s (the
  first file if none qualifies), and every record from there is dispatched
  again into the ConsumeQueues (existing units are skipped) and the index.
* otherwise normal recovery from the third-last file (4.x to 5.3.1) or, from
  5.3.2 on, from the newest file starting at or below the ConsumeQueues' max
  physical offset (offset + size of their last units). What it dispatches
  again: 4.x, every record from that max on (the reput starts there); 5.0 to
  5.3.1, nothing (the walk does not dispatch, the reput starts at the end);
  5.3.2 on, the records the walk reads whose offset is greater than that max
  (so not one starting exactly there). Which one is the store's
  `broker_version` (the operator's --broker-version), else what the store
  shows (store_rules).
* either way the walk stops at the first record that fails the broker's own
  check (magic, body CRC with checkCRCOnRecover, totalSize against the fields)
  or at a zero tail; BLANK goes to the next file. That is the new end: the
  truncation is logical (the bytes stay), files starting after it are deleted.
* what the restart drops: every record the broker had appended at or past
  the new end, found by following each record header's totalSize (a torn
  record's header still says where the next record went) and, where no
  header is left, by the scan's proof rule; the dropped bytes end at the last
  declared record end (capped at its file's end) or the last non-zero byte,
  never in the zero tail of a preallocated file.
* after an abnormal exit, index files whose endTimestamp is later than the
  checkpoint's indexMsgTimestamp are deleted on load; the index is rebuilt
  only for offsets at or above the kept last file's endPhyOffset.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from construct import Struct

from rmqdump.common import problems as P
from rmqdump.common.jsontext import fields_of
from rmqdump.common.problems import Problem
from rmqdump.readers.batchcq import BCQ_UNIT_SIZE, BatchConsumeQueue, BatchUnits, read_batch_units
from rmqdump.readers.checkpoint import Checkpoint
from rmqdump.readers.commitlog import Blank, SegmentFile
from rmqdump.readers.consumequeue import ConsumeQueue, read_units, unit_places, valid_units
from rmqdump.readers.fastpath import field_offset, field_struct, struct_format
from rmqdump.readers.mapped import MappedFile, open_binary, open_readonly
from rmqdump.readers.message import Message, decode_properties, split_keys
from rmqdump.readers.store import Store
from rmqdump.scan import scanner
from rmqdump.scan.ranges import SERIAL, Mapper, map_ranges, range_batches
from rmqdump.scan.resync import first_nonzero, resync
from rmqdump.scan.splits import RANGE_BYTES, Split, commitlog_splits
from rmqdump.schemas import RecordPrefix, message_header
from rmqdump.schemas import constants as C
from rmqdump.schemas.commitlog import MIN_RECORD_SIZE, PropertiesLength, TopicLengthV1, TopicLengthV2

NORMAL_THIRD_LAST = "third_last"  # 4.x .. 5.3.1
NORMAL_FROM_CQ = "from_cq"  # 5.3.2+
# What a normal restart dispatches into the ConsumeQueues and index (records missing from them are written back):
NORMAL_DISPATCH_FROM_CQ = "from_cq"  # 4.x: ReputMessageService starts at the queues' max offset (offset + size of their last unit)
NORMAL_DISPATCH_NONE = "none"  # 5.0 .. 5.3.1: recoverNormally dispatches nothing and the reput starts at the CommitLog's end
NORMAL_DISPATCH_AFTER_CQ = "after_cq"  # 5.3.2+: recoverNormally dispatches the records whose offset is greater than that max
FROM_CQ_SINCE = (5, 3, 2)  # CommitLog.recoverNormally starts at the file holding the ConsumeQueues' max offset


@dataclass(frozen=True)
class BrokerRules:
    """What a broker release does differently in a restart's recovery."""

    name: str  # the releases they hold for
    allow_v2: bool  # reads MESSAGE_MAGIC_CODE_V2 records (5.x); a 4.x broker stops at the first one
    normal_start: str  # where a normal recovery starts: NORMAL_THIRD_LAST or NORMAL_FROM_CQ
    normal_dispatch: str  # what a normal restart dispatches again: NORMAL_DISPATCH_FROM_CQ, NORMAL_DISPATCH_NONE or NORMAL_DISPATCH_AFTER_CQ
    why: str = ""  # how they were chosen: the operator's --broker-version, or what the store shows


def parse_broker_version(text: str) -> tuple[int, ...]:
    """(major, minor, patch) of `4.9.7`, `5.3`, `rocketmq-all-5.3.3`; ValueError otherwise."""
    t = text.strip().removeprefix("rocketmq-all-").removeprefix("v")
    parts = t.split(".")
    if not 1 <= len(parts) <= 3 or not all(p.isdigit() for p in parts) or not 4 <= int(parts[0]) <= 5:
        raise ValueError(f"not a RocketMQ broker release: {text!r} (e.g. 4.9.7, 5.1.4, 5.3.3)")
    return tuple(int(p) for p in parts)


def broker_rules(version: tuple[int, ...] | None, why: str = "") -> BrokerRules:
    """The recovery rules of a broker release; None: the newest (5.3.2 on)."""
    if version is not None and version[0] < 5:
        return BrokerRules("4.x", allow_v2=False, normal_start=NORMAL_THIRD_LAST, normal_dispatch=NORMAL_DISPATCH_FROM_CQ, why=why)
    if version is not None and version < FROM_CQ_SINCE:
        return BrokerRules("5.0 to 5.3.1", allow_v2=True, normal_start=NORMAL_THIRD_LAST, normal_dispatch=NORMAL_DISPATCH_NONE, why=why)
    return BrokerRules("5.3.2 on", allow_v2=True, normal_start=NORMAL_FROM_CQ, normal_dispatch=NORMAL_DISPATCH_AFTER_CQ, why=why)


def store_rules(store: Store) -> BrokerRules:
    """The rules of the broker that will restart `store`: the operator's --broker-version, else inferred from the store.

    A 4.x broker cannot restart a store a 5.x broker wrote (5.x files, V2 records), and the broker that wrote a store
    is the one an operator restarts: a store with no mark of 5.x gets 4.x rules, one with any gets the newest 5.x.
    """
    v = store.broker_version
    if v is not None:
        return broker_rules(v, "--broker-version " + ".".join(map(str, v)))
    marks = store.marks_of_5x()
    if not marks:
        return broker_rules((4,), "inferred: no 5.x file, config field or V2 record in the store")
    return broker_rules(None, f"inferred: written by 5.x ({', '.join(marks[:3])}{', ...' if len(marks) > 3 else ''}), the newest 5.x rules")

_H4 = message_header()
_H6 = message_header(born_v6=True)
_MAGIC_AT, _MAGIC = field_struct(_H4, "magic")
_SYSFLAG_AT, _SYSFLAG = field_struct(_H4, "sys_flag")
_STORE_TS = field_struct(_H4, "store_timestamp")[1]
_STORE_TS_AT = {False: field_offset(_H4, "store_timestamp"), True: field_offset(_H6, "store_timestamp")}
# What checkMessageAndReturnSize stops the walk for when checkCRCOnRecover is on: the body's CRC. The __CRC32#
# property (5.2.0 on) is checked instead only with forceVerifyPropCRC, off by default and kept in no store file:
# a record whose properties alone are damaged is kept (found by tests/test_salvage.py against the broker's recovery)
_STOP_RECORD_CODES = {P.BODY_CRC_MISMATCH}
_PREFIX = struct_format(RecordPrefix)
_PHYS_AT, _PHYS = field_struct(_H4, "phys_offset")
_TOPIC_LEN = {C.MAGIC_V1: struct_format(Struct("n" / TopicLengthV1)), C.MAGIC_V2: struct_format(Struct("n" / TopicLengthV2))}
_PROPS_LEN = struct_format(Struct("n" / PropertiesLength))
_AFTER_JUMP = 1024  # records per batch where the walk goes on after a known chain: the next chain is usually the next record
DROPPED_LISTED = 10_000  # records described one by one; past that they are only counted
_CHUNK = 4 << 20


@dataclass
class DroppedRecord:
    """One record a restart drops, with what of it still decodes (None where it does not)."""

    phys_offset: int
    file: str
    file_offset: int
    total_size: int  # as its header declares
    state: str  # "intact", "torn" (cut short: past its file's end, or its later bytes zeros), or the scan's code for it
    topic: str | None = None
    queue_id: int | None = None
    queue_offset: int | None = None
    store_timestamp: int | None = None
    keys: list[str] | None = None
    uniq_key: str | None = None

    def to_dict(self) -> dict:
        return fields_of(self)


@dataclass
class RecoveryPreview:
    abnormal: bool  # the fields in the order of the JSON row (to_dict)
    scan_from: int
    valid_end: int
    truncated_bytes: int
    truncated_messages: int
    dropped: list[DroppedRecord]
    redispatch_from: int
    index_files_dropped: list[str]
    scan_from_file: str | None
    stop: str  # why the walk ended
    index_redispatch_from: int
    commitlog_files_dropped: list[str]
    records_walked: int
    min_timestamp: int | None
    cq_max_phys_offset: int
    load_errors: list[str] = field(default_factory=list)
    rules: str = ""  # the broker releases whose rules it follows (BrokerRules.name)
    rules_why: str = ""  # how those were chosen (BrokerRules.why)

    def redispatches(self, phys_offset: int | np.ndarray) -> bool | np.ndarray:
        """Whether the restart dispatches the record at this offset into its ConsumeQueue again (a missing unit it writes
        back); of each offset for an array of them."""
        return (self.redispatch_from <= phys_offset) & (phys_offset < self.valid_end)

    def to_dict(self) -> dict:
        return {
            "kind": "recovery",
            "broker_rules": self.rules,
            "broker_rules_why": self.rules_why,
            **fields_of(self, omit=("rules", "rules_why")),
            "dropped": [d.to_dict() for d in self.dropped],  # a key given again keeps its place: dropped stays after truncated_messages
        }


def first_store_timestamp(seg: SegmentFile, *, allow_v2: bool = True) -> int | None:
    """storeTimestamp of a file's first record, as isMappedFileMatchedRecover reads it (None: no message magic)."""
    need = _STORE_TS_AT[True] + 8
    with open_binary(seg.path) as f:
        head = f.read(need)
    if len(head) < _STORE_TS_AT[False] + 8:
        return None
    (magic,) = _MAGIC.unpack_from(head, _MAGIC_AT)
    if magic != C.MAGIC_V1 and not (allow_v2 and magic == C.MAGIC_V2):
        return None
    (sys_flag,) = _SYSFLAG.unpack_from(head, _SYSFLAG_AT)
    at = _STORE_TS_AT[bool(sys_flag & C.FLAG_BORNHOST_V6)]
    if len(head) < at + 8:
        return None
    return _STORE_TS.unpack_from(head, at)[0]


def _queue_max_phys(q: ConsumeQueue, end: int | None = None) -> int:
    """ConsumeQueue.recover: from the third-last file, units while offset >= 0 and size > 0; max offset + size.

    With `end`, truncateDirtyLogicFiles: the queue's max offset + size once units at or past `end` are cut."""
    files = q.files[max(0, len(q.files) - 3) :]
    best = -1
    for f in files:
        offset, size = unit_places(read_units(f))
        cut = ~valid_units(offset, size) if end is None else ~valid_units(offset, size) | (offset >= end)
        bad = np.flatnonzero(cut)
        k = int(bad[0]) if bad.size else len(offset)
        if k:
            best = int(offset[k - 1]) + int(size[k - 1])
        if bad.size or (end is None and k < (q.file_size or f.size) // 20):
            break
    return best


def _batch_queue_max_phys(q: BatchConsumeQueue) -> int:
    """BatchConsumeQueue.recover: from the third-last file, units while valid; the last one's offset (its start: a
    batch queue's getMaxPhysicOffset, unlike a ConsumeQueue's offset + size)."""
    best = -1
    for f in q.files[max(0, len(q.files) - 3) :]:
        u = BatchUnits.from_array(f, read_batch_units(f))
        bad = np.flatnonzero(~u.valid_mask())
        k = int(bad[0]) if bad.size else len(u)
        if k:
            best = int(u.offset[k - 1])
        if bad.size or k < (q.file_size or f.size) // BCQ_UNIT_SIZE:
            break
    return best


def queues_max_phys(store: Store) -> int:
    """The ConsumeQueues' max physical offset as DefaultMessageStore.recoverConsumeQueue returns it (every queue kind)."""
    return max([_queue_max_phys(q) for q in store.queues.values()] + [_batch_queue_max_phys(q) for q in store.batch_queues.values()], default=-1)


class _Walked:
    """Tells `on_bytes` of the CommitLog bytes the preview has gone past, each byte once, as its position moves forward."""

    def __init__(self, on_bytes: Callable[[int], None] | None, origin: int):
        self.on_bytes, self.done = on_bytes, origin

    def to(self, offset: int) -> None:
        if self.on_bytes is not None and offset > self.done:
            self.on_bytes(offset - self.done)
            self.done = offset


def first_stop(b) -> int | None:
    """Index of the first record of batch `b` the recovery walk stops at for its CRC (checkMessageAndReturnSize), or None."""
    bad = [i for i, ps in b.record_problems.items() if any(p.code in _STOP_RECORD_CODES for p in ps)]
    return min(bad) if bad else None


def chain_step(b: scanner.Batch, allow_v2: bool = True) -> tuple[int, int, int, int, int, bool]:
    """What CleanChain needs of one batch, small enough to come back from a range's task (a fold of another pass):
    (records, first record's offset, records up to the first the walk stops at or the first break, the last of
    those records' offset and end, whether the batch had events)."""
    n = len(b)
    if not n:
        return 0, 0, 0, 0, 0, bool(b.events)
    pos = b.cols["_pos"].astype(np.int64) + b.seg.base
    end = b.cols["_end"].astype(np.int64) + b.seg.base
    k = n
    stop = first_stop(b)
    if stop is not None:
        k = min(k, stop)
    v2 = np.flatnonzero(b.cols["magic"][:k] == C.MAGIC_V2) if not allow_v2 else []
    if len(v2):
        k = int(v2[0])
    gaps = np.flatnonzero(pos[1:k] != end[: k - 1]) if k > 1 else []
    if len(gaps):
        k = int(gaps[0]) + 1
    return n, int(pos[0]), k, int(pos[k - 1]) if k else 0, int(end[k - 1]) if k else 0, bool(b.events)


class CleanChain:
    """The run of back-to-back records a range starts with, up to the first the recovery walk would stop at
    (a CRC; a V2 record for a broker without allow_v2), an event (damage, a marker) or a break: (first record,
    last record, records before the last). Fed batch by batch (add) or with their chain_step (step)."""

    def __init__(self, allow_v2: bool = True):
        self.first = self.last = self.end = None
        self.count = 0
        self.open = True
        self.allow_v2 = allow_v2

    def add(self, b: scanner.Batch) -> None:
        self.step(chain_step(b, self.allow_v2))

    def step(self, s: tuple[int, int, int, int, int, bool]) -> None:
        n, pos0, k, last, end, events = s
        if self.open and n:
            if self.first is None:
                self.first = self.end = pos0
            k = k if pos0 == self.end else 0
            if k:
                self.count += k
                self.last, self.end = last, end
            self.open = k == n
        if events:
            self.open = False

    def entry(self) -> tuple[int, tuple[int, int]] | None:
        return None if self.last is None or self.count < 2 else (self.first, (self.last, self.count - 1))


def chain_of(split: Split, allow_v2: bool = True) -> tuple[int, tuple[int, int]] | None:
    """A range's clean chain (CleanChain.entry), read with the walk's checks: a task of the walk's look-ahead."""
    chain = CleanChain(allow_v2)
    for b in range_batches(split, keys=False):
        chain.add(b)
        if not chain.open:
            break
    return chain.entry()


Chains = Callable[[], dict[int, tuple[int, int]]]
"""Clean record chains another pass already read with the same checks: first record's offset -> (offset of the
chain's last record, records before it). None of them stops the walk, so the walk may go on at the last one."""


def _jump(seg: SegmentFile, mf: MappedFile, b, cut: int, chains: Chains | None) -> tuple[int, int, int] | None:
    """(index in `b` where a known chain starts, its last record's file offset, records from there up to it)."""
    if chains is None or not cut:
        return None
    known = chains()
    if not known:
        return None
    pos = b.cols["_pos"][:cut].astype(np.int64) + seg.base
    starts = np.sort(np.fromiter(known, np.int64, len(known)))
    at = np.minimum(np.searchsorted(starts, pos), len(starts) - 1)
    hit = np.flatnonzero(starts[at] == pos)  # np.isin would sort through np.unique, whose first use imports numpy.ma (20 ms)
    for j in hit.tolist():
        last, skipped = known[int(pos[j])]
        at = last - seg.base
        # the walk goes on at the chain's last record as a scan that starts there would: it must prove to start there
        if skipped > 0 and 0 < at < mf.size and resync(seg, mf, at) == at:
            return j, at, skipped
    return None


def _walk(
    files: list[SegmentFile], start: int, *, check_crc: bool, allow_v2: bool, walked: _Walked, chains: Chains | None = None
) -> tuple[int, str, int]:
    """The broker's recovery walk from file index `start`: (valid end, why it stopped, records walked).

    chains: stretches known to hold no stop (from a pass over the same bytes with the same checks) are stepped over.
    """
    records = 0
    idx = start
    seg = files[idx]
    end = seg.base
    while True:
        with MappedFile(seg.path) as mf:
            stop: str | None = None
            next_file = False
            at = 0
            batches = scanner.file_batches_from(seg, mf, start=0, check_crc=check_crc, keys=False)
            while (b := next(batches, None)) is not None:
                n = len(b)
                cut = n
                if n:
                    if not allow_v2:
                        v2 = np.flatnonzero(b.cols["magic"] == C.MAGIC_V2)
                        if v2.size:
                            cut = int(v2[0])
                            stop = f"V2 magic at {seg.base + int(b.cols['_pos'][cut])}: this broker version does not know it"
                    k = first_stop(b)
                    if k is not None and k < cut:
                        cut = k
                        code = next(p.code for p in b.record_problems[cut] if p.code in _STOP_RECORD_CODES)
                        stop = f"{code} at {seg.base + int(b.cols['_pos'][cut])}"
                    jump = _jump(seg, mf, b, cut, chains)
                    if jump is not None:  # records before the chain, the chain up to its last record; on from there
                        j, at, skipped = jump
                        records += j + skipped
                        end = seg.base + at
                        walked.to(end)
                        stop = None
                        batches = scanner.file_batches_from(seg, mf, start=at, check_crc=check_crc, keys=False, batch_records=_AFTER_JUMP)
                        continue
                    records += cut
                    if cut:
                        end = seg.base + int(b.cols["_end"][cut - 1])
                        walked.to(end)
                    if cut < n:
                        break
                for e in b.events:
                    if (isinstance(e, Blank) and e.marker == "blank") or (isinstance(e, Problem) and e.code == P.BAD_BLANK):
                        next_file = True
                    elif isinstance(e, Blank):
                        stop = f"zero tail at {e.phys_offset} ({e.file})"
                    else:
                        stop = f"{e.code} at {e.phys_offset} ({e.file}@{e.file_offset})"
                    break
                if stop or next_file:
                    break
            if stop is None and not next_file:
                stop = f"end of {seg.path} without an end-of-file marker"
        if stop is not None:
            return end, stop, records
        walked.to(seg.base + seg.size)
        idx += 1
        if idx >= len(files):
            return end, "BLANK marker of the last file", records
        seg = files[idx]
        end = seg.base


def _last_nonzero(mf: MappedFile, start: int, stop: int) -> int:
    """The position after the last non-zero byte of [start, stop) (start when all zeros), read backwards by pread."""
    stop = min(stop, mf.size)
    if start >= stop or first_nonzero(mf, start, stop) is None:
        return start
    fd = open_readonly(mf.path)
    try:
        hi = stop
        while hi > start:
            lo = max(start, hi - _CHUNK)
            chunk = os.pread(fd, hi - lo, lo)
            kept = len(chunk.rstrip(b"\0"))
            if kept:
                return lo + kept
            hi = lo
        return start
    finally:
        os.close(fd)


def _from_message(m: Message, file_offset: int) -> DroppedRecord:
    """A dropped record that decodes whole: lost for its CRC, or only because it comes after the new end."""
    state = P.BODY_CRC_MISMATCH if m.crc_ok is False else P.PROP_CRC_MISMATCH if m.prop_crc_ok is False else "intact"
    return DroppedRecord(
        m.phys_offset,
        m.file,
        file_offset,
        m.total_size,
        state,
        m.topic,
        m.queue_id,
        m.queue_offset,
        m.store_timestamp,
        split_keys(m.properties.get(C.PROPERTY_KEYS)),
        m.properties.get(C.PROPERTY_UNIQ_KEY),
    )


def _describe(seg: SegmentFile, mf: MappedFile, p: int, total: int) -> DroppedRecord:
    """What a dropped record still says: all of it when it decodes, else each field that lies before its zero tail.

    Its state: "torn" when it runs past its file's end or its later bytes are zeros (never written), else the code
    the scan gives the record (a size field changed, a bad magic ...), so every output names it alike.
    """
    m = scanner.file_record_at(seg, mf, p, check_crc=True) if p + total <= mf.size else None
    if isinstance(m, Message):
        return _from_message(m, p)
    end = min(p + total, mf.size)
    z = _last_nonzero(mf, p, end)  # bytes from z on are zeros: the part of the record the OS never wrote (or zeros)
    torn = m is None or z < end - _PROPS_LEN.size  # a whole record ends in its properties, or in their empty length
    d = DroppedRecord(seg.base + p, seg.path, p, total, "torn" if torn else m.code)
    view = mf.view
    if p + _SYSFLAG_AT + 4 > z:
        return d
    (sys_flag,) = _SYSFLAG.unpack_from(view, p + _SYSFLAG_AT)
    hdr = message_header(born_v6=bool(sys_flag & C.FLAG_BORNHOST_V6), store_v6=bool(sys_flag & C.FLAG_STOREHOST_V6))
    at = p + hdr.sizeof()
    # the header was written when its physicalOffset is the record's own position and it ends before the zeros
    if at > z or _PHYS.unpack_from(view, p + _PHYS_AT)[0] != seg.base + p:
        return d
    h = hdr.parse(bytes(view[p:at]))
    d.queue_id, d.queue_offset, d.store_timestamp = h.queue_id, h.queue_offset, h.store_timestamp
    tl = _TOPIC_LEN.get(h.magic)
    at += max(h.body_length, 0)
    if tl is None or at + tl.size > z:
        return d
    (n,) = tl.unpack_from(view, at)
    at += tl.size
    if n == 0 or at + n > z:
        return d
    try:
        d.topic = bytes(view[at : at + n]).decode("utf-8")
    except UnicodeDecodeError:
        return d
    at += n
    if at + _PROPS_LEN.size > z:
        return d
    (n,) = _PROPS_LEN.unpack_from(view, at)
    at += _PROPS_LEN.size
    if n > 0 and at + n <= z:
        props, _ = decode_properties(bytes(view[at : at + n]))
        d.keys, d.uniq_key = split_keys(props.get(C.PROPERTY_KEYS)), props.get(C.PROPERTY_UNIQ_KEY)
    return d


def _appended_after(files: list[SegmentFile], valid_end: int, walked: _Walked, listed: int | None = None) -> tuple[int, int, list[DroppedRecord]]:
    """(end of the appended data, records, their descriptions) at or past the broker's new end.

    Record to record by each header's totalSize, as the broker appended them:
    runs of whole records through the scan (batches, pages given back), a
    torn record by its header alone; where no header is left, on to the next
    record the proof rule finds, counting the bytes up to the last non-zero one.
    """
    end, count, dropped = valid_end, 0, []
    listed = DROPPED_LISTED if listed is None else listed

    def take_run(seg: SegmentFile, mf: MappedFile, p: int) -> int:
        """Whole records from p on, as the scan reads them; where the scan stops (p itself when it takes none)."""
        nonlocal end, count
        listing = len(dropped) < listed  # CRCs only matter for the records still described
        for b in scanner.file_batches_from(seg, mf, start=p, check_crc=listing):
            n = len(b)
            if n:
                pos = b.cols["_pos"]
                if int(pos[0]) != p:  # the scan resynced past p: p is not where it reads on from
                    return p
                count += n
                for i in range(min(n, listed - len(dropped))):
                    dropped.append(_from_message(b.message(i), int(pos[i])))
                p = int(b.cols["_end"][-1])
                end = max(end, seg.base + p)
                walked.to(seg.base + p)
            if b.events or (listing and len(dropped) >= listed):
                return p  # the event is at p: the caller looks at it; or counting goes on without CRCs
        return p

    for seg in files:
        if seg.base + seg.size <= valid_end:
            continue
        with MappedFile(seg.path) as mf:
            size, view = mf.size, mf.view
            p: int | None = max(0, valid_end - seg.base)
            released = 0
            while p is not None and p < size:
                walked.to(seg.base + p)
                if p - released >= scanner.RELEASE_EVERY:
                    mf.release(released, p)
                    released = p
                if p + 8 <= size:
                    total, magic = _PREFIX.unpack_from(view, p)
                    if magic in C.MESSAGE_MAGICS and total >= MIN_RECORD_SIZE:
                        if p + _PHYS_AT + 8 <= size and _PHYS.unpack_from(view, p + _PHYS_AT)[0] == seg.base + p:
                            q = take_run(seg, mf, p)
                            if q > p:
                                p = q
                                continue
                        count += 1  # a record the scan cannot take: by its header
                        if len(dropped) < listed:
                            dropped.append(_describe(seg, mf, p, total))
                        p += total
                        end = max(end, seg.base + min(p, size))
                        continue
                    if magic == C.MAGIC_BLANK and total == size - p:
                        break
                if first_nonzero(mf, p, size) is None:
                    break  # zeros to the end of the file: nothing was appended there
                nxt = resync(seg, mf, p + 1) if p + 8 <= size else None
                z = _last_nonzero(mf, p, size if nxt is None else nxt)
                if z > p:
                    end = max(end, seg.base + z)
                p = nxt
        walked.to(seg.base + seg.size)
    return end, count, dropped


def _start_index(files: list[SegmentFile], abnormal: bool, min_ts: int | None, cq_max: int, *, allow_v2: bool, normal_start: str) -> int:
    """The file the broker's recovery walk starts at (see the module docstring)."""
    if abnormal:
        bound = min_ts if min_ts is not None else 0
        for i in range(len(files) - 1, -1, -1):
            ts = first_store_timestamp(files[i], allow_v2=allow_v2)
            if ts is not None and ts != 0 and ts <= bound:
                return i
        return 0
    if normal_start == NORMAL_FROM_CQ:
        for i in range(len(files) - 1, 0, -1):
            if files[i].base <= cq_max:
                return i
        return 0
    return max(0, len(files) - 3)


def _record_after(cl, offset: int, valid_end: int) -> int:
    """The first record offset greater than `offset` (the end of the one that starts there; `offset` itself when none
    does), at most valid_end: where 5.3.2+'s normal walk starts dispatching (its test is offset > the queues' max)."""
    m = scanner.record_at(cl, offset, check_crc=False) if offset < valid_end else None
    return min(offset + m.total_size, valid_end) if isinstance(m, Message) else min(offset, valid_end)


def _chains_ahead(cl, origin: int, check_crc: bool, allow_v2: bool, mapper: Mapper, progress: _Walked, range_bytes: int) -> Chains:
    """The clean chains of every range from `origin` on, read by `mapper`; progress moves over each range read."""
    found: dict[int, tuple[int, int]] = {}
    splits = [s for s in commitlog_splits(cl, range_bytes, check_crc=check_crc) if s.base >= origin]
    for sp, entry in map_ranges(splits, functools.partial(chain_of, allow_v2=allow_v2), mapper):
        if entry is not None:
            found[entry[0]] = entry[1]
        progress.to(sp.base + sp.end)
    return lambda: found


def preview_bytes(store: Store) -> int:
    """The CommitLog bytes preview() goes past (and tells its `on_bytes` of): from its start file to the end of the files.

    Cheap (file heads, the checkpoint; the ConsumeQueues' tails only for NORMAL_FROM_CQ): a progress bar's total.
    """
    files = store.commitlog.files
    if not files:
        return 0
    rules = store_rules(store)
    abnormal = store.abort
    ckpt = store.checkpoint()
    cq_max = queues_max_phys(store) if rules.normal_start == NORMAL_FROM_CQ and not abnormal else -1
    start = _start_index(files, abnormal, None if ckpt is None else ckpt.min_timestamp, cq_max, allow_v2=rules.allow_v2, normal_start=rules.normal_start)
    return files[-1].base + files[-1].size - files[start].base


def preview(
    store: Store,
    *,
    check_crc: bool = True,
    allow_v2: bool | None = None,
    normal_start: str | None = None,
    on_bytes: Callable[[int], None] | None = None,
    dropped_listed: int | None = None,
    count_after: bool = True,
    chains: Chains | None = None,
    chains_allow_v2: bool = True,
    mapper: Mapper = SERIAL,
    range_bytes: int = RANGE_BYTES,
) -> RecoveryPreview:
    """The recovery the broker would run on this store (see the module docstring).

    on_bytes(n) is told of the CommitLog bytes walked, preview_bytes() in all, for a progress bar.
    dropped_listed: how many dropped records to describe one by one (default DROPPED_LISTED; 0: only count them, no
    CRC past the new end). count_after=False: no walk past the new end at all (truncated_bytes, truncated_messages
    and dropped are left 0 and empty), for a caller that reads every record there itself. chains: see _walk; with
    none given and a mapper of several workers, the ranges past the start are read side by side first (chain_of)
    and the walk steps over their clean chains: the same answer, the CommitLog read on every core. chains_allow_v2:
    the allow_v2 the caller's chains were found with (CleanChain); chains that run past V2 records are not used by a
    walk that stops at them.
    allow_v2, normal_start: by default those of the store's broker_version (broker_rules).
    """
    rules = store_rules(store)
    if allow_v2 is not None or normal_start is not None:
        rules = BrokerRules("as asked", rules.allow_v2 if allow_v2 is None else allow_v2, normal_start or rules.normal_start, rules.normal_dispatch, "as the caller asked")
    allow_v2, normal_start = rules.allow_v2, rules.normal_start
    cl = store.commitlog
    files = cl.files
    abnormal = store.abort
    ckpt: Checkpoint | None = store.checkpoint()
    load_errors = [p.line() for p in cl.problems if p.code == P.CL_FILE_SIZE]
    queues = list(store.queues.values())
    cq_max = queues_max_phys(store)
    min_ts = None if ckpt is None else ckpt.min_timestamp
    if not files:
        return RecoveryPreview(abnormal, 0, 0, 0, 0, [], 0, [], None, "no CommitLog files", 0, [], 0, min_ts, cq_max, load_errors, rules.name, rules.why)

    start = _start_index(files, abnormal, min_ts, cq_max, allow_v2=allow_v2, normal_start=normal_start)
    progress = _Walked(on_bytes, files[start].base)
    if not allow_v2 and chains_allow_v2:
        chains = None  # chains found allowing V2 records run past them; this walk stops at the first
    if chains is None and mapper.workers > 1:
        chains = _chains_ahead(cl, files[start].base, check_crc, allow_v2, mapper, progress, range_bytes)
    valid_end, stop, walked = _walk(files, start, check_crc=check_crc, allow_v2=allow_v2, walked=progress, chains=chains)
    data_end, after, lost = _appended_after(files, valid_end, progress, dropped_listed) if count_after else (valid_end, 0, [])
    progress.to(files[-1].base + files[-1].size)  # the rest is zero tails and files after the data: gone past unread

    if abnormal:
        redispatch = files[start].base
    elif rules.normal_dispatch == NORMAL_DISPATCH_NONE:
        redispatch = valid_end
    elif rules.normal_dispatch == NORMAL_DISPATCH_AFTER_CQ:
        first = files[start].base  # the walk dispatches only what it reads
        redispatch = first if cq_max < first else _record_after(cl, cq_max, valid_end)
    else:
        cq_after = max((_queue_max_phys(q, valid_end) for q in queues), default=-1) if cq_max >= valid_end else cq_max
        redispatch = max(cl.min_offset, cq_after, 0)

    dropped_index: list[str] = []
    kept = list(store.index_files)
    if abnormal:
        limit = ckpt.index_msg_timestamp if ckpt is not None else 0
        dropped = [f for f in kept if f.header is not None and f.header["end_timestamp"] > limit]
        dropped_index = [f.name for f in dropped]
        kept = [f for f in kept if f not in dropped]
    last_kept_end = kept[-1].header["end_phy_offset"] if kept and kept[-1].header else 0
    return RecoveryPreview(
        abnormal=abnormal,
        scan_from=files[start].base,
        scan_from_file=os.path.basename(files[start].path),
        valid_end=valid_end,
        stop=stop,
        truncated_bytes=max(0, data_end - valid_end),
        truncated_messages=after,
        dropped=lost,
        redispatch_from=redispatch,
        index_redispatch_from=max(redispatch, last_kept_end),
        index_files_dropped=dropped_index,
        commitlog_files_dropped=[os.path.basename(f.path) for f in files if f.base > valid_end],
        records_walked=walked,
        min_timestamp=min_ts,
        cq_max_phys_offset=cq_max,
        load_errors=load_errors,
        rules=rules.name,
        rules_why=rules.why,
    )
