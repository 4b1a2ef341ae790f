"""`index verify`: every index file against itself and against the CommitLog, both ways.

Inside a file: the header agrees with the entries (count, begin/end offset and
time), every slot points at a written entry of its own hash, chains only go
backwards and stay in their slot, every entry is reachable from a slot. Against
the CommitLog: every entry points at a record start whose topic#key set has a
key of that hash and whose store time gives its timeDiff; and every record the
broker would index (all but ROLLBACK) has an entry per key.

Two things look odd and are not damage (store-format.md): entry 1 of a file
has its timeDiff counted from the previous file's end, and after an abnormal
recovery the message at a kept file's endPhyOffset is indexed again in the
next file.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from rmqdump.common.javahash import index_hash_many, java_hash_many
from rmqdump.common.jsontext import fields_of
from rmqdump.common.problems import Problem
from rmqdump.readers.commitlog import CommitLog, commitlog_path, frame_of
from rmqdump.readers.indexfile import HEADER_COUNT, HEADER_SLOT_COUNT, LAYOUT_SIZE, IndexFile, IndexLayoutError, open_all
from rmqdump.readers.readable import prove_readable
from rmqdump.scan import scanner
from rmqdump.scan.dispatch import DelayLevels, DispatchColumns
from rmqdump.scan.ranges import SERIAL, Mapper, RangeScan, ScanOptions, map_ranges, scan_range
from rmqdump.scan.splits import RANGE_BYTES, Split, commitlog_splits

HEADER_BEGIN = "index_header_begin"
HEADER_END = "index_header_end"
ENTRY0_WRITTEN = "index_entry0_written"
ENTRY_EMPTY = "index_entry_empty"
ENTRY_BAD_HASH = "index_entry_bad_hash"
ENTRY_BAD_TIME = "index_entry_bad_time"
ENTRY_NOT_RECORD = "index_entry_not_record"
ENTRY_KEY_MISMATCH = "index_entry_key_mismatch"
TIME_DIFF_MISMATCH = "index_time_diff_mismatch"
SLOT_PAST_COUNT = "index_slot_past_count"
SLOT_WRONG_HASH = "index_slot_wrong_hash"
CHAIN_NOT_BACKWARDS = "index_chain_not_backwards"
CHAIN_BROKEN = "index_chain_broken"
UNREACHABLE = "index_entry_unreachable"
DUPLICATE = "index_duplicate_entry"
MISSING = "index_missing_entry"
FILE_GAP = "index_file_gap"
BEHIND = "index_behind"
FILE_ORDER = "index_file_order"
FILE_SIZE = LAYOUT_SIZE
NO_INDEX = "index_no_files"

_PAIR = np.dtype([("phys", "<i8"), ("hash", "<i8")])
MAX_LISTED = 5
CHUNK = 1 << 20  # entries checked at a time
GATHER_SPAN = 1 << 20  # entries (20 MiB of the file) read before their pages are given back


@dataclass
class IndexVerifySummary:
    index_files: int = 0
    entries: int = 0
    messages: int = 0
    indexed_keys: int = 0
    problems: int = 0
    codes: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"kind": "summary", **fields_of(self, omit=("codes",))}


PROBLEM_COLUMNS = ("index_file", "entry", "slot")  # on every JSON Lines problem, CommitLog problems included


@dataclass
class Records:
    """What the CommitLog holds: record starts as sorted columns, and the (phys, hash) of every key it indexes.

    Key names are not kept (a big CommitLog has millions): the few a report
    needs are read back from their records.
    """

    phys: np.ndarray
    size: np.ndarray
    store_ts: np.ndarray
    indexed: np.ndarray
    key_table: np.ndarray  # sorted unique _PAIR values
    key_counts: np.ndarray  # how many entries the broker writes for each (a key can repeat in one message)

    @property
    def data_end(self) -> int:
        return int(self.phys[-1] + self.size[-1]) if len(self.phys) else 0

    @property
    def indexed_keys(self) -> int:
        return int(self.key_counts.sum())

    def at(self, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(record index or -1, offset is a record start, offset lies inside a record)."""
        if len(self.phys) == 0:
            z = np.zeros(len(offsets), dtype=bool)
            return np.full(len(offsets), -1), z, z
        i = np.searchsorted(self.phys, offsets, side="right") - 1
        ok = i >= 0
        ic = np.where(ok, i, 0)
        start = ok & (self.phys[ic] == offsets)
        inside = ok & (offsets < self.phys[ic] + self.size[ic])
        return np.where(ok, i, -1), start, inside

    def with_record_before(self, rec: tuple[int, int, int] | None) -> Records:
        """The same records with one more in front (phys, size, store time), for offsets that fall inside it."""
        if rec is None:
            return self
        p, n, t = rec
        return Records(np.r_[p, self.phys], np.r_[n, self.size], np.r_[t, self.store_ts], np.r_[False, self.indexed], self.key_table, self.key_counts)

    def lookup_pairs(self, phys: np.ndarray, h: np.ndarray) -> np.ndarray:
        """Index of each (phys, hash) pair in key_table, or -1."""
        if len(phys) == 0 or len(self.key_table) == 0:
            return np.full(len(phys), -1, dtype=np.int64)
        up, tkey = self._composite()
        r = np.minimum(np.searchsorted(up, phys), len(up) - 1)
        ok = (up[r] == phys) & (h >= 0) & (h < 1 << 32)
        qk = (r.astype(np.int64) << 32) | np.where(ok, h, 0)
        i = np.minimum(np.searchsorted(tkey, qk), len(tkey) - 1)
        return np.where(ok & (tkey[i] == qk), i, -1)

    def _composite(self) -> tuple[np.ndarray, np.ndarray]:
        """key_table as one sorted int64 per pair, (rank of phys) << 32 | hash: searched as plain integers, not structured values."""
        got = self.__dict__.get("_comp")
        if got is None or got[0] is not self.key_table:
            p, h = self.key_table["phys"], self.key_table["hash"]
            new = np.ones(len(p), dtype=bool)
            new[1:] = p[1:] != p[:-1]
            rank = np.cumsum(new) - 1
            got = (self.key_table, p[new], (rank.astype(np.int64) << 32) | h)
            self.__dict__["_comp"] = got
        return got[1], got[2]


def _records_of(scan: RangeScan) -> tuple[Records, list[Problem]]:
    return records_of(scan.columns), scan.problems


def phys_window(sp: Split) -> tuple[int, int]:
    """The physical offsets [a, b) of the records that start in a range (DLedger: past their entry header)."""
    frame = frame_of(sp.path)
    return sp.base + (sp.start + frame if sp.start else 0), sp.base + (sp.end + frame if sp.end < sp.size else sp.size)


def records_of(d: DispatchColumns) -> Records:
    """The Records of joined dispatch columns: what the index verification compares the IndexFiles with."""
    table, counts = key_pairs(d.phys[d.key_rec], index_hash_many(d.key_hash))
    return Records(d.phys, d.size.astype(np.int64), d.store_timestamp, d.indexed, table, counts)


def key_pairs(phys: np.ndarray, index_hash: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct (phys, index hash) pairs of keys, sorted, and how many keys each has: np.unique(pairs, return_counts=True),
    sorting one int64 per pair ((rank of phys) << 32 | hash) instead of structured values.

    Hashes are index hashes (0 <= hash < 2**31); pairs come in CommitLog order (phys non-decreasing), else are put so first.
    """
    if len(phys) == 0:
        return np.zeros(0, dtype=_PAIR), np.zeros(0, dtype=np.int64)
    p, h = phys.astype(np.int64, copy=False), index_hash.astype(np.int64, copy=False)
    if len(p) > 1 and bool((p[1:] < p[:-1]).any()):
        o = np.argsort(p, kind="stable")
        p, h = p[o], h[o]
    newp = np.ones(len(p), dtype=bool)
    newp[1:] = p[1:] != p[:-1]
    uniq_phys = p[newp]
    key = ((np.cumsum(newp) - 1).astype(np.int64) << 32) | h.astype(np.int64)
    key.sort()
    new = np.ones(len(key), dtype=bool)
    new[1:] = key[1:] != key[:-1]
    starts = np.flatnonzero(new)
    table = np.zeros(len(starts), dtype=_PAIR)
    table["phys"], table["hash"] = uniq_phys[key[starts] >> 32], key[starts] & 0xFFFFFFFF
    return table, np.diff(np.append(starts, len(key)))


def index_keys_of(cl: CommitLog, phys: int) -> list[tuple[str, int]]:
    """(topic#key, index hash) of the record at phys, as the broker indexes them (none for a ROLLBACK)."""
    m = scanner.record_at(cl, phys, check_crc=False)
    if isinstance(m, Problem) or m.transaction == "rollback":
        return []
    names = ([f"{m.topic}#{m.uniq_key}"] if m.uniq_key is not None else []) + [f"{m.topic}#{k}" for k in m.keys]
    return list(zip(names, index_hash_many(java_hash_many(names)).tolist(), strict=True)) if names else []


def _problem(code: str, f: IndexFile, detail: str, *, entry: int | None = None, slot: int | None = None, phys: int | None = None) -> Problem:
    """A finding located at its bytes: the slot for slot findings, else the entry, else the header."""
    if slot is not None and code in (SLOT_PAST_COUNT, SLOT_WRONG_HASH):
        pos = f.slot_offset(slot)
    elif entry is not None and 0 <= entry < f.layout.index_entries:
        pos = f.entry_offset(entry)
    elif slot is not None:
        pos = f.slot_offset(slot)
    else:
        pos = 0
    return Problem(code, f.path, pos, detail, phys_offset=phys, extra={"index_file": f.name, "entry": entry, "slot": slot})


def _listed(xs: list, n: int = MAX_LISTED) -> str:
    s = ", ".join(map(str, xs[:n]))
    return s + (f" and {len(xs) - n} more" if len(xs) > n else "")


@dataclass
class _FileState:
    """Per-entry facts of one file kept between passes (small types: a full file has 20,000,000 entries)."""

    last: int
    prev: np.ndarray  # int32
    live: np.ndarray  # bool
    good_link: np.ndarray  # bool: a link that goes back and stays in the slot
    chunks: list[tuple[int, int, int, int]] = field(default_factory=list)  # (lo, hi, min phys, max phys) of live entries
    first_live: bool = False

    def drop_arrays(self) -> None:
        """Keep only what the CommitLog pass needs: a few numbers per chunk, not bytes per entry."""
        self.first_live = bool(self.live[1]) if len(self.live) > 1 else False
        self.prev = self.live = self.good_link = np.zeros(0, dtype=bool)


def check_file(f: IndexFile, prev_file: IndexFile | None, extent: tuple[int, int]) -> tuple[_FileState, list[Problem]]:
    """Findings inside one index file (header, entries, slots, chains); the CommitLog comes later, window by window."""
    out: list[Problem] = []
    hd, slots_n = f.header, f.layout.hash_slots
    last = f.last_written()
    n = last + 1  # entries 0..last; the header should say indexCount == n
    e0 = f.entries[0:1]
    if len(e0) and bool(e0["key_hash"][0] != 0 or e0["phys_offset"][0] != 0 or e0["prev_index"][0] != 0):
        out.append(_problem(ENTRY0_WRITTEN, f, "entry 0 is never written by the broker, but holds data", entry=0))
    if hd.index_count != max(n, 1):
        if hd.index_count < 1 or hd.index_count > f.layout.index_entries:
            out.append(
                _problem(HEADER_COUNT, f, f"header indexCount {hd.index_count} is outside 1..{f.layout.index_entries}; entries are written up to {last}")
            )
        elif hd.index_count < n:
            out.append(
                _problem(HEADER_COUNT, f, f"entries {hd.index_count}..{last} are written past the header's indexCount {hd.index_count}", entry=hd.index_count)
            )
        else:
            out.append(_problem(HEADER_COUNT, f, f"header indexCount {hd.index_count} counts entries {n}..{hd.index_count - 1}, which are empty", entry=n))
    st = _FileState(last, np.zeros(n, dtype=np.int32), np.zeros(n, dtype=bool), np.zeros(n, dtype=bool))
    all_hash = f.entries["key_hash"]
    for lo in range(1, n, CHUNK):
        out.extend(_check_chunk(f, st, lo, min(n, lo + CHUNK), all_hash, slots_n, extent))
        f.release()
    out.extend(_check_slots(f, st, all_hash, slots_n))
    st.drop_arrays()
    if last < 1 and prev_file is not None and (hd.begin_phy_offset, hd.end_phy_offset) != (prev_file.header.end_phy_offset, prev_file.header.end_phy_offset):
        out.append(
            _problem(
                HEADER_BEGIN,
                f,
                f"empty file: begin/end offsets {hd.begin_phy_offset}/{hd.end_phy_offset} are not the previous file's end {prev_file.header.end_phy_offset}",
            )
        )
    f.release()
    return st, out


def _slot_of(kh: np.ndarray, slots_n: int) -> np.ndarray:
    return np.where(kh >= 0, kh, 0) % slots_n


def _check_chunk(f: IndexFile, st: _FileState, lo: int, hi: int, all_hash, slots_n: int, extent: tuple[int, int]) -> Iterator[Problem]:
    last = st.last
    c = f.entries[lo:hi]
    kh = c["key_hash"].astype(np.int64)
    phys = c["phys_offset"].astype(np.int64)
    diff = c["time_diff"].astype(np.int64)
    prev = c["prev_index"].astype(np.int64)
    idx = np.arange(lo, hi, dtype=np.int64)
    empty = (kh == 0) & (phys == 0) & (diff == 0) & (prev == 0)
    live = ~empty
    st.live[lo:hi] = live
    st.prev[lo:hi] = np.clip(prev, -1, 2**31 - 1)
    if live.any():
        st.chunks.append((lo, hi, int(phys[live].min()), int(phys[live].max())))
    for j in np.flatnonzero(empty).tolist():
        yield _problem(ENTRY_EMPTY, f, f"entry {lo + j} is inside the written range (1..{last}) but empty", entry=lo + j)
    for j in np.flatnonzero(live & (kh < 0)).tolist():
        yield _problem(ENTRY_BAD_HASH, f, f"keyHash {int(kh[j])} is negative (the broker stores abs(hashCode))", entry=lo + j, phys=int(phys[j]))
    for j in np.flatnonzero(live & (diff < 0)).tolist():
        yield _problem(ENTRY_BAD_TIME, f, f"timeDiff {int(diff[j])} is negative", entry=lo + j, phys=int(phys[j]))
    for j in np.flatnonzero(live & ((phys < extent[0]) | (phys >= extent[1]))).tolist():
        p = int(phys[j])
        where = "past the end of the CommitLog" if p >= extent[1] else "before the CommitLog's first file"
        yield _problem(ENTRY_NOT_RECORD, f, f"entry {lo + j} (phyOffset {p}) points {where} ({extent[0]}..{extent[1]})", entry=lo + j, phys=p)
    slot = _slot_of(kh, slots_n)
    back_ok = (prev >= 0) & (prev < idx)
    for j in np.flatnonzero(live & ~back_ok).tolist():
        yield _problem(
            CHAIN_NOT_BACKWARDS,
            f,
            f"prevIndex {int(prev[j])} does not point back to an older entry (chains run newest to oldest)",
            entry=lo + j,
            phys=int(phys[j]),
        )
    linked = live & back_ok & (prev > 0)
    prev_hash = _key_hashes(f, all_hash, prev[linked])  # older entries, possibly in earlier chunks: read from the map
    ok_prev = (prev_hash >= 0) & (_slot_of(prev_hash, slots_n) == slot[linked])
    broken = np.zeros(len(kh), dtype=bool)
    broken[np.flatnonzero(linked)[~ok_prev]] = True
    st.good_link[lo:hi] = linked & ~broken
    for j in np.flatnonzero(broken).tolist():
        p = int(prev[j])
        yield _problem(
            CHAIN_BROKEN,
            f,
            f"prevIndex {p} is an entry of slot {int(_slot_of(np.array([int(all_hash[p])]), slots_n)[0])}, not of this entry's slot {int(slot[j])}: the chain is broken here",
            entry=lo + j,
            slot=int(slot[j]),
            phys=int(phys[j]),
        )


def _window_entries(f: IndexFile, st: _FileState, a: int, b: int) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """(entry numbers, key hashes, phys) of the live entries pointing into [a, b), chunk by chunk (entries run in CommitLog order)."""
    for lo, hi, pmin, pmax in st.chunks:
        if pmax < a or pmin >= b:
            continue
        c = f.entries[lo:hi]
        phys = c["phys_offset"].astype(np.int64)
        live = (c["key_hash"] != 0) | (phys != 0) | (c["time_diff"] != 0) | (c["prev_index"] != 0)
        sel = np.flatnonzero(live & (phys >= a) & (phys < b))
        if len(sel):
            yield lo + sel, c["key_hash"][sel].astype(np.int64), phys[sel]
        f.release()


def _check_records(f: IndexFile, st: _FileState, rec: Records, ca: np.ndarray, a: int, b: int) -> Iterator[Problem]:
    """The entries pointing into one CommitLog window against its records; counts each entry's key pair into `ca`."""
    hd = f.header
    for k, kh, phys in _window_entries(f, st, a, b):
        ri, start, inside = rec.at(phys)
        for t in np.flatnonzero(~start).tolist():
            p = int(phys[t])
            if inside[t]:
                what = f"points into the middle of the record at {int(rec.phys[ri[t]])} (size {int(rec.size[ri[t]])})"
            elif p >= rec.data_end:
                what = f"points past the end of the CommitLog's data ({rec.data_end})"
            else:
                what = "points at no record"
            yield _problem(ENTRY_NOT_RECORD, f, f"entry {int(k[t])} (phyOffset {p}) {what}", entry=int(k[t]), phys=p)
        sk, sri, skh, sp = k[start], ri[start], kh[start], phys[start]
        u = rec.lookup_pairs(sp, skh)
        np.add.at(ca, u[u >= 0], 1)
        for t in np.flatnonzero(u < 0).tolist():
            why = (
                "the record is a ROLLBACK, which the broker never indexes" if not rec.indexed[sri[t]] else f"no index key of the record hashes to {int(skh[t])}"
            )
            yield _problem(ENTRY_KEY_MISMATCH, f, f"entry {int(sk[t])} (phyOffset {int(sp[t])}): {why}", entry=int(sk[t]), phys=int(sp[t]))
        # timeDiff: Java's (ts - begin) / 1000 clamped to [0, Integer.MAX_VALUE]; 0 while begin was unset.
        # Entry 1 counts from the previous file's end (written before the header's begin is set): skipped.
        diff = f.entries["time_diff"][sk].astype(np.int64)
        ts = rec.store_ts[sri]
        want = np.minimum(np.where(ts >= hd.begin_timestamp, (ts - hd.begin_timestamp) // 1000, 0), 2**31 - 1)
        if hd.begin_timestamp <= 0:
            want = np.zeros_like(want)
        for t in np.flatnonzero((want != diff) & (sk != 1)).tolist():
            yield _problem(
                TIME_DIFF_MISMATCH,
                f,
                f"entry {int(sk[t])}: timeDiff {int(diff[t])} s, but the record was stored {int(ts[t])} = header begin {hd.begin_timestamp} + {int(want[t])} s",
                entry=int(sk[t]),
                phys=int(sp[t]),
            )
        f.release()


def _check_slots(f: IndexFile, st: _FileState, all_hash, slots_n: int) -> Iterator[Problem]:
    hd, last, n = f.header, st.last, st.last + 1
    heads_all = f.slots
    used = np.flatnonzero(heads_all != 0).astype(np.int32)
    heads = heads_all[used].astype(np.int32)
    past = (heads < 1) | (heads > last)
    for s_, h_ in zip(used[past].tolist(), heads[past].tolist(), strict=True):
        yield _problem(
            SLOT_PAST_COUNT, f, f"slot {s_} points at entry {h_}, outside the written entries 1..{last} (indexCount {hd.index_count})", slot=s_, entry=h_
        )
    vu, vh = used[~past], heads[~past]
    n_used = len(used)
    del used, heads
    head_slot = _slot_of(_key_hashes(f, all_hash, vh), slots_n).astype(np.int32)
    wrong = (head_slot != vu) | ~st.live[vh]
    for s_, h_, hs in zip(vu[wrong].tolist(), vh[wrong].tolist(), head_slot[wrong].tolist(), strict=True):
        yield _problem(SLOT_WRONG_HASH, f, f"slot {s_} points at entry {h_}, whose keyHash {int(all_hash[h_])} belongs to slot {hs}", slot=s_, entry=h_)
    if n_used != hd.hash_slot_count:
        yield _problem(HEADER_SLOT_COUNT, f, f"header hashSlotCount {hd.hash_slot_count}, but {n_used} slots are in use")
    # Reachability: from the valid heads along valid links only.
    reach = np.zeros(n, dtype=bool)
    frontier = vh[~wrong]
    while len(frontier):
        frontier = frontier[~reach[frontier]]
        reach[frontier] = True
        frontier = st.prev[frontier[st.good_link[frontier]]].astype(np.int64)
    orphan = st.live & ~reach
    orphan[0] = False
    # Report where a cut chain starts, not every older entry hanging from it.
    hanging = np.zeros(n, dtype=bool)
    hanging[st.prev[orphan & st.good_link]] = True
    for k in np.flatnonzero(orphan & ~hanging).tolist():
        kh = int(all_hash[k])
        yield _problem(
            UNREACHABLE,
            f,
            f"entry {k} and the older entries of its chain are reachable from no slot: lookups cannot find them",
            entry=k,
            slot=kh % slots_n if kh >= 0 else None,
            phys=int(f.entries[k]["phys_offset"]),
        )


def _key_hashes(f: IndexFile, all_hash, entries: np.ndarray) -> np.ndarray:
    """keyHash of each given entry, read in file order one stretch at a time, each stretch's pages given back.

    Random reads over a mapped file fault whole page-cache folios in; unsorted,
    a million of them would make the whole file resident.
    """
    out = np.zeros(len(entries), dtype=np.int64)
    if not len(entries):
        return out
    order = np.argsort(entries, kind="stable")
    se = entries[order]
    bounds = np.searchsorted(se, np.arange(int(se[0]), int(se[-1]) + GATHER_SPAN, GATHER_SPAN), side="left")
    bounds = np.unique(np.r_[bounds, len(se)])
    for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        if hi > lo:
            out[order[lo:hi]] = all_hash[se[lo:hi]]
            f.release()
    return out


def _check_header_ends(f: IndexFile, st: _FileState, cl: CommitLog) -> Iterator[Problem]:
    """begin values are entry 1's, end values the last entry's."""
    hd, last = f.header, st.last
    if last < 1:
        return
    first, final = f.step(1), f.step(last)

    def stored(phys: int) -> int | None:
        m = scanner.record_at(cl, phys, check_crc=False) if cl.file_for(phys) is not None else None
        return None if m is None or isinstance(m, Problem) else m.store_timestamp

    if st.first_live and hd.begin_phy_offset != first.phys_offset:
        yield _problem(HEADER_BEGIN, f, f"header beginPhyOffset {hd.begin_phy_offset}, entry 1 points at {first.phys_offset}", entry=1, phys=first.phys_offset)
    elif st.first_live and (t := stored(first.phys_offset)) is not None and hd.begin_timestamp != t:
        yield _problem(HEADER_BEGIN, f, f"header beginTimestamp {hd.begin_timestamp}, entry 1's record was stored {t}", entry=1, phys=first.phys_offset)
    if hd.end_phy_offset != final.phys_offset:
        yield _problem(
            HEADER_END, f, f"header endPhyOffset {hd.end_phy_offset}, the last entry {last} points at {final.phys_offset}", entry=last, phys=final.phys_offset
        )
    elif (t := stored(final.phys_offset)) is not None and hd.end_timestamp != t:
        yield _problem(HEADER_END, f, f"header endTimestamp {hd.end_timestamp}, the last entry's record was stored {t}", entry=last, phys=final.phys_offset)


@dataclass
class _Shortfall:
    """Missing keys summed over the windows, for the closing index_behind / index_file_gap findings."""

    behind: list[int] = field(default_factory=lambda: [0, -1, -1])  # count, first, last
    gaps: dict[str, list[int]] = field(default_factory=dict)  # index file path -> [count, first, last]


def _note(acc: list[int], p: int) -> None:
    acc[0] += 1
    acc[1] = p if acc[1] < 0 else min(acc[1], p)
    acc[2] = max(acc[2], p)


def verify(
    store: str,
    *,
    hash_slots: int | None = None,
    index_entries: int | None = None,
    delays: DelayLevels | None = None,
    summary: IndexVerifySummary | None = None,
    on_bytes=None,
    records_in: Callable[[int, int], tuple[Records, list[Problem]]] | None = None,
    mapper: Mapper = SERIAL,
    range_bytes: int = RANGE_BYTES,
) -> Iterator[Problem]:
    """Every finding of `index verify` on a store root (`on_bytes(n)` is told of each CommitLog stretch done).

    `records_in(a, b)`: the records starting in [a, b) and the scan's problems
    there, when a caller has them already (rebuild's self-check); by default
    the CommitLog is scanned.

    First each index file on its own; then the CommitLog one file at a time:
    its records against the entries pointing into it, and its keys the index
    lacks. Memory is bounded by one CommitLog file's keys plus a few bytes per
    index entry, whatever the store's size.
    """
    s = summary if summary is not None else IndexVerifySummary()

    def emit(p: Problem) -> Problem:
        s.problems += 1
        s.codes[p.code] = s.codes.get(p.code, 0) + 1
        return p

    store = str(store)
    prove_readable(store)
    probs: list[Problem] = []

    def bad_size(p: str, e: IndexLayoutError) -> None:  # a file no sizing fits: reported, the others checked
        probs.append(Problem(FILE_SIZE, p, e.offset, e.detail, extra={"index_file": os.path.basename(p), "entry": None, "slot": None}))

    files = open_all(store, hash_slots, index_entries, bad_size)
    try:
        s.index_files = len(files)
        for p in probs:
            yield emit(p)
        cl_dir = commitlog_path(store)
        cl = CommitLog.open(cl_dir) if os.path.isdir(cl_dir) else CommitLog([], [], None)
        for p in cl.problems:
            yield emit(p)
        extent = (cl.files[0].base, cl.files[-1].base + cl.files[-1].size) if cl.files else (0, 0)
        states: list[_FileState] = []
        prev_f = None
        for f in files:
            st, found = check_file(f, prev_f, extent)
            states.append(st)
            s.entries += st.last
            for p in found:
                yield emit(p)
            yield from map(emit, _check_header_ends(f, st, cl))
            if prev_f is not None and st.last >= 1 and f.header.begin_phy_offset < prev_f.header.end_phy_offset:
                yield emit(
                    _problem(
                        FILE_ORDER,
                        f,
                        f"begins at phyOffset {f.header.begin_phy_offset}, before the previous file {prev_f.name} ends ({prev_f.header.end_phy_offset})",
                        entry=1,
                    )
                )
            prev_f = f
        spans = [(f, f.header.begin_phy_offset, f.header.end_phy_offset) for f, st in zip(files, states, strict=True) if st.last >= 1]
        short = _Shortfall()
        carry = None  # the previous window's last record: an entry may point into its middle
        splits = commitlog_splits(cl, range_bytes, check_crc=False)  # the index takes a record whatever its body CRC
        if records_in is None:
            options = ScanOptions(keys=True, delays=delays or DelayLevels.parse())
            scans = map_ranges(splits, lambda sp: _records_of(scan_range(sp, options)), mapper, progress=on_bytes)
        else:
            scans = map_ranges(splits, lambda sp: records_in(*phys_window(sp)), SERIAL, progress=on_bytes)
        for sp, (rec, cl_probs) in scans:
            a, b = phys_window(sp)
            s.messages += len(rec.phys)
            s.indexed_keys += rec.indexed_keys
            for p in cl_probs:
                yield emit(p)
            ca = np.zeros(len(rec.key_table), dtype=np.int64)
            ctx = rec.with_record_before(carry) if sp.start > 0 else rec
            for f, st in zip(files, states, strict=True):
                yield from map(emit, _check_records(f, st, ctx, ca, a, b))
            yield from map(emit, _duplicates(files, states, rec, ca, a, b))
            yield from map(emit, _missing(spans, rec, ca, cl, short))
            if len(rec.phys):
                carry = (int(rec.phys[-1]), int(rec.size[-1]), int(rec.store_ts[-1]))
        if not files:
            if s.indexed_keys:
                yield emit(
                    Problem(NO_INDEX, os.path.join(store, "index"), None, f"no index files, but {s.indexed_keys} keys of the CommitLog should be indexed")
                )
            return
        yield from map(emit, _shortfall(files, spans, short, os.path.exists(os.path.join(store, "abort"))))
    finally:
        for f in files:
            f.close()


def _duplicates(files: list[IndexFile], states: list[_FileState], rec: Records, ca: np.ndarray, a: int, b: int) -> Iterator[Problem]:
    """Pairs with more entries than the CommitLog has keys: the later entries are extra.

    Not damage: the message at a file's endPhyOffset indexed again at the start
    of the next file after an abnormal recovery (the builder only skips offsets
    below endPhyOffset).
    """
    extra_u = ca > rec.key_counts
    if not extra_u.any():
        return
    seen = np.zeros(len(ca), dtype=np.int64)
    for fi, (f, st) in enumerate(zip(files, states, strict=True)):
        for k, kh, phys in _window_entries(f, st, a, b):
            u = rec.lookup_pairs(phys, kh)
            for j in np.flatnonzero((u >= 0) & extra_u[np.maximum(u, 0)]).tolist():
                x = int(u[j])
                seen[x] += 1
                if seen[x] <= rec.key_counts[x]:
                    continue
                p = int(phys[j])
                if fi > 0 and p == files[fi - 1].header.end_phy_offset:
                    continue
                yield _problem(
                    DUPLICATE,
                    f,
                    f"entry {int(k[j])} repeats the key hash {int(kh[j])} of the message at {p}, which the broker indexes once",
                    entry=int(k[j]),
                    phys=p,
                )


def _missing(spans: list, rec: Records, ca: np.ndarray, cl: CommitLog, short: _Shortfall) -> Iterator[Problem]:
    """Keys the broker would have indexed and no entry holds: one problem per message."""
    owed = rec.key_counts - ca
    miss = np.flatnonzero(owed > 0)
    if not len(miss):
        return
    by_phys: dict[int, dict[int, int]] = {}
    for u in miss.tolist():
        p, h = int(rec.key_table["phys"][u]), int(rec.key_table["hash"][u])
        by_phys.setdefault(p, {})[h] = int(owed[u])
    newest_end = max((e for _, _, e in spans), default=-1)
    for p in sorted(by_phys):
        want = dict(by_phys[p])
        keys = []
        for name, h in index_keys_of(cl, p):
            if want.get(h, 0) > 0:
                want[h] -= 1
                keys.append(name)
        owner = next((f for f, b, e in spans if b <= p <= e), None)
        if owner is not None:
            where = f"inside the range of {owner.name}"
        elif p > newest_end:
            where = f"after the newest index file's end ({newest_end}): the index was not built this far (dispatch lag or crash)"
            _note(short.behind, p)
        else:
            nxt = next((f for f, b, _ in spans if b > p), None)
            where = f"in no index file's range (before {nxt.name})" if nxt else "in no index file's range"
            if nxt is not None:
                _note(short.gaps.setdefault(nxt.path, [0, -1, -1]), p)
        yield Problem(
            MISSING,
            owner.path if owner else os.path.join(os.path.dirname(os.path.dirname(cl.files[0].path)), "index"),
            None,
            f"message at {p}: {len(keys)} key(s) not in the index: {_listed(keys)}; {where}",
            phys_offset=p,
            extra={"index_file": owner.name if owner else None, "entry": None, "slot": None, "keys": keys},
        )


def _shortfall(files: list[IndexFile], spans: list, short: _Shortfall, abort: bool) -> Iterator[Problem]:
    """Where the index stops short: after its newest file (lag or a lost file), or between two files."""
    count, first, last = short.behind
    if count and spans:
        newest, _, newest_end = spans[-1]
        why = (
            "the broker did not shut down cleanly (abort file present): the index lags the CommitLog and a restart rebuilds it"
            if abort
            else "the store shut down cleanly (no abort file), so the index should reach the end: an index file is missing or was cut short"
        )
        yield _problem(
            BEHIND,
            newest,
            f"{count} messages with keys after this file's end ({newest_end}), from {first} to {last}, are in no index file; {why}",
            entry=newest.last_written(),
            phys=first,
        )
    for path, (n, first, last) in short.gaps.items():
        f = next(x for x in files if x.path == path)
        yield _problem(
            FILE_GAP,
            f,
            f"{n} messages with keys between phyOffset {first} and {last} lie before this file's first entry and in no other file: an index file is missing",
            entry=1,
            phys=first,
        )
