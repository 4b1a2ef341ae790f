"""IndexFile: header, hash slots, entries.

store/index/IndexHeader.java and store/index/IndexFile.java. A file is the
40-byte header, then hashSlotNum 4-byte slots, then indexNum 20-byte entries.
Entry 0 is never written; a slot holds the newest entry number of its chain and
each entry the previous one (0 ends the chain).
"""

from __future__ import annotations

from construct import Array, Int32sb, Int64sb, Struct

IndexHeader = Struct(
    "begin_timestamp" / Int64sb,
    "end_timestamp" / Int64sb,
    "begin_phy_offset" / Int64sb,
    "end_phy_offset" / Int64sb,
    "hash_slot_count" / Int32sb,
    "index_count" / Int32sb,
)

IndexSlot = Struct("entry" / Int32sb)

IndexEntry = Struct(
    "key_hash" / Int32sb,
    "phys_offset" / Int64sb,
    "time_diff" / Int32sb,
    "prev_index" / Int32sb,
)


def index_file(hash_slots: int, index_entries: int) -> Struct:
    """A whole IndexFile of the given sizing (maxHashSlotNum, maxIndexNum)."""
    return Struct(
        "header" / IndexHeader,
        "slots" / Array(hash_slots, IndexSlot),
        "entries" / Array(index_entries, IndexEntry),
    )
