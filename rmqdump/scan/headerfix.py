"""A record whose header alone is damaged (its magic code or totalSize), proven by everything else and restored.

The broker's recovery stops at a record whose magic or totalSize is wrong,
even when every other byte of it is intact. Such a record lies at the start of
a stretch the walk resynced over (rmqdump.scan.damage), and the next record
the resync proved marks where it ends. It is given back when all of this holds:

- the size its fields imply (the schemas' layout: the fixed head of its host
  variant, then body, topic and properties with their lengths) is exactly the
  distance to that next record, with a message magic (the one found, or V1/V2
  when the found one is not a message magic: exactly one of them must fit);
- the scan kernel takes the restored bytes as one record: its non-empty body
  matches bodyCRC, a property CRC (if any) matches, its physicalOffset field is
  its own position, its properties parse and hold no zero byte;
- a ConsumeQueue unit at its queue offset, where one exists, names it (offset,
  size, tagsCode): `unit_agrees`.

Only the two fields the broker's walk checks first are restored; anything
else not proven stays damage.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import numpy as np

from rmqdump.readers.commitlog import SegmentFile
from rmqdump.readers.fastpath import field_struct, struct_format
from rmqdump.readers.mapped import MappedFile
from rmqdump.readers.message import decode_properties
from rmqdump.scan._walk import Batch, kernel, scan_file
from rmqdump.scan.dispatch import DelayLevels, dispatch_columns
from rmqdump.schemas import RecordPrefix, message_header
from rmqdump.schemas import constants as C
from rmqdump.schemas.commitlog import MIN_RECORD_SIZE, PropertiesLength, TopicLengthV1, TopicLengthV2

MAGIC_CODE = "magic_code"
TOTAL_SIZE = "total_size"

_PREFIX = struct_format(RecordPrefix)
_HEADS = {(b, s): message_header(b, s) for b in (False, True) for s in (False, True)}
_HEAD_SIZES = {k: h.sizeof() for k, h in _HEADS.items()}


_SYS_FLAG = field_struct(message_header(), "sys_flag")
_BODY_LENGTH = {k: field_struct(h, "body_length") for k, h in _HEADS.items()}
_TOPIC_LENGTH = {m: struct.Struct(">" + fmt.fmtstr[1:]) for m, fmt in ((C.MAGIC_V1, TopicLengthV1), (C.MAGIC_V2, TopicLengthV2))}
_PROPS_LENGTH = struct.Struct(">" + PropertiesLength.fmtstr[1:])


@dataclass
class Restored:
    """A record given back with its header restored: where it is, which fields were wrong, and its bytes."""

    phys: int
    file: str
    file_offset: int
    data: bytes  # the record as it must be: the stored bytes with the header fields restored
    fields: list[str] = field(default_factory=list)  # MAGIC_CODE, TOTAL_SIZE
    found: dict[str, int] = field(default_factory=dict)
    restored: dict[str, int] = field(default_factory=dict)

    @property
    def length(self) -> int:
        return len(self.data)

    def to_dict(self) -> dict:
        return {
            "phys_offset": self.phys,
            "size": self.length,
            "file": self.file,
            "file_offset": self.file_offset,
            "header_fields": self.fields,
            "found": self.found,
            "restored": self.restored,
        }

    def batch(self) -> Batch:
        """The restored record as the scan kernel's one-record batch (CRCs checked), at its own physical offset."""
        seg = SegmentFile(self.file, self.phys, self.length)
        return next(b for b in scan_file(seg, _Buffer(self.file, self.data), check_crc=True) if len(b))


def spelled(fields: list[str], found: dict, restored: dict) -> str:
    """The restored fields as text: `magic_code 0x5A5A5A5A -> 0xDAA320A7, total_size 378 -> 330`."""
    spell = {MAGIC_CODE: lambda v: f"0x{v:08X}"}
    return ", ".join(f"{k} {spell.get(k, str)(found[k])} -> {spell.get(k, str)(restored[k])}" for k in fields)


class _Buffer:
    """Bytes in memory standing in for a mapped file (rmqdump.readers.mapped.MappedFile's reading side)."""

    def __init__(self, path: str, data: bytes):
        self.path, self.size, self._bytes = path, len(data), data
        self.data = np.frombuffer(data, dtype=np.uint8)
        self.view = memoryview(data)

    def release(self, start: int, end: int) -> None:
        pass

    def find(self, needle: bytes, start: int, stop: int) -> int:
        return self._bytes.find(needle, start, stop)

    def find_each(self, needles, start: int, stop: int):
        for j, nd in enumerate(needles):
            at = self.find(nd, start, stop)
            if at >= 0:
                yield at, j


def implied_size(raw: bytes, magic: int) -> int | None:
    """The length the record's fields add up to read with `magic` (the broker's calMsgLength), or None when a
    length runs past `raw`."""
    if len(raw) < _SYS_FLAG[0] + 4:
        return None
    (sys_flag,) = _SYS_FLAG[1].unpack_from(raw, _SYS_FLAG[0])
    key = (bool(sys_flag & C.FLAG_BORNHOST_V6), bool(sys_flag & C.FLAG_STOREHOST_V6))
    at = _HEAD_SIZES[key]
    if at > len(raw):
        return None
    (body,) = _BODY_LENGTH[key][1].unpack_from(raw, _BODY_LENGTH[key][0])
    tl = _TOPIC_LENGTH[magic]
    at += body
    if body < 0 or at + tl.size > len(raw):
        return None
    (topic,) = tl.unpack_from(raw, at)
    at += tl.size + topic
    if at + _PROPS_LENGTH.size > len(raw):
        return None
    (props,) = _PROPS_LENGTH.unpack_from(raw, at)
    return at + _PROPS_LENGTH.size + props if props >= 0 else None


def restore_header(seg: SegmentFile, view, p: int, nxt: int | None) -> Restored | None:
    """The record at file offset p with its magic and/or totalSize restored, when the rest proves it (module
    docstring); `nxt` is where the next record the resync proved starts (None: no record follows in the file)."""
    if seg.frame or nxt is None or nxt - p < MIN_RECORD_SIZE:
        return None
    raw = bytes(view[p:nxt])
    length = len(raw)
    total, magic = _PREFIX.unpack_from(raw, 0)
    magics = [magic] if magic in C.MESSAGE_MAGICS else list(C.MESSAGE_MAGICS)
    fits = [m for m in magics if implied_size(raw, m) == length]
    if len(fits) != 1 or (fits[0] == magic and total == length):
        return None  # nothing to restore by the header alone, or no single reading holds together
    data = _PREFIX.pack(length, fits[0]) + raw[_PREFIX.size :]
    r = Restored(seg.base + p, seg.path, p, data)
    for name, was, now in ((TOTAL_SIZE, total, length), (MAGIC_CODE, magic, fits[0])):
        if was != now:
            r.fields.append(name)
            r.found[name], r.restored[name] = was, now
    r.fields.sort(key=lambda n: n != TOTAL_SIZE)  # in the record's order: totalSize, then magic
    return r if _proven(r) else None


def restore_stretches(seg: SegmentFile, damage: list) -> list[Restored]:
    """The first record of each damaged stretch (scan.damage's problems, with the bytes `skipped` to the next
    record) whose header alone is wrong, restored where the rest proves it. A stretch that runs to the end of its
    file has no next record to end the one restored: none is."""
    stretches = [(e.file_offset, e.file_offset + int(e.extra["skipped"])) for e in damage if e.extra.get("skipped")]
    stretches = [(a, b) for a, b in stretches if b < seg.size]
    if seg.frame or not stretches:
        return []
    with MappedFile(seg.path, limit=seg.size) as mf:
        return [r for a, b in stretches if (r := restore_header(seg, mf.view, a, b)) is not None]


def _proven(r: Restored) -> bool:
    """The kernel takes the restored bytes as exactly one record with matching CRCs, its own physicalOffset, a
    non-empty body, and properties that parse and hold no zero byte."""
    try:
        b = r.batch()
    except StopIteration:
        return False
    c = b.cols
    # the kernel's verdicts on the one record: a body CRC or property CRC mismatch, or a physicalOffset field
    # that is not its own offset, are record problems
    if len(b) != 1 or int(c["_end"][0]) != r.length or b.record_problems or b.events:
        return False
    if int(c["body_length"][0]) <= 0:  # an empty body has no CRC to prove it
        return False
    props = b.properties_bytes(0)
    pos, n = c["properties_pos"].astype(np.int64), c["properties_length"].astype(np.int64)
    return decode_properties(props)[1] and not bool(kernel().holds_zero(b.mf.data, pos, n)[0])


_HOLE = 2**31 - 1  # a filler unit's size (ConsumeQueue fillPreBlank): names no record


def unit_agrees(r: Restored, unit_at) -> bool:
    """The ConsumeQueue unit at the record's queue offset names it (offset, size, tagsCode), where one exists.

    unit_at(topic, queue_id, queue_offset) -> (offset, size, tagsCode) or None; a unit with no valid offset and
    size (the zero tail of a queue file, a filler unit) names no record."""
    b = r.batch()
    d = dispatch_columns(b, DelayLevels.parse(), keys=False)
    if not bool(d.queued[0]):
        return True  # no unit is written for it
    unit = unit_at(d.topics[int(d.topic_id[0])], int(d.queue_id[0]), int(d.queue_offset[0]))
    if unit is None or unit[0] < 0 or unit[1] <= 0 or unit[1] == _HOLE:
        return True
    return (int(unit[0]), int(unit[1]), int(unit[2])) == (r.phys, r.length, int(d.tags_code[0]))


def store_units(store):
    """unit_at for unit_agrees over a rmqdump.readers.store.Store."""

    def unit_at(topic: str, queue_id: int, queue_offset: int):
        q = store.queue(topic, queue_id)
        return None if q is None else q.unit_at(queue_offset)

    return unit_at
