"""The bytes `repair` writes over a damaged CommitLog range: a record the broker accepts and no consumer receives.

The broker's recovery walk (CommitLog.checkMessageAndReturnSize) takes a
record when its magic is a message magic, its body CRC matches (checkCRCOnRecover,
on by default; an empty body is not checked) and its totalSize equals the length
its fields add up to (MessageExtEncoder.calMsgLength). It does not check the
physicalOffset, timestamp or host fields.

A filler is such a record, exactly as long as the range, with sysFlag
TRANSACTION_ROLLBACK: CommitLogDispatcherBuildConsumeQueue queues only the
none and commit types, and IndexService.buildIndex returns on a rollback, so
no ConsumeQueue unit and no index entry ever points at it and no consumer is
served it. Its topic and properties are empty (the smallest record the walk
accepts, MIN_FILLER bytes); its body holds a short note, then zeros. Its
physicalOffset is its own position, its times are its neighbour's, so an
abnormal recovery that picks a start file by a file's first store time still
picks a sensible one.

A range that reaches the end of its file is closed with a BLANK marker
(totalSize = bytes left) instead, as the broker ends a file: the walk goes on
at the next file.
"""

from __future__ import annotations

import zlib

from rmqdump.schemas import BlankMarker, MessageRecord
from rmqdump.schemas import constants as C

REPAIR_DIR = "rmqdump-repair"  # beside the store's own directories: the broker does not read it
REPORT = "report.json"  # in REPAIR_DIR: what repair did; with the fillers themselves, what tells repair's holes from damage (checks/repairholes.py)
FILLER = "filler"  # a range's action in the report: a filler record written over it
BLANKED = "blank"  # ... a BLANK marker closing its file
RESTORED = "header_restored"  # ... its record written back with the damaged header fields restored


def _record(phys: int, body: bytes, store_ts: int, total: int = 0) -> bytes:
    return MessageRecord.build(
        {
            "total_size": total,
            "magic": C.MAGIC_V1,
            "body_crc": zlib.crc32(body) & 0x7FFFFFFF,  # UtilAll.crc32: CRC-32 masked to a non-negative int
            "queue_id": 0,
            "flag": 0,
            "queue_offset": 0,
            "phys_offset": phys,
            "sys_flag": C.TRANSACTION_ROLLBACK,
            "born_timestamp": store_ts,
            "born_host": {"address": bytes(4), "port": 0},
            "store_timestamp": store_ts,
            "store_host": {"address": bytes(4), "port": 0},
            "reconsume_times": 0,
            "prepared_transaction_offset": 0,
            "body_length": len(body),
            "body": body,
            "topic_length": 0,
            "topic": b"",
            "properties_length": 0,
            "properties": b"",
        }
    )


MIN_FILLER = len(_record(0, b"", 0))
"""The smallest filler (V1 magic, IPv4 hosts, empty body, topic and properties): 91 bytes."""

MIN_BLANK = BlankMarker.sizeof()
"""A BLANK marker needs its totalSize and magic: 8 bytes (the broker's END_FILE_MIN_BLANK_LENGTH)."""


def note(length: int, phys: int) -> bytes:
    """The text a filler's body starts with: what it stands for."""
    return f"rmqdump repair: {length} damaged bytes at physical offset {phys} replaced; originals in the repair quarantine".encode("ascii")


def filler_record(phys: int, length: int, store_ts: int) -> bytes:
    """A rolled-back record of exactly `length` bytes (>= MIN_FILLER) at physical offset `phys`."""
    if length < MIN_FILLER:
        raise ValueError(f"a filler needs at least {MIN_FILLER} bytes, the range has {length}")
    room = length - MIN_FILLER
    text = note(length, phys)[:room]
    body = text + bytes(room - len(text))
    data = _record(phys, body, store_ts, total=length)
    assert len(data) == length
    return data


def blank_marker(length: int) -> bytes:
    """A BLANK marker for the last `length` bytes of a file: the marker, then zeros."""
    if length < MIN_BLANK:
        raise ValueError(f"a BLANK marker needs at least {MIN_BLANK} bytes, the range has {length}")
    return BlankMarker.build({"total_size": length, "magic": C.MAGIC_BLANK}) + bytes(length - MIN_BLANK)
