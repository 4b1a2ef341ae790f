"""Thrift's compact protocol, read and written back as it was: what lets rmqdump move a Parquet footer's offsets.

A struct is decoded into a list of [field id, type, value] in the order
written (nothing is dropped, nothing is interpreted), so encoding it again
gives the same bytes as the writer's (Thrift writes a field header as a delta
where it can and a short list header below 15 elements, as done here); only
the values a caller changes differ. Lists and sets are (element type, items),
maps (key type, value type, [(key, value)]), doubles their 8 bytes as found.
"""

from __future__ import annotations

from rmqdump.schemas.parquet import T_BINARY, T_BYTE, T_DOUBLE, T_FALSE, T_I16, T_I32, T_I64, T_LIST, T_MAP, T_SET, T_STOP, T_STRUCT, T_TRUE, T_UUID

_INTS = (T_I16, T_I32, T_I64)
_BOOLS = (T_TRUE, T_FALSE)
MAX_DEPTH = 64  # nested structs and containers: far past a Parquet footer's, short of Python's recursion limit


class ThriftError(ValueError):
    """Bytes that are no compact-protocol struct (cut short, an unknown type, nested past MAX_DEPTH)."""


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data, pos: int):
        self.data, self.pos = memoryview(data).cast("B"), pos  # unsigned bytes, whatever the exporter says (pyarrow: signed)

    def byte(self) -> int:
        if self.pos >= len(self.data):
            raise ThriftError(f"cut short at byte {self.pos}")
        b = self.data[self.pos]
        self.pos += 1
        return b

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ThriftError(f"{n} bytes at {self.pos} run past the end")
        v = bytes(self.data[self.pos : self.pos + n])
        self.pos += n
        return v

    def varint(self) -> int:
        shift = value = 0
        while True:
            b = self.byte()
            value |= (b & 0x7F) << shift
            if b < 0x80:
                return value
            shift += 7
            if shift > 70:
                raise ThriftError(f"varint longer than 10 bytes at {self.pos}")

    def zigzag(self) -> int:
        v = self.varint()
        return (v >> 1) ^ -(v & 1)


def _value(r: _Reader, t: int, depth: int):
    if depth > MAX_DEPTH:
        raise ThriftError(f"nested deeper than {MAX_DEPTH} at {r.pos}")
    if t in _BOOLS:  # an element of a container: one byte
        return r.byte() == T_TRUE
    if t == T_BYTE:
        return r.byte()
    if t in _INTS:
        return r.zigzag()
    if t == T_DOUBLE:
        return r.take(8)
    if t == T_UUID:
        return r.take(16)
    if t == T_BINARY:
        return r.take(r.varint())
    if t in (T_LIST, T_SET):
        head = r.byte()
        et, n = head & 0x0F, head >> 4
        if n == 15:
            n = r.varint()
        return (et, [_value(r, et, depth + 1) for _ in range(n)])
    if t == T_MAP:
        n = r.varint()
        if not n:
            return (0, 0, [])
        head = r.byte()
        kt, vt = head >> 4, head & 0x0F
        return (kt, vt, [(_value(r, kt, depth + 1), _value(r, vt, depth + 1)) for _ in range(n)])
    if t == T_STRUCT:
        return _struct(r, depth + 1)
    raise ThriftError(f"unknown type {t} at {r.pos}")


def _struct(r: _Reader, depth: int) -> list[list]:
    fields: list[list] = []
    last = 0
    while (head := r.byte()) != T_STOP:
        t, delta = head & 0x0F, head >> 4
        fid = last + delta if delta else r.zigzag()
        last = fid
        fields.append([fid, t, t == T_TRUE if t in _BOOLS else _value(r, t, depth)])
    return fields


def decode(data, pos: int = 0) -> tuple[list[list], int]:
    """The struct at `pos` of `data` as [field id, type, value] lists, and where it ends."""
    r = _Reader(data, pos)
    try:
        return _struct(r, 0), r.pos
    except RecursionError as e:
        raise ThriftError(f"nested too deep at {r.pos}") from e


def _varint(out: bytearray, v: int) -> None:
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def _zigzag(out: bytearray, v: int) -> None:
    _varint(out, (v << 1) ^ (v >> 63))


def _write_value(out: bytearray, t: int, v) -> None:
    if t in _BOOLS:
        out.append(T_TRUE if v else T_FALSE)
    elif t == T_BYTE:
        out.append(v)
    elif t in _INTS:
        _zigzag(out, v)
    elif t in (T_DOUBLE, T_UUID):
        out += v
    elif t == T_BINARY:
        _varint(out, len(v))
        out += v
    elif t in (T_LIST, T_SET):
        et, items = v
        if len(items) < 15:
            out.append(len(items) << 4 | et)
        else:
            out.append(0xF0 | et)
            _varint(out, len(items))
        for x in items:
            _write_value(out, et, x)
    elif t == T_MAP:
        kt, vt, items = v
        _varint(out, len(items))
        if items:
            out.append(kt << 4 | vt)
            for k, x in items:
                _write_value(out, kt, k)
                _write_value(out, vt, x)
    elif t == T_STRUCT:
        encode_into(out, v)
    else:
        raise ThriftError(f"unknown type {t}")


def encode_into(out: bytearray, fields: list[list]) -> None:
    """A struct's fields (in the order given, ids rising as Thrift writes them) appended to `out`."""
    last = 0
    for fid, t, v in fields:
        head_type = (T_TRUE if v else T_FALSE) if t in _BOOLS else t
        if 0 < fid - last <= 15:
            out.append((fid - last) << 4 | head_type)
        else:
            out.append(head_type)
            _zigzag(out, fid)
        if t not in _BOOLS:
            _write_value(out, t, v)
        last = fid
    out.append(T_STOP)


def encode(fields: list[list]) -> bytes:
    out = bytearray()
    encode_into(out, fields)
    return bytes(out)


def field(fields: list[list], fid: int) -> list | None:
    """The [id, type, value] entry of field `fid`, changed in place by assigning its [2]; None when absent."""
    for f in fields:
        if f[0] == fid:
            return f
    return None
