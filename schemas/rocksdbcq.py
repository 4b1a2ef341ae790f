"""The 5.3 RocksDB ConsumeQueue: keys and values of its two column families.

store/queue/RocksDBConsumeQueueTable.java and RocksDBConsumeQueueOffsetTable.java
(5.3.x): column family `default` maps (topic, queueId, cqOffset) to the unit,
column family `offset` maps (topic, "max"|"min", queueId) to the queue's
bounds; the topic `CHECKPOINT_TOPIC` there holds the max physical offset
dispatched. Separators are the byte 0x01 (CTRL_1); integers big-endian.
"""

from __future__ import annotations

from construct import Bytes, Const, Int8ul, Int16ul, Int32sb, Int32ul, Int64sb, Struct, this

from .consumequeue import ConsumeQueueUnit

CTRL_1 = b"\x01"

_TOPIC_HEAD = ("topic_length" / Int32sb, "sep1" / Const(CTRL_1), "topic" / Bytes(this.topic_length))
"""How both column families' keys start: the topic's length, a separator, the topic."""

RocksCQKeyTail = Struct(
    "sep2" / Const(CTRL_1),
    "queue_id" / Int32sb,
    "sep3" / Const(CTRL_1),
    "cq_offset" / Int64sb,
)
"""The fixed-size end of a `default` key, after the topic."""

RocksCQKey = Struct(*_TOPIC_HEAD, *RocksCQKeyTail.subcons)
"""Key of one unit in column family `default`."""

RocksCQValue = Struct(*ConsumeQueueUnit.subcons, "store_time" / Int64sb)
"""Value of one unit (28 bytes): a file ConsumeQueue unit, then the store time."""

RocksOffsetKeyTail = Struct(
    "sep2" / Const(CTRL_1),
    "bound" / Bytes(3),  # b"max" or b"min"
    "sep3" / Const(CTRL_1),
    "queue_id" / Int32sb,
)

RocksOffsetKey = Struct(*_TOPIC_HEAD, *RocksOffsetKeyTail.subcons)
"""Key in column family `offset`."""

RocksOffsetValue = Struct(
    "commit_log_offset" / Int64sb,
    "cq_offset" / Int64sb,  # max: the last unit's offset (max offset - 1); min: the first
)
"""A queue bound (16 bytes)."""

RocksCheckpointValue = Struct("commit_log_offset" / Int64sb)
"""CHECKPOINT_TOPIC's `max` entry in `offset`: the max physical offset dispatched (8 bytes)."""

LOG_BLOCK_SIZE = 32768
"""RocksDB's log files (the MANIFEST, the WAL) are cut into blocks of this size; no record header spans two."""

RocksLogRecordHeader = Struct(
    "checksum" / Int32ul,  # masked CRC32C of the type and the payload
    "length" / Int16ul,  # payload bytes after this header, within the block
    "type" / Int8ul,
)
"""The 7-byte header of one physical record in a RocksDB log file (db/log_format.h, the legacy format)."""

LOG_ZERO_TYPE = 0
"""A zero header: preallocated space; the reader skips the rest of the block."""

LOG_RECYCLABLE_TYPES = frozenset({5, 6, 7, 8, 11})
"""Record types of recycled WAL files (an 11-byte header with the log number). RocksDB never writes them into a
MANIFEST (its writer is created not recyclable), and its MANIFEST reader loops forever on one (rocksdict 0.3.29),
so a MANIFEST record of these types is damage that must be reported before RocksDB opens the file."""
