"""A DLedger CommitLog (`dledger-<id>/`): its entry index files and own state files, and its problem codes.

RocketMQ's DLedgerCommitLog keeps each message inside a DLedger entry
(schemas.dledger). The scan walks the data files with the entry header as a
frame (rmqdump.scan.scanner, rmqdump.scan.damage, rmqdump.scan.resync); the
index files (one unit per entry) and the `checkpoint` / `currterm` files are
read here and checked against the entries by rmqdump.checks.dledgerindex.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from rmqdump.common.problems import Problem
from rmqdump.readers.commitlog import SegmentFile
from rmqdump.readers.fastpath import numpy_dtype
from rmqdump.readers.mapped import MappedFile, offset_files
from rmqdump.schemas import dledger as DL

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
UNIT = numpy_dtype(DL.IndexUnit)
UNIT_SIZE = UNIT.itemsize


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


class IndexUnits:
    """Index units read by entry index across the index files."""

    def __init__(self, files: list[SegmentFile]):
        self.files = files
        self.maps: dict[str, MappedFile] = {}

    def read(self, indexes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(units, present, file index, file offset) for each entry index."""
        units = np.zeros(len(indexes), dtype=UNIT)
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
            units[sel] = raw.view(UNIT).reshape(len(sel))
            present[sel] = True
            which[sel] = k
        return units, present, which, off

    def close(self) -> None:
        for mf in self.maps.values():
            mf.close()
