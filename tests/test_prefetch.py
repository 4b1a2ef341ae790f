"""rmqdump.scan.bytecopy.prefetch is a hint only: the text kernels prefetch where a later row's record says its bytes
are, and a hint at any address, inside the array or far outside it, must neither fault nor change a byte."""

from __future__ import annotations

import numpy as np

from rmqdump.scan.native import configure

configure()
from numba import njit  # noqa: E402  (numba set up first)

from rmqdump.scan.bytecopy import prefetch  # noqa: E402


@njit  # no cache: numba would not see a change to the intrinsic, in another file
def _hinted(a, where):
    total = 0
    for i in range(where.shape[0]):
        prefetch(a, where[i])
        total += a[i % a.shape[0]]
    return total


def test_a_hint_anywhere_neither_faults_nor_writes():
    a = np.arange(256, dtype=np.uint8)
    before = a.copy()
    where = np.array([0, 255, 256, -1, 1 << 40, -(1 << 40), 2**62, -(2**62)], dtype=np.int64)
    assert _hinted(a, where) == sum(range(len(where)))
    assert (a == before).all()
