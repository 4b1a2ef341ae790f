"""ConsumeQueue ext files written as the broker lays them out, with filter bitmaps that claim nothing.

With enableConsumeQueueExt the broker appends an ext unit per ConsumeQueue
unit (ConsumeQueueExt.put: size, tagsCode, msgStoreTime, bitMapSize, bitmap)
and stores its address (Long.MIN_VALUE + byte offset) as the unit's
tagsCode; a unit that would reach into a file's last 4 bytes goes to the next
file, after a short -1. Given the bitmap length the addresses, sizes,
tagsCodes and store times are all known offline, so the ConsumeQueue files
come out byte-identical. The bitmap bits are not: they are the Bloom-filter
bits of the consumer filters registered when the message was dispatched,
which the store does not keep. They are written all ones ("every filter may
match"), which no source bit is copied into and which is safe: a broker that
sees a hit evaluates the filter on the CommitLog record before delivering
(ExpressionMessageFilter), so nothing a consumer should get is filtered out.
"""

from __future__ import annotations

import os

import numpy as np

from rmqdump.builders.queuefiles import QueueFiles, QueueResult
from rmqdump.readers.cqext import EXT_HEADER
from rmqdump.schemas import constants as C

_END_MARK = np.array([C.EXT_FILE_END], dtype=">i2").tobytes()


class ConsumeQueueExtBuilder:
    """put() each queue's units in dispatch order; it returns their ext addresses."""

    def __init__(self, out_dir: str, file_size: int, bitmap_bits: int, *, sync: bool = True):
        self.file_size = file_size
        self.bitmap_len = -(-bitmap_bits // 8) if bitmap_bits > 0 else 0
        self.dtype = np.dtype([*((n, EXT_HEADER.fields[n][0]) for n in EXT_HEADER.names), ("filter_bitmap", np.dtype((np.void, self.bitmap_len)))])
        self.unit_size = self.dtype.itemsize
        if self.unit_size > file_size - C.EXT_END_BLANK:
            raise ValueError(f"an ext unit of {self.unit_size} bytes does not fit a {file_size}-byte ext file")
        self.queues: dict[tuple[str, int], QueueResult] = {}
        self._wrote: dict[tuple[str, int], int] = {}  # bytes used in the queue (file base + position)
        self._files = QueueFiles(out_dir, file_size, sync=sync)

    def put(self, topic: str, queue_id: int, tags_code: np.ndarray, store_ts: np.ndarray) -> np.ndarray:
        key = (topic, queue_id)
        q = self.queues.setdefault(key, QueueResult(topic, queue_id))
        n = len(tags_code)
        units = np.zeros(n, dtype=self.dtype)
        units["size"] = self.unit_size
        units["tags_code"] = tags_code
        units["msg_store_time"] = store_ts
        units["bitmap_size"] = self.bitmap_len
        if self.bitmap_len:
            units["filter_bitmap"] = b"\xff" * self.bitmap_len
        addr = np.empty(n, dtype=np.int64)
        wrote = self._wrote.get(key, 0)
        at = 0
        fs, us = self.file_size, self.unit_size
        while at < n:
            base, pos = wrote - wrote % fs, wrote % fs
            k = min(n - at, (fs - C.EXT_END_BLANK - pos) // us)
            if k <= 0:  # fullFillToEnd: a short -1 where the unit would not fit, then the next file
                os.pwrite(self._files.fd(q, base), _END_MARK, pos)
                wrote = base + fs
                continue
            os.pwrite(self._files.fd(q, base), memoryview(units[at : at + k]).cast("B"), pos)
            addr[at : at + k] = C.EXT_ADDRESS_BASE + wrote + np.arange(k, dtype=np.int64) * us
            wrote += k * us
            at += k
        self._wrote[key] = wrote
        q.units += n
        return addr

    def close(self) -> None:
        self._files.close()

    def abort(self) -> None:
        self._files.abort()
