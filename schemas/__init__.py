"""Byte layouts of the RocketMQ store, declared once with construct. No I/O."""

from .checkpoint import Checkpoint
from .commitlog import BlankMarker, HostV4, HostV6, MessageRecord, RecordPrefix, message_header
from .consumequeue import BatchConsumeQueueUnit, ConsumeQueueExtHeader, ConsumeQueueExtUnit, ConsumeQueueUnit, SparseConsumeQueueUnit
from .indexfile import IndexEntry, IndexHeader, IndexSlot, index_file
from .msgid import OffsetMsgIdV4, OffsetMsgIdV6, UniqKeyV4, UniqKeyV6, offset_msg_id, uniq_key
from .rocksdbcq import RocksCheckpointValue, RocksCQKey, RocksCQValue, RocksOffsetKey, RocksOffsetValue
from .timer import TimerCheck, TimerLogBlank, TimerLogUnit, TimerWheelSlot

__all__ = [
    "BatchConsumeQueueUnit",
    "BlankMarker",
    "Checkpoint",
    "ConsumeQueueExtHeader",
    "ConsumeQueueExtUnit",
    "ConsumeQueueUnit",
    "HostV4",
    "HostV6",
    "IndexEntry",
    "IndexHeader",
    "IndexSlot",
    "MessageRecord",
    "OffsetMsgIdV4",
    "OffsetMsgIdV6",
    "RecordPrefix",
    "RocksCQKey",
    "RocksCQValue",
    "RocksCheckpointValue",
    "RocksOffsetKey",
    "RocksOffsetValue",
    "SparseConsumeQueueUnit",
    "TimerCheck",
    "TimerLogBlank",
    "TimerLogUnit",
    "TimerWheelSlot",
    "UniqKeyV4",
    "UniqKeyV6",
    "index_file",
    "message_header",
    "offset_msg_id",
    "uniq_key",
]
