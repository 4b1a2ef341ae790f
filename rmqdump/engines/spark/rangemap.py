"""Every Spark job over byte ranges (or another work list) is built here; each command's Spark path is one of these
plus its fold on the driver or in Spark SQL.

- `frame`: rows made on the driver as a DataFrame (the small tables a command joins onto its stage).
- `arrow_stage`: a pure `item -> Arrow record batches` function and its Arrow output schema as a mapInArrow stage.
  The items are pickled into the stage's rows, so a task gets only its own and the closure stays small however
  many there are; the Spark schema is derived from the Arrow one (mapInArrow checks the types exactly).
  `ranges_stage` is that stage over the planner's ranges, `fn(range number, range)`, about a range's bytes a partition.
- `SparkMap`: the local engine's `range -> result` function (cq verify, rebuild, export, journey) run as Spark
  tasks, results back in item order for the local engine's own fold; memory on the driver is bounded as with
  threads: a wave of `workers` tasks at a time, the next one running while the caller folds the previous one.

The tasks open the store's files themselves at the driver's path (a filesystem every executor sees).
"""

from __future__ import annotations

import pickle
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import TypeVar

import pyarrow as pa

from rmqdump.engines.local import driver_map
from rmqdump.scan.splits import Split, partition_count

T = TypeVar("T")
R = TypeVar("R")
Batches = Iterable[pa.RecordBatch]

_ITEMS = pa.schema([("item", pa.binary())])


def spark_schema(schema: pa.Schema):
    """The Spark StructType of an Arrow schema, every column nullable (as a DDL string has them)."""
    from pyspark.sql.pandas.types import from_arrow_type
    from pyspark.sql.types import StructField, StructType

    return StructType([StructField(f.name, from_arrow_type(f.type), True) for f in schema])


def frame(spark, rows: Sequence[tuple], schema: pa.Schema, partitions: int | None = None):
    """Rows made on the driver as a DataFrame of `schema`, in `partitions` slices (default: one)."""
    rdd = spark.sparkContext.parallelize(list(rows), max(1, min(len(rows), partitions or 1)))
    return spark.createDataFrame(rdd, spark_schema(schema))


def arrow_stage(spark, items: Sequence[T], fn: Callable[[T], Batches], schema: pa.Schema, partitions: int | None = None):
    """A DataFrame of `schema` whose rows are `fn(item)`'s batches for every item, made by Spark tasks.

    partitions: default one per item, at most four per core (a slow item then holds one core, not a wave)."""
    if partitions is None:
        partitions = 4 * spark.sparkContext.defaultParallelism
    rows = [(pickle.dumps(x, pickle.HIGHEST_PROTOCOL),) for x in items]
    return frame(spark, rows, _ITEMS, partitions).mapInArrow(_arrow_task(fn), spark_schema(schema))


def ranges_stage(spark, splits: list[Split], fn: Callable[[int, Split], Batches], schema: pa.Schema, partitions: int | None = None):
    """arrow_stage over the planner's ranges: `fn(range number, range)`; partitions as partition_count gives them."""
    partitions = partition_count(splits, spark.sparkContext.defaultParallelism, partitions)
    return arrow_stage(spark, list(enumerate(splits)), lambda item: fn(*item), schema, partitions)


def batch_of(schema: pa.Schema, **cols: pa.Array) -> pa.RecordBatch:
    """A record batch of `schema` from the columns given by name, every other column null: a stage's rows of one kind."""
    n = len(next(iter(cols.values())))
    return pa.RecordBatch.from_arrays([cols[f.name] if f.name in cols else pa.nulls(n, f.type) for f in schema], schema=schema)


def _arrow_task(fn: Callable[[T], Batches]) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """What a mapInArrow task runs: each of its items unpickled and mapped, in order."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for blob in batch.column("item").to_pylist():
                yield from fn(pickle.loads(blob))

    return run


@contextmanager
def persisted(df):
    """A stage read more than once (problems, counts, then the joins) kept on the executors, dropped after."""
    from pyspark import StorageLevel

    df = df.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        yield df
    finally:
        df.unpersist()


class SparkMap:
    """fn over items as Spark tasks (one item a task), results in item order, at most two waves of `workers` in flight."""

    def __init__(self, spark, wave: int | None = None):
        self.sc = spark.sparkContext
        self.workers = max(1, int(self.sc.defaultParallelism))
        self.wave = max(1, int(wave or self.workers))
        # what is not a range (salvage's row groups, the self-check's side-by-side jobs over files being written) runs
        # on the driver, on its cores
        self.on_driver = driver_map()

    def __call__(self, fn: Callable[[T], R], items: Iterable[T]) -> Iterator[R]:
        items = list(items)
        if not items:
            return iter(())
        rdd = self.sc.parallelize(items, len(items))  # partition i holds item i
        waves = deque(list(range(i, min(len(items), i + self.wave))) for i in range(0, len(items), self.wave))
        ex = ThreadPoolExecutor(1, thread_name_prefix="rmqdump-spark")
        task = _task(fn)
        pending = deque(ex.submit(self.sc.runJob, rdd, task, waves.popleft()) for _ in range(min(2, len(waves))))
        return self._drain(ex, rdd, task, waves, pending)

    def unordered(self, fn: Callable[[T], R], items: Iterable[T]) -> Iterator[tuple[int, R]]:
        """(index of the item, its result): the waves give them in order, which a sum does not mind."""
        return enumerate(self(fn, items))

    def _drain(self, ex: ThreadPoolExecutor, rdd, task, rest: deque, pending: deque) -> Iterator:
        try:
            while pending:
                results = pending.popleft().result()
                if rest:
                    pending.append(ex.submit(self.sc.runJob, rdd, task, rest.popleft()))
                yield from results
        finally:
            ex.shutdown(wait=True, cancel_futures=True)


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
