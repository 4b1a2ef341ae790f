"""Magic codes, flag bits and property names of the RocketMQ store.

Sources (Apache RocketMQ): common/message/MessageDecoder.java,
common/sysflag/MessageSysFlag.java, common/message/MessageConst.java,
store/CommitLog.java, store/ConsumeQueue.java, store/index/IndexFile.java.
"""

from __future__ import annotations

from .consumequeue import BatchConsumeQueueUnit, ConsumeQueueExtHeader, ConsumeQueueUnit
from .indexfile import IndexEntry, IndexHeader, IndexSlot

# CommitLog record magic codes (unsigned view of the Java int).
MAGIC_V1 = 0xDAA320A7  # 1-byte topic length, every version
MAGIC_V2 = 0xDAA320AB  # 2-byte topic length, 5.1.0+ for topics > 127 chars
MAGIC_BLANK = 0xCBD43194  # end-of-file marker: totalSize = bytes left in the file
MESSAGE_MAGICS = (MAGIC_V1, MAGIC_V2)
BLANK_LENGTH = 8  # the marker itself: totalSize + magic

# sysFlag bits
FLAG_COMPRESSED = 0x1
FLAG_MULTI_TAGS = 0x2
TRANSACTION_MASK = 0xC
TRANSACTION_NOT = 0x0
TRANSACTION_PREPARED = 0x4
TRANSACTION_COMMIT = 0x8
TRANSACTION_ROLLBACK = 0xC
FLAG_BORNHOST_V6 = 0x10
FLAG_STOREHOST_V6 = 0x20
FLAG_NEED_UNWRAP = 0x40
FLAG_INNER_BATCH = 0x80
COMPRESSION_SHIFT = 8
COMPRESSION_MASK = 0x700

TRANSACTION_NAMES = {
    TRANSACTION_NOT: "none",
    TRANSACTION_PREPARED: "prepared",
    TRANSACTION_COMMIT: "commit",
    TRANSACTION_ROLLBACK: "rollback",
}

# Compression type in sysFlag bits 8-10 (0 is the legacy zlib of 4.x clients).
COMPRESSION_NAMES = {0: "zlib", 1: "lz4", 2: "zstd", 3: "zlib"}

FLAG_NAMES = {
    FLAG_COMPRESSED: "COMPRESSED",
    FLAG_MULTI_TAGS: "MULTI_TAGS",
    FLAG_BORNHOST_V6: "BORNHOST_V6",
    FLAG_STOREHOST_V6: "STOREHOST_V6",
    FLAG_NEED_UNWRAP: "NEED_UNWRAP",
    FLAG_INNER_BATCH: "INNER_BATCH",
}

# Properties: UTF-8 "name\x01value\x02" repeated.
NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"
KEY_SEPARATOR = " "

PROPERTY_KEYS = "KEYS"
PROPERTY_TAGS = "TAGS"
PROPERTY_DELAY = "DELAY"
PROPERTY_UNIQ_KEY = "UNIQ_KEY"
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QUEUE_ID = "REAL_QID"
PROPERTY_TRANSACTION_PREPARED = "TRAN_MSG"
PROPERTY_PRODUCER_GROUP = "PGROUP"
PROPERTY_CLUSTER = "CLUSTER"
PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"
PROPERTY_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
PROPERTY_INNER_MULTI_DISPATCH = "INNER_MULTI_DISPATCH"
PROPERTY_INNER_MULTI_QUEUE_OFFSET = "INNER_MULTI_QUEUE_OFFSET"
PROPERTY_INNER_NUM = "INNER_NUM"
PROPERTY_INNER_BASE = "INNER_BASE"

# 5.2+ property CRC: the last property, "__CRC32#\x01" + 10 digits + "\x02",
# covering the first totalSize - CRC_PROPERTY_LENGTH bytes of the record.
PROPERTY_CRC32 = "__CRC32#"
CRC_DIGITS = 10
CRC_PROPERTY_LENGTH = len(PROPERTY_CRC32) + 1 + CRC_DIGITS + 1  # 20

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"

# ConsumeQueue
CQ_UNIT_SIZE = ConsumeQueueUnit.sizeof()  # 20
CQ_FILLER_SIZE = 0x7FFFFFFF  # fillPreBlank: (0, Integer.MAX_VALUE, 0)
DEFAULT_CQ_UNITS_PER_FILE = 300_000
BCQ_UNIT_SIZE = BatchConsumeQueueUnit.sizeof()  # 46
BCQ_COMPACTED_OFFSET_NONE = -1  # BatchConsumeQueue.INVALID_POS, what every unit carries
DEFAULT_BCQ_FILE_SIZE = 300_000 * BCQ_UNIT_SIZE  # mapperFileSizeBatchConsumeQueue

# ConsumeQueue ext (store/ConsumeQueueExt.java): a CQ unit's tagsCode at or
# below EXT_ADDRESS_MAX is Long.MIN_VALUE + the ext unit's byte offset.
EXT_ADDRESS_MAX = -(1 << 31) - 1  # Integer.MIN_VALUE - 1
EXT_ADDRESS_BASE = -(1 << 63)  # Long.MIN_VALUE
EXT_MIN_UNIT_SIZE = ConsumeQueueExtHeader.sizeof()  # 20: size(2) + tagsCode(8) + msgStoreTime(8) + bitMapSize(2)
EXT_END_BLANK = 4  # END_BLANK_DATA_LENGTH: a unit never uses a file's last 4 bytes
EXT_FILE_END = -1  # short written where the next unit does not fit (fullFillToEnd)
DEFAULT_EXT_FILE_SIZE = 48 * 1024 * 1024  # mappedFileSizeConsumeQueueExt

# Light Message Queue multi-dispatch (common/MixAll.java, store/LmqDispatch.java)
LMQ_PREFIX = "%LMQ%"
LMQ_DISPATCH_SEPARATOR = ","
LMQ_QUEUE_ID = 0
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
SYSTEM_TOPIC_PREFIX = "rmq_sys_"  # TopicValidator: no multi-dispatch from these (nor from SCHEDULE_TOPIC_XXXX)

# IndexFile
INDEX_HEADER_SIZE = IndexHeader.sizeof()  # 40
INDEX_SLOT_SIZE = IndexSlot.sizeof()  # 4
INDEX_ENTRY_SIZE = IndexEntry.sizeof()  # 20
DEFAULT_HASH_SLOTS = 5_000_000
DEFAULT_INDEX_ENTRIES = 20_000_000
INDEX_KEY_SEPARATOR = "#"

# 5.x timer message store (store/timer/TimerLog.java, TimerWheel.java, TimerMessageStore.java)
TIMER_TOPIC = "rmq_sys_wheel_timer"
TIMER_LOG_UNIT_SIZE = 52
TIMER_BLANK_MAGIC = (0xBBCCDDEE ^ (1880681586 + 8)) - (1 << 32)  # Java int, negative
TIMER_MIN_BLANK_LEN = 16  # size + prevPos + magic
TIMER_MAGIC_DEFAULT = 1
TIMER_MAGIC_ROLL = 2
TIMER_MAGIC_DELETE = 4
TIMER_WHEEL_TTL_DAY = 7
TIMER_WHEEL_SLOTS = 2 * TIMER_WHEEL_TTL_DAY * 86400  # slotsTotal * 2, whatever the precision
TIMER_SLOT_SIZE = 32
TIMERCHECK_SIZE = 4096
DEFAULT_TIMER_PRECISION_MS = 1000
DEFAULT_TIMER_LOG_FILE_SIZE = 100 << 20  # mappedFileSizeTimerLog
PROPERTY_TIMER_OUT_MS = "TIMER_OUT_MS"
PROPERTY_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
PROPERTY_TIMER_ENQUEUE_MS = "TIMER_ENQUEUE_MS"
PROPERTY_TIMER_DEQUEUE_MS = "TIMER_DEQUEUE_MS"
PROPERTY_TIMER_DEL_UNIQKEY = "TIMER_DEL_UNIQKEY"

# Files
COMMITLOG_NAME_DIGITS = 20
DEFAULT_COMMITLOG_FILE_SIZE = 1 << 30
CHECKPOINT_SIZE = 4096
MAX_MESSAGE_SIZE = 4 * 1024 * 1024  # broker default maxMessageSize

# Compaction topics (store/kv/CompactionStore.java, CompactionLog.java, CompactionPositionMgr.java)
COMPACTION_DIR = "compaction"  # under the store root
COMPACTION_LOG_DIR = "compactionLog"  # compaction/compactionLog/TOPIC/QID/: CommitLog records, physicalOffset = own offset
COMPACTION_CQ_DIR = "compactionCq"  # compaction/compactionCq/TOPIC/QID/: SparseConsumeQueue, file names = the log files'
COMPACTION_CHECKPOINT = "position-checkpoint"  # JSON {"queueOffsetMap": {"TOPIC_QID": last compacted queue offset}}
COMPACTION_CHECKPOINT_NONE = -1  # CompactionPositionMgr.getOffset for a queue never compacted
SCQ_END_OFFSET = -1  # SparseConsumeQueue.putEndPositionInfo: the unit closing a full file
