"""CommitLog message record and end-of-file marker.

Layout: common/message/MessageDecoder.java and store/CommitLog.java
(calMsgLength, DefaultAppendMessageCallback). Big-endian throughout.
The host fields are 8 bytes (IPv4 + port) or 20 bytes (IPv6 + port), chosen
by the BORNHOST_V6 / STOREHOSTADDRESS_V6 sysFlag bits; the topic length is
one byte in V1 records and two bytes in V2 records. Magic is a plain integer
so that a damaged record parses and its damage can be reported.
"""

from __future__ import annotations

from construct import Bytes, IfThenElse, Int8ub, Int16sb, Int16ub, Int32sb, Int32ub, Int64sb, Struct, this

from .constants import FLAG_BORNHOST_V6, FLAG_STOREHOST_V6, MAGIC_V2

HostV4 = Struct("address" / Bytes(4), "port" / Int32sb)
HostV6 = Struct("address" / Bytes(16), "port" / Int32sb)


def _record_fields(born_host, store_host, topic_length):
    return [
        "total_size" / Int32sb,
        "magic" / Int32ub,
        "body_crc" / Int32sb,
        "queue_id" / Int32sb,
        "flag" / Int32sb,
        "queue_offset" / Int64sb,
        "phys_offset" / Int64sb,
        "sys_flag" / Int32sb,
        "born_timestamp" / Int64sb,
        "born_host" / born_host,
        "store_timestamp" / Int64sb,
        "store_host" / store_host,
        "reconsume_times" / Int32sb,
        "prepared_transaction_offset" / Int64sb,
        "body_length" / Int32sb,
        "body" / Bytes(this.body_length),
        "topic_length" / topic_length,
        "topic" / Bytes(this.topic_length),
        "properties_length" / Int16sb,
        "properties" / Bytes(this.properties_length),
    ]


MessageRecord = Struct(
    *_record_fields(
        born_host=IfThenElse(this.sys_flag & FLAG_BORNHOST_V6, HostV6, HostV4),
        store_host=IfThenElse(this.sys_flag & FLAG_STOREHOST_V6, HostV6, HostV4),
        topic_length=IfThenElse(this.magic == MAGIC_V2, Int16ub, Int8ub),
    )
)
"""One CommitLog record, every version and host variant."""


def message_header(born_v6: bool = False, store_v6: bool = False) -> Struct:
    """The fixed-size head of one host variant: every field before the body."""
    fields = _record_fields(HostV6 if born_v6 else HostV4, HostV6 if store_v6 else HostV4, Int8ub)
    names = [f.name for f in fields]
    return Struct(*fields[: names.index("body")])


RecordPrefix = Struct(*_record_fields(HostV4, HostV4, Int8ub)[:2])
"""totalSize and magic: what a sequential walk reads at every record start."""

TopicLengthV1 = Int8ub
TopicLengthV2 = Int16ub
PropertiesLength = Int16sb

BlankMarker = Struct("total_size" / Int32sb, "magic" / Int32ub)
"""Written where the next record does not fit: totalSize = bytes left in the file."""


MIN_RECORD_SIZE = message_header().sizeof() + TopicLengthV1.sizeof() + PropertiesLength.sizeof()  # empty body, topic and properties
