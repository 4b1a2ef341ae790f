"""One CommitLog record read as a hop of a message's life: a stored copy of a message, or a record about others.

A message the broker moves (a delay, a timer, a transaction, a retry, the DLQ, a POP revive) is written again, whole,
under another topic, keeping its UNIQ_KEY: each such record is a `Copy`, and what it is (`hop`) follows from its topic,
its transaction type and its properties. Records that are not messages but name some (a transaction's op record, a POP
checkpoint or ack, in the revive topic or still held in the timer wheel) are `Evidence`, with the queue positions they
name. Which record is which is the broker's own naming (rmqdump.schemas.lifecycle); nothing here links records.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from rmqdump.common.jsontext import fields_of
from rmqdump.readers.message import Message
from rmqdump.schemas import constants as C
from rmqdump.schemas import lifecycle as L

QueuePos = tuple[str, int, int]  # topic, queue id, queue offset


def _int(value: str | None) -> int | None:
    try:
        return None if value is None else int(value)
    except ValueError:
        return None


def is_pop_retry_topic(topic: str, m: Message | None = None) -> bool:
    """A POP retry topic (%RETRY%GROUP+TOPIC, or %RETRY%GROUP_TOPIC holding revived messages)."""
    if not topic.startswith(L.RETRY_PREFIX):
        return False
    if "+" in topic:
        return True
    return m is not None and L.PROPERTY_FIRST_POP_TIME in m.properties


@dataclass
class Copy:
    """One stored copy of a message (a record carrying its UNIQ_KEY) and what its header and properties say."""

    uniq_key: str
    hop: str
    topic: str
    queue_id: int
    queue_offset: int
    phys_offset: int
    store_timestamp: int
    total_size: int
    msg_id: str
    file: str
    real_topic: str | None = None
    real_queue_id: int | None = None
    delay_level: int | None = None
    due_time: int | None = None  # when a held copy falls due (delay level or timer)
    reconsume_times: int = 0
    check_times: int | None = None  # TRANSACTION_CHECK_TIMES of a half put again by a check
    prepared_offset: int | None = None  # a commit's half (preparedTransactionOffset)
    origin_msg_id: str | None = None  # ORIGIN_MESSAGE_ID of a retry or DLQ copy
    retry_topic: str | None = None  # RETRY_TOPIC: the topic a retry or DLQ copy came from
    producer_group: str | None = None
    keys: list[str] = field(default_factory=list)
    tags: str | None = None
    recovery_drops: bool = False  # past where the broker's recovery would cut the CommitLog

    @property
    def pos(self) -> QueuePos:
        return (self.topic, self.queue_id, self.queue_offset)

    @property
    def target_topic(self) -> str:
        """The topic consumers read it in: its own, or, while held, the one it is bound for."""
        if self.hop in L.HOLDING_HOPS or self.hop in (L.HOP_HALF, L.HOP_HALF_CHECK, L.HOP_CHECK_MAX):
            return self.real_topic or self.topic
        return self.topic

    def to_dict(self) -> dict:
        return {"kind": "copy", **fields_of(self, omit=("file",), rename={"store_timestamp": "store_time"}), "file": self.file}


@dataclass
class Evidence:
    """A record about messages: an op record settling halves, a POP checkpoint or ack; `names` the queue positions."""

    hop: str  # op, checkpoint, ack
    topic: str
    queue_id: int
    queue_offset: int
    phys_offset: int
    store_timestamp: int
    file: str
    names: list[QueuePos]
    held_in_timer: bool = False  # a checkpoint or ack still in the timer wheel, not yet in the revive topic
    group: str | None = None
    pop_time: int | None = None
    start_offset: int | None = None
    invisible_time: int | None = None
    revive_time: int | None = None
    revive_queue: int | None = None
    acked: list[int] = field(default_factory=list)  # a checkpoint's offsets already acked when it was written
    problem: str | None = None  # why its body could not be read

    def ck_key(self) -> tuple | None:
        """What the revive service matches a checkpoint and its acks by."""
        if not self.names or self.group is None or self.pop_time is None or self.start_offset is None:
            return None
        t, q, _ = self.names[0]
        return (self.group, t, q, self.start_offset, self.pop_time)

    def to_dict(self, uniq_key: str | None = None, name: QueuePos | None = None) -> dict:
        d = {
            "kind": "evidence",
            "uniq_key": uniq_key,
            "hop": self.hop,
            "topic": self.topic,
            "queue_id": self.queue_id,
            "queue_offset": self.queue_offset,
            "phys_offset": self.phys_offset,
            "store_time": self.store_timestamp,
            "names_topic": None if name is None else name[0],
            "names_queue_id": None if name is None else name[1],
            "names_queue_offset": None if name is None else name[2],
            "held_in_timer": self.held_in_timer,
            "group": self.group,
            "pop_time": self.pop_time,
            "invisible_time": self.invisible_time,
            "revive_time": self.revive_time,
            "file": self.file,
        }
        if self.problem:
            d["problem"] = self.problem
        return d


def is_own_topic(topic: str) -> bool:
    """A topic producers put into, not one the broker moves messages through (system, schedule, retry, DLQ topics)."""
    return not (
        topic in (L.SCHEDULE_TOPIC, L.TIMER_TOPIC, L.TRANS_HALF_TOPIC, L.TRANS_OP_HALF_TOPIC, L.TRANS_CHECK_MAX_TIME_TOPIC)
        or topic.startswith((L.REVIVE_TOPIC_PREFIX, L.RETRY_PREFIX, L.DLQ_PREFIX))
    )


def is_evidence_topic(topic: str) -> bool:
    return topic == L.TRANS_OP_HALF_TOPIC or topic.startswith(L.REVIVE_TOPIC_PREFIX)


def wants_body(m: Message) -> bool:
    """Whether the record's body must be read: the records about others carry what they name in their body."""
    return is_evidence_topic(m.topic) or (m.topic == L.TIMER_TOPIC and (m.properties.get(L.PROPERTY_REAL_TOPIC) or "").startswith(L.REVIVE_TOPIC_PREFIX))


def read_record(m: Message, body: bytes | None = None) -> Copy | Evidence | None:
    """The record as a copy of a message, or as evidence about some; None for a record that is neither."""
    props = m.properties
    real_topic = props.get(L.PROPERTY_REAL_TOPIC)
    if is_evidence_topic(m.topic) or (m.topic == L.TIMER_TOPIC and (real_topic or "").startswith(L.REVIVE_TOPIC_PREFIX)):
        return _evidence(m, body)
    uniq = m.uniq_key or m.msg_id
    hop = _hop(m, real_topic)
    c = Copy(
        uniq, hop, m.topic, m.queue_id, m.queue_offset, m.phys_offset, m.store_timestamp, m.total_size, m.msg_id, m.file,
        real_topic=real_topic, real_queue_id=_int(props.get(L.PROPERTY_REAL_QUEUE_ID)),
        reconsume_times=m.reconsume_times, keys=m.keys, tags=m.tags,
        origin_msg_id=props.get(L.PROPERTY_ORIGIN_MESSAGE_ID), retry_topic=props.get(L.PROPERTY_RETRY_TOPIC),
        producer_group=props.get(L.PROPERTY_PRODUCER_GROUP),
        check_times=_int(props.get(L.PROPERTY_TRANSACTION_CHECK_TIMES)),
    )  # fmt: skip
    level = _int(props.get(L.PROPERTY_DELAY))
    if hop == L.HOP_SCHEDULED:
        c.delay_level = level if level is not None else m.queue_id + 1
    elif level:
        c.delay_level = level
    if hop == L.HOP_TIMER:
        c.due_time = _int(props.get(L.PROPERTY_TIMER_OUT_MS))
    if hop == L.HOP_COMMIT:
        c.prepared_offset = m.prepared_transaction_offset
    return c


def _hop(m: Message, real_topic: str | None) -> str:
    t = m.topic
    tx = m.sys_flag & C.TRANSACTION_MASK
    if t == L.SCHEDULE_TOPIC:
        return L.HOP_SCHEDULED
    if t == L.TIMER_TOPIC:
        return L.HOP_TIMER
    if t == L.TRANS_HALF_TOPIC:
        return L.HOP_HALF_CHECK if L.PROPERTY_TRANSACTION_CHECK_TIMES in m.properties else L.HOP_HALF
    if t == L.TRANS_CHECK_MAX_TIME_TOPIC:
        return L.HOP_CHECK_MAX
    if t.startswith(L.DLQ_PREFIX):
        return L.HOP_DLQ
    if t.startswith(L.RETRY_PREFIX):
        return L.HOP_POP_RETRY if is_pop_retry_topic(t, m) else L.HOP_RETRY
    if tx == C.TRANSACTION_COMMIT:
        return L.HOP_COMMIT
    if tx == C.TRANSACTION_PREPARED:
        return L.HOP_PREPARED
    if tx == C.TRANSACTION_ROLLBACK:
        return L.HOP_ROLLBACK
    if real_topic == t and (L.PROPERTY_DELAY in m.properties or L.PROPERTY_TIMER_OUT_MS in m.properties):
        return L.HOP_DELIVERED
    return L.HOP_PUT


def _evidence(m: Message, body: bytes | None) -> Evidence:
    held = m.topic == L.TIMER_TOPIC
    ev = Evidence("", m.topic, m.queue_id, m.queue_offset, m.phys_offset, m.store_timestamp, m.file, [], held_in_timer=held)
    tag = m.tags or ""
    if m.topic == L.TRANS_OP_HALF_TOPIC:
        ev.hop = L.EVIDENCE_OP
        text = (body or b"").decode("utf-8", errors="replace")
        for tok in text.split(L.OP_OFFSET_SEPARATOR):
            tok = tok.strip()
            if not tok:
                continue
            if not tok.lstrip("-").isdigit():
                ev.problem = f"op body token {tok[:40]!r} is not a queue offset"
                continue
            ev.names.append((L.TRANS_HALF_TOPIC, m.queue_id, int(tok)))
        return ev
    ev.hop = L.EVIDENCE_CHECKPOINT if tag == L.CK_TAG else L.EVIDENCE_ACK
    try:
        doc = json.loads((body or b"").decode("utf-8"))
        if not isinstance(doc, dict):
            raise ValueError("not a JSON object")
        ev.group = str(doc[L.CK_GROUP])
        topic, qid, so = str(doc[L.CK_TOPIC]), int(doc[L.CK_QUEUE_ID]), int(doc[L.CK_START_OFFSET])
        ev.pop_time, ev.start_offset = int(doc[L.CK_POP_TIME]), so
        if ev.hop == L.EVIDENCE_CHECKPOINT:
            diffs = [int(x) for x in doc.get(L.CK_DIFFS) or []]
            bm = int(doc.get(L.CK_BITMAP) or 0)
            ev.names = [(topic, qid, so + d) for d in diffs]
            ev.acked = [so + d for i, d in enumerate(diffs) if bm >> i & 1]
            ev.invisible_time = _int(str(doc.get(L.CK_INVISIBLE_TIME))) if doc.get(L.CK_INVISIBLE_TIME) is not None else None
            ev.revive_time = int(doc[L.CK_REVIVE_TIME]) if doc.get(L.CK_REVIVE_TIME) is not None else ev.pop_time + (ev.invisible_time or 0)
            ev.revive_queue = _int(m.properties.get(L.PROPERTY_REAL_QUEUE_ID)) if held else m.queue_id
        else:
            offsets = doc.get(L.ACK_OFFSET_LIST) if tag == L.BATCH_ACK_TAG or L.ACK_OFFSET_LIST in doc else [doc[L.ACK_OFFSET]]
            ev.names = [(topic, qid, int(o)) for o in offsets or []]
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        ev.problem = f"the {ev.hop} body is not the JSON the broker writes (fields {L.CK_GROUP}, {L.CK_TOPIC}, {L.CK_QUEUE_ID}, {L.CK_START_OFFSET}, {L.CK_POP_TIME})"
        ev.names = []
    return ev
