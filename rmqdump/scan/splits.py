"""The planner: byte ranges over the CommitLog files of one or more stores, the unit of parallel work.

A range owns the records that start inside it (scan_file resyncs at its start
by the proof rule and reads past its end to finish its last record), so the
ranges of a file can be decoded independently, by processes or Spark tasks,
and together give every record exactly once.

Every pass plans here, with one range size (RANGE_BYTES) and one name for the
knob (`range_bytes`); a pass that needs other cuts (ranges grouped into
tasks, two byte streams compared side by side, the records past an offset)
asks for them by name rather than cutting its own.
"""

from __future__ import annotations

import glob
import itertools
import os
from dataclasses import dataclass, replace

from rmqdump.common.problems import InputError, Problem
from rmqdump.readers.commitlog import CommitLog, commitlog_path, frame_of
from rmqdump.readers.mapped import next_data, open_readonly
from rmqdump.readers.readable import prove_readable

MiB = 1 << 20
RANGE_BYTES = 128 * MiB  # the unit of parallel work of every pass: ~110k records of 1.2 KB, ~5 MB of columns
PARALLEL_MIN_BYTES = RANGE_BYTES // 2  # below this a CommitLog is read by one worker: threads would cost more than they save
# A pass whose results hold a range's decoded output whole until its fold takes it (2 x workers ranges in flight)
# cuts ranges smaller by how much that output outweighs the records' bytes (held_range_bytes):
HELD_WHOLE = {
    "rows": 8,  # sql's Arrow rows, bodies included, waiting for DuckDB: -j2 peak RSS 411 MB, not 895 MB, on gen-1m (bench/RESULTS.md)
    "text": 32,  # journey --all's rendered JSON Lines, twice the records' bytes; a listing with bodies, ~1.4x
    "listing": 16,  # a listing without bodies, ~0.65x the records' bytes: twice the ranges' size, half the steps per byte
}


@dataclass(frozen=True)
class StoreRef:
    """A store root and the broker name its rows carry."""

    name: str
    root: str

    @property
    def commitlog(self) -> str:
        return commitlog_path(self.root)


@dataclass(frozen=True)
class Split:
    broker: str
    path: str
    base: int
    start: int
    end: int
    size: int  # bytes of the file that are data: its size, at most the CommitLog's configured file size
    check_crc: bool = True

    @property
    def length(self) -> int:
        return self.end - self.start


def default_name(root: str) -> str:
    """The directory's name; RocketMQ's default root is `~/store`, so then its parent's name."""
    root = os.path.abspath(root)
    name = os.path.basename(root)
    if name == "store":
        name = os.path.basename(os.path.dirname(root)) or name
    return name


def resolve_stores(values: list[str]) -> list[StoreRef]:
    """`DIR`, `NAME=DIR` or a glob of store roots, as given to `--store`."""
    refs: list[StoreRef] = []
    for v in values:
        v = str(v)
        name = None
        if "=" in v and not os.path.exists(v):
            name, v = v.split("=", 1)
        roots = [v]
        if not os.path.exists(v) and glob.has_magic(v):
            roots = sorted(glob.glob(v))
            if not roots:
                raise InputError("not_found", v, "no store matches this pattern")
            if name is not None and len(roots) > 1:
                raise InputError("usage", v, "NAME=PATTERN matches several stores; give each its own name")
        for r in roots:
            if not os.path.isdir(r):
                raise InputError("not_found", r, "no such store directory")
            if not os.path.isdir(commitlog_path(r)):
                raise InputError("not_a_store", r, "no commitlog/ directory in this store root")
            prove_readable(r)
            refs.append(StoreRef(name or default_name(r), os.path.abspath(r)))
    seen: dict[str, str] = {}
    for ref in refs:
        if ref.name in seen:
            raise InputError("duplicate_broker", ref.root, f"broker name {ref.name!r} is also {seen[ref.name]}; name them with NAME=DIR")
        seen[ref.name] = ref.root
    return refs


def _positive(range_bytes: int) -> int:
    if range_bytes <= 0:
        raise ValueError("range_bytes must be positive")
    return range_bytes


def file_splits(broker: str, path: str, base: int, size: int, range_bytes: int, end: int | None = None, check_crc: bool = True) -> list[Split]:
    """The ranges of one file, `range_bytes` bytes each, over its first `end` bytes (the whole file by default)."""
    _positive(range_bytes)
    stop = size if end is None else min(size, end)
    return [Split(broker, path, base, s, min(s + range_bytes, stop), size, check_crc) for s in range(0, stop, range_bytes)]


def commitlog_splits(
    cl: CommitLog, range_bytes: int = RANGE_BYTES, to_offset: int | None = None, broker: str = "", check_crc: bool = True
) -> list[Split]:
    """Every range of an opened CommitLog's files, in offset order; `to_offset` stops before that physical offset.

    A file longer than the configured file size is read only that far, as the
    whole-CommitLog scan reads it (the excess is the layout problem
    commitlog_file_size), so every pass sees the same records whatever its ranges.
    """
    out = []
    for f in cl.files:
        stop = None if to_offset is None else to_offset - f.base
        out += file_splits(broker, f.path, f.base, _data_size(cl, f), range_bytes, stop, check_crc)
    return out


def window_splits(
    cl: CommitLog, from_offset: int | None = None, to_offset: int | None = None, range_bytes: int = RANGE_BYTES, check_crc: bool = True
) -> list[Split]:
    """commitlog_splits' ranges clipped to [from_offset, to_offset), the window an in-order walk of the CommitLog reads
    (rmqdump.scan.scanner.batches): offsets are the messages', so a DLedger file's window starts and stops an entry
    header earlier; a range clipped to start inside a file resyncs there as the walk does."""
    out = []
    for f in cl.files:
        if (to_offset is not None and f.base >= to_offset) or (from_offset is not None and f.base + f.size <= from_offset):
            continue
        frame = frame_of(f.path)
        lo = 0 if from_offset is None else from_offset - f.base - frame
        hi = None if to_offset is None else to_offset - f.base - frame
        for sp in file_splits("", f.path, f.base, _data_size(cl, f), range_bytes, check_crc=check_crc):
            start, end = max(sp.start, lo), sp.end if hi is None else min(sp.end, hi)
            if start < end:
                out.append(replace(sp, start=start, end=end))
    return out


def _data_size(cl: CommitLog, f) -> int:
    """A file's bytes that are data: at most the CommitLog's configured file size (the excess is a layout problem)."""
    return min(f.size, cl.file_size) if cl.file_size else f.size


def splits_past(cl: CommitLog, start: int, range_bytes: int = RANGE_BYTES, check_crc: bool = True) -> list[Split]:
    """The ranges of `cl` from physical offset `start` on (a record start): the range holding it begins there, the
    others are commitlog_splits' own (what a diff decodes past the two sides' common prefix)."""
    out = []
    for sp in commitlog_splits(cl, range_bytes, check_crc=check_crc):
        if sp.base + sp.end <= start:
            continue
        if sp.base + sp.start < start:
            sp = Split(sp.broker, sp.path, sp.base, start - sp.base, sp.end, sp.size, sp.check_crc)
        out.append(sp)
    return out


def group_splits(splits: list[Split], workers: int, min_bytes: int = RANGE_BYTES // 2) -> list[list[Split]]:
    """Consecutive ranges into tasks of at least `min_bytes` (or a share of the work), so that
    small ranges do not each pay for their own part files (export); big ranges stay one per task."""
    total = sum(s.length for s in splits)
    target = max(1, min(min_bytes, total // (4 * max(1, workers))))
    groups: list[list[Split]] = []
    size = 0
    for s in splits:
        if not groups or size >= target:
            groups.append([])
            size = 0
        groups[-1].append(s)
        size += s.length
    return groups


def stream_cuts(files: list[tuple[int, int, str]], lo: int, hi: int, range_bytes: int = RANGE_BYTES) -> list[tuple[int, int]]:
    """Ranges of at most `range_bytes` covering [lo, hi) of byte streams made of `files` ((base, size, path), of
    either side of a comparison), cut at every file boundary and where a sparse file's data turns into a hole or
    back (so a hole is a range of its own, skipped unread)."""
    _positive(range_bytes)
    bounds = {lo, hi}
    for base, size, path in files:
        bounds.update(x for x in (base, base + size, *(base + t for t in _hole_edges(path, size))) if lo < x < hi)
    out = []
    for s, e in itertools.pairwise(sorted(bounds)):
        out.extend((p, min(e, p + range_bytes)) for p in range(s, e, range_bytes))
    return out


def _hole_edges(path: str, size: int, most: int = 256) -> list[int]:
    """Offsets in a file where data turns into a hole and back (readers.mapped.next_data), at most `most` of them."""
    out: list[int] = []
    try:
        fd = open_readonly(path)
    except OSError:
        return []
    try:
        pos = 0
        while pos < size and len(out) < most:
            data, data_end = next_data(fd, pos, size)  # a stretch that may hold data; a hole before it and after it
            if data >= size:
                break
            out += [data, data_end]
            pos = data_end
    finally:
        os.close(fd)
    return sorted(set(out))


def partition_count(splits: list[Split], parallelism: int, wanted: int | None = None, target: int = RANGE_BYTES) -> int:
    """How many partitions a Spark job over `splits` takes: `wanted`, else about `target` bytes each and at least
    two per core; never more than one per range."""
    if wanted is None:
        wanted = max(2 * parallelism, -(-sum(sp.length for sp in splits) // target))
    return max(1, min(len(splits), wanted))


def held_range_bytes(held: str) -> int:
    """The range size of a pass whose results hold a range's output whole (HELD_WHOLE's `held`: "rows", "text")."""
    return max(1, RANGE_BYTES // HELD_WHOLE[held])


def plan(stores: list[StoreRef], range_bytes: int = RANGE_BYTES, check_crc: bool = True) -> tuple[list[Split], list[tuple[str, Problem]]]:
    """Every byte range of every CommitLog file, and the (broker, layout problem) pairs found on the way."""
    _positive(range_bytes)
    splits: list[Split] = []
    problems: list[tuple[str, Problem]] = []
    for ref in stores:
        cl = CommitLog.open(ref.commitlog)
        problems.extend((ref.name, p) for p in cl.problems)
        splits.extend(commitlog_splits(cl, range_bytes, broker=ref.name, check_crc=check_crc))
    return splits, problems
