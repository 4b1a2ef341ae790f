"""One decoded CommitLog message and the small decoders it needs.

Properties, hosts, offset message ids and transaction types are turned into
the values an operator reads; the byte positions come from the scan.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Any

from rmqdump.readers.fastpath import struct_format
from rmqdump.schemas import OffsetMsgIdV4, OffsetMsgIdV6
from rmqdump.schemas import constants as C


def decode_properties(raw: bytes) -> tuple[dict[str, str], bool]:
    """Parse `name\\x01value\\x02...` the way the broker does; second value False if malformed.

    Like MessageDecoder.string2messageProperties, items without a name/value
    separator are dropped (and reported as malformed); the last value wins.
    """
    try:
        text = raw.decode("utf-8")
        wellformed = True
    except UnicodeDecodeError:
        text = raw.decode("utf-8", errors="replace")
        wellformed = False
    props: dict[str, str] = {}
    for item in text.split(C.PROPERTY_SEPARATOR):
        if not item:
            continue
        name, sep, value = item.partition(C.NAME_VALUE_SEPARATOR)
        if not sep:
            wellformed = False
            continue
        props[name] = value
    return props, wellformed


def split_keys(keys: str | None) -> list[str]:
    """KEYS split on one space, in order, duplicates kept, empty tokens dropped."""
    if not keys:
        return []
    return [k for k in keys.split(C.KEY_SEPARATOR) if k]


def format_address(address: bytes) -> str:
    """An IP the way the broker's Java prints it: IPv6 as eight uncompressed hex groups."""
    if len(address) == 16:
        return ":".join(f"{int.from_bytes(address[i : i + 2], 'big'):x}" for i in range(0, 16, 2))
    return "%d.%d.%d.%d" % tuple(address)  # noqa: UP031 (four bytes, the hot path of a dump)


def format_host(address: bytes, port: int) -> str:
    if len(address) == 16:
        return f"[{format_address(address)}]:{port}"
    return f"{format_address(address)}:{port}"


_MSGID_V4, _MSGID_V6 = struct_format(OffsetMsgIdV4), struct_format(OffsetMsgIdV6)


def offset_msg_id(store_address: bytes, store_port: int, phys_offset: int) -> str:
    """The offset message id: store IP, port, physical offset, uppercase hex."""
    layout = _MSGID_V6 if len(store_address) == 16 else _MSGID_V4
    return layout.pack(store_address, store_port, phys_offset).hex().upper()


def transaction_name(sys_flag: int) -> str:
    return C.TRANSACTION_NAMES[sys_flag & C.TRANSACTION_MASK]


def flag_names(sys_flag: int) -> list[str]:
    names = [n for bit, n in C.FLAG_NAMES.items() if sys_flag & bit]
    if sys_flag & C.FLAG_COMPRESSED:
        names.append("COMPRESSION_" + compression_name(sys_flag).upper())
    return names


def compression_name(sys_flag: int) -> str:
    return C.COMPRESSION_NAMES.get((sys_flag & C.COMPRESSION_MASK) >> C.COMPRESSION_SHIFT, "unknown")


# The most a body may expand to: the producer refuses bodies over maxMessageSize (4 MiB by default)
# before it compresses them, so anything far past that is damage (or a decompression bomb), not a
# message. 4x the default keeps a listed body (decoded, then base64 or hex text) well inside 500 MB.
DECOMPRESSED_LIMIT = 16 << 20


def decompress(body: bytes, sys_flag: int, limit: int = DECOMPRESSED_LIMIT) -> bytes:
    """Uncompress a body stored with the COMPRESSED flag (zlib, lz4 frame or zstd), never past `limit` bytes."""
    kind = compression_name(sys_flag)
    if kind == "zlib":
        d = zlib.decompressobj()
        out = d.decompress(body, limit + 1)
        if len(out) <= limit and not d.eof:
            raise zlib.error("incomplete or truncated stream")
    elif kind == "lz4":
        import lz4.frame

        d = lz4.frame.LZ4FrameDecompressor()
        out = d.decompress(body, max_length=limit + 1)
        if len(out) <= limit and not d.eof:
            raise RuntimeError("incomplete or truncated LZ4 frame")
    elif kind == "zstd":
        import zstandard

        parts, n = [], 0
        with zstandard.ZstdDecompressor().stream_reader(body, read_across_frames=True) as r:
            while n <= limit:
                chunk = r.read(min(1 << 20, limit + 1 - n))
                if not chunk:
                    break
                parts.append(chunk)
                n += len(chunk)
        out = b"".join(parts)
    else:
        raise ValueError(f"unknown compression type in sysFlag 0x{sys_flag:x}")
    if len(out) > limit:
        raise ValueError(f"expands past {limit} bytes (a body is at most the producer's maxMessageSize)")
    return out


@dataclass
class Message:
    file: str
    phys_offset: int
    total_size: int
    magic: int
    body_crc: int
    crc_ok: bool | None
    prop_crc_ok: bool | None
    queue_id: int
    flag: int
    queue_offset: int
    sys_flag: int
    born_timestamp: int
    born_host: str
    store_timestamp: int
    store_host: str
    reconsume_times: int
    prepared_transaction_offset: int
    body_length: int
    topic: str
    properties: dict[str, str]
    msg_id: str
    body: bytes | None = None
    properties_ok: bool = True
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def magic_version(self) -> int:
        return 2 if self.magic == C.MAGIC_V2 else 1

    @property
    def transaction(self) -> str:
        return transaction_name(self.sys_flag)

    @property
    def tags(self) -> str | None:
        return self.properties.get(C.PROPERTY_TAGS)

    @property
    def keys(self) -> list[str]:
        return split_keys(self.properties.get(C.PROPERTY_KEYS))

    @property
    def uniq_key(self) -> str | None:
        return self.properties.get(C.PROPERTY_UNIQ_KEY)

    def to_dict(self) -> dict[str, Any]:
        d = {
            "kind": "message",
            "file": self.file,
            "phys_offset": self.phys_offset,
            "total_size": self.total_size,
            "magic_version": self.magic_version,
            "body_crc": self.body_crc,
            "crc_ok": self.crc_ok,
            "prop_crc_ok": self.prop_crc_ok,
            "queue_id": self.queue_id,
            "flag": self.flag,
            "queue_offset": self.queue_offset,
            "sys_flag": self.sys_flag,
            "sys_flag_names": flag_names(self.sys_flag),
            "transaction": self.transaction,
            "born_timestamp": self.born_timestamp,
            "born_host": self.born_host,
            "store_timestamp": self.store_timestamp,
            "store_host": self.store_host,
            "reconsume_times": self.reconsume_times,
            "prepared_transaction_offset": self.prepared_transaction_offset,
            "body_length": self.body_length,
            "topic": self.topic,
            "properties": self.properties,
            "tags": self.tags,
            "keys": self.keys,
            "uniq_key": self.uniq_key,
            "msg_id": self.msg_id,
        }
        d.update(self.extra)
        return d
