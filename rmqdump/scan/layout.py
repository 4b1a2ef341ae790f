"""The scan kernel's layout constants, computed from the construct declarations in schemas/.

Every byte offset, width and signedness the kernel (rmqdump.scan.kernel) uses
is computed here and frozen into the compiled code as constants (tests pin the
kernel's columns to construct's parse); `fingerprint()` keys the compile cache
by them, so a schema change never runs stale code.
"""

from __future__ import annotations

import hashlib
import zlib

import numpy as np

from rmqdump.readers.fastpath import field_offset, numpy_dtype
from rmqdump.schemas import HostV4, HostV6, MessageRecord, message_header
from rmqdump.schemas import constants as C
from rmqdump.schemas.commitlog import MIN_RECORD_SIZE, PropertiesLength, TopicLengthV1, TopicLengthV2
from rmqdump.schemas.dledger import ENTRY_MAGIC, EntryHeader


def _field(con, name):
    for sc in con.subcons:
        if sc.name == name:
            return sc
    raise KeyError(name)


def _width_signed(con) -> tuple[int, bool]:
    dt = numpy_dtype(con)
    assert dt.byteorder in (">", "|"), f"{con}: the kernel reads big-endian fields"
    return dt.itemsize, dt.kind == "i"


# Header fields in schema order; the host variant (IPv4/IPv6 born and store host) moves the later ones.
HEADER_FIELDS = tuple(sc.name for sc in message_header().subcons)
_VARIANTS = [(False, False), (True, False), (False, True), (True, True)]  # index: born_v6 | store_v6 << 1
_HEADERS = [message_header(b, s) for b, s in _VARIANTS]
HEADER_OFFSETS = np.array([[field_offset(h, n) for n in HEADER_FIELDS] for h in _HEADERS], dtype=np.int64)
HEADER_SIZES = np.array([h.sizeof() for h in _HEADERS], dtype=np.int64)
F = {n: i for i, n in enumerate(HEADER_FIELDS)}
_INT_FIELDS = [n for n in HEADER_FIELDS if n not in ("born_host", "store_host")]
WIDTHS = {n: _width_signed(_field(message_header(), n).subcon) for n in _INT_FIELDS}
HOST_ADDR = (HostV4.subcons[0].sizeof(), HostV6.subcons[0].sizeof())  # address bytes, v4 and v6
BORN_V6, STORE_V6 = C.FLAG_BORNHOST_V6, C.FLAG_STOREHOST_V6

# The variable tail after the header: body, topic length (width by magic), topic, properties length, properties.
TOPIC_LEN_V1 = _width_signed(TopicLengthV1)
TOPIC_LEN_V2 = _width_signed(TopicLengthV2)
PROPS_LEN = _width_signed(PropertiesLength)
assert [sc.name for sc in MessageRecord.subcons[len(HEADER_FIELDS) :]] == ["body", "topic_length", "topic", "properties_length", "properties"]

# DLedger framing (scan's `frame` argument): an entry header before each record, checked and skipped.
FRAME_SIZE = EntryHeader.sizeof()
FRAME_MAGIC = ENTRY_MAGIC
FRAME_FIELDS = {n: (field_offset(EntryHeader, n), *_width_signed(_field(EntryHeader, n).subcon)) for n in ("magic", "size", "pos", "body_size")}

# Property names the dispatcher reads, and the 5.2+ property CRC trailer.
CRC_PREFIX = np.frombuffer((C.PROPERTY_CRC32 + C.NAME_VALUE_SEPARATOR).encode(), dtype=np.uint8).copy()
NAMES = {n: np.frombuffer(n.encode(), dtype=np.uint8).copy() for n in (C.PROPERTY_TAGS, C.PROPERTY_KEYS, C.PROPERTY_UNIQ_KEY, C.PROPERTY_DELAY)}
SEP_NV, SEP_PROP, SEP_KEY = ord(C.NAME_VALUE_SEPARATOR), ord(C.PROPERTY_SEPARATOR), ord(C.KEY_SEPARATOR)


def _crc_tables() -> np.ndarray:
    """Slicing-by-8 tables of the CRC-32 zlib uses (java.util.zip.CRC32), checked against zlib below."""
    t = np.zeros((8, 256), dtype=np.uint32)
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0xEDB88320 if c & 1 else c >> 1
        t[0, i] = c
    for k in range(1, 8):
        for i in range(256):
            t[k, i] = (t[k - 1, i] >> 8) ^ t[0, t[k - 1, i] & 0xFF]
    return t


CRC_TABLES = _crc_tables()
assert zlib.crc32(b"123456789") == 0xCBF43926

# Kernel output: one int64 row per column, one entry per record.
RECORD_COLUMNS = (
    "_pos", "_end", "total_size", "magic", "body_crc", "queue_id", "flag", "queue_offset", "phys_offset", "sys_flag",
    "born_timestamp", "born_host_pos", "born_host_then", "store_timestamp", "store_host_pos", "store_host_then",
    "reconsume_times", "prepared_transaction_offset", "body_length", "body_pos", "topic_length", "topic_pos",
    "properties_length", "properties_pos",
)  # fmt: skip
EXTRA_COLUMNS = ("crc", "prop_crc", "topic_id", "tags_hash", "tags_slow", "tags_pos", "tags_len", "delay", "delay_pos", "delay_len")
COLUMNS = RECORD_COLUMNS + EXTRA_COLUMNS
COL = {n: i for i, n in enumerate(COLUMNS)}
KEY_COLUMNS = ("rec", "pos", "len", "hash", "slow", "uniq", "units")  # len in bytes, units in UTF-16; uniq: 1 UNIQ_KEY, 0 a KEYS token
KCOL = {n: i for i, n in enumerate(KEY_COLUMNS)}

# Stop codes
END, FULL, STUCK = 0, 1, 2  # reached the end of the range; out of room; a record that cannot be taken (diagnose it)
DELAY_NONE, DELAY_PY = 0, -2  # no DELAY; a DELAY value that is not plain ASCII digits (Python decides)

# unit_pointers' findings about a ConsumeQueue unit, one bit each (rmqdump.checks.cqunits gives each its problem code)
UNIT_DANGLING, UNIT_OUTSIDE, UNIT_NOT_START, UNIT_SIZE, UNIT_TOPIC, UNIT_QUEUE, UNIT_QUEUE_OFFSET, UNIT_TAGS = 1, 2, 4, 8, 16, 32, 64, 128


def fingerprint() -> str:
    """The constants the compiled code depends on besides its sources (rmqdump.scan.native.code_fingerprint adds the
    shared helpers' bytes)."""
    h = hashlib.sha1()
    for a in (HEADER_OFFSETS, HEADER_SIZES, CRC_TABLES, CRC_PREFIX):
        h.update(a.tobytes())
    h.update(repr((WIDTHS, HOST_ADDR, BORN_V6, STORE_V6, TOPIC_LEN_V1, TOPIC_LEN_V2, PROPS_LEN, MIN_RECORD_SIZE, C.MESSAGE_MAGICS, C.MAGIC_V2)).encode())
    h.update(repr((FRAME_SIZE, FRAME_MAGIC, sorted(FRAME_FIELDS.items()))).encode())
    h.update(repr((sorted((k, v.tobytes()) for k, v in NAMES.items()), SEP_NV, SEP_PROP, SEP_KEY, COLUMNS, KEY_COLUMNS)).encode())
    return h.hexdigest()[:16]
