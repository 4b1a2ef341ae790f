"""How the compiled text kernels spell CommitLog records: the fixed text between values, the row matrix, status codes.

The listing prints at the scan's pace only if no record becomes a Python
object on the way out. These kernels read the batch's columns and the mapped
bytes and write the output bytes directly, exactly as `json.dumps` of
`Message.to_dict()` (and the table's cells) would be. Anything a kernel cannot
render exactly (invalid UTF-8, characters JSON escapes, malformed or repeated
property names, IPv6 hosts, times outside years 1-9999) marks the row
`FALLBACK` and the caller renders that row through `Message`, so the kernels
never decide what a value is, only how plain values are spelled.

The kernels themselves are rmqdump.text.kernel, reached through
rmqdump.text.batches.kernels() (numba set up first).
"""

from __future__ import annotations

import numpy as np

from rmqdump.schemas import HostV4, HostV6
from rmqdump.schemas import constants as C

# Row status written by the kernels
TAKEN, FALLBACK, FILTERED = np.int8(0), np.int8(1), np.int8(2)  # typed, not literals: the ahead-of-time compiler unifies no two literals

# Columns of the row matrix the caller builds (rows_matrix); every value as int64.
MATRIX = (
    "_pos", "total_size", "magic_version", "body_crc", "queue_id", "flag", "queue_offset", "sys_flag", "born_timestamp",
    "born_host_pos", "born_host_then", "store_timestamp", "store_host_pos", "store_host_then", "reconsume_times",
    "prepared_transaction_offset", "body_length", "topic_pos", "topic_length", "properties_pos", "properties_length",
    "crc", "prop_crc", "flag_idx", "body_pos",
)  # fmt: skip
M = {n: i for i, n in enumerate(MATRIX)}
TABLE_CELLS = 11  # offset, size, topic, q, qoffset, stored (UTC), tags, keys, uniq_key, tx, crc

V4_ADDR, V6_ADDR = HostV4.subcons[0].sizeof(), HostV6.subcons[0].sizeof()
PORT_BYTES = HostV4.subcons[1].sizeof()
MAX_ITEMS = 128  # properties per record the kernel takes; more (never seen) go the Python way
MAX_MS = 253402300799999  # 9999-12-31T23:59:59.999Z, the last time datetime can print


def _b(s: str) -> np.ndarray:
    return np.frombuffer(s.encode(), dtype=np.uint8).copy()


# Text between the values of a message object, in Message.to_dict() order.
L_KIND = _b('{"kind":"message","file":')
L_PHYS = _b(',"phys_offset":')
L_TOTAL = _b(',"total_size":')
L_MAGIC = _b(',"magic_version":')
L_BCRC = _b(',"body_crc":')
L_CRC = _b(',"crc_ok":')
L_PCRC = _b(',"prop_crc_ok":')
L_QID = _b(',"queue_id":')
L_FLAG = _b(',"flag":')
L_QOFF = _b(',"queue_offset":')
L_SYSF = _b(',"sys_flag":')
L_BORN_TS = _b(',"born_timestamp":')
L_BORN_HOST = _b(',"born_host":"')
L_STORE_TS = _b('","store_timestamp":')
L_STORE_HOST = _b(',"store_host":"')
L_RECON = _b('","reconsume_times":')
L_PREP = _b(',"prepared_transaction_offset":')
L_BODYLEN = _b(',"body_length":')
L_TOPIC = _b(',"topic":"')
L_PROPS = _b('","properties":{')
L_TAGS = _b('},"tags":')
L_KEYS = _b(',"keys":[')
L_UNIQ = _b('],"uniq_key":')
L_MSGID = _b(',"msg_id":"')
L_NULL, L_TRUE, L_FALSE = _b("null"), _b("true"), _b("false")
L_OK, L_BAD, L_DASH = _b("ok"), _b("BAD"), _b("-")
# CSV (csv.writer): a JSON list or map is one quoted field, its quotes doubled; the 9 columns after
# `properties` (body ... marker, dledger_index, dledger_term) are empty for a message (the DLedger
# entry's index and term are put in by rmqdump.cli.records.CsvOut, in place of the last two).
C_KIND = _b("message,")
C_TRUE, C_FALSE = _b("True"), _b("False")
C_EMPTY_LIST, C_LIST_OPEN, C_LIST_SEP, C_LIST_CLOSE = _b("[]"), _b('"[""'), _b('"", ""'), _b('""]"')
C_EMPTY_MAP, C_MAP_OPEN, C_MAP_SEP, C_MAP_COLON, C_MAP_CLOSE = _b("{}"), _b('"{""'), _b('"", ""'), _b('"": ""'), _b('""}"')
C_END = _b(",,,,,,,,,\n")
N_TAGS, N_KEYS, N_UNIQ = _b(C.PROPERTY_TAGS), _b(C.PROPERTY_KEYS), _b(C.PROPERTY_UNIQ_KEY)
SEP_NV, SEP_PROP, SEP_KEY = ord(C.NAME_VALUE_SEPARATOR), ord(C.PROPERTY_SEPARATOR), ord(C.KEY_SEPARATOR)
HEX_UPPER = _b("0123456789ABCDEF")
BASE64 = _b("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")  # RFC 4648, as base64.b64encode
FIXED_JSON = sum(len(x) for x in (L_KIND, L_PHYS, L_TOTAL, L_MAGIC, L_BCRC, L_CRC, L_PCRC, L_QID, L_FLAG, L_QOFF, L_SYSF, L_BORN_TS, L_BORN_HOST,
                                  L_STORE_TS, L_STORE_HOST, L_RECON, L_PREP, L_BODYLEN, L_TOPIC, L_PROPS, L_TAGS, L_KEYS, L_UNIQ, L_MSGID)) + 1  # fmt: skip
# + 1: the msg_id's closing quote; the caller's tail is counted by the caller
