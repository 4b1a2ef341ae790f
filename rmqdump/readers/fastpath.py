"""Columnar parsing derived from the construct schemas.

A per-record construct parse costs tens of microseconds. Here the same Struct
is walked once per batch instead of once per record: each field of the schema
becomes one numpy gather over all record starts of the batch, and the schema's
own `this.` expressions (host variant, topic length width, byte-string
lengths) are evaluated over whole columns. Nothing about the layout is written
here; tests check the result against construct's own parse on every real record.
"""

from __future__ import annotations

import struct as _struct

import numpy as np
from construct import Bytes, Const, FormatField, IfThenElse, Renamed, Struct

_NP_CODES = {"b": "i1", "B": "u1", "h": "i2", "H": "u2", "l": "i4", "L": "u4", "i": "i4", "I": "u4", "q": "i8", "Q": "u8"}


def _fixed(con):
    return isinstance(con, (FormatField, Struct)) or (isinstance(con, Bytes) and isinstance(con.length, int))


def numpy_dtype(con) -> np.dtype:
    """The numpy dtype of a fixed-size construct: FormatField, fixed Bytes or a Struct of them."""
    if isinstance(con, Renamed):
        return numpy_dtype(con.subcon)
    if isinstance(con, FormatField):
        order = ">" if con.fmtstr[0] == ">" else "<"
        return np.dtype(order + _NP_CODES[con.fmtstr[1]])
    if isinstance(con, Bytes) and isinstance(con.length, int):
        return np.dtype((np.void, con.length))
    if isinstance(con, Struct):
        return np.dtype([(sc.name, numpy_dtype(sc)) for sc in con.subcons])
    raise TypeError(f"no fixed numpy layout for {con!r}")


def struct_format(con) -> _struct.Struct:
    """A `struct.Struct` for a Struct of FormatFields and fixed Bytes (for per-record hot loops)."""
    order, parts = None, []
    for sc in con.subcons:
        inner = sc.subcon
        if isinstance(inner, FormatField):
            order = order or inner.fmtstr[0]
            parts.append(inner.fmtstr[1:])
        elif isinstance(inner, Bytes) and isinstance(inner.length, int):
            parts.append(f"{inner.length}s")
        elif isinstance(inner, Const) and isinstance(inner.subcon, Bytes):  # a separator: read as bytes, compared by the caller
            parts.append(f"{len(inner.value)}s")
        else:
            raise TypeError(f"field {sc.name}: {inner!r} has no struct format")
    return _struct.Struct((order or ">") + "".join(parts))


def field_struct(con: Struct, name: str) -> tuple[int, _struct.Struct]:
    """(offset, struct) to read one fixed-size field of a Struct straight from a buffer."""
    for sc in con.subcons:
        if sc.name == name:
            return field_offset(con, name), struct_format(Struct(sc))
    raise KeyError(name)


def field_offset(con: Struct, name: str) -> int:
    """Byte offset of a field inside a Struct whose earlier fields are fixed-size."""
    off = 0
    for sc in con.subcons:
        if sc.name == name:
            return off
        off += sc.sizeof()
    raise KeyError(name)


def gather(data: np.ndarray, pos: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Read one value of `dtype` at each position (positions are clipped into the buffer)."""
    k = dtype.itemsize
    if len(pos) == 0 or len(data) < k:
        return np.zeros(len(pos), dtype=dtype)
    p = np.clip(pos, 0, len(data) - k)
    if data.ndim == 1 and data.flags.c_contiguous:
        # Every k-byte window of the buffer as one overlapping array (stride 1):
        # the gather is then one k-byte copy per position, not k index lookups.
        windows = np.ndarray((len(data) - k + 1,), dtype=np.dtype((np.void, k)), buffer=data, strides=(1,))
        return windows[p].view(dtype)
    raw = data[p[:, None] + np.arange(k)]
    return raw.view(dtype).reshape(len(pos))


def _native(a: np.ndarray) -> np.ndarray:
    return a.astype(a.dtype.newbyteorder("="), copy=False) if a.dtype.byteorder == ">" else a


class ColumnarParser:
    """Parses a batch of records laid out by one construct Struct into columns.

    parse() returns (columns, ok): integer fields as native int64/uint32 arrays,
    byte strings as `NAME_pos` (+ their length field), sub-structs chosen by an
    IfThenElse as `NAME_pos` plus `NAME_then` (the condition). `ok` is False
    for a record whose fields do not end exactly at its limit (damage).
    """

    def __init__(self, con: Struct):
        self.steps = []
        run = []
        for sc in con.subcons:
            inner = sc.subcon
            if isinstance(inner, FormatField):
                run.append(sc)
                continue
            if run:
                self.steps.append(("run", run))
                run = []
            self.steps.append(("field", sc))
        if run:
            self.steps.append(("run", run))
        self._run_dtypes = {id(r): np.dtype([(f.name, numpy_dtype(f)) for f in r]) for kind, r in self.steps if kind == "run"}

    def parse(self, data: np.ndarray, starts: np.ndarray, limits: np.ndarray):
        cols: dict[str, np.ndarray] = {}
        cur = starts.astype(np.int64, copy=True)
        ok = np.ones(len(starts), dtype=bool)
        for kind, item in self.steps:
            if kind == "run":
                dt = self._run_dtypes[id(item)]
                ok &= cur + dt.itemsize <= limits
                rec = gather(data, cur, dt)
                for f in item:
                    cols[f.name] = _native(rec[f.name])
                cur = cur + dt.itemsize
                continue
            name, inner = item.name, item.subcon
            if isinstance(inner, Bytes):
                n = inner.length if isinstance(inner.length, int) else inner.length(cols)
                n = np.asarray(n, dtype=np.int64)
                ok &= (n >= 0) & (cur + n <= limits)
                cols[name + "_pos"] = cur
                cur = cur + np.maximum(n, 0)
            elif isinstance(inner, IfThenElse):
                cond = np.asarray(inner.condfunc(cols)).astype(bool)
                a, b = inner.thensubcon, inner.elsesubcon
                sa, sb = a.sizeof(), b.sizeof()
                size = np.where(cond, sa, sb)
                ok &= cur + size <= limits
                if isinstance(a, FormatField) and isinstance(b, FormatField):
                    va = _native(gather(data, cur, numpy_dtype(a))).astype(np.int64)
                    vb = _native(gather(data, cur, numpy_dtype(b))).astype(np.int64)
                    cols[name] = np.where(cond, va, vb)
                else:
                    cols[name + "_pos"] = cur
                    cols[name + "_then"] = cond
                cur = cur + size
            elif _fixed(inner):
                dt = numpy_dtype(inner)
                ok &= cur + dt.itemsize <= limits
                cols[name + "_pos"] = cur
                cur = cur + dt.itemsize
            else:
                raise TypeError(f"field {name}: {inner!r} has no columnar form")
        ok &= cur == limits
        cols["_end"] = cur
        return cols, ok
