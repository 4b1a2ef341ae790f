"""ConsumeQueue units.

store/ConsumeQueue.java (CQ_STORE_UNIT_SIZE = 20) and
store/queue/BatchConsumeQueue.java (CQ_STORE_UNIT_SIZE = 46).
"""

from __future__ import annotations

from construct import Int16sb, Int32sb, Int64sb, Struct

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
