"""The store's checkpoint file (store/StoreCheckpoint.java), 4 KiB."""

from __future__ import annotations

from construct import Bytes, Int64sb, Struct

from .constants import CHECKPOINT_SIZE

_FIELDS = [
    "physic_msg_timestamp" / Int64sb,
    "logics_msg_timestamp" / Int64sb,
    "index_msg_timestamp" / Int64sb,
    "master_flushed_offset" / Int64sb,  # 5.0+
    "confirm_phy_offset" / Int64sb,  # 5.1.1+
]

Checkpoint = Struct(*_FIELDS, "reserved" / Bytes(CHECKPOINT_SIZE - 8 * len(_FIELDS)))
