"""The columns of a rebuild's own scan, kept for its self-check instead of scanning the CommitLog again.

While the builders write, each range's dispatch columns are appended to
column files in the rebuild's temporary directory (about 45 bytes a record
and 20 a key, on disk: memory stays bounded whatever the store's size). The
self-check then runs the `cq verify` and `index verify` analyses on the files
written, read back through the readers, with these columns standing in for
the CommitLog scan those commands make; the spill is removed before the
result is published.

First comes a quick proof (quick_cq, quick_index): where the written files
must hold exactly these columns, unit for unit and key for key (a clean
whole-store rebuild), they are read back with the schema's dtypes and
compared with them in whole-array passes. When that proves them, the
analyses would find nothing and are not run; when it cannot, the analyses
run and name what differs.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import numpy as np

from rmqdump.common import problems as P
from rmqdump.common.columnspill import ColumnSpill
from rmqdump.common.problems import Problem

SPILL_DIR = ".rmqdump-scan-columns"
QUEUED, INDEXED = 1, 2
_RECORD = {
    "phys": np.int64,
    "size": np.int32,
    "topic_id": np.int32,
    "queue_id": np.int32,
    "queue_offset": np.int64,
    "tags_code": np.int64,
    "store_ts": np.int64,
    "flags": np.uint8,
}
_KEY = {"key_phys": np.int64, "key_hash": np.int32, "key_ts": np.int64}  # index hash (abs of hashCode), record's store time; in put order
_CRC_CODES = (P.BODY_CRC_MISMATCH, P.PROP_CRC_MISMATCH)


class ScanColumns:
    """Append-only column files of one rebuild's scan, in CommitLog order, and their windows for the verifiers."""

    def __init__(self, tmp: str):
        self.dir = os.path.join(tmp, SPILL_DIR)
        os.makedirs(self.dir)
        self.records = ColumnSpill(self.dir, _RECORD)
        self.keys = ColumnSpill(self.dir, _KEY)
        self.tmap: dict[str, int] = {}
        self.problems: list[Problem] = []  # what the scan found, as the verifiers' own scan would report it

    @property
    def n(self) -> int:
        return self.records.rows

    @property
    def nk(self) -> int:
        return self.keys.rows

    def add(self, r) -> None:
        """One rebuild.RangeResult (its key hashes are index hashes)."""
        self.problems.extend(r.damaged)
        self.problems.extend(p for p in r.flagged if p.code not in _CRC_CODES)  # the verifiers scan without CRC checks
        if not len(r.phys):
            return
        remap = np.array([self.tmap.setdefault(t, len(self.tmap)) for t in r.topics], dtype=np.int32)
        flags = r.queued.astype(np.uint8) * QUEUED | r.indexed.astype(np.uint8) * INDEXED
        cols = {
            "phys": r.phys,
            "size": r.size,
            "topic_id": remap[r.topic_id],
            "queue_id": r.queue_id,
            "queue_offset": r.queue_offset,
            "tags_code": r.tags_code,
            "store_ts": r.store_ts,
            "flags": flags,
        }
        self.records.append(cols)
        keyed = len(r.key_rec) > 0
        self.keys.append(
            {
                "key_phys": r.phys[r.key_rec] if keyed else np.zeros(0, np.int64),
                "key_hash": r.key_hash if keyed else np.zeros(0, np.int32),
                "key_ts": r.store_ts[r.key_rec] if keyed else np.zeros(0, np.int64),
            }
        )

    def _scan_findings(self) -> dict:
        """What the analyses report of the CommitLog itself (its damage, read by the scan), beside the files proven:
        counted, not a problem of the files written."""
        codes: dict[str, int] = {}
        for p in self.problems:
            codes[p.code] = codes.get(p.code, 0) + 1
        return {"problems": len(self.problems), "codes": codes}

    def finish(self) -> None:
        """No more columns: the files are closed (and the object can be sent to the verifier processes)."""
        self.records.finish()
        self.keys.finish()

    def remove(self) -> None:
        self.finish()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _spill(self, name: str) -> ColumnSpill:
        return self.keys if name in _KEY else self.records

    def _col(self, name: str) -> np.ndarray:
        return self._spill(name).mapped(name)

    def _read(self, name: str, a: int, b: int) -> np.ndarray:
        return self._spill(name).read(name, a, b)

    # --- for cq verify: record tables of about `window` records, in offset order ---

    def record_windows(self, window: int) -> Iterator[tuple[object, list[Problem]]]:
        from rmqdump.checks.cqunits import RecordTable

        topics = list(self.tmap)
        problems = list(self.problems)
        for a in range(0, self.n, window):
            c = {k: self._read(k, a, min(self.n, a + window)) for k in _RECORD}
            same = {k: c[k] for k in ("phys", "size", "topic_id", "queue_id", "queue_offset", "tags_code")}
            yield RecordTable(**same, store_timestamp=c["store_ts"], queued=(c["flags"] & QUEUED) > 0, topics=topics), problems
            problems = []
        yield RecordTable.empty(), problems  # the remainder, as record_windows ends

    # --- for index verify: the records starting in [a, b) and the keys they index ---

    def records_in(self, a: int, b: int):
        from rmqdump.checks.indexverify import Records, key_pairs

        phys = self._col("phys")
        i0, i1 = (int(x) for x in np.searchsorted(phys, [a, b]))
        kp = self._col("key_phys")
        j0, j1 = (int(x) for x in np.searchsorted(kp, [a, b]))
        del phys, kp  # the maps: only the searches' pages were touched
        table, counts = key_pairs(self._read("key_phys", j0, j1), self._read("key_hash", j0, j1).astype(np.int64))
        rec = Records(
            self._read("phys", i0, i1),
            self._read("size", i0, i1).astype(np.int64),
            self._read("store_ts", i0, i1),
            (self._read("flags", i0, i1) & INDEXED) > 0,
            table,
            counts,
        )
        probs = [p for p in self.problems if p.phys_offset is not None and a <= p.phys_offset < b]
        return rec, probs

    # --- the quick proof: the written files equal what these columns say, or the analyses above explain why not ---

    def quick_cq(self, cq_root: str, units_per_file: int, analyzed: frozenset = frozenset()) -> dict | None:
        """cq verify's clean result when every queue's files hold exactly the units of its queued records, else None.

        analyzed: (topic, queueId) of queues left to the analysis (a repair's queues with holes): their
        records and files are not proven here, and the result counts the other queues only.

        Proven from the bytes on disk (read with the schema's unit dtype):
        every queue directory is one the columns name; its files are named
        0, F, 2F.. at the full file size; unit i of a queue is its i-th
        queued record (offset, size, tagsCode), with queueOffsets 0, 1, 2..
        in CommitLog order; and every unit after the last is zero. The
        CommitLog's own damage (the scan's problems) is counted as the analysis
        counts it: the proof is about the files written. Anything
        else (holes, fillers, a wrong byte) returns None: the caller
        then runs the `cq verify` analysis, which names what differs.
        """
        from rmqdump.readers.consumequeue import UNIT_DTYPE, UNIT_SIZE
        from rmqdump.scan.queueorder import queue_members

        fsize = units_per_file * UNIT_SIZE
        topics = list(self.tmap)
        on_disk: set[tuple[str, str]] = set()
        if os.path.isdir(cq_root):
            for t in os.listdir(cq_root):
                if not os.path.isdir(os.path.join(cq_root, t)):
                    return None
                on_disk.update((t, q) for q in os.listdir(os.path.join(cq_root, t)))
        nxt: dict[tuple[str, int], int] = {}
        for a in range(0, self.n, _QUICK_WINDOW):
            c = {k: self._read(k, a, min(self.n, a + _QUICK_WINDOW)) for k in ("topic_id", "queue_id", "queue_offset", "phys", "size", "tags_code", "flags")}
            idx = np.flatnonzero(c["flags"] & QUEUED)
            for sel in queue_members(len(topics), c["topic_id"][idx], c["queue_id"][idx]):
                m = idx[sel]
                q = (topics[int(c["topic_id"][m[0]])], int(c["queue_id"][m[0]]))
                if q in analyzed:
                    continue
                first = nxt.get(q, 0)
                qo = c["queue_offset"][m]
                if int(qo[0]) != first or int(qo[-1]) != first + len(m) - 1 or (len(m) > 1 and not (np.diff(qo) == 1).all()):
                    return None
                units = _read_units(os.path.join(cq_root, q[0], str(q[1])), first, len(m), units_per_file, UNIT_DTYPE)
                if (
                    units is None
                    or not np.array_equal(units["commit_log_offset"], c["phys"][m])
                    or not np.array_equal(units["size"], c["size"][m])
                    or not np.array_equal(units["tags_code"], c["tags_code"][m])
                ):
                    return None
                nxt[q] = first + len(m)
        if on_disk != {(t, str(qid)) for t, qid in [*nxt, *analyzed]}:
            return None
        for (t, qid), n in nxt.items():
            qdir = os.path.join(cq_root, t, str(qid))
            files = -(-n // units_per_file)
            if sorted(os.listdir(qdir)) != [f"{i * fsize:020d}" for i in range(files)]:
                return None
            if any(os.path.getsize(os.path.join(qdir, f"{i * fsize:020d}")) != fsize for i in range(files)):
                return None
            rest = n % units_per_file
            if rest:
                tail = np.fromfile(os.path.join(qdir, f"{(files - 1) * fsize:020d}"), dtype=np.uint8, offset=rest * UNIT_SIZE)
                if tail.any():
                    return None
        return {"queues": len(nxt), "units": sum(nxt.values()), **self._scan_findings(), "at_filler_units": {}, "ok": True}

    def quick_index(self, index_root: str, hash_slots: int, index_entries: int) -> dict | None:
        """index verify's clean result when the IndexFiles hold exactly these columns' keys, in put order, else None.

        Proven from the bytes on disk (schema dtypes): the files, oldest
        first, are full but the last, at the layout's size; their entries
        1..indexCount-1 are the keys (hash, CommitLog offset) in put order,
        with the timeDiff the header's beginTimestamp gives; the headers'
        begin/end values are their first and last key's; and in each file
        every entry's previous-index link goes to the previous entry of the
        same slot, every used slot holds its newest entry, hashSlotCount
        counts them. Anything else returns None and the caller runs the
        `index verify` analysis.
        """
        from rmqdump.readers.fastpath import numpy_dtype
        from rmqdump.readers.indexfile import ENTRY_DTYPE, ENTRY_SIZE, HEADER_SIZE, SLOT_DTYPE, file_size, list_index_files
        from rmqdump.schemas import IndexHeader

        names = sorted(os.listdir(index_root)) if os.path.isdir(index_root) else []
        paths = list_index_files(os.path.dirname(index_root))
        if len(paths) != len(names):
            return None
        header_dt = numpy_dtype(IndexHeader)
        size = file_size(hash_slots, index_entries)
        entries_at = HEADER_SIZE + hash_slots * SLOT_DTYPE.itemsize
        k = 0
        prev_end_ts = prev_end_phy = 0
        entries = 0
        for i, path in enumerate(paths):
            if os.path.getsize(path) != size:
                return None
            h = np.fromfile(path, dtype=header_dt, count=1)[0]
            count = int(h["index_count"])
            m = count - 1
            if m < 0 or count > index_entries or k + m > self.nk or (i < len(paths) - 1 and count != index_entries):
                return None
            if m == 0:  # the empty successor of a file that filled: the inherited begin and end values, no slots
                inherited = (prev_end_phy, prev_end_ts, prev_end_phy, prev_end_ts)
                if i != len(paths) - 1 or k != self.nk or int(h["hash_slot_count"]) != 0:
                    return None
                if (int(h["begin_phy_offset"]), int(h["begin_timestamp"]), int(h["end_phy_offset"]), int(h["end_timestamp"])) != inherited:
                    return None
                slots = np.fromfile(path, dtype=SLOT_DTYPE, count=hash_slots, offset=HEADER_SIZE)
                return None if slots["entry"].any() else {"files": len(paths), "entries": entries, "problems": 0, "codes": {}, "ok": True}
            begin = int(h["begin_timestamp"])
            first_key = (int(self._read("key_phys", k, k + 1)[0]), int(self._read("key_ts", k, k + 1)[0]))
            chains = _Chains(m, hash_slots)
            for c0 in range(0, m, _QUICK_WINDOW):
                c1 = min(m, c0 + _QUICK_WINDOW)
                ent = np.fromfile(path, dtype=ENTRY_DTYPE, count=c1 - c0, offset=entries_at + (1 + c0) * ENTRY_SIZE)
                kp = self._read("key_phys", k + c0, k + c1)
                kh = self._read("key_hash", k + c0, k + c1)
                if not np.array_equal(ent["phys_offset"], kp) or not np.array_equal(ent["key_hash"], kh):
                    return None
                st = self._read("key_ts", k + c0, k + c1)
                td = st - begin if begin > 0 else np.zeros(len(st), dtype=np.int64)
                if c0 == 0:
                    td[0] = st[0] - prev_end_ts if prev_end_ts > 0 else 0
                td = np.minimum(np.maximum(td, 0) // 1000, _INT_MAX)  # a negative difference is 0 whichever way it is divided
                if not np.array_equal(ent["time_diff"], td) or not chains.add(c0, kh.astype(np.int64) % hash_slots, ent["prev_index"].astype(np.int64)):
                    return None
            last_key = (int(kp[-1]), int(st[-1]))
            if (int(h["begin_phy_offset"]), begin, int(h["end_phy_offset"]), int(h["end_timestamp"])) != (*first_key, *last_key):
                return None
            slots = np.fromfile(path, dtype=SLOT_DTYPE, count=hash_slots, offset=HEADER_SIZE)["entry"].astype(np.int32)
            if not chains.finish(slots, int(h["hash_slot_count"])):
                return None
            prev_end_ts, prev_end_phy = int(h["end_timestamp"]), int(h["end_phy_offset"])
            k += m
            entries += m
        if k != self.nk:
            return None
        return {"files": len(paths), "entries": entries, **self._scan_findings(), "ok": True}


_QUICK_WINDOW = 1 << 19
_INT_MAX = (1 << 31) - 1


def _read_units(qdir: str, first: int, n: int, units_per_file: int, dtype: np.dtype) -> np.ndarray | None:
    """Units first..first+n-1 of a queue, read from its files (None when a file is missing or short)."""
    parts = []
    i = first
    while i < first + n:
        f, at = divmod(i, units_per_file)
        take = min(units_per_file - at, first + n - i)
        path = os.path.join(qdir, f"{f * units_per_file * dtype.itemsize:020d}")
        try:
            u = np.fromfile(path, dtype=dtype, count=take, offset=at * dtype.itemsize)
        except OSError:
            return None
        if len(u) != take:
            return None
        parts.append(u)
        i += take
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


class _Chains:
    """Entries 1..m of one IndexFile (their slots and previous-index links, in chunks) and its slot table form the broker's chains.

    Each link goes back to an entry of the same slot, no entry is the
    previous of two, each used slot has exactly one chain end (link 0) and
    its table value is the one entry nobody links to: then each slot's
    entries form one chain, newest first, each linking to the one before it.
    Held: a slot per entry, a mark per entry and per slot.
    """

    def __init__(self, m: int, hash_slots: int):
        self.slot = np.zeros(m + 1, dtype=np.int32)  # by entry number
        self.is_prev = np.zeros(m + 1, dtype=bool)
        self.used = np.zeros(hash_slots, dtype=bool)
        self.links = self.ends = 0

    def add(self, c0: int, slot: np.ndarray, prev: np.ndarray) -> bool:
        """Entries c0+1.. (their slots and links), in order."""
        e = np.arange(c0 + 1, c0 + 1 + len(slot), dtype=np.int64)
        self.slot[e] = slot
        self.used[slot] = True
        if ((prev < 0) | (prev >= e)).any():
            return False
        linked = prev != 0
        lp = prev[linked]
        if not np.array_equal(self.slot[lp], slot[linked]):
            return False
        if self.is_prev[lp].any():  # the previous of two entries
            return False
        self.is_prev[lp] = True  # twice inside one chunk: finish() counts the marks
        self.links += len(lp)
        self.ends += len(slot) - len(lp)
        return True

    def finish(self, slots: np.ndarray, hash_slot_count: int) -> bool:
        m = len(self.slot) - 1
        if int(np.count_nonzero(self.is_prev)) != self.links:  # an entry that is the previous of two
            return False
        n_used = int(np.count_nonzero(self.used))
        if self.ends != n_used or n_used != hash_slot_count:  # one chain end per used slot (each chain ends in its own slot)
            return False
        used = slots != 0  # masks and int32 gathers, no index arrays: a full file has 20M entries and millions of used slots
        if not np.array_equal(used, self.used):
            return False
        heads = np.where(used, slots, 1)
        if ((heads < 1) | (heads > m)).any():
            return False
        own = self.slot[heads] == np.arange(len(slots), dtype=np.int32)  # each used slot's head entry lies in that slot
        return bool(own[used].all() and not self.is_prev[heads[used]].any())
