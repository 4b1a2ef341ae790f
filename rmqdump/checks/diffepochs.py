"""Controller mode (5.x AutoSwitchHA): both sides' epoch histories and the point the broker keeps when one rejoins the other."""

from __future__ import annotations

from dataclasses import dataclass

from rmqdump.common.problems import Problem
from rmqdump.readers.epochfile import EPOCH_FILE_DAMAGED, Epoch, EpochFile, read_epoch_file
from rmqdump.readers.store import Store

SIDES = ("a", "b")
JAVA_LONG_MAX = (1 << 63) - 1  # an open epoch's end (EpochEntry.endOffset default)


def epoch_ends(entries: list[Epoch], max_offset: int) -> list[tuple[int, int, int]]:
    """(epoch, start, end) per entry as EpochFileCache holds them: an epoch ends where the next (in file order) starts,
    the last at the store's max offset (left open, Long.MAX_VALUE, when that lies before its start)."""
    out = []
    for i, e in enumerate(entries):
        if i + 1 < len(entries):
            end = entries[i + 1].start_offset
        else:
            end = max_offset if e.start_offset <= max_offset else JAVA_LONG_MAX
        out.append((e.epoch, e.start_offset, end))
    return out


def consistent_point(local: list[tuple[int, int, int]], other: list[tuple[int, int, int]]) -> int:
    """EpochFileCache.findConsistentPoint: from local's newest epoch down, the first epoch `other` holds with the same
    start offset gives the smaller of the two ends; -1 when there is none. (Later entries of one epoch replace earlier ones.)"""
    mine = {e: (s, end) for e, s, end in local}
    theirs = {e: (s, end) for e, s, end in other}
    for epoch in sorted(mine, reverse=True):
        if epoch in theirs and theirs[epoch][0] == mine[epoch][0]:
            return min(mine[epoch][1], theirs[epoch][1])
    return -1


@dataclass
class EpochDiff:
    files: dict[str, EpochFile | None]
    ends: dict[str, list[tuple[int, int, int]]]
    consistent_point: int | None  # None: a side has no usable history

    def problems(self) -> list[Problem]:
        return [Problem(EPOCH_FILE_DAMAGED, f.path, f.error_offset, f.error) for f in self.files.values() if f is not None and f.error]

    def to_dict(self) -> dict:
        d: dict = {"kind": "epochs"}
        for s in SIDES:
            f = self.files[s]
            d[f"{s}_file"] = None if f is None else f.path
            d[f"{s}_epochs"] = [{"epoch": e, "start_offset": st, "end_offset": end} for e, st, end in self.ends[s]]
        d["consistent_point"] = self.consistent_point
        return d


def epoch_diff(stores: dict[str, Store], data_end: dict[str, int]) -> EpochDiff | None:
    """Each side's epoch history and the point the broker would keep when A rejoins B (A's epochs searched newest first)."""
    files = {s: read_epoch_file(stores[s].root) for s in SIDES}
    if all(f is None for f in files.values()):
        return None
    ends = {s: [] if f is None or f.error else epoch_ends(f.entries, data_end[s]) for s, f in files.items()}
    point = consistent_point(ends["a"], ends["b"]) if all(ends.values()) else None
    return EpochDiff(files, ends, point)
