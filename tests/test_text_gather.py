"""The text kernels' input rows, gathered in one compiled pass from the scan kernel's output (rmqdump.text.kernel.gather),
against a model: each value narrowed as numpy narrows it to its column's dtype, a bool as 0 or 1."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from rmqdump.text import batches as TB

DTYPES = {8: np.int64, 4: np.int32, 2: np.int16, 1: np.bool_}


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    cols=st.lists(st.tuples(st.integers(-1, 5), st.sampled_from([8, 4, 2, 1])), min_size=1, max_size=12),
    n=st.integers(0, 40),
    take=st.integers(0, 40),
)
def test_gather_narrows_as_the_typed_columns_do(seed, cols, n, take):
    rng = np.random.default_rng(seed)
    src = rng.integers(-(2**63), 2**63 - 1, size=(6, max(n, 1)), dtype=np.int64, endpoint=True)
    src[:, ::3] = rng.integers(-70_000, 70_000, size=src[:, ::3].shape)  # small values too: signs near int16's edges
    src[:, 1::5] = 0  # and zeros (a bool's false)
    rows = np.sort(rng.choice(max(n, 1), size=min(take, n), replace=False)).astype(np.int64) if n else np.zeros(0, np.int64)
    pick = np.array([p for p, _ in cols], dtype=np.int64)
    width = np.array([w for _, w in cols], dtype=np.int64)
    mat = np.full((len(rows), len(cols)), 12345, dtype=np.int64)
    assert TB.kernels().gather(src, pick, width, rows, mat) == len(rows)
    for j, (p, w) in enumerate(cols):
        want = np.full(len(rows), 12345, dtype=np.int64) if p < 0 else src[p, rows].astype(DTYPES[w]).astype(np.int64)
        assert mat[:, j].tolist() == want.tolist(), (j, p, w)
