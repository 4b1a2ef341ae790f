"""Per-record columns of a whole CommitLog kept on disk, not in memory: what keeps a two-pass command's memory bounded.

A pass that must see every record before it can decide about any (rebuild's
self-check, salvage's classification) appends each range's columns to one
file per column as it gets them (native dtypes, no header), then reads them
back a window of rows at a time: memory holds a window, never the store.
The files live in the command's own publishing directory and are removed
before it is published.
"""

from __future__ import annotations

import os
import shutil

import numpy as np


class ColumnSpill:
    """Append-only column files, all of the same length, under one directory (shared by several spills: names must differ)."""

    def __init__(self, directory: str, dtypes: dict[str, type | np.dtype]):
        os.makedirs(directory, exist_ok=True)
        self.dir = directory
        self.dtypes = {k: np.dtype(v) for k, v in dtypes.items()}
        self.rows = 0
        self._files = {k: open(self.path(k), "wb") for k in self.dtypes}  # noqa: SIM115 (closed in finish)

    def path(self, name: str) -> str:
        return os.path.join(self.dir, name)

    def append(self, cols: dict[str, np.ndarray]) -> None:
        """The next rows of every column (same length each)."""
        n = {len(cols[k]) for k in self.dtypes}
        if len(n) != 1:
            raise ValueError(f"columns of different lengths: {sorted(n)}")
        for k, dt in self.dtypes.items():
            self._files[k].write(np.ascontiguousarray(cols[k], dtype=dt).data)  # a failed write raises with its errno (tofile's does not)
        self.rows += n.pop()

    def finish(self) -> None:
        """No more rows: the files are closed (and the object can be sent to another process)."""
        for f in self._files.values():
            f.close()
        self._files = {}

    def read(self, name: str, a: int, b: int) -> np.ndarray:
        """Rows [a, b) of a column, read (not mapped): a pass over the whole column keeps none of it resident."""
        dt = self.dtypes[name]
        b = min(b, self.rows)
        if b <= a:
            return np.zeros(0, dtype=dt)
        f = self._files.get(name)
        if f is not None:
            f.flush()
        return np.fromfile(self.path(name), dtype=dt, count=b - a, offset=a * dt.itemsize)

    def window(self, a: int, b: int) -> dict[str, np.ndarray]:
        """Rows [a, b) of every column."""
        return {k: self.read(k, a, b) for k in self.dtypes}

    def mapped(self, name: str) -> np.ndarray:
        """A whole column, mapped: for binary searches, which touch a few pages of it."""
        dt = self.dtypes[name]
        if self.rows == 0:
            return np.zeros(0, dtype=dt)
        return np.memmap(self.path(name), dtype=dt, mode="r", shape=(self.rows,))

    def remove(self) -> None:
        """Close and delete the whole directory (with any other spill sharing it)."""
        self.finish()
        shutil.rmtree(self.dir, ignore_errors=True)
