"""IndexFiles built from dispatch columns, byte for byte as the broker's IndexService builds them.

The broker puts keys one at a time (IndexFile.putKey): a key's slot is
hash % slots, its entry links to what the slot held, and the slot then holds
the entry. That step runs compiled over whole batches
(scan.scanner.index_put); timeDiffs and the entries are whole-array work. What the broker
does around that, kept here:

- entry numbers start at 1 (indexCount starts at 1; entry 0 stays zero) and
  a file is full at indexCount == maxIndexNum, i.e. after maxIndexNum - 1 keys;
- hashSlotCount counts puts that found their slot empty;
- timeDiff = (storeTime - header beginTimestamp) / 1000, clamped to
  [0, Integer.MAX_VALUE], and 0 while beginTimestamp <= 0;
- the first put of a file computes its timeDiff against the begin values the
  file inherited from the previous file's end (0 in the very first file)
  and only then sets beginTimestamp/beginPhyOffset to its own;
- a new file is made by the first dispatch after the file filled: the next
  key of the same message, or else the next message, with or without keys;
  so a file that filled before the last message leaves an empty successor,
  whose header holds the inherited values, hashSlotCount 0, indexCount 1;
- a message below the current file's endPhyOffset is not indexed (this only
  matters when building on after a kept file, as the broker's recovery does).

Files are named like the broker's (yyyyMMddHHmmssSSS, UTC) after the store
time of the message that made them, one millisecond later than the previous
name when two would collide. Entries are written in slices as they come; slots
and header when a file is done, so memory stays at one slot table.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import datetime, timezone

import numpy as np

from rmqdump.common.javahash import index_hash_many
from rmqdump.common.jsontext import fields_of
from rmqdump.readers.fastpath import numpy_dtype
from rmqdump.scan import scanner
from rmqdump.schemas import IndexEntry, IndexHeader, IndexSlot
from rmqdump.schemas import constants as C

_SLOT = numpy_dtype(IndexSlot.subcons[0])  # the big-endian slot value

INT_MAX = (1 << 31) - 1
_ENTRY = numpy_dtype(IndexEntry)
_HEADER = numpy_dtype(IndexHeader)


def index_file_name(ms: int) -> str:
    """UtilAll.timeMillisToHumanString: yyyyMMddHHmmssSSS (UTC here; the broker uses its JVM's zone)."""
    d = datetime.fromtimestamp(ms / 1000, tz=timezone.utc)
    return d.strftime("%Y%m%d%H%M%S") + f"{ms % 1000:03d}"


@dataclass
class IndexFileResult:
    name: str
    path: str
    hash_slot_count: int = 0  # the header's fields, in the order of the file's JSON row (to_dict)
    index_count: int = 1
    begin_timestamp: int = 0
    end_timestamp: int = 0
    begin_phy_offset: int = 0
    end_phy_offset: int = 0

    @property
    def entries(self) -> int:
        return self.index_count - 1

    def header_bytes(self) -> bytes:
        h = np.zeros(1, dtype=_HEADER)
        for name in _HEADER.names:
            h[name] = getattr(self, name)
        return h.tobytes()

    def to_dict(self) -> dict:
        return {"file": self.name, "entries": self.entries, **fields_of(self, omit=("name", "path"))}


@dataclass
class IndexBuilder:
    """Feed `add()` every dispatched message in CommitLog order; `finish()` closes the last file.

    `after` = (endTimestamp, endPhyOffset) of a full index file that is kept
    before the new ones (what the broker's recovery builds on); None for a
    build from nothing.
    """

    out_dir: str
    hash_slots: int
    index_entries: int
    after: tuple[int, int] | None = None
    sync: bool = True
    files: list[IndexFileResult] = field(default_factory=list)

    def __post_init__(self):
        self._slot_table: np.ndarray | None = None
        self._fd: int | None = None
        self._cur: IndexFileResult | None = None
        self._last_name_ms = -1
        self._entries_at = C.INDEX_HEADER_SIZE + self.hash_slots * C.INDEX_SLOT_SIZE
        self._size = self._entries_at + self.index_entries * C.INDEX_ENTRY_SIZE
        self._skip_below = self.after[1] if self.after else None
        # the previous file's end values, inherited by the next file
        self._prev_end = (self.after[0], self.after[1]) if self.after else (0, 0)
        self._pending_after_record = -1  # a new file is due from the record after this one (global number)
        self._pending = True
        self._records_seen = 0

    # --- files ---

    def _open(self, trigger_ts: int) -> None:
        ms = max(int(trigger_ts), self._last_name_ms + 1)
        self._last_name_ms = ms
        name = index_file_name(ms)
        path = os.path.join(self.out_dir, name)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.ftruncate(fd, self._size)
        end_ts, end_phy = self._prev_end
        f = IndexFileResult(name, path)
        if end_phy > 0:
            f.begin_phy_offset = f.end_phy_offset = end_phy
        if end_ts > 0:
            f.begin_timestamp = f.end_timestamp = end_ts
        self._fd, self._cur = fd, f
        self.files.append(f)
        if self._slot_table is None:
            self._slot_table = np.zeros(self.hash_slots, dtype=np.int32)
        else:
            self._slot_table.fill(0)
        self._pending = False

    def _close(self) -> None:
        if self._cur is None:
            return
        f, fd = self._cur, self._fd
        if f.index_count > 1:  # an empty file's slots are the zeros ftruncate left
            os.pwrite(fd, self._slot_table.astype(_SLOT).tobytes(), C.INDEX_HEADER_SIZE)
        os.pwrite(fd, f.header_bytes(), 0)
        if self.sync:
            os.fsync(fd)
        os.close(fd)
        self._prev_end = (f.end_timestamp, f.end_phy_offset)
        self._cur, self._fd = None, None

    @property
    def _full(self) -> bool:
        return self._cur is not None and self._cur.index_count >= self.index_entries

    # --- building ---

    def add(self, phys: np.ndarray, store_ts: np.ndarray, key_rec: np.ndarray, key_hash: np.ndarray) -> None:
        """One batch of dispatched messages (every one, keyed or not) and their keys in put order.

        key_rec indexes the batch's messages (non-decreasing); key_hash is
        Java hashCode("topic#key") or already the index hash (its abs, which
        abs leaves as it is).
        """
        n = len(phys)
        if n == 0:
            return
        base = self._records_seen
        self._records_seen += n
        key_rec = np.asarray(key_rec, dtype=np.int64)
        h = index_hash_many(np.asarray(key_hash))
        if self._skip_below is not None and len(key_rec):
            keep = phys[key_rec] >= self._skip_below
            if not keep.all():
                key_rec, h = key_rec[keep], h[keep]
        K = len(key_rec)
        k0 = 0
        while True:
            if self._pending or self._full:
                if self._full:
                    self._close()
                    self._pending = True
                # the dispatch that makes the next file: the same message if it has keys left, else the next message
                nxt = self._pending_after_record + 1
                if k0 < K and base + int(key_rec[k0]) == self._pending_after_record:
                    nxt = self._pending_after_record
                if nxt - base >= n:
                    return  # made by a later batch, if any
                self._open(int(store_ts[max(nxt - base, 0)]))
            if k0 >= K:
                return
            room = self.index_entries - self._cur.index_count
            k1 = min(K, k0 + room)
            self._put(phys, store_ts, key_rec[k0:k1], h[k0:k1])
            self._pending_after_record = base + int(key_rec[k1 - 1])
            k0 = k1
            if not self._full and k0 >= K:
                return

    def _put(self, phys, store_ts, rec: np.ndarray, h: np.ndarray) -> None:
        """These keys (their records, index hashes) into the current file, which has room for them all."""
        f = self._cur
        k = len(rec)
        first = f.index_count
        p = phys[rec]
        st = store_ts[rec]
        # timeDiff against the header's beginTimestamp as it is at each put
        td = np.empty(k, dtype=np.int64)
        j = 0
        if first <= 1:
            td[0] = _time_diff(int(st[0]), f.begin_timestamp)
            f.begin_phy_offset = int(p[0])
            f.begin_timestamp = int(st[0])
            j = 1
        if k > j:
            if f.begin_timestamp <= 0:
                td[j:] = 0
            else:
                td[j:] = np.minimum(np.maximum(st[j:] - f.begin_timestamp, 0) // 1000, INT_MAX)
        rows = np.empty(k, dtype=_ENTRY)
        prev = np.empty(k, dtype=np.int32)
        f.hash_slot_count += int(scanner.index_put(self._slot_table, h % np.int32(self.hash_slots), first, prev))
        rows["key_hash"] = h
        rows["phys_offset"] = p
        rows["time_diff"] = td
        rows["prev_index"] = prev
        os.pwrite(self._fd, memoryview(rows).cast("B"), self._entries_at + first * C.INDEX_ENTRY_SIZE)
        f.index_count += k
        f.end_phy_offset = int(p[-1])
        f.end_timestamp = int(st[-1])

    def finish(self) -> list[IndexFileResult]:
        self._close()
        return self.files

    def abort(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _time_diff(store_ts: int, begin: int) -> int:
    if begin <= 0:
        return 0
    d = int((store_ts - begin) / 1000) if store_ts < begin else (store_ts - begin) // 1000
    return max(0, min(d, INT_MAX))
