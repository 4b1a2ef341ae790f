"""The local engine: a range -> result function mapped over ranges by threads of this process.

Threads, not processes: the scan kernel and the numpy steps around it run
without the GIL, the compiled code is loaded once, and results need no
pickling. Results come back in the order of the items, with a bounded number
in flight, so a pass folds them as a serial loop would and memory stays
bounded by the workers, not the store. `LocalMap(1)` runs in the caller's
thread: `-j1` is the same code with one worker (rmqdump.scan.ranges.SERIAL's).
LocalMap is a rmqdump.scan.ranges.Mapper; its `on_driver` is itself (its
workers are in this process).
"""

from __future__ import annotations

import itertools
import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from typing import TypeVar

from rmqdump.scan.ranges import SerialMap
from rmqdump.scan.splits import PARALLEL_MIN_BYTES

T = TypeVar("T")
R = TypeVar("R")

WORKER_MEMORY = 160 << 20  # what one worker may hold at its peak (a range's columns, its mapped pages, a writer's buffers)


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity, as a container or taskset limits it)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def available_memory() -> int | None:
    """MemAvailable from /proc/meminfo, in bytes (None where there is none)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def default_workers(total_bytes: int, min_bytes: int = PARALLEL_MIN_BYTES, per_worker: int = WORKER_MEMORY) -> int:
    """Every usable core for work worth splitting, as far as a quarter of the available memory holds their peaks; else one."""
    if total_bytes < min_bytes:
        return 1
    cores = usable_cores()
    mem = available_memory()
    if mem is not None:
        cores = min(cores, max(1, mem // 4 // per_worker))
    return max(1, cores)


def driver_map() -> LocalMap:
    """Every usable core of this machine, as far as memory holds their peaks: the mapper for the work that stays on the
    driver (salvage's row groups, rebuild's self-check) whatever engine maps the ranges."""
    return LocalMap(default_workers(PARALLEL_MIN_BYTES))


class LocalMap(SerialMap):
    """fn over items on `workers` threads, results in item order, at most `workers + ahead` in flight."""

    def __init__(self, workers: int = 1, ahead: int | None = None):
        self.workers = max(1, int(workers))
        self.ahead = self.workers if ahead is None else ahead

    def __call__(self, fn: Callable[[T], R], items: Iterable[T]) -> Iterator[R]:
        """The results, in order; with threads the first items start now, not at the first result asked for
        (the scan runs while the caller does its own work first)."""
        if self.workers == 1:
            return super().__call__(fn, items)
        items = iter(items)
        ex = ThreadPoolExecutor(self.workers, thread_name_prefix="rmqdump-scan")
        pending = deque(ex.submit(fn, it) for it in itertools.islice(items, self.workers + self.ahead))
        return self._drain(ex, fn, items, pending)

    def unordered(self, fn: Callable[[T], R], items: Iterable[T]) -> Iterator[tuple[int, R]]:
        """(index of the item, its result) as they finish, at most `workers + ahead` in flight: for folds that need no
        order (sums), where a slow item must not hold back the next ones."""
        if self.workers == 1:
            yield from super().unordered(fn, items)
            return
        it = enumerate(items)
        with ThreadPoolExecutor(self.workers, thread_name_prefix="rmqdump-scan") as ex:
            running = {ex.submit(fn, x): i for i, x in itertools.islice(it, self.workers + self.ahead)}
            while running:
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for fut in done:
                    i = running.pop(fut)
                    for j, x in itertools.islice(it, 1):
                        running[ex.submit(fn, x)] = j
                    yield i, fut.result()

    @staticmethod
    def _drain(ex: ThreadPoolExecutor, fn: Callable[[T], R], items: Iterator[T], pending: deque) -> Iterator[R]:
        try:
            while pending:
                r = pending.popleft().result()
                for nxt in itertools.islice(items, 1):
                    pending.append(ex.submit(fn, nxt))
                yield r
        finally:
            ex.shutdown(wait=True, cancel_futures=True)


def local_map(workers: int | None, total_bytes: int, min_bytes: int = PARALLEL_MIN_BYTES, per_worker: int = WORKER_MEMORY) -> LocalMap:
    """The local engine for a pass over `total_bytes`: `workers` threads, or by default as many as default_workers finds."""
    return LocalMap(workers if workers else default_workers(total_bytes, min_bytes, per_worker))
