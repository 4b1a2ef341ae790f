"""The Spark engine as a mapper: the local engine's range -> result function, run as Spark tasks.

cq verify, rebuild and export take a `mapper` (rmqdump.engines.local.LocalMap
on this machine): a function over the planner's byte ranges whose results the
caller folds in range order. SparkMap runs that same function on the
executors, one range a task, and hands the results back in item order, so the
fold on the driver (the window checks of cq verify, the builders of rebuild,
including the Batch ConsumeQueue, ext, LMQ and RocksDB work that is not a
CommitLog range) is the local engine's own code and gives the same answer.

Memory on the driver is bounded as with threads: results come back a wave of
`workers` tasks at a time, and the next wave runs while the caller folds the
previous one. The items and the function are pickled to the executors; they
open the store's files themselves, at the same path (a filesystem every
executor sees, as for the other Spark commands).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import TypeVar

from rmqdump.engines.local import LocalMap

T = TypeVar("T")
R = TypeVar("R")


class SparkMap:
    """fn over items as Spark tasks (one item a task), results in item order, at most two waves of `workers` in flight."""

    def __init__(self, spark, wave: int | None = None):
        self.sc = spark.sparkContext
        self.workers = max(1, int(self.sc.defaultParallelism))
        self.wave = max(1, int(wave or self.workers))
        # what is not a range (the self-check's side-by-side jobs over files being written) runs on the driver
        self.on_driver = LocalMap(1)

    def __call__(self, fn: Callable[[T], R], items: Iterable[T]) -> Iterator[R]:
        items = list(items)
        if not items:
            return iter(())
        rdd = self.sc.parallelize(items, len(items))  # partition i holds item i
        waves = [list(range(i, min(len(items), i + self.wave))) for i in range(0, len(items), self.wave)]
        ex = ThreadPoolExecutor(1, thread_name_prefix="rmqdump-spark")
        task = _task(fn)
        pending = deque(ex.submit(self.sc.runJob, rdd, task, w) for w in waves[:2])
        return self._drain(ex, rdd, task, waves[2:], pending)

    def unordered(self, fn: Callable[[T], R], items: Iterable[T]) -> Iterator[tuple[int, R]]:
        """(index of the item, its result): the waves give them in order, which a sum does not mind."""
        return enumerate(self(fn, items))

    def _drain(self, ex: ThreadPoolExecutor, rdd, task, rest: list[list[int]], pending: deque) -> Iterator:
        rest = deque(rest)
        try:
            while pending:
                results = pending.popleft().result()
                if rest:
                    pending.append(ex.submit(self.sc.runJob, rdd, task, rest.popleft()))
                yield from results
        finally:
            ex.shutdown(wait=True, cancel_futures=True)


@contextmanager
def spark_map(master: str, conf: list[str] | None = None, *, ship: str = "auto") -> Iterator[SparkMap]:
    """For a command's --engine spark: a session for the command, its ranges mapped as Spark tasks, the session stopped."""
    from rmqdump.engines.spark.session import session

    with session(master, conf, ship=ship) as spark:
        yield SparkMap(spark)


def _task(fn: Callable[[T], R]) -> Callable[[Iterator[T]], list[R]]:
    """A partition's items, mapped (one item per partition)."""

    def run(it: Iterator[T]) -> list[R]:
        return [fn(x) for x in it]

    return run


def folds_on_driver(store) -> bool:
    """Whether a store's queues are checked and built by the local engine's fold on the driver, the ranges mapped by
    Spark: Batch ConsumeQueues, ConsumeQueue ext, LMQ queues and a RocksDB ConsumeQueue are read and written there
    (none of them is a CommitLog range); plain ConsumeQueue stores take the Spark engine's own joins and group tasks."""
    return bool(store.queue_kinds_5x()) or store.rocksdb_cq is not None
