"""Message ids: the offset msgId and the client's UNIQ_KEY.

Both are uppercase hex of the same two lengths (32 chars with an IPv4
address, 56 with IPv6), so a string alone does not say which it is: the
offset id is tried first and believed only when a record starts at its
offset and carries that very msgId.

offset msgId (MessageDecoder.createMessageId): store IP, port i32, physical
offset i64. UNIQ_KEY (MessageClientIDSetter.createUniqID): producer IP, pid
i16, class loader hash i32, milliseconds since the start of the producer's
current month in its own time zone (an int that wraps after 24.8 days, so read
unsigned), counter i16. The month is not in the id: it is anchored on a time
known to be close, the record's bornTimestamp.
"""

from __future__ import annotations

import calendar
from dataclasses import dataclass
from datetime import datetime, timezone

from rmqdump.common.jsontext import fields_of
from rmqdump.readers.message import format_address
from rmqdump.schemas import OffsetMsgIdV4, OffsetMsgIdV6, UniqKeyV4, UniqKeyV6

SHORT_HEX = 32  # IPv4 forms
LONG_HEX = 56  # IPv6 forms

_QUARTER_HOUR = 15 * 60 * 1000
_MAX_EAST = 14 * 3600 * 1000
_MAX_WEST = 12 * 3600 * 1000


class MsgIdError(ValueError):
    pass


def id_bytes(text: str) -> bytes:
    """The bytes of a 32- or 56-character hex id."""
    t = text.strip()
    if len(t) not in (SHORT_HEX, LONG_HEX):
        raise MsgIdError(f"{t!r} is {len(t)} characters; a msgId or UNIQ_KEY is {SHORT_HEX} (IPv4) or {LONG_HEX} (IPv6) hex characters")
    try:
        return bytes.fromhex(t)
    except ValueError:
        raise MsgIdError(f"{t!r} is not hexadecimal") from None


@dataclass(frozen=True)
class OffsetMsgId:
    text: str
    store_ip: str
    port: int
    phys_offset: int

    @classmethod
    def decode(cls, text: str) -> OffsetMsgId:
        b = id_bytes(text)
        f = (OffsetMsgIdV6 if len(b) == OffsetMsgIdV6.sizeof() else OffsetMsgIdV4).parse(b)
        return cls(text.strip().upper(), format_address(f.address), f.port, f.phys_offset)

    @property
    def store_host(self) -> str:
        return f"[{self.store_ip}]:{self.port}" if ":" in self.store_ip else f"{self.store_ip}:{self.port}"

    def to_dict(self) -> dict:
        return {"type": "offset", "store_host": self.store_host, "phys_offset": self.phys_offset}


def _month_start_utc(ms: int, months_back: int = 0) -> int:
    d = datetime.fromtimestamp(ms / 1000, tz=timezone.utc)
    y, m = d.year, d.month - months_back
    while m < 1:
        y, m = y - 1, m + 12
    return calendar.timegm((y, m, 1, 0, 0, 0)) * 1000


def _nearest_month_start_utc(ms: int) -> int:
    cur = _month_start_utc(ms)
    nxt = _month_start_utc(cur + 32 * 86_400_000)
    return cur if ms - cur <= nxt - ms else nxt


@dataclass(frozen=True)
class UniqKey:
    text: str
    ip: str
    pid: int
    class_loader_hash: int
    month_millis: int  # ms since the producer's month start
    counter: int

    @classmethod
    def decode(cls, text: str) -> UniqKey:
        b = id_bytes(text)
        f = (UniqKeyV6 if len(b) == UniqKeyV6.sizeof() else UniqKeyV4).parse(b)
        return cls(text.strip().upper(), format_address(f.address), f.pid, f.class_loader_hash, f.month_millis, f.counter)

    def time_near(self, anchor_ms: int) -> dict:
        """When the id was made, anchored on a time known to be close (the record's bornTimestamp).

        anchor - month_millis is the producer's month start, give or take the
        moment between making the id and stamping the message. Rounded to a
        quarter hour it is midnight of the 1st in the producer's zone, which
        gives its UTC offset. If it is no month start in any zone, the UTC
        month before the anchor is assumed, as MessageClientIDSetter does.
        """
        start = round((anchor_ms - self.month_millis) / _QUARTER_HOUR) * _QUARTER_HOUR
        utc_start = _nearest_month_start_utc(start)
        offset = utc_start - start
        if -_MAX_WEST <= offset <= _MAX_EAST:
            return {"time": start + self.month_millis, "month_start": start, "utc_offset_minutes": offset // 60_000, "anchor": anchor_ms}
        return self.time_assumed_utc(anchor_ms)

    def time_assumed_utc(self, now_ms: int) -> dict:
        """MessageClientIDSetter.getNearlyTimeFromID in UTC: this month, or the previous one if that lies in the future."""
        start = _month_start_utc(now_ms)
        if start + self.month_millis >= now_ms:
            start = _month_start_utc(now_ms, 1)
        return {"time": start + self.month_millis, "month_start": start, "utc_offset_minutes": None, "anchor": now_ms}

    def to_dict(self) -> dict:
        return {"type": "uniq_key", **fields_of(self, omit=("text",))}
