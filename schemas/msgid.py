"""Message ids, as bytes before their uppercase-hex encoding.

Offset msgId: common/message/MessageDecoder.createMessageId (store host IP,
port, physical offset). UNIQ_KEY: common/message/MessageClientIDSetter (client
IP, pid, class loader hash, then ms since the producer's month start and a
counter). The IP is 4 or 16 bytes; the hex text is 32 or 56 characters.
"""

from __future__ import annotations

from construct import Bytes, Int16ub, Int32sb, Int32ub, Int64sb, Struct


def offset_msg_id(ip_length: int) -> Struct:
    return Struct("address" / Bytes(ip_length), "port" / Int32sb, "phys_offset" / Int64sb)


def uniq_key(ip_length: int) -> Struct:
    return Struct(
        "address" / Bytes(ip_length),
        "pid" / Int16ub,
        "class_loader_hash" / Int32sb,
        "month_millis" / Int32ub,
        "counter" / Int16ub,
    )


OffsetMsgIdV4, OffsetMsgIdV6 = offset_msg_id(4), offset_msg_id(16)
UniqKeyV4, UniqKeyV6 = uniq_key(4), uniq_key(16)
