"""DLedger CommitLog: the entry header around each message, and the entry index unit.

openmessaging/dledger (DLedgerEntry, DLedgerEntryCoder, DLedgerMmapFileStore,
MmapFileList) as used by RocketMQ's DLedgerCommitLog: `dledger-<selfId>/data/`
files hold entries (this header, then the RocketMQ message record), a file
ends with a BLANK (magic -1, size = bytes left); `dledger-<selfId>/index/`
holds one unit per entry at entry index x unit size. Big-endian throughout.
"""

from __future__ import annotations

from construct import Int32sb, Int64sb, Struct

ENTRY_MAGIC = 1  # DLedgerEntry.MAGIC: every entry and index unit starts with it
BLANK_MAGIC = -1  # MmapFileList.BLANK_MAGIC_CODE: end of a data file, size = bytes left
DIR_PREFIX = "dledger-"  # dledger-<selfId>, beside (or inside) the store's commitlog path
DATA_DIR = "data"
INDEX_DIR = "index"
CHECKPOINT_FILE = "checkpoint"  # key=value text: committedIndex, endIndex
TERM_FILE = "currterm"  # key=value text: currTerm, voteLeader
INDEX_FILE_UNITS = 5 * 1024 * 1024  # DLedgerConfig default: index files of this many units

EntryHeader = Struct(
    "magic" / Int32sb,
    "size" / Int32sb,  # the whole entry: this header + the message
    "index" / Int64sb,
    "term" / Int64sb,
    "pos" / Int64sb,  # the entry's own offset in the data files
    "channel" / Int32sb,
    "chain_crc" / Int32sb,
    "body_crc" / Int32sb,
    "body_size" / Int32sb,  # the message's length
)
"""The 48 bytes before each message (DLedgerEntry.BODY_OFFSET): the message's physical offset is pos + 48."""

IndexUnit = Struct(
    "magic" / Int32sb,
    "pos" / Int64sb,
    "size" / Int32sb,
    "index" / Int64sb,
    "term" / Int64sb,
)
"""One entry's place in the data files, at entry index x 32 in the index files."""

BlankEntry = Struct("magic" / Int32sb, "size" / Int32sb)
"""Written where the next entry does not fit in a data file."""
