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
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from rmqdump.commitlog import Blank, CommitLog
from rmqdump.dispatch import DelayLevels, dispatch_of
from rmqdump.indexfile import LAYOUT_SIZE, IndexFile, IndexLayoutError, Layout, list_index_files
from rmqdump.javahash import index_hash_many, java_hash_many
from rmqdump.problems import Problem

HEADER_COUNT = "index_header_count"
HEADER_SLOT_COUNT = "index_header_slot_count"
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


@dataclass
class IndexVerifySummary:
    index_files: int = 0
    entries: int = 0
    messages: int = 0
    indexed_keys: int = 0
    problems: int = 0
    codes: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {
            "kind": "summary",
            "index_files": self.index_files,
            "entries": self.entries,
            "messages": self.messages,
            "indexed_keys": self.indexed_keys,
            "problems": self.problems,
        }


def problem_dict(p: Problem) -> dict:
    """The JSON Lines shape of a finding: every key present, CommitLog problems included."""
    d = {"kind": "problem", "code": p.code, "index_file": None, "entry": None, "slot": None, "phys_offset": p.phys_offset, "detail": p.detail}
    d.update(p.extra)
    d["file"] = p.file
    d["file_offset"] = p.file_offset
    return d


@dataclass
class Records:
    """What the CommitLog holds, as sorted columns: record starts and the (phys, hash) of each index key."""

    phys: np.ndarray
    size: np.ndarray
    store_ts: np.ndarray
    indexed: np.ndarray
    topic: list[str]
    key_pairs: np.ndarray  # _PAIR, one per index key the broker would write, in put order
    key_names: list[str]

    @property
    def data_end(self) -> int:
        return int(self.phys[-1] + self.size[-1]) if len(self.phys) else 0

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


def scan_commitlog(cl: CommitLog, delays: DelayLevels | None = None) -> tuple[Records, list[Problem]]:
    delays = delays or DelayLevels.parse()
    phys, size, ts, indexed, topics, names = [], [], [], [], [], []
    pairs_p: list[np.ndarray] = []
    problems: list[Problem] = []
    for b in cl.scan(check_crc=False):
        for i in sorted(b.record_problems):
            problems.extend(b.record_problems[i])
        problems.extend(e for e in b.events if not isinstance(e, Blank))
        if not len(b):
            continue
        d = dispatch_of(b, delays)
        phys.append(d.phys.astype(np.int64))
        size.append(d.size.astype(np.int64))
        ts.append(np.asarray(d.store_timestamp, dtype=np.int64))
        indexed.append(d.indexed)
        topics.extend(d.topic)
        rec, keys = d.index_keys()
        names.extend(keys)
        pairs_p.append(d.phys[rec].astype(np.int64) if len(rec) else np.zeros(0, np.int64))
    cat = lambda xs, dt: np.concatenate(xs) if xs else np.zeros(0, dt)  # noqa: E731
    kp = np.zeros(len(names), dtype=_PAIR)
    kp["phys"] = cat(pairs_p, np.int64)
    kp["hash"] = index_hash_many(java_hash_many(names)).astype(np.int64) if names else np.zeros(0, np.int64)
    return Records(cat(phys, np.int64), cat(size, np.int64), cat(ts, np.int64), cat(indexed, bool), topics, kp, names), problems


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


def _open_files(paths: list[str], hash_slots, index_entries) -> tuple[list[IndexFile], list[Problem]]:
    files: dict[str, IndexFile] = {}
    problems: list[Problem] = []
    pending: list[tuple[str, IndexLayoutError]] = []
    for p in paths:
        try:
            files[p] = IndexFile(p, hash_slots, index_entries)
        except IndexLayoutError as e:
            if e.code == LAYOUT_SIZE:
                problems.append(Problem(FILE_SIZE, p, e.offset, e.detail, extra={"index_file": os.path.basename(p), "entry": None, "slot": None}))
            else:
                pending.append((p, e))
    for p, err in pending:
        size = os.path.getsize(p)
        known = [f.layout for f in files.values() if f.mf.size == size]
        if not known:
            for f in files.values():
                f.close()
            raise err
        files[p] = IndexFile(p, layout=Layout(known[0].hash_slots, known[0].index_entries, "store"))
    return [files[p] for p in paths if p in files], problems


@dataclass
class _FileEntries:
    """Written entries of one file, as native arrays (entry k at position k)."""

    f: IndexFile
    last: int  # last written entry number (0: none)
    kh: np.ndarray
    phys: np.ndarray
    diff: np.ndarray
    prev: np.ndarray


def _load(f: IndexFile) -> _FileEntries:
    e = f.entries
    written = (e["key_hash"] != 0) | (e["phys_offset"] != 0) | (e["time_diff"] != 0) | (e["prev_index"] != 0)
    nz = np.flatnonzero(written)
    last = int(nz[-1]) if len(nz) else 0
    sl = e[: last + 1]
    return _FileEntries(
        f, last, sl["key_hash"].astype(np.int64), sl["phys_offset"].astype(np.int64), sl["time_diff"].astype(np.int64), sl["prev_index"].astype(np.int64)
    )


def _listed(xs: list, n: int = MAX_LISTED) -> str:
    s = ", ".join(map(str, xs[:n]))
    return s + (f" and {len(xs) - n} more" if len(xs) > n else "")


def check_file(fe: _FileEntries, rec: Records, key_table: np.ndarray, prev_file: IndexFile | None) -> Iterator[Problem]:
    """Findings inside one index file, and its entries against the CommitLog."""
    f, last = fe.f, fe.last
    hd, slots_n = f.header, f.layout.hash_slots
    n = last + 1  # entries 0..last; the header should say indexCount == n
    if f.entries.size and bool(
        np.any(f.entries[0:1]["key_hash"] != 0) or np.any(f.entries[0:1]["phys_offset"] != 0) or np.any(f.entries[0:1]["prev_index"] != 0)
    ):
        yield _problem(ENTRY0_WRITTEN, f, "entry 0 is never written by the broker, but holds data", entry=0)
    if hd.index_count != max(n, 1):
        if hd.index_count < 1 or hd.index_count > f.layout.index_entries:
            yield _problem(
                HEADER_COUNT, f, f"header indexCount {hd.index_count} is outside 1..{f.layout.index_entries}; entries are written up to {last}", entry=None
            )
        elif hd.index_count < n:
            yield _problem(HEADER_COUNT, f, f"entries {hd.index_count}..{last} are written past the header's indexCount {hd.index_count}", entry=hd.index_count)
        else:
            yield _problem(HEADER_COUNT, f, f"header indexCount {hd.index_count} counts entries {n}..{hd.index_count - 1}, which are empty", entry=n)
    kh, phys, diff, prev = fe.kh, fe.phys, fe.diff, fe.prev
    idx = np.arange(n, dtype=np.int64)
    body = idx >= 1
    empty = body & (kh == 0) & (phys == 0) & (diff == 0) & (prev == 0)
    for k in np.flatnonzero(empty).tolist():
        yield _problem(ENTRY_EMPTY, f, f"entry {k} is inside the written range (1..{last}) but empty", entry=k)
    live = body & ~empty
    for k in np.flatnonzero(live & (kh < 0)).tolist():
        yield _problem(ENTRY_BAD_HASH, f, f"keyHash {int(kh[k])} is negative (the broker stores abs(hashCode))", entry=k, phys=int(phys[k]))
    for k in np.flatnonzero(live & (diff < 0)).tolist():
        yield _problem(ENTRY_BAD_TIME, f, f"timeDiff {int(diff[k])} is negative", entry=k, phys=int(phys[k]))
    slot = np.where(kh >= 0, kh, 0) % slots_n
    back_ok = (prev >= 0) & (prev < idx)
    for k in np.flatnonzero(live & ~back_ok).tolist():
        yield _problem(
            CHAIN_NOT_BACKWARDS, f, f"prevIndex {int(prev[k])} does not point back to an older entry (chains run newest to oldest)", entry=k, phys=int(phys[k])
        )
    linked = live & back_ok & (prev > 0)
    pv = np.where(linked, prev, 0)
    same_slot = slot[pv] == slot
    broken = linked & ~(same_slot & (kh[pv] >= 0))
    for k in np.flatnonzero(broken).tolist():
        p = int(prev[k])
        yield _problem(
            CHAIN_BROKEN,
            f,
            f"prevIndex {p} is an entry of slot {int(slot[p])}, not of this entry's slot {int(slot[k])}: the chain is broken here",
            entry=k,
            slot=int(slot[k]),
            phys=int(phys[k]),
        )
    # Slots.
    heads_all = f.slots.astype(np.int64)
    used = np.flatnonzero(heads_all != 0)
    heads = heads_all[used]
    past = (heads < 1) | (heads > last)
    for s_, h_ in zip(used[past].tolist(), heads[past].tolist(), strict=True):
        yield _problem(
            SLOT_PAST_COUNT, f, f"slot {s_} points at entry {h_}, outside the written entries 1..{last} (indexCount {hd.index_count})", slot=s_, entry=h_
        )
    vu, vh = used[~past], heads[~past]
    wrong = (slot[vh] != vu) | empty[vh]
    for s_, h_ in zip(vu[wrong].tolist(), vh[wrong].tolist(), strict=True):
        yield _problem(SLOT_WRONG_HASH, f, f"slot {s_} points at entry {h_}, whose keyHash {int(kh[h_])} belongs to slot {int(slot[h_])}", slot=s_, entry=h_)
    if len(used) != hd.hash_slot_count:
        yield _problem(HEADER_SLOT_COUNT, f, f"header hashSlotCount {hd.hash_slot_count}, but {len(used)} slots are in use")
    # Reachability: follow valid heads and valid links only.
    reach = np.zeros(n, dtype=bool)
    frontier = vh[~wrong]
    good_link = linked & ~broken
    while len(frontier):
        frontier = frontier[~reach[frontier]]
        reach[frontier] = True
        frontier = prev[frontier[good_link[frontier]]]
    orphan = live & ~reach
    # Report where a cut chain starts, not every older entry hanging from it.
    hanging = np.zeros(n, dtype=bool)
    hanging[prev[orphan & good_link]] = True
    for k in np.flatnonzero(orphan & ~hanging).tolist():
        yield _problem(
            UNREACHABLE,
            f,
            f"entry {k} and the older entries of its chain are reachable from no slot: lookups cannot find them",
            entry=k,
            slot=int(slot[k]),
            phys=int(phys[k]),
        )
    # Entries against the CommitLog.
    lk = np.flatnonzero(live)
    if len(lk) == 0:
        if n <= 1 and prev_file is not None and (hd.begin_phy_offset, hd.end_phy_offset) != (prev_file.header.end_phy_offset, prev_file.header.end_phy_offset):
            yield _problem(
                HEADER_BEGIN,
                f,
                f"empty file: begin/end offsets {hd.begin_phy_offset}/{hd.end_phy_offset} are not the previous file's end {prev_file.header.end_phy_offset}",
            )
        return
    ri, start, inside = rec.at(phys[lk])
    for j in np.flatnonzero(~start).tolist():
        k, p = int(lk[j]), int(phys[lk[j]])
        if inside[j]:
            what = f"points into the middle of the record at {int(rec.phys[ri[j]])} (size {int(rec.size[ri[j]])})"
        elif p >= rec.data_end:
            what = f"points past the end of the CommitLog's data ({rec.data_end})"
        else:
            what = "points at no record"
        yield _problem(ENTRY_NOT_RECORD, f, f"entry {k} (phyOffset {p}) {what}", entry=k, phys=p)
    sk = lk[start]
    sri = ri[start]
    q = np.zeros(len(sk), dtype=_PAIR)
    q["phys"], q["hash"] = phys[sk], kh[sk]
    has_key = _isin_pairs(q, key_table)
    for j in np.flatnonzero(~has_key).tolist():
        k, r = int(sk[j]), int(sri[j])
        if not rec.indexed[r]:
            why = "the record is a ROLLBACK, which the broker never indexes"
        else:
            why = f"no index key of the record (topic {rec.topic[r]}) hashes to {int(kh[k])}"
        yield _problem(ENTRY_KEY_MISMATCH, f, f"entry {k} (phyOffset {int(phys[k])}): {why}", entry=k, phys=int(phys[k]))
    # timeDiff: seconds since the header's begin (entry 1 counts from the previous file's end: skipped).
    ts = rec.store_ts[sri]
    # Java's (ts - begin) / 1000, then clamped to [0, Integer.MAX_VALUE]; 0 while begin was unset.
    want = np.minimum(np.where(ts >= hd.begin_timestamp, (ts - hd.begin_timestamp) // 1000, 0), 2**31 - 1)
    if hd.begin_timestamp <= 0:
        want = np.zeros_like(want)
    bad_t = (want != diff[sk]) & (sk != 1)
    for j in np.flatnonzero(bad_t).tolist():
        k = int(sk[j])
        yield _problem(
            TIME_DIFF_MISMATCH,
            f,
            f"entry {k}: timeDiff {int(diff[k])} s, but the record was stored {int(ts[j])} = header begin {hd.begin_timestamp} + {int(want[j])} s",
            entry=k,
            phys=int(phys[k]),
        )
    # Header against entry 1 and the last entry.
    first_ok = start[0] and lk[0] == 1
    if lk[0] == 1 and hd.begin_phy_offset != int(phys[1]):
        yield _problem(HEADER_BEGIN, f, f"header beginPhyOffset {hd.begin_phy_offset}, entry 1 points at {int(phys[1])}", entry=1, phys=int(phys[1]))
    elif first_ok and hd.begin_timestamp != int(ts[0]):
        yield _problem(HEADER_BEGIN, f, f"header beginTimestamp {hd.begin_timestamp}, entry 1's record was stored {int(ts[0])}", entry=1, phys=int(phys[1]))
    if hd.end_phy_offset != int(phys[last]):
        yield _problem(
            HEADER_END, f, f"header endPhyOffset {hd.end_phy_offset}, the last entry {last} points at {int(phys[last])}", entry=last, phys=int(phys[last])
        )
    elif start[-1] and lk[-1] == last and hd.end_timestamp != int(ts[-1]):
        yield _problem(
            HEADER_END, f, f"header endTimestamp {hd.end_timestamp}, the last entry's record was stored {int(ts[-1])}", entry=last, phys=int(phys[last])
        )


def _isin_pairs(q: np.ndarray, table: np.ndarray) -> np.ndarray:
    """Membership of (phys, hash) pairs in a sorted unique pair table."""
    if len(q) == 0 or len(table) == 0:
        return np.zeros(len(q), dtype=bool)
    i = np.minimum(np.searchsorted(table, q), len(table) - 1)
    return table[i] == q


def verify(
    store: str,
    *,
    hash_slots: int | None = None,
    index_entries: int | None = None,
    delays: DelayLevels | None = None,
    summary: IndexVerifySummary | None = None,
) -> Iterator[Problem]:
    """Every finding of `index verify` on a store root, file by file, then the CommitLog's keys missing from the index."""
    s = summary if summary is not None else IndexVerifySummary()

    def emit(p: Problem) -> Problem:
        s.problems += 1
        s.codes[p.code] = s.codes.get(p.code, 0) + 1
        return p

    store = str(store)
    paths = list_index_files(store)
    files, probs = _open_files(paths, hash_slots, index_entries)
    try:
        s.index_files = len(files)
        for p in probs:
            yield emit(p)
        cl_dir = os.path.join(store, "commitlog")
        cl = CommitLog.open(cl_dir) if os.path.isdir(cl_dir) else CommitLog([], [], None)
        rec, cl_probs = scan_commitlog(cl, delays)
        s.messages = len(rec.phys)
        s.indexed_keys = len(rec.key_pairs)
        for p in cl.problems + cl_probs:
            yield emit(p)
        if not files:
            if len(rec.key_pairs):
                yield emit(
                    Problem(NO_INDEX, os.path.join(store, "index"), None, f"no index files, but {len(rec.key_pairs)} keys of the CommitLog should be indexed")
                )
            return
        key_table = np.unique(rec.key_pairs)
        loaded = []
        prev_f = None
        for f in files:
            fe = _load(f)
            loaded.append(fe)
            s.entries += fe.last
            for p in check_file(fe, rec, key_table, prev_f):
                yield emit(p)
            if prev_f is not None and fe.last >= 1 and f.header.begin_phy_offset < prev_f.header.end_phy_offset:
                yield emit(
                    _problem(
                        FILE_ORDER,
                        f,
                        f"begins at phyOffset {f.header.begin_phy_offset}, before the previous file {prev_f.name} ends ({prev_f.header.end_phy_offset})",
                        entry=1,
                    )
                )
            prev_f = f
        yield from map(emit, _cross_check(loaded, rec, os.path.exists(os.path.join(store, "abort"))))
    finally:
        for f in files:
            f.close()


def _cross_check(loaded: list[_FileEntries], rec: Records, abort: bool) -> Iterator[Problem]:
    """Expected (phys, hash) pairs against the entries of all files, counting multiplicity."""
    act_parts, file_no, entry_no = [], [], []
    for i, fe in enumerate(loaded):
        k = np.arange(1, fe.last + 1, dtype=np.int64)
        live = (fe.kh[1:] != 0) | (fe.phys[1:] != 0)
        k = k[live]
        a = np.zeros(len(k), dtype=_PAIR)
        a["phys"], a["hash"] = fe.phys[k], fe.kh[k]
        act_parts.append(a)
        file_no.append(np.full(len(k), i))
        entry_no.append(k)
    act = np.concatenate(act_parts) if act_parts else np.zeros(0, _PAIR)
    act_file = np.concatenate(file_no) if file_no else np.zeros(0, np.int64)
    act_entry = np.concatenate(entry_no) if entry_no else np.zeros(0, np.int64)
    exp = rec.key_pairs
    if len(exp) + len(act) == 0:
        return
    uniq, inv = np.unique(np.concatenate([exp, act]), return_inverse=True)
    inv = inv.reshape(-1)
    ce = np.bincount(inv[: len(exp)], minlength=len(uniq))
    ca = np.bincount(inv[len(exp) :], minlength=len(uniq))
    # Extra entries of a pair the record does have: duplicates. The later ones are the extras.
    ends = [fe.f.header.end_phy_offset for fe in loaded]
    extra_u = (ca > ce) & (ce > 0)
    if extra_u.any():
        ai = inv[len(exp) :]
        rows = np.flatnonzero(extra_u[ai])
        seen: dict[int, int] = {}
        for r in rows.tolist():
            u = int(ai[r])
            seen[u] = seen.get(u, 0) + 1
            if seen[u] <= ce[u]:
                continue
            fi, k = int(act_file[r]), int(act_entry[r])
            p = int(act["phys"][r])
            if fi > 0 and p == ends[fi - 1]:
                continue  # re-indexed after an abnormal recovery: the builder skips only offsets below endPhyOffset
            f = loaded[fi].f
            yield _problem(
                DUPLICATE, f, f"entry {k} repeats the key hash {int(act['hash'][r])} of the message at {p}, which the broker indexes once", entry=k, phys=p
            )
    # Missing: grouped per message.
    miss_u = ce > ca
    if not miss_u.any():
        return
    ei = inv[: len(exp)]
    owed = (ce - ca).astype(np.int64)
    by_phys: dict[int, list[str]] = {}
    for r in np.flatnonzero(miss_u[ei]).tolist():
        u = int(ei[r])
        if owed[u] <= 0:
            continue
        owed[u] -= 1
        by_phys.setdefault(int(exp["phys"][r]), []).append(rec.key_names[r])
    spans = [(fe.f, fe.f.header.begin_phy_offset, fe.f.header.end_phy_offset) for fe in loaded if fe.last >= 1]
    newest_end = max((e for _, _, e in spans), default=-1)
    gaps: dict[tuple[str, str], list[int]] = {}
    for p in sorted(by_phys):
        keys = by_phys[p]
        owner = next((f for f, b, e in spans if b <= p <= e), None)
        if owner is not None:
            where = f"inside the range of {owner.name}"
        elif p > newest_end:
            where = f"after the newest index file's end ({newest_end}): the index was not built this far (dispatch lag or crash)"
        else:
            nxt = next((f for f, b, _ in spans if b > p), None)
            where = f"in no index file's range (before {nxt.name})" if nxt else "in no index file's range"
            if nxt is not None:
                gaps.setdefault((nxt.path, nxt.name), []).append(p)
        f0 = owner
        yield Problem(
            MISSING,
            f0.path if f0 else os.path.dirname(loaded[0].f.path),
            None,
            f"message at {p}: {len(keys)} key(s) not in the index: {_listed(keys)}; {where}",
            phys_offset=p,
            extra={"index_file": f0.name if f0 else None, "entry": None, "slot": None, "keys": keys},
        )
    behind = [p for p in by_phys if p > newest_end]
    if behind:
        newest = next(fe for fe in reversed(loaded) if fe.last >= 1)
        why = (
            "the broker did not shut down cleanly (abort file present): the index lags the CommitLog and a restart rebuilds it"
            if abort
            else "the store shut down cleanly (no abort file), so the index should reach the end: an index file is missing or was cut short"
        )
        yield _problem(
            BEHIND,
            newest.f,
            f"{len(behind)} messages with keys after this file's end ({newest_end}), from {min(behind)} to {max(behind)}, are in no index file; {why}",
            entry=newest.last,
            phys=min(behind),
        )
    for (path, _name), ps in gaps.items():
        f = next(fe.f for fe in loaded if fe.f.path == path)
        yield _problem(
            FILE_GAP,
            f,
            f"{len(ps)} messages with keys between phyOffset {ps[0]} and {ps[-1]} lie before this file's first entry and in no other file: an index file is missing",
            entry=1,
            phys=ps[0],
        )
