"""Names the broker gives to the hops of a message's life: system topics, properties, tags, and the fields of the
JSON bodies of POP checkpoints and acks. No I/O.

Sources (Apache RocketMQ 5.3.3): common/topic/TopicValidator.java, common/message/MessageConst.java,
common/PopAckConstants.java, common/KeyBuilder.java, common/MixAll.java, store/pop/PopCheckPoint.java,
store/pop/AckMsg.java, store/pop/BatchAckMsg.java, broker/transaction/queue/TransactionalMessageUtil.java,
broker/schedule/ScheduleMessageService.java.
"""

from __future__ import annotations

from .constants import (  # noqa: F401 (named here too: every name of a message's life in one place)
    PROPERTY_DELAY,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_TIMER_OUT_MS,
    PROPERTY_UNIQ_KEY,
    RETRY_GROUP_TOPIC_PREFIX,
    SCHEDULE_TOPIC,
    TIMER_TOPIC,
    TRANS_HALF_TOPIC,
)

# --- topics ---
TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TRANS_CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"  # halves discarded after transactionCheckMax checks
REVIVE_TOPIC_PREFIX = "rmq_sys_REVIVE_LOG_"  # + cluster name: POP checkpoints and acks
RETRY_PREFIX = RETRY_GROUP_TOPIC_PREFIX  # + group: push retries; + group + "_" (v1) or "+" (v2) + topic: POP retries
DLQ_PREFIX = "%DLQ%"  # + group
POP_RETRY_SEPARATORS = ("+", "_")  # v2 first: a group name may hold "_"

# --- consumer groups the broker itself commits offsets for ---
TRANS_GROUP = "CID_RMQ_SYS_TRANS"  # the transaction check service, on the half and op queues
REVIVE_GROUP = "CID_RMQ_SYS_REVIVE_GROUP"  # the POP revive service, on the revive queues

# --- properties ---
PROPERTY_TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
PROPERTY_TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
PROPERTY_FIRST_POP_TIME = "1ST_POP_TIME"  # on a message the POP revive service put into a POP retry topic

# --- tags of records about messages ---
CK_TAG = "ck"
ACK_TAG = "ack"
BATCH_ACK_TAG = "bAck"
OP_REMOVE_TAG = "d"  # an op record: the half queue offsets it settles, comma separated
OP_OFFSET_SEPARATOR = ","

# --- JSON fields of a POP checkpoint (PopCheckPoint) and an ack (AckMsg, BatchAckMsg) ---
CK_START_OFFSET = "so"
CK_DIFFS = "d"  # queue offset of message i = so + d[i]
CK_BITMAP = "bm"  # bit i: message i acked before the checkpoint was written (buffer merge)
CK_NUM = "n"
CK_POP_TIME = "pt"
CK_INVISIBLE_TIME = "it"
CK_REVIVE_TIME = "reviveTime"
CK_REVIVE_OFFSET = "ro"
CK_QUEUE_ID = "q"
CK_TOPIC = "t"
CK_GROUP = "c"
CK_BROKER = "bn"
ACK_OFFSET = "ao"
ACK_OFFSET_LIST = "aol"

# --- the hops: what one stored copy of a message is ---
HOP_PUT = "put"  # as the producer sent it, in its own topic
HOP_SCHEDULED = "scheduled"  # held in SCHEDULE_TOPIC_XXXX for a delay level (a retry is held there too)
HOP_TIMER = "timer"  # held in the timer wheel's topic
HOP_DELIVERED = "delivered"  # put into its real topic when its delay or timer fell due
HOP_HALF = "half"  # a transaction's half message
HOP_HALF_CHECK = "half_check"  # the half put again by a check (TRANSACTION_CHECK_TIMES)
HOP_PREPARED = "prepared"  # 4.x-style prepared record in the real topic
HOP_COMMIT = "commit"
HOP_ROLLBACK = "rollback"  # 4.x-style rollback record
HOP_CHECK_MAX = "check_max"  # the half discarded after transactionCheckMax checks
HOP_RETRY = "retry"  # in a push group's %RETRY% topic
HOP_POP_RETRY = "pop_retry"  # revived into a POP group's retry topic
HOP_DLQ = "dlq"
HOLDING_HOPS = (HOP_SCHEDULED, HOP_TIMER)
TX_HOPS = (HOP_HALF, HOP_HALF_CHECK, HOP_PREPARED, HOP_COMMIT, HOP_ROLLBACK, HOP_CHECK_MAX)

# --- records about messages (evidence) ---
EVIDENCE_OP = "op"
EVIDENCE_CHECKPOINT = "checkpoint"
EVIDENCE_ACK = "ack"

# --- where a message stands (a journey's verdict) ---
STATE_SCHEDULED = "scheduled"
STATE_DELIVERED = "delivered"
STATE_DEAD_LETTER = "dead_letter"
STATE_TX_PENDING = "tx_pending"
STATE_TX_COMMITTED = "tx_committed"
STATE_TX_ROLLED_BACK = "tx_rolled_back"
STATE_TX_DISCARDED = "tx_discarded"
STATES = (STATE_SCHEDULED, STATE_DELIVERED, STATE_DEAD_LETTER, STATE_TX_PENDING, STATE_TX_COMMITTED, STATE_TX_ROLLED_BACK, STATE_TX_DISCARDED)

# --- what a consumer group did with it ---
GROUP_CONSUMED = "consumed"
GROUP_NOT_CONSUMED = "not_consumed"
GROUP_ACKED = "acked"
GROUP_UNACKED = "unacked"

# Properties a record carries only when the broker moved the message (delay, timer, retry, DLQ, POP revive) or it
# belongs to a transaction: a record with none of them, in a topic of its own, is a message as its producer put it.
MOVED_PROPERTIES = (
    PROPERTY_REAL_TOPIC,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_DELAY,
    PROPERTY_TIMER_OUT_MS,
    PROPERTY_TIMER_DELAY_SEC,
    PROPERTY_TRANSACTION_CHECK_TIMES,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_FIRST_POP_TIME,
    PROPERTY_PRODUCER_GROUP,
)
