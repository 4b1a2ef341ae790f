"""IndexFile reader: header, slots and entries as arrays over a read-only map.

Nothing is read up front: a lookup touches one slot and the entries of its
chain. The file does not record its own sizing (maxHashSlotNum, maxIndexNum),
and the header's hashSlotCount is the number of slots in use, not the slot
count, so the sizing is given by the operator or inferred: among the
(slots, entries) pairs that fill the file exactly, the one under which the
entries link into consistent hash chains.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from rmqdump.common.closing import Closing
from rmqdump.common.javahash import index_hash, java_hash
from rmqdump.common.problems import InputError, Problem
from rmqdump.readers.fastpath import numpy_dtype
from rmqdump.readers.mapped import MappedFile
from rmqdump.schemas import IndexEntry, IndexHeader, IndexSlot
from rmqdump.schemas import constants as C

_KEY_HASH = numpy_dtype(IndexEntry.subcons[0])

HEADER_SIZE = IndexHeader.sizeof()
SLOT_DTYPE = numpy_dtype(IndexSlot)
ENTRY_DTYPE = numpy_dtype(IndexEntry)
SLOT_SIZE = SLOT_DTYPE.itemsize
ENTRY_SIZE = ENTRY_DTYPE.itemsize

NAME_RE = re.compile(r"^\d{17}$")  # creation time yyyyMMddHHmmssSSS

# Layout inference: files up to this size have every candidate sizing scored;
# larger ones only the broker's 1:4 ratio and the "file is full" sizing.
FULL_SEARCH_MAX_BYTES = 64 << 20
SAMPLE_ENTRIES = 64  # each sampled entry may fault in a whole page-cache folio
STRETCH_ENTRIES = 1 << 20  # entries checked at a time when a whole file is (20 MiB of it resident, a few arrays of 8 MiB)
# With a header that names no usable newest entry, small files have every sizing scored one by one.
FALLBACK_MAX_CANDIDATES = 20_000
# A candidate is accepted when this share of the sampled entries link up.
MIN_SCORE = 0.5

LAYOUT_SIZE = "index_file_size"
HEADER_COUNT = "index_header_count"
HEADER_SLOT_COUNT = "index_header_slot_count"
LAYOUT_AMBIGUOUS = "index_layout_ambiguous"
LAYOUT_UNKNOWN = "index_layout_unknown"


class IndexLayoutError(InputError):
    """The sizing of an index file cannot be established; the message names the flag to pass."""


@dataclass(frozen=True)
class Header:
    begin_timestamp: int
    end_timestamp: int
    begin_phy_offset: int
    end_phy_offset: int
    hash_slot_count: int
    index_count: int

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass(frozen=True)
class Layout:
    """maxHashSlotNum and maxIndexNum of one file, and how they were found."""

    hash_slots: int
    index_entries: int
    source: str  # "given", "ratio", "full", "search", "store"

    @property
    def file_size(self) -> int:
        return file_size(self.hash_slots, self.index_entries)

    @property
    def entries_offset(self) -> int:
        return HEADER_SIZE + self.hash_slots * SLOT_SIZE


def file_size(hash_slots: int, index_entries: int) -> int:
    return HEADER_SIZE + hash_slots * SLOT_SIZE + index_entries * ENTRY_SIZE


def size_problems(path: str, size: int, index_count: int, hash_slot_count: int) -> list[Problem]:
    """What an index file's size and header counts show before its sizing is known (the store model's check, for
    `info` and `report`; `index verify` checks each field against the sizing it finds): a size that no sizing fills
    (a file cut short or padded), and header counts that no sizing of this size can hold."""
    body = size - HEADER_SIZE
    words = body // SLOT_SIZE
    per_entry = ENTRY_SIZE // SLOT_SIZE
    if body % SLOT_SIZE or words < 1 + per_entry:  # at least one slot and one entry
        return [Problem(LAYOUT_SIZE, path, size, f"{size} bytes is not {HEADER_SIZE} + 4 x slots + 20 x entries for any sizing: cut short or padded")]
    out = []
    most_entries = (words - 1) // per_entry
    if not 0 <= index_count <= most_entries:
        out.append(Problem(HEADER_COUNT, path, 0, f"header indexCount {index_count} is outside 0..{most_entries}, all a file of {size} bytes can hold"))
    most_slots = words - per_entry
    if not 0 <= hash_slot_count <= most_slots:
        out.append(Problem(HEADER_SLOT_COUNT, path, 0, f"header hashSlotCount {hash_slot_count} is outside 0..{most_slots}, all a file of {size} bytes can hold"))
    return out


def parse_header(raw: bytes) -> Header:
    """The header of an index file from its first HEADER_SIZE bytes."""
    h = IndexHeader.parse(raw)
    return Header(h.begin_timestamp, h.end_timestamp, h.begin_phy_offset, h.end_phy_offset, h.hash_slot_count, h.index_count)


def read_header(mf: MappedFile) -> Header:
    if mf.size < HEADER_SIZE:
        raise IndexLayoutError(LAYOUT_SIZE, mf.path, f"{mf.size} bytes is shorter than the {HEADER_SIZE}-byte header", 0)
    return parse_header(bytes(mf.view[:HEADER_SIZE]))


def _flag_hint() -> str:
    return "pass --hash-slots (the broker's maxHashSlotNum) or --index-entries (maxIndexNum)"


def _candidates(size: int) -> np.ndarray:
    """Every (slots, entries) with both >= 1 that fills `size` bytes exactly, fewest entries first (rows of an int64 array)."""
    body = size - HEADER_SIZE
    if body <= 0 or body % SLOT_SIZE:
        return np.zeros((0, 2), dtype=np.int64)
    words = body // SLOT_SIZE
    per_entry = ENTRY_SIZE // SLOT_SIZE
    e = np.arange(1, (words - 1) // per_entry + 1, dtype=np.int64)
    return np.stack([words - per_entry * e, e], axis=1)


def _fits(size: int, slots: int | None = None, entries: int | None = None) -> tuple[int, int] | None:
    """The sizing with the given slot or entry count that fills `size` exactly, if any."""
    body = size - HEADER_SIZE
    if slots is not None:
        e, r = divmod(body - slots * SLOT_SIZE, ENTRY_SIZE)
        return (slots, e) if slots >= 1 and e >= 1 and not r else None
    s, r = divmod(body - entries * ENTRY_SIZE, SLOT_SIZE)
    return (s, entries) if entries >= 1 and s >= 1 and not r else None


def _score(mf: MappedFile, header: Header, slots: int, entries: int, sample: int | None) -> tuple[int, int]:
    """(entries that link up, entries looked at) under one candidate sizing.

    An entry links up when it is written (keyHash >= 0, prevIndex before it)
    and both its slot's head and its previous entry fall in the same slot: a
    wrong sizing puts the entries at other byte offsets and the slots under
    other hashes, so almost nothing links. A stretch of entries at a time,
    its pages (and those of the earlier entries its links reached) given back
    after it: memory stays bounded on a full 20M-entry file.
    """
    start = HEADER_SIZE + slots * SLOT_SIZE
    count = header.index_count if 1 < header.index_count <= entries else entries
    lo = 1 if sample is None else max(1, count - sample)
    if count <= lo:
        return 0, 0
    heads = mf.data[HEADER_SIZE : HEADER_SIZE + slots * SLOT_SIZE].view(SLOT_DTYPE)["entry"]
    linked = 0
    for a in range(lo, count, STRETCH_ENTRIES):
        b = min(count, a + STRETCH_ENTRIES)
        linked += _linked(mf, heads, start, slots, entries, a, b)
        if b < count:
            mf.release(start, start + b * ENTRY_SIZE)
    return linked, count - lo


def _linked(mf: MappedFile, heads: np.ndarray, start: int, slots: int, entries: int, a: int, b: int) -> int:
    """How many of entries [a, b) link up (see _score)."""
    ent = mf.data[start + a * ENTRY_SIZE : start + b * ENTRY_SIZE].view(ENTRY_DTYPE)
    kh = ent["key_hash"].astype(np.int64)
    prev = ent["prev_index"].astype(np.int64)
    idx = np.arange(a, b, dtype=np.int64)
    written = (kh != 0) | (ent["phys_offset"] != 0)
    ok = written & (kh >= 0) & (prev >= 0) & (prev < idx) & (ent["time_diff"] >= 0)
    slot_no = np.where(kh >= 0, kh, 0) % slots
    head = heads[slot_no].astype(np.int64)
    ok &= (head >= idx) & (head < entries)
    has_prev = ok & (prev > 0)
    pv = prev[has_prev]
    prev_hash = mf.data[start + pv[:, None] * ENTRY_SIZE + np.arange(4)].view(_KEY_HASH).reshape(len(pv)).astype(np.int64)
    link = (prev_hash >= 0) & (np.where(prev_hash >= 0, prev_hash, 0) % slots == slot_no[has_prev])
    ok[np.flatnonzero(has_prev)[~link]] = False
    return int(ok.sum())


def infer_layout(mf: MappedFile, header: Header, hash_slots: int | None = None, index_entries: int | None = None) -> Layout:
    """The file's sizing: from the flags if given (checked against the size), else inferred."""
    size = mf.size
    if hash_slots is not None or index_entries is not None:
        fit = _fits(size, slots=hash_slots) if hash_slots is not None else _fits(size, entries=index_entries)
        if fit is None or (index_entries is not None and fit[1] != index_entries):
            given = ", ".join(f"{k} {v}" for k, v in (("--hash-slots", hash_slots), ("--index-entries", index_entries)) if v is not None)
            raise IndexLayoutError(LAYOUT_SIZE, mf.path, f"{size} bytes does not fit {given} (a file is {HEADER_SIZE} + 4 x slots + 20 x entries bytes)")
        return Layout(*fit, "given")
    body = size - HEADER_SIZE
    ratio = _fits(size, slots=body // (SLOT_SIZE + 4 * ENTRY_SIZE)) if body > 0 and body % (SLOT_SIZE + 4 * ENTRY_SIZE) == 0 else None
    if body <= 0 or body % SLOT_SIZE or body < SLOT_SIZE + ENTRY_SIZE:
        raise IndexLayoutError(LAYOUT_SIZE, mf.path, f"{size} bytes is not {HEADER_SIZE} + 4 x slots + 20 x entries for any sizing")
    if header.index_count <= 1 and not mf.data[HEADER_SIZE : HEADER_SIZE + (16 << 20)].any():
        # Nothing written: every sizing reads the same (empty) file.
        if ratio:
            return Layout(*ratio, "ratio")
        raise IndexLayoutError(LAYOUT_AMBIGUOUS, mf.path, f"the file holds no entries and {size} bytes fits several sizings: {_flag_hint()}")
    if size > FULL_SEARCH_MAX_BYTES:
        # Too many sizings to try: the broker's default 1:4 ratio, then "the file is full".
        full = _fits(size, entries=header.index_count) if header.index_count > 1 else None
        for c, src in ((ratio, "ratio"), (full, "full")):
            if c is None:
                continue
            good, seen = _score(mf, header, c[0], c[1], SAMPLE_ENTRIES)
            mf.release(0, size)
            if seen and good >= MIN_SCORE * seen:
                return Layout(c[0], c[1], src)
        raise IndexLayoutError(
            LAYOUT_UNKNOWN, mf.path, f"{size} bytes: neither the broker's 1:4 slots:entries ratio nor a full file fits the entries; {_flag_hint()}"
        )
    cands = _candidates(size)
    quick = _newest_is_head(mf, header, cands) if len(cands) else []
    scored = _score_all(mf, header, quick) if quick else []
    if not scored or scored[0][0] < MIN_SCORE * scored[0][1]:
        if len(cands) > FALLBACK_MAX_CANDIDATES:
            raise IndexLayoutError(LAYOUT_UNKNOWN, mf.path, f"the newest entry the header names is not the head of its slot under any sizing; {_flag_hint()}")
        scored = _score_all(mf, header, [(int(a), int(b)) for a, b in cands])  # the header may be damaged: try every sizing
    if not scored or scored[0][0] < MIN_SCORE * scored[0][1]:
        raise IndexLayoutError(LAYOUT_UNKNOWN, mf.path, f"no sizing of {size} bytes makes the entries link into hash chains; {_flag_hint()}")
    best = scored[0]
    rivals = [x for x in scored[1:] if x[0] >= MIN_SCORE * x[1] and x[0] >= 0.9 * best[0]]
    if rivals:
        alts = ", ".join(f"{s} slots/{e} entries" for _, _, s, e in [best, *rivals[:3]])
        raise IndexLayoutError(LAYOUT_AMBIGUOUS, mf.path, f"several sizings fit ({alts}): {_flag_hint()}")
    return Layout(best[2], best[3], "ratio" if best[3] == 4 * best[2] else "search")


def _newest_is_head(mf: MappedFile, header: Header, cands: np.ndarray) -> list[tuple[int, int]]:
    """Sizings under which the header's newest entry is the head of its own slot (one gather for all)."""
    n = header.index_count
    c = cands[(cands[:, 1] >= n) & (cands[:, 0] >= max(header.hash_slot_count, 1))]
    if n < 2 or not len(c):
        return []
    pos = HEADER_SIZE + c[:, 0] * SLOT_SIZE + (n - 1) * ENTRY_SIZE
    ent = mf.data[pos[:, None] + np.arange(ENTRY_SIZE)].view(ENTRY_DTYPE).reshape(len(c))
    kh = ent["key_hash"].astype(np.int64)
    ok = (kh >= 0) & (ent["prev_index"] >= 0) & (ent["prev_index"] < n - 1)
    slot_pos = HEADER_SIZE + (np.where(ok, kh, 0) % c[:, 0]) * SLOT_SIZE
    head = mf.data[slot_pos[:, None] + np.arange(SLOT_SIZE)].view(SLOT_DTYPE).reshape(len(c))["entry"]
    ok &= head == n - 1
    return [(int(s), int(e)) for s, e in c[ok]]


def _score_all(mf: MappedFile, header: Header, cands: list[tuple[int, int]]) -> list[tuple[int, int, int, int]]:
    scored = []
    for s, e in cands:
        good, seen = _score(mf, header, s, e, 64)  # cheap first pass, then all entries of the survivors
        if seen and good >= MIN_SCORE * seen:
            good, seen = _score(mf, header, s, e, None)
            scored.append((good, seen, s, e))
    scored.sort(reverse=True)
    return scored


def sizing_holds(mf: MappedFile, header: Header, slots: int, entries: int) -> bool:
    """Does the file fit this sizing: its counts within it and its slots' head entries hashing back to them?

    The check a sizing that is not scored against the others (one taken from
    the store's full files, or the broker default) must pass.
    """
    count = header.index_count
    if not (1 <= count <= entries) or header.hash_slot_count > slots or file_size(slots, entries) != mf.size:
        return False
    if count == 1:
        return True
    slot_vals = mf.data[HEADER_SIZE : HEADER_SIZE + slots * SLOT_SIZE].view(SLOT_DTYPE)["entry"]
    used = np.flatnonzero(slot_vals)
    if len(used) != header.hash_slot_count:
        return False
    heads = slot_vals[used].astype(np.int64)
    if (heads < 1).any() or (heads >= count).any():
        return False
    start = HEADER_SIZE + slots * SLOT_SIZE
    for a in range(0, count, STRETCH_ENTRIES):  # the heads in one stretch of entries at a time, its pages given back after
        b = min(count, a + STRETCH_ENTRIES)
        pick = np.flatnonzero((heads >= a) & (heads < b))
        key_hash = mf.data[start + heads[pick, None] * ENTRY_SIZE + np.arange(4)].view(_KEY_HASH).reshape(len(pick)).astype(np.int64)
        if not ((key_hash >= 0).all() and (key_hash % slots == used[pick]).all()):
            return False
        mf.release(start + a * ENTRY_SIZE, start + b * ENTRY_SIZE)
    first = mf.data[start + ENTRY_SIZE : start + 2 * ENTRY_SIZE].view(ENTRY_DTYPE)[0]
    return int(first["phys_offset"]) == header.begin_phy_offset


def infer_store_sizing(paths: list[str]) -> tuple[tuple[int, int] | None, str]:
    """(hash slots, index entries) the broker created a store's index files with, proven by the files; else (None, why).

    Every file but the newest was full when the broker started the next one,
    so its indexCount is maxIndexNum (the "full" sizing of infer_layout); a lone
    file only fits the broker defaults. Either must pass sizing_holds on the
    oldest file. Stricter than infer_layout, which also accepts the sizing under
    which a partial file's entries link best: a rebuild writes files the broker
    will read, so it takes no sizing the store does not prove.
    """
    if not paths:
        return None, "no index files to infer from"
    sizes = {os.path.getsize(p) for p in paths}
    if len(sizes) > 1:
        return None, f"index files disagree on their size: {sorted(sizes)} bytes"
    (size,) = sizes
    if size < HEADER_SIZE:
        return None, "an index file is shorter than its header"
    headers = []
    for p in paths:
        with MappedFile(p) as mf:
            headers.append(read_header(mf))
    full = {h.index_count for h in headers[:-1]}
    if len(full) > 1:
        return None, f"older index files disagree on indexCount: {sorted(full)}"
    if full:
        entries = full.pop()
        sizing = _fits(size, entries=entries) if entries > 1 else None
        why = f"inferred from {len(paths)} index files of {size} bytes (full files hold {entries - 1} entries)"
        fail = f"index files of {size} bytes with indexCount {entries} do not fit any slot count"
    else:
        sizing = (C.DEFAULT_HASH_SLOTS, C.DEFAULT_INDEX_ENTRIES) if size == file_size(C.DEFAULT_HASH_SLOTS, C.DEFAULT_INDEX_ENTRIES) else None
        why = f"inferred from the one index file ({size} bytes, the default sizing)"
        fail = f"one index file of {size} bytes: its size alone does not give the slot and entry counts"
    if sizing is None:
        return None, fail
    with MappedFile(paths[0]) as mf:
        ok = sizing_holds(mf, headers[0], *sizing)
    return (sizing, why) if ok else (None, fail)


@dataclass
class ChainStep:
    """One entry met while walking a slot's chain."""

    entry: int
    key_hash: int
    phys_offset: int
    time_diff: int
    prev_index: int
    time: int  # header beginTimestamp + timeDiff seconds, as the broker computes it


@dataclass
class ChainWalk:
    slot: int
    head: int
    steps: list[ChainStep]
    stop: str  # why the walk ended: "end", "empty", "slot_past_count", "loop", "forward", "past_count"


class IndexFile(Closing):
    """One index file mapped read-only. `slots` and `entries` are numpy views over the map."""

    def __init__(self, path: str, hash_slots: int | None = None, index_entries: int | None = None, layout: Layout | None = None):
        self.path = str(path)
        self.name = os.path.basename(self.path)
        self.mf = MappedFile(self.path)
        try:
            self.header = read_header(self.mf)
            self.layout = layout if layout is not None else infer_layout(self.mf, self.header, hash_slots, index_entries)
        except BaseException:
            self.mf.close()
            raise
        s, e = self.layout.hash_slots, self.layout.index_entries
        self._last: int | None = None
        self.slots = self.mf.data[HEADER_SIZE : HEADER_SIZE + s * SLOT_SIZE].view(SLOT_DTYPE)["entry"]
        self.entries = self.mf.data[self.layout.entries_offset : self.layout.entries_offset + e * ENTRY_SIZE].view(ENTRY_DTYPE)

    @property
    def count(self) -> int:
        """Entries written (entry 0 is never used), bounded by the file."""
        return max(0, min(self.header.index_count, self.layout.index_entries))

    def entry_offset(self, entry: int) -> int:
        return self.layout.entries_offset + entry * ENTRY_SIZE

    def slot_offset(self, slot: int) -> int:
        return HEADER_SIZE + slot * SLOT_SIZE

    def slot_of(self, key_hash: int) -> int:
        return key_hash % self.layout.hash_slots

    def entry_time(self, time_diff: int) -> int:
        return self.header.begin_timestamp + time_diff * 1000

    def step(self, entry: int) -> ChainStep:
        e = self.entries[entry]
        diff = int(e["time_diff"])
        return ChainStep(entry, int(e["key_hash"]), int(e["phys_offset"]), diff, int(e["prev_index"]), self.entry_time(diff))

    def walk(self, key_hash: int) -> ChainWalk:
        """The chain of the slot `key_hash` falls in, newest entry first.

        Like the broker, a slot or link outside 1..indexCount ends the walk;
        unlike it, a link that does not go backwards or revisits an entry
        also ends it (damage must not loop).
        """
        slot = self.slot_of(key_hash)
        head = int(self.slots[slot])
        steps: list[ChainStep] = []
        count = self.count
        if head <= 0:
            return ChainWalk(slot, head, steps, "empty")
        if head >= count:
            return ChainWalk(slot, head, steps, "slot_past_count")
        seen = set()
        cur = head
        while True:
            seen.add(cur)
            st = self.step(cur)
            steps.append(st)
            nxt = st.prev_index
            if nxt <= 0:
                return ChainWalk(slot, head, steps, "end")
            if nxt >= count:
                return ChainWalk(slot, head, steps, "past_count")
            if nxt in seen:
                return ChainWalk(slot, head, steps, "loop")
            if nxt > cur:
                return ChainWalk(slot, head, steps, "forward")
            cur = nxt

    def last_written(self, chunk: int = 1 << 20) -> int:
        """The last entry holding anything (0: none), looked for from the header's count outwards.

        Verify trusts the data over the header: indexCount may be damaged.
        """
        if self._last is not None:
            return self._last
        e = self.entries
        total = len(e)

        def last_in(lo: int, hi: int) -> int:
            """The last entry of [lo, hi) holding anything, 0 when none does (lo is at least 1)."""
            c = e[lo:hi]
            w = np.flatnonzero((c["key_hash"] != 0) | (c["phys_offset"] != 0) | (c["time_diff"] != 0) | (c["prev_index"] != 0))
            return lo + int(w[-1]) if len(w) else 0

        n0 = min(max(self.header.index_count, 1), total)
        last = 0
        for lo in range(n0, total, chunk):  # written past the count?
            last = last_in(lo, min(total, lo + chunk)) or last
            self.release()
        hi = n0
        while not last and hi > 1:
            lo = max(1, hi - chunk)
            last = last_in(lo, hi)
            hi = lo
        self.release()
        self._last = last
        return last

    def release(self) -> None:
        """Give back the pages a walk mapped in (they stay in the page cache).

        A fault maps a whole page-cache folio, often hundreds of KiB, so many
        lookups in one process would otherwise pile up resident memory.
        """
        self.mf.release(0, self.mf.size)

    def used_slots(self) -> np.ndarray:
        return np.flatnonzero(self.slots != 0)

    def close(self) -> None:
        self.slots = self.entries = None
        self.mf.close()


def key_hash(topic: str, key: str) -> int:
    """The index hash of topic#key."""
    return index_hash(java_hash(f"{topic}{C.INDEX_KEY_SEPARATOR}{key}"))


def index_dir(store: str) -> str:
    return os.path.join(str(store), "index")


def list_index_files(store: str) -> list[str]:
    """Index files of a store, oldest first (names are creation times)."""
    d = index_dir(store)
    if not os.path.isdir(d):
        return []
    try:
        names = sorted(os.listdir(d))
    except OSError as e:
        raise InputError("unreadable", d, e.strerror or str(e), 0) from None
    return [os.path.join(d, n) for n in names if NAME_RE.match(n)]  # one that is no readable file: `unreadable` when opened


def open_all(
    store: str, hash_slots: int | None = None, index_entries: int | None = None, bad_size: Callable[[str, IndexLayoutError], None] | None = None
) -> list[IndexFile]:
    """Every index file of a store, oldest first.

    A file whose sizing cannot be inferred on its own (too few entries) takes
    the sizing of another file of the same size in the store: the broker
    creates them all from one configuration. A file of a size no sizing gives
    raises LAYOUT_SIZE, or is passed to bad_size(path, error) and left out
    (a check reports it and goes on with the others).
    """
    paths = list_index_files(store)
    out: dict[str, IndexFile] = {}
    pending: list[tuple[str, IndexLayoutError]] = []
    try:
        for p in paths:
            try:
                out[p] = IndexFile(p, hash_slots, index_entries)
            except IndexLayoutError as e:
                if e.code != LAYOUT_SIZE:
                    pending.append((p, e))
                elif bad_size is None:
                    raise
                else:
                    bad_size(p, e)
        for p, err in pending:
            size = os.path.getsize(p)
            known = [f.layout for f in out.values() if f.mf.size == size and f.layout.source != "store"]
            if not known:
                raise err
            lay = known[0]
            out[p] = IndexFile(p, layout=Layout(lay.hash_slots, lay.index_entries, "store"))
    except BaseException:
        for f in out.values():
            f.close()
        raise
    return [out[p] for p in paths if p in out]


def iter_entries(f: IndexFile, start: int = 1, stop: int | None = None, chunk: int = 1 << 20) -> Iterator[tuple[int, np.ndarray]]:
    """(first entry number, entries) chunks over [start, stop)."""
    stop = f.count if stop is None else stop
    for lo in range(start, stop, chunk):
        yield lo, f.entries[lo : min(stop, lo + chunk)]
