"""Arrow's binary_view value (the columnar format's variable-size binary view layout), 16 bytes a value.

salvage builds its `body` column as views of the mapped CommitLog: a value of
up to INLINE bytes is held in its view after its length (the bytes from
`prefix` on); a longer one keeps its first 4 bytes in `prefix` and is found at
`offset` of data buffer `buffer_index`. No I/O here.
"""

from __future__ import annotations

from construct import Bytes, Int32sl, Struct

BinaryView = Struct("length" / Int32sl, "prefix" / Bytes(4), "buffer_index" / Int32sl, "offset" / Int32sl)
INLINE = BinaryView.sizeof() - 4  # a value this long or shorter sits in the view, from the prefix on
