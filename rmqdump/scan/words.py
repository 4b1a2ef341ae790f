"""Eight bytes a step: the compiled kernels' searches for separators and for bytes JSON escapes.

A byte loop with a test per byte split the properties at about 6 cycles a byte
(the JSON listing's properties pass was 11% of its CPU, export's split 9%).
These load a word and test its eight bytes at once with the borrow tricks of
bit-twiddling folklore: `(w - 0x0101..) & ~w & 0x8080..` flags the zero bytes
of w. A borrow can flag a byte above a true one, never below, so only the
lowest flag is read: it is exact. Both kernel sets use them, as leaves inlined
into their callers (no arrays counted, nothing allocated).
"""

from __future__ import annotations

import sys

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.cpython.unsafe.numbers import trailing_zeros
from numba.extending import intrinsic

from rmqdump.scan.unsigned import u as _u

ONES = np.uint64(0x0101010101010101)
HIGHS = np.uint64(0x8080808080808080)
SPACES = np.uint64(0x2020202020202020)  # bytes below 0x20: control characters, the properties' separators among them
QUOTES = np.uint64(0x2222222222222222)
BACKSLASHES = np.uint64(0x5C5C5C5C5C5C5C5C)
_leaf = njit(cache=True, nogil=True, _nrt=False, inline="always")


@intrinsic
def word(typingctx, arr, i):
    """arr[i:i+8] as a uint64, the byte at i lowest, from any address (no index checks: the caller's)."""

    def codegen(context, builder, sig, args):
        a = context.make_array(sig.args[0])(context, builder, args[0])
        p = builder.bitcast(builder.gep(a.data, [args[1]]), ir.IntType(64).as_pointer())
        v = builder.load(p, align=1)
        return builder.bswap(v) if sys.byteorder == "big" else v

    return types.uint64(arr, i), codegen


@_leaf
def zero_bytes(w):
    """A flag (0x80) on each zero byte of w, exact at the lowest."""
    return (w - ONES) & ~w & HIGHS


@_leaf
def lowest(m):
    """The byte index (0-7) of the lowest flag in a non-zero mask."""
    return np.int64(trailing_zeros(m)) >> 3


@_leaf
def json_stops(w):
    """Flags on the bytes of w a JSON string cannot hold as they are (below 0x20, '"', '\\'), exact at the lowest."""
    return ((w - SPACES) & ~w & HIGHS) | zero_bytes(w ^ QUOTES) | zero_bytes(w ^ BACKSLASHES)


@_leaf
def find(d, s, e, c):
    """The first i in s..e-1 with d[i] == c, or e (never reads at or past e)."""
    pat = ONES * np.uint64(c)
    while s + 8 <= e:
        m = zero_bytes(word(d, s) ^ pat)
        if m:
            return s + lowest(m)
        s += 8
    while s < e and d[_u(s)] != c:
        s += 1
    return s
