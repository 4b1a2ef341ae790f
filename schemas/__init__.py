"""Byte layouts of the RocketMQ store, declared once with construct. No I/O."""

from schemas.checkpoint import Checkpoint
from schemas.commitlog import BlankMarker, HostV4, HostV6, MessageRecord, RecordPrefix, message_header
from schemas.consumequeue import BatchConsumeQueueUnit, ConsumeQueueUnit
from schemas.indexfile import IndexEntry, IndexHeader, IndexSlot, index_file

__all__ = [
    "BatchConsumeQueueUnit",
    "BlankMarker",
    "Checkpoint",
    "ConsumeQueueUnit",
    "HostV4",
    "HostV6",
    "IndexEntry",
    "IndexHeader",
    "IndexSlot",
    "MessageRecord",
    "RecordPrefix",
    "index_file",
    "message_header",
]
