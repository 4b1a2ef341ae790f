"""A DLedger CommitLog's entries against its entry index files and checkpoint (`info`'s dledger line).

Every entry the walk takes must have its 32-byte index unit (magic, pos, size,
index, term) and follow its predecessor's index; the checkpoint's endIndex
must not be past the last entry.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from rmqdump.common.jsontext import fields_of
from rmqdump.common.problems import Problem
from rmqdump.readers.commitlog import CommitLog
from rmqdump.readers.dledger import CHECKPOINT_AHEAD, HEADER, INDEX_MISMATCH, INDEX_MISSING, INDEX_SEQUENCE, UNIT, DLedgerDir, IndexUnits
from rmqdump.scan import scanner
from rmqdump.schemas import dledger as DL


@dataclass
class IndexCheck:
    """Entries of the data files against their index units, and the checkpoint against the entries."""

    entries: int = 0
    first_index: int | None = None
    last_index: int | None = None
    units_checked: int = 0
    problems: list[Problem] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"kind": "dledger_index", **fields_of(self, omit=("problems",)), "problems": len(self.problems)}


def check_index(dl: DLedgerDir, cl: CommitLog, *, check_crc: bool = False, on_bytes=None) -> IndexCheck:
    """Every entry of the data files has its index unit (magic, pos, size, index, term) and follows its predecessor.

    Entries the walk cannot take are reported as the scan reports them (and the next one then breaks the sequence).
    """
    res = IndexCheck()

    def flag(code: str, path: str, pos: int, detail: str, entry_at: int, index: int) -> None:
        res.problems.append(Problem(code, path, pos, detail, phys_offset=entry_at + HEADER, extra={"dledger_index": index}))

    units = IndexUnits(dl.index_files)
    prev: int | None = None
    told: dict[str, int] = {}  # file -> its bytes told to on_bytes (a progress bar)
    try:
        for b in scanner.batches(cl, check_crc=check_crc):
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
                flag(INDEX_SEQUENCE, b.seg.path, p, f"entry index {int(idx[i])} follows {int(seq[i]) - 1}", b.seg.base + p, int(idx[i]))
            prev = int(idx[-1])
            u, present, which, off = units.read(idx)
            res.units_checked += int(present.sum())
            pos = b.cols["_pos"] - HEADER + b.seg.base
            for i in np.flatnonzero(~present).tolist():
                detail = f"entry {int(idx[i])} at {int(pos[i])} has no index unit (no index file holds byte {int(off[i])})"
                flag(INDEX_MISSING, dl.path, int(off[i]), detail, int(pos[i]), int(idx[i]))
            want = {"magic": np.full(len(idx), DL.ENTRY_MAGIC), "pos": pos, "size": ent["size"], "index": idx, "term": ent["term"]}
            bad = np.zeros(len(idx), dtype=bool)
            for name, w in want.items():
                bad |= u[name] != w
            for i in np.flatnonzero(bad & present).tolist():
                f = dl.index_files[int(which[i])]
                got = {n: int(u[n][i]) for n in UNIT.names}
                diff = ", ".join(f"{n} {got[n]} (entry: {int(want[n][i])})" for n in want if got[n] != int(want[n][i]))
                detail = f"index unit of entry {int(idx[i])} disagrees with the entry at {int(pos[i])}: {diff}"
                flag(INDEX_MISMATCH, f.path, int(off[i]) - f.base, detail, int(pos[i]), int(idx[i]))
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
