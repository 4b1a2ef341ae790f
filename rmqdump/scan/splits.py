"""Byte ranges over the CommitLog files of one or more stores: the unit of parallel work.

A range owns the records that start inside it (scan_file resyncs at its start
by the proof rule and reads past its end to finish its last record), so the
ranges of a file can be decoded independently, by processes or Spark tasks,
and together give every record exactly once.
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass

from rmqdump.common.problems import InputError, Problem
from rmqdump.readers.commitlog import CommitLog, commitlog_path
from rmqdump.readers.store import prove_readable

MiB = 1 << 20
DEFAULT_SPLIT = 128 * MiB  # the unit of parallel work of every pass: ~110k records of 1.2 KB, ~5 MB of columns
MIN_SPLIT, MAX_SPLIT = 128 * MiB, 512 * MiB  # the range a user may pick; tests go smaller through the library
PARALLEL_MIN_BYTES = 64 * MiB  # below this a CommitLog is read by one worker: threads would cost more than they save


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


def file_splits(broker: str, path: str, base: int, size: int, split_size: int, end: int | None = None, check_crc: bool = True) -> list[Split]:
    """The ranges of one file, `split_size` bytes each, over its first `end` bytes (the whole file by default)."""
    if split_size <= 0:
        raise ValueError("split size must be positive")
    stop = size if end is None else min(size, end)
    return [Split(broker, path, base, s, min(s + split_size, stop), size, check_crc) for s in range(0, stop, split_size)]


def commitlog_splits(
    cl: CommitLog, split_size: int = DEFAULT_SPLIT, to_offset: int | None = None, broker: str = "", check_crc: bool = True
) -> list[Split]:
    """Every range of an opened CommitLog's files, in offset order; `to_offset` stops before that physical offset.

    A file longer than the configured file size is read only that far, as the
    whole-CommitLog scan reads it (the excess is the layout problem
    commitlog_file_size), so every pass sees the same records whatever its ranges.
    """
    out = []
    for f in cl.files:
        size = min(f.size, cl.file_size) if cl.file_size else f.size
        stop = None if to_offset is None else to_offset - f.base
        out += file_splits(broker, f.path, f.base, size, split_size, stop, check_crc)
    return out


def partition_count(splits: list[Split], parallelism: int, wanted: int | None = None, target: int = DEFAULT_SPLIT) -> int:
    """How many partitions a Spark job over `splits` takes: `wanted`, else about `target` bytes each and at least
    two per core; never more than one per range."""
    if wanted is None:
        wanted = max(2 * parallelism, -(-sum(sp.length for sp in splits) // target))
    return max(1, min(len(splits), wanted))


def plan(stores: list[StoreRef], split_size: int = DEFAULT_SPLIT, check_crc: bool = True) -> tuple[list[Split], list[tuple[str, Problem]]]:
    """Every byte range of every CommitLog file, and the (broker, layout problem) pairs found on the way."""
    if split_size <= 0:
        raise ValueError("split size must be positive")
    splits: list[Split] = []
    problems: list[tuple[str, Problem]] = []
    for ref in stores:
        cl = CommitLog.open(ref.commitlog)
        problems.extend((ref.name, p) for p in cl.problems)
        splits.extend(commitlog_splits(cl, split_size, broker=ref.name, check_crc=check_crc))
    return splits, problems
