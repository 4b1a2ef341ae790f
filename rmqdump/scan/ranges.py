"""One byte range of one CommitLog file, read: the only place a range is turned into records.

Every CommitLog-wide pass (cq verify, index verify, rebuild, export, the Spark
tasks) maps a function over the planner's ranges (rmqdump.scan.splits), and
that function starts here: `range_batches` walks the range as the scan
kernel's batches, `scan_range` reduces them to the dispatch columns and the
problems the range owns. Whichever engine maps it, and however many workers,
a range gives the same answer, so `-j1` and `-jN` agree.

A mapper (the Mapper protocol: SERIAL here, the local engine's threads, Spark
tasks) is the only thing that differs between engines; `map_ranges` is the one
place a pass's ranges meet it, results taken in range order with one progress
hook, so a pass is a range function, a fold and a command.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Protocol, TypeVar, runtime_checkable

from rmqdump.common.problems import Problem
from rmqdump.readers.commitlog import SegmentFile
from rmqdump.readers.mapped import MappedFile
from rmqdump.scan._walk import Batch, scan_file
from rmqdump.scan.dispatch import DelayLevels, DispatchColumns, DispatchJoin, dispatch_columns
from rmqdump.scan.splits import Split

T = TypeVar("T")
R = TypeVar("R")


@runtime_checkable
class Mapper(Protocol):
    """How a pass's work is mapped: SERIAL, rmqdump.engines.local.LocalMap (threads) or the Spark engine's SparkMap."""

    workers: int  # how many items run at once (builders run beside the fold when there are several)

    def __call__(self, fn: Callable[[T], R], items: Iterable[T]) -> Iterator[R]:
        """fn's results in item order."""
        ...

    def unordered(self, fn: Callable[[T], R], items: Iterable[T]) -> Iterator[tuple[int, R]]:
        """(index of the item, its result) as they finish: for folds that need no order (sums)."""
        ...

    @property
    def on_driver(self) -> Mapper:
        """The mapper for work that is not a range (jobs over files this process writes): one whose workers are here."""
        ...


class SerialMap:
    """The mapper of one worker, in the caller's thread: builtin map under the protocol's names (every pass's default)."""

    workers = 1

    def __call__(self, fn: Callable[[T], R], items: Iterable[T]) -> Iterator[R]:
        return map(fn, items)

    def unordered(self, fn: Callable[[T], R], items: Iterable[T]) -> Iterator[tuple[int, R]]:
        return enumerate(map(fn, items))

    @property
    def on_driver(self) -> SerialMap:
        return self


SERIAL = SerialMap()


def map_ranges(
    ranges: Iterable[Split], fn: Callable[[Split], R], mapper: Mapper = SERIAL, *, progress: Callable[[int], None] | None = None
) -> Iterator[tuple[Split, R]]:
    """(range, fn(range)) in range order, fn mapped by `mapper`; progress(the range's bytes) once the caller has
    folded a range's result (when it asks for the next). The ranges start being read now, not at the first result
    asked for, where the mapper runs ahead (LocalMap, SparkMap)."""
    ranges = list(ranges)
    return _in_order(ranges, mapper(fn, ranges), progress)


def _in_order(ranges: list[Split], results: Iterator[R], progress: Callable[[int], None] | None) -> Iterator[tuple[Split, R]]:
    for sp, r in zip(ranges, results, strict=True):
        yield sp, r
        if progress is not None:
            progress(sp.length)


def range_batches(split: Split, *, keys: bool = True, batch_records: int | None = None) -> Iterator[Batch]:
    """The scan kernel's batches of the records starting in the range (CRCs checked as `split.check_crc` says;
    index key columns only with `keys`).

    The file is mapped only up to `split.size`, the planner's data size of the
    file: bytes past the CommitLog's configured file size are a layout
    problem, never records.
    """
    seg = SegmentFile(split.path, split.base, split.size)
    kw = {} if batch_records is None else {"batch_records": batch_records}
    with MappedFile(split.path, limit=split.size) as mf:
        yield from scan_file(seg, mf, start=split.start, end=split.end, check_crc=split.check_crc, keys=keys, **kw)


@dataclass(frozen=True)
class ScanOptions:
    """What a pass takes from each record: index keys or not, the delay levels (tagsCode of delayed messages), a topic filter."""

    keys: bool = False
    delays: DelayLevels = field(default_factory=DelayLevels.parse)
    topics: frozenset[str] | None = None
    # fold(batch, its dispatch columns) -> a value kept in RangeScan.folded: what a pass needs of every record
    # beyond the dispatch columns (report's traffic bins), computed in the range's task, in the same walk
    fold: Callable[[Batch, DispatchColumns], object] | None = None


@dataclass
class RangeScan:
    """The records of one range as dispatch columns, and the problems the range owns.

    `problems` is in scan order (each batch's record problems, then what ended
    the batch); `flagged` are the problems of records still decoded (CRC,
    physicalOffset field), `damaged` those that stopped the walk; `blanks`
    the ends of file data met (a BLANK marker, or a zero tail).
    """

    split: Split
    columns: DispatchColumns  # of the wanted topics
    records: int  # records decoded in the range, every topic
    last_ts: int | None  # store time of the range's last record, every topic
    problems: list[Problem]
    flagged: list[Problem]
    damaged: list[Problem]
    folded: list = field(default_factory=list)  # options.fold's values, batch by batch
    blanks: list = field(default_factory=list)  # rmqdump.readers.commitlog.Blank: where file data ended, in scan order

    @property
    def nbytes(self) -> int:
        return self.split.length


def scan_range(split: Split, options: ScanOptions = ScanOptions()) -> RangeScan:
    """The range's dispatch columns (of `options.topics`, keys when asked) and problems."""
    join = DispatchJoin()
    problems: list[Problem] = []
    flagged: list[Problem] = []
    damaged: list[Problem] = []
    folded: list = []
    blanks: list = []
    records = 0
    last_ts = None
    for b in range_batches(split, keys=options.keys):
        f, d = b.flagged(), b.damage()
        problems += f + d
        flagged += f
        damaged += d
        blanks += [e for e in b.events if not isinstance(e, Problem)]
        if not len(b):
            continue
        cols = dispatch_columns(b, options.delays, keys=options.keys)
        records += len(cols)
        last_ts = int(cols.store_timestamp[-1])
        if options.fold is not None:
            folded.append(options.fold(b, cols))
        join.add(cols.of_topics(options.topics))
    return RangeScan(split, join.take(), records, last_ts, problems, flagged, damaged, folded, blanks)
