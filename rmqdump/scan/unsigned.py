"""Byte indices the compiled kernels use as unsigned.

numba gives every index of a signed type a negative-index fix-up (i < 0: i + n). In a byte loop that select keeps
LLVM from proving the accesses contiguous, so no loop compiled to vector code or memcpy: the JSON Lines kernel ran
1.6x longer with it. The kernels' offsets are never negative, so they index through `u`.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def u(i):
    """A never-negative index as uint64 (numba then adds no fix-up)."""
    return np.uint64(i)
