"""Stored hosts and offset msgIds of many records at once, for every column built from a batch (export, journeys).

A record stores its born and store hosts as an address then a port (schemas
HostV4, HostV6: 8 or 20 bytes); a store has few of them, so each distinct
host is formatted once per process (`host_text`), and a batch's hosts are
found by the compiled `word_codes` (one pass, no sort) when all are IPv4.
An offset msgId is the store host's bytes then the physical offset (schemas
OffsetMsgIdV4/V6) in uppercase hex: `msg_id_text` spells a batch's with the
compiled `spell_rows`, as the buffers of an Arrow string column.
"""

from __future__ import annotations

import numpy as np

from rmqdump.readers.fastpath import numpy_dtype, struct_format
from rmqdump.readers.message import format_host
from rmqdump.scan.aot import SCAN, load
from rmqdump.schemas import HostV4, HostV6, OffsetMsgIdV4

HOST_LAYOUTS = {False: struct_format(HostV4), True: struct_format(HostV6)}  # IPv6?: the stored host's struct
_V4, _V6 = HostV4.sizeof(), HostV6.sizeof()
_MSGID_PHYS = numpy_dtype(OffsetMsgIdV4.subcons[-1])  # the physical offset ending a msgId, big-endian
# a byte's two uppercase hex digits as one little-endian uint16: an array of bytes spelled by one take
_HEX_PAIRS = np.frombuffer("".join(f"{i:02X}" for i in range(256)).encode(), dtype="<u2")
_TEXT: dict[bytes, str] = {}  # a host's stored bytes -> "ip:port"
TEXT_MAX = 1 << 16  # hosts kept; past it the cache starts again (a store of that many hosts is damaged or synthetic)


def host_text(raw: bytes) -> str:
    """format_host of a host as stored (address, then port), from the process's cache."""
    text = _TEXT.get(raw)
    if text is None:
        v6 = len(raw) == _V6
        text = format_host(raw[: len(raw) - 4], HOST_LAYOUTS[v6].unpack(raw)[1])
        if len(_TEXT) >= TEXT_MAX:
            _TEXT.clear()  # other threads only miss: they hold the texts they looked up
        _TEXT[raw] = text
    return text


def distinct_hosts(data: np.ndarray, pos: np.ndarray, v6: np.ndarray) -> tuple[list[bytes], np.ndarray]:
    """The distinct hosts stored at `pos` (IPv6 where `v6`), as stored, and each position's index among them."""
    n = len(pos)
    pos, v6 = np.asarray(pos, np.int64), np.asarray(v6, bool)
    if not v6.any():  # an IPv4 address and port are 8 bytes: one word each, read by the compiled loop
        uniq, code = load(SCAN).word_codes(data, np.ascontiguousarray(pos))
        b = uniq.astype("<u8", copy=False).tobytes()  # the words' bytes as stored
        return [b[i : i + _V4] for i in range(0, len(b), _V4)], code
    key = np.zeros((n, 1 + _V6), dtype=np.uint8)  # a family byte, then the host: IPv4 and IPv6 never equal
    i4, i6 = np.flatnonzero(~v6), np.flatnonzero(v6)
    key[i4, 1 : 1 + _V4] = data[pos[i4, None] + np.arange(_V4)]
    key[i6, 0] = 1
    key[i6, 1:] = data[pos[i6, None] + np.arange(_V6)]
    uniq, code = np.unique(key.view(np.dtype((np.void, 1 + _V6))).reshape(n), return_inverse=True)
    return [u[1:] if u[0] else u[1 : 1 + _V4] for u in (bytes(x) for x in uniq.tolist())], code.reshape(n)


def msg_id_text(hosts: list[bytes], code: np.ndarray, phys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The offset msgIds of records whose store hosts are `hosts[code]` (distinct_hosts') and whose physical offsets
    are `phys`: int32 offsets (one more than the records) and the uppercase hex bytes, an Arrow string column's
    buffers. The layout is the schemas': a msgId is its store host as stored, then the offset (tests/test_hosts.py)."""
    n = len(phys)
    tails = np.asarray(phys, np.int64).astype(_MSGID_PHYS).view(np.uint8).reshape(n, _MSGID_PHYS.itemsize)
    head_offs = np.zeros(len(hosts) + 1, dtype=np.int64)
    np.cumsum(np.array([len(h) for h in hosts], dtype=np.int64), out=head_offs[1:])
    heads = np.frombuffer(b"".join(hosts), dtype=np.uint8)
    return load(SCAN).spell_rows(heads, head_offs, np.asarray(code, np.int32), tails, _HEX_PAIRS)
