"""The parts of a Parquet file rmqdump joins row groups by (Apache Parquet's format: parquet.thrift, the file layout).

A file is MAGIC, its row groups' column chunks, the footer (a FileMetaData
struct in Thrift's compact protocol) and the Trailer. rmqdump encodes a
salvage's row groups side by side, each as a file of its own, then writes
their chunks one after another under one footer: the only fields it changes
are the byte offsets below (moved by where a chunk lands), the row count and
each row group's ordinal. No I/O here.
"""

from __future__ import annotations

from construct import Const, Int32ul, Struct

MAGIC = b"PAR1"
Trailer = Struct("footer_length" / Int32ul, "magic" / Const(MAGIC))

# Thrift compact protocol: a field's type in the low nibble of its header byte, a container's element types likewise
T_STOP, T_TRUE, T_FALSE, T_BYTE, T_I16, T_I32, T_I64, T_DOUBLE, T_BINARY, T_LIST, T_SET, T_MAP, T_STRUCT = range(13)
T_UUID = 13

# FileMetaData
FILE_NUM_ROWS = 3  # i64
FILE_ROW_GROUPS = 4  # list<RowGroup>
# RowGroup
ROW_GROUP_COLUMNS = 1  # list<ColumnChunk>
ROW_GROUP_FILE_OFFSET = 5  # i64: where its first column chunk starts
ROW_GROUP_ORDINAL = 7  # i16: its index in the file
# ColumnChunk
CHUNK_FILE_OFFSET = 2  # i64, deprecated: parquet-cpp writes 0, and a 0 stays 0
CHUNK_META_DATA = 3  # ColumnMetaData
CHUNK_OFFSET_INDEX_OFFSET = 4  # i64: a page index, written after every row group: refused (one is never asked for)
CHUNK_COLUMN_INDEX_OFFSET = 6  # i64: likewise
# ColumnMetaData: the offsets of its pages
COLUMN_DATA_PAGE_OFFSET = 9
COLUMN_INDEX_PAGE_OFFSET = 10
COLUMN_DICTIONARY_PAGE_OFFSET = 11
COLUMN_BLOOM_FILTER_OFFSET = 14  # i64: written after every row group: refused likewise
COLUMN_PAGE_OFFSETS = (COLUMN_DATA_PAGE_OFFSET, COLUMN_INDEX_PAGE_OFFSET, COLUMN_DICTIONARY_PAGE_OFFSET)
