"""The store's `checkpoint` file: the times up to which each part was flushed.

The broker writes it lazily (an index file filling up, the 60 s thorough flush,
shutdown), so after a crash it is older than the data. Recovery decides where
to start scanning from min(physic, logics) - 3 s (StoreCheckpoint.getMinTimestamp).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rmqdump.common.jsontext import fields_of
from rmqdump.common.problems import InputError
from rmqdump.readers.fastpath import numpy_dtype
from rmqdump.schemas import Checkpoint as CheckpointLayout
from rmqdump.schemas import constants as C

_DTYPE = numpy_dtype(CheckpointLayout)
RECOVERY_MARGIN_MS = 3000  # StoreCheckpoint.getMinTimestamp subtracts 3 s


@dataclass(frozen=True)
class Checkpoint:
    path: str
    size: int
    physic_msg_timestamp: int
    logics_msg_timestamp: int
    index_msg_timestamp: int
    master_flushed_offset: int
    confirm_phy_offset: int

    @property
    def min_timestamp(self) -> int:
        """min(physic, logics) - 3 s, floored at 0: where abnormal recovery may start."""
        return max(0, min(self.physic_msg_timestamp, self.logics_msg_timestamp) - RECOVERY_MARGIN_MS)

    def to_dict(self) -> dict:
        return {**fields_of(self, omit=("size",)), "min_timestamp": self.min_timestamp}


def read_checkpoint(path: str) -> Checkpoint:
    """Read a checkpoint file; fewer than the first three fields is unusable input."""
    try:
        with open(path, "rb") as f:
            raw = f.read(C.CHECKPOINT_SIZE)
    except OSError as e:
        raise InputError("unreadable", path, e.strerror or str(e)) from None
    need = 3 * 8
    if len(raw) < need:
        raise InputError("checkpoint_short", path, f"{len(raw)} bytes; the checkpoint needs at least {need}", offset=len(raw))
    buf = raw + bytes(max(0, _DTYPE.itemsize - len(raw)))
    rec = np.frombuffer(buf[: _DTYPE.itemsize], dtype=_DTYPE)[0]
    return Checkpoint(path, len(raw), **{name: int(rec[name]) for name in _DTYPE.names if name != "reserved"})  # the schema's fields by name
