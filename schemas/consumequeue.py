"""ConsumeQueue units.

store/ConsumeQueue.java (CQ_STORE_UNIT_SIZE = 20),
store/queue/BatchConsumeQueue.java (CQ_STORE_UNIT_SIZE = 46; its subclass
store/queue/SparseConsumeQueue.java, the compaction topics' `compactionCq`,
writes the same 46-byte unit) and
store/ConsumeQueueExt.java (CqExtUnit: variable size, written as size,
tagsCode, msgStoreTime, bitMapSize, bitmap; checked against the bytes of
fixtures/real/rmq53-cqext).
"""

from __future__ import annotations

from construct import Bytes, Int16sb, Int32sb, Int64sb, Struct, this

ConsumeQueueUnit = Struct(
    "commit_log_offset" / Int64sb,
    "size" / Int32sb,
    "tags_code" / Int64sb,
)
"""One unit; its index in the queue is the message's queue offset."""

BatchConsumeQueueUnit = Struct(
    "commit_log_offset" / Int64sb,
    "size" / Int32sb,
    "tags_code" / Int64sb,
    "store_time" / Int64sb,
    "msg_base_offset" / Int64sb,
    "batch_size" / Int16sb,
    "compacted_offset" / Int32sb,
    "reserved" / Int32sb,
)
"""One Batch ConsumeQueue unit; units are appended in order, msg_base_offset is the queue offset of its first message."""

SparseConsumeQueueUnit = BatchConsumeQueueUnit
"""One unit of a compaction topic's SparseConsumeQueue (compaction/compactionCq/TOPIC/QID/): the Batch layout, with
commit_log_offset holding the compaction-log offset of its record and batch_size 1. A full file ends with an end unit
(offset -1, compacted_offset -1, every other field 0)."""

ConsumeQueueExtHeader = Struct(
    "size" / Int16sb,
    "tags_code" / Int64sb,
    "msg_store_time" / Int64sb,
    "bitmap_size" / Int16sb,
)
"""The fixed part of a ConsumeQueue ext unit (size = 20 + bitmap_size)."""

ConsumeQueueExtUnit = Struct(*ConsumeQueueExtHeader.subcons, "filter_bitmap" / Bytes(this.bitmap_size))
"""One ConsumeQueue ext unit, the consumer-filter bitmap included."""
