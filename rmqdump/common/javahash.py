"""Java's String.hashCode, which the broker uses for tagsCode and index slots.

hashCode runs over UTF-16 code units (a non-BMP character counts twice) with
32-bit wrap-around. The index takes abs() of it, and Integer.MIN_VALUE, whose
abs() is still negative, becomes 0 (IndexFile.indexKeyHashMethod).
"""

from __future__ import annotations

import numpy as np

INT_MIN = -(1 << 31)


def java_hash(s: str) -> int:
    """String.hashCode() as a signed 32-bit int."""
    h = 0
    if s.isascii():
        for ch in s.encode():
            h = (31 * h + ch) & 0xFFFFFFFF
    else:
        units = np.frombuffer(s.encode("utf-16-be"), dtype=">u2")
        for u in units.tolist():
            h = (31 * h + u) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def index_hash(h: int) -> int:
    """abs(hashCode) with Integer.MIN_VALUE mapped to 0."""
    return 0 if h == INT_MIN else abs(h)


_POW31 = np.ones(1, dtype=np.uint32)


def _pow31(n: int) -> np.ndarray:
    global _POW31
    if len(_POW31) < n:
        p = np.ones(max(n, 2 * len(_POW31)), dtype=np.uint32)
        with np.errstate(over="ignore"):
            for i in range(1, len(p)):
                p[i] = p[i - 1] * np.uint32(31)
        _POW31 = p
    return _POW31


def java_hash_many(strings: list[str]) -> np.ndarray:
    """String.hashCode() of many strings at once, as int32 (numpy, no per-character Python)."""
    n = len(strings)
    if n == 0:
        return np.zeros(0, dtype=np.int32)
    joined = "".join(strings)
    if joined.isascii():
        units = np.frombuffer(joined.encode(), dtype=np.uint8).astype(np.uint32)
        lengths = np.fromiter(map(len, strings), dtype=np.int64, count=n)
    else:
        units = np.frombuffer(joined.encode("utf-16-be", "surrogatepass"), dtype=">u2").astype(np.uint32)
        lengths = np.fromiter((len(s.encode("utf-16-be", "surrogatepass")) // 2 for s in strings), dtype=np.int64, count=n)
    ends = np.cumsum(lengths)
    starts = ends - lengths
    if len(units) == 0:
        return np.zeros(n, dtype=np.int32)
    owner = np.repeat(np.arange(n), lengths)
    exponent = ends[owner] - 1 - np.arange(len(units))
    pw = _pow31(int(lengths.max()))
    with np.errstate(over="ignore"):
        terms = units * pw[exponent]
    out = np.zeros(n, dtype=np.uint32)
    nonempty = lengths > 0
    if nonempty.any():
        out[nonempty] = np.add.reduceat(terms, starts[nonempty], dtype=np.uint32)
    return out.view(np.int32)


def index_hash_many(hashes: np.ndarray) -> np.ndarray:
    h = hashes.astype(np.int64)
    return np.where(h == INT_MIN, 0, np.abs(h)).astype(np.int32)
