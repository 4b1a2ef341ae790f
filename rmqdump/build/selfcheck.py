"""The columns of a rebuild's own scan, kept for its self-check instead of scanning the CommitLog again.

While the builders write, each range's dispatch columns are appended to
column files in the rebuild's temporary directory (about 45 bytes a record
and 12 a key, on disk: memory stays bounded whatever the store's size). The
self-check then runs the `cq verify` and `index verify` analyses on the files
written, read back through the readers, with these columns standing in for
the CommitLog scan those commands make; the spill is removed before the
result is published.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import numpy as np

from rmqdump.common import problems as P
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
_KEY = {"key_phys": np.int64, "key_hash": np.int32}  # the index hash (abs of hashCode), in put order
_CRC_CODES = (P.BODY_CRC_MISMATCH, P.PROP_CRC_MISMATCH)


class ScanColumns:
    """Append-only column files of one rebuild's scan, in CommitLog order, and their windows for the verifiers."""

    def __init__(self, tmp: str):
        self.dir = os.path.join(tmp, SPILL_DIR)
        os.makedirs(self.dir)
        self.tmap: dict[str, int] = {}
        self.problems: list[Problem] = []  # what the scan found, as the verifiers' own scan would report it
        self.n = self.nk = 0
        self._files = {k: open(os.path.join(self.dir, k), "wb") for k in (*_RECORD, *_KEY)}  # noqa: SIM115 (closed in finish)

    def add(self, r) -> None:
        """One rebuild.RangeResult (its key hashes already turned into chains or not)."""
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
        kh = r.chains[0] if r.chains is not None else None
        if kh is None and len(r.key_rec):
            from rmqdump.common.javahash import index_hash_many

            kh = index_hash_many(r.key_hash)
        cols["key_phys"] = r.phys[r.key_rec] if len(r.key_rec) else np.zeros(0, np.int64)
        cols["key_hash"] = kh if kh is not None else np.zeros(0, np.int32)
        for k, dt in {**_RECORD, **_KEY}.items():
            np.asarray(cols[k], dtype=dt).tofile(self._files[k])
        self.n += len(r.phys)
        self.nk += len(cols["key_phys"])

    def finish(self) -> None:
        """No more columns: the files are closed (and the object can be sent to the verifier processes)."""
        for f in self._files.values():
            f.close()
        self._files = {}

    def remove(self) -> None:
        self.finish()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _col(self, name: str) -> np.ndarray:
        dt = {**_RECORD, **_KEY}[name]
        count = self.nk if name in _KEY else self.n
        if count == 0:
            return np.zeros(0, dtype=dt)
        return np.memmap(os.path.join(self.dir, name), dtype=dt, mode="r", shape=(count,))

    # --- for cq verify: record tables of about `window` records, in offset order ---

    def record_windows(self, window: int) -> Iterator[tuple[object, list[Problem]]]:
        from rmqdump.checks.cqverify import RecordTable

        cols = {k: self._col(k) for k in _RECORD}
        topics = list(self.tmap)
        problems = list(self.problems)
        for a in range(0, self.n, window):
            c = {k: np.array(v[a : a + window]) for k, v in cols.items()}
            yield (
                RecordTable(
                    phys=c["phys"],
                    size=c["size"],
                    topic_id=c["topic_id"],
                    queue_id=c["queue_id"],
                    queue_offset=c["queue_offset"],
                    tags_code=c["tags_code"],
                    store_timestamp=c["store_ts"],
                    queued=(c["flags"] & QUEUED) > 0,
                    topics=topics,
                ),
                problems,
            )
            problems = []
        yield RecordTable.empty(), problems  # the remainder, as record_windows ends

    # --- for index verify: the records starting in [a, b) and the keys they index ---

    def records_in(self, a: int, b: int):
        from rmqdump.checks.indexverify import Records, key_pairs

        phys = self._col("phys")
        i0, i1 = (int(x) for x in np.searchsorted(phys, [a, b]))
        kp = self._col("key_phys")
        j0, j1 = (int(x) for x in np.searchsorted(kp, [a, b]))
        table, counts = key_pairs(np.array(kp[j0:j1]), np.array(self._col("key_hash")[j0:j1], dtype=np.int64))
        rec = Records(
            np.array(phys[i0:i1]),
            np.array(self._col("size")[i0:i1], dtype=np.int64),
            np.array(self._col("store_ts")[i0:i1]),
            (np.array(self._col("flags")[i0:i1]) & INDEXED) > 0,
            table,
            counts,
        )
        probs = [p for p in self.problems if p.phys_offset is not None and a <= p.phys_offset < b]
        return rec, probs
