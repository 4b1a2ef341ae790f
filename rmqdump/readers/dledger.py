"""A DLedger CommitLog (`dledger-<id>/`): its entry frames, entry index and own state files.

RocketMQ's DLedgerCommitLog keeps each message inside a DLedger entry
(schemas.dledger). The CommitLog scan walks the data files with the entry
header as a frame (rmqdump.readers.commitlog); what it cannot take is
diagnosed here, entry by entry, and the walk resyncs at the next entry it can
prove: entry magic at a position whose pos field equals the file's base
offset plus that position. The index files (one unit per entry) and the
`checkpoint` / `currterm` files are read here and checked against the entries.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from rmqdump.common import problems as P
from rmqdump.common.problems import Problem
from rmqdump.readers.commitlog import Blank, CommitLog, SegmentFile, diagnose_record, first_nonzero, short_tail
from rmqdump.readers.fastpath import numpy_dtype, struct_format
from rmqdump.readers.mapped import MappedFile, offset_files
from schemas import dledger as DL

# Stable problem codes of DLedger files.
BAD_ENTRY_MAGIC = "dledger_bad_entry_magic"
ENTRY_POS_MISMATCH = "dledger_entry_pos_mismatch"
ENTRY_SIZE_MISMATCH = "dledger_entry_size_mismatch"
BAD_BLANK = "dledger_bad_blank"
INDEX_MISMATCH = "dledger_index_mismatch"
INDEX_MISSING = "dledger_index_missing"
INDEX_SEQUENCE = "dledger_index_sequence"
CHECKPOINT_AHEAD = "dledger_checkpoint_ahead"
BAD_STATE_FILE = "dledger_bad_state_file"

HEADER = DL.EntryHeader.sizeof()
_HEADER = struct_format(DL.EntryHeader)
_HEADER_NAMES = [sc.name for sc in DL.EntryHeader.subcons]
_BLANK = struct_format(DL.BlankEntry)
_UNIT = numpy_dtype(DL.IndexUnit)
UNIT_SIZE = _UNIT.itemsize
_MAGIC_BYTES = _BLANK.pack(DL.ENTRY_MAGIC, 0)[:4]
_BLANK_BYTES = _BLANK.pack(DL.BLANK_MAGIC, 0)[:4]
_NEEDLES = (_MAGIC_BYTES, _BLANK_BYTES)
_WINDOW = 16 << 20


def _entry_at(mf: MappedFile, p: int) -> dict:
    return dict(zip(_HEADER_NAMES, _HEADER.unpack_from(mf.view, p), strict=True))


def resync(seg: SegmentFile, mf: MappedFile, start: int) -> int | None:
    """The first position >= start where an entry can be proven to start, or a valid BLANK."""
    size = mf.size
    lo = start
    if start + 8 <= size and not any(mf.view[start : start + 8]):
        q = first_nonzero(mf, start, size)
        if q is None:
            return None
        lo = max(lo, q - 3)  # the entry magic's first bytes are zeros
    while lo < size:
        hi = min(size, lo + _WINDOW)
        p = _proof_in(seg, mf, lo, hi)
        if p is not None:
            return p
        if hi < size:
            mf.release(lo, hi)
        lo = hi
    return None


def _proof_in(seg: SegmentFile, mf: MappedFile, lo: int, hi: int) -> int | None:
    size = mf.size
    for at, j in mf.find_each(_NEEDLES, lo, min(size, hi + 3)):
        if j == 1:
            if at + 8 <= size and _BLANK.unpack_from(mf.view, at)[1] == size - at:
                return at
        elif at + HEADER <= size and _entry_at(mf, at)["pos"] == seg.base + at:
            return at
    return None


def diagnose(seg: SegmentFile, mf: MappedFile, p: int) -> tuple[list, int | None]:
    """What is at an entry position the walk could not take, and where the scan goes on."""
    size, path, base = mf.size, seg.path, seg.base
    if p + 8 > size or (p + HEADER > size and _BLANK.unpack_from(mf.view, p) != (DL.BLANK_MAGIC, size - p)):
        return short_tail(seg, mf, p, "an entry")
    magic, esize = _BLANK.unpack_from(mf.view, p)
    if magic == DL.BLANK_MAGIC and esize == size - p:
        return [Blank(path, p, base + p, esize, "blank")], None
    if magic == 0 and esize == 0:
        nz = first_nonzero(mf, p, size)
        if nz is None:
            return [Blank(path, p, base + p, size - p, "zeros")], None
    e = _entry_at(mf, p)
    if magic == DL.BLANK_MAGIC:
        code, what = BAD_BLANK, f"BLANK entry says {esize} bytes left, the file has {size - p}"
    elif magic == 0 and esize == 0:
        code, what = P.ZEROED_RANGE, "zero bytes where an entry should start"
    elif magic != DL.ENTRY_MAGIC:
        code, what = BAD_ENTRY_MAGIC, f"entry magic {magic} is not {DL.ENTRY_MAGIC} (or a BLANK)"
    elif e["pos"] != base + p:
        code, what = ENTRY_POS_MISMATCH, f"entry pos field says {e['pos']}, the entry is at {base + p}"
    else:
        total = int.from_bytes(mf.view[p + HEADER : p + HEADER + 4], "big", signed=True) if p + HEADER + 4 <= size else None
        if esize != HEADER + e["body_size"] or total != e["body_size"]:
            code = ENTRY_SIZE_MISMATCH
            what = f"entry size {esize}, bodySize {e['body_size']} and the message's totalSize {total} disagree (size = {HEADER} + bodySize = {HEADER} + totalSize)"
        else:  # the header holds together: the message inside is what is wrong
            events, nxt = diagnose_record(seg, mf, p + HEADER)
            return [_in_entry(ev, e) for ev in events], nxt
    nxt = resync(seg, mf, p + 1)
    skipped = (size if nxt is None else nxt) - p
    where = f"skipped {skipped} bytes to the end of the file" if nxt is None else f"skipped {skipped} bytes to the next entry at {nxt}"
    extra = {"skipped": skipped, "dledger_index": e["index"] if magic == DL.ENTRY_MAGIC else None}
    return [Problem(code, path, p, f"{what}; {where}", phys_offset=base + p + HEADER, extra=extra)], nxt


def _in_entry(ev, entry: dict):
    if isinstance(ev, Problem):
        return Problem(ev.code, ev.file, ev.file_offset, ev.detail, ev.phys_offset, {**ev.extra, "dledger_index": entry["index"]})
    return ev


# --- the DLedger directory: index files and state files ---------------------------------------------------------------


def read_properties(path: str) -> tuple[dict[str, str], Problem | None]:
    """DLedger's key=value state files (checkpoint, currterm)."""
    try:
        with open(path, "rb") as f:
            raw = f.read(1 << 16)
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError) as e:
        return {}, Problem(BAD_STATE_FILE, path, None, f"unreadable: {e}")
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        k, sep, v = line.partition("=")
        if not sep:
            return out, Problem(BAD_STATE_FILE, path, None, f"line {line[:40]!r} is not key=value")
        out[k.strip()] = v.strip()
    return out, None


def _int(d: dict, k: str) -> int | None:
    try:
        return int(d[k])
    except (KeyError, ValueError):
        return None


@dataclass
class DLedgerDir:
    """One `dledger-<selfId>/` directory."""

    path: str
    index_files: list[SegmentFile]
    checkpoint: dict[str, str]
    term: dict[str, str]
    problems: list[Problem] = field(default_factory=list)

    @property
    def self_id(self) -> str:
        return os.path.basename(self.path)[len(DL.DIR_PREFIX) :]

    @property
    def committed_index(self) -> int | None:
        return _int(self.checkpoint, "committedIndex")

    @property
    def end_index(self) -> int | None:
        return _int(self.checkpoint, "endIndex")

    @property
    def current_term(self) -> int | None:
        return _int(self.term, "currTerm")

    @classmethod
    def open(cls, path: str) -> DLedgerDir:
        probs: list[Problem] = []
        idx_dir = os.path.join(path, DL.INDEX_DIR)
        files = offset_files(idx_dir, SegmentFile)[0] if os.path.isdir(idx_dir) else []
        state = {}
        for name in (DL.CHECKPOINT_FILE, DL.TERM_FILE):
            p = os.path.join(path, name)
            state[name] = {}
            if os.path.isfile(p):
                state[name], prob = read_properties(p)
                if prob:
                    probs.append(prob)
        return cls(path, files, state[DL.CHECKPOINT_FILE], state[DL.TERM_FILE], probs)


def find(root: str) -> DLedgerDir | None:
    """The DLedger directory whose data files are the store's CommitLog (see commitlog.commitlog_dir)."""
    from rmqdump.readers.commitlog import commitlog_dir

    d = commitlog_dir(root)
    if d is None or not os.path.basename(os.path.dirname(d)).startswith(DL.DIR_PREFIX):
        return None
    return DLedgerDir.open(os.path.dirname(d))


@dataclass
class IndexCheck:
    """Entries of the data files against their index units, and the checkpoint against the entries."""

    entries: int = 0
    first_index: int | None = None
    last_index: int | None = None
    units_checked: int = 0
    problems: list[Problem] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "kind": "dledger_index",
            "entries": self.entries,
            "first_index": self.first_index,
            "last_index": self.last_index,
            "units_checked": self.units_checked,
            "problems": len(self.problems),
        }


class _Units:
    """Index units read by entry index across the index files."""

    def __init__(self, files: list[SegmentFile]):
        self.files = files
        self.maps: dict[str, MappedFile] = {}

    def read(self, indexes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(units, present, file index, file offset) for each entry index."""
        units = np.zeros(len(indexes), dtype=_UNIT)
        present = np.zeros(len(indexes), dtype=bool)
        which = np.full(len(indexes), -1, dtype=np.int64)
        off = indexes.astype(np.int64) * UNIT_SIZE
        for k, f in enumerate(self.files):
            sel = np.flatnonzero((off >= f.base) & (off + UNIT_SIZE <= f.base + f.size))
            if not len(sel):
                continue
            mf = self.maps.get(f.path) or self.maps.setdefault(f.path, MappedFile(f.path))
            pos = off[sel] - f.base
            raw = mf.data[pos[:, None] + np.arange(UNIT_SIZE)]
            units[sel] = raw.view(_UNIT).reshape(len(sel))
            present[sel] = True
            which[sel] = k
        return units, present, which, off

    def close(self) -> None:
        for mf in self.maps.values():
            mf.close()


def check_index(dl: DLedgerDir, cl: CommitLog, *, check_crc: bool = False, on_bytes=None) -> IndexCheck:
    """Every entry of the data files has its index unit (magic, pos, size, index, term) and follows its predecessor.

    Entries the walk cannot take are reported as the scan reports them (and the next one then breaks the sequence).
    """
    res = IndexCheck()
    units = _Units(dl.index_files)
    prev: int | None = None
    told: dict[str, int] = {}  # file -> its bytes told to on_bytes (a progress bar)
    try:
        for b in cl.scan(check_crc=check_crc):
            if on_bytes is not None:
                end = b.seg.size if b.events else (int(b.cols["_end"][-1]) if len(b) else 0)
                if end > told.get(b.seg.path, 0):
                    on_bytes(end - told.get(b.seg.path, 0))
                    told[b.seg.path] = end
            res.problems.extend(b.damage())  # damaged entries: their units cannot be checked
            if not len(b) or b.entries is None:
                continue
            ent = b.entries
            idx = ent["index"].astype(np.int64)
            res.entries += len(idx)
            res.first_index = int(idx[0]) if res.first_index is None else res.first_index
            res.last_index = int(idx[-1])
            seq = np.concatenate(([idx[0] - 1 if prev is None else prev], idx[:-1])) + 1
            for i in np.flatnonzero(idx != seq).tolist():
                p = int(b.cols["_pos"][i]) - HEADER
                res.problems.append(
                    Problem(
                        INDEX_SEQUENCE,
                        b.seg.path,
                        p,
                        f"entry index {int(idx[i])} follows {int(seq[i]) - 1}",
                        phys_offset=b.seg.base + p + HEADER,
                        extra={"dledger_index": int(idx[i])},
                    )
                )
            prev = int(idx[-1])
            u, present, which, off = units.read(idx)
            res.units_checked += int(present.sum())
            pos = b.cols["_pos"] - HEADER + b.seg.base
            for i in np.flatnonzero(~present).tolist():
                res.problems.append(
                    Problem(
                        INDEX_MISSING,
                        dl.path,
                        int(off[i]),
                        f"entry {int(idx[i])} at {int(pos[i])} has no index unit (no index file holds byte {int(off[i])})",
                        phys_offset=int(pos[i]) + HEADER,
                        extra={"dledger_index": int(idx[i])},
                    )
                )
            want = {"magic": np.full(len(idx), DL.ENTRY_MAGIC), "pos": pos, "size": ent["size"], "index": idx, "term": ent["term"]}
            bad = np.zeros(len(idx), dtype=bool)
            for name, w in want.items():
                bad |= u[name] != w
            for i in np.flatnonzero(bad & present).tolist():
                f = dl.index_files[int(which[i])]
                got = {n: int(u[n][i]) for n in _UNIT.names}
                diff = ", ".join(f"{n} {got[n]} (entry: {int(want[n][i])})" for n in want if got[n] != int(want[n][i]))
                res.problems.append(
                    Problem(
                        INDEX_MISMATCH,
                        f.path,
                        int(off[i]) - f.base,
                        f"index unit of entry {int(idx[i])} disagrees with the entry at {int(pos[i])}: {diff}",
                        phys_offset=int(pos[i]) + HEADER,
                        extra={"dledger_index": int(idx[i])},
                    )
                )
    finally:
        units.close()
    end = dl.end_index
    if end is not None and (res.last_index is None or end > res.last_index):
        res.problems.append(
            Problem(
                CHECKPOINT_AHEAD,
                os.path.join(dl.path, DL.CHECKPOINT_FILE),
                None,
                f"endIndex={end} but the last entry in the data files is {res.last_index}",
            )
        )
    return res
