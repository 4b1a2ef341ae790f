"""Every message of one or more stores as a dataset: `rmqdump export` on any engine's mapper.

Work is cut into byte ranges (rmqdump.scan.splits); each range is decoded by
rmqdump.scan.ranges.range_batches and turned into Arrow by rmqdump.export.arrowbatch, and each task
writes its own part files, so workers never share a file. The engines differ only in who runs
the tasks (`mapper`: builtin map, the local engine's threads, or Spark tasks on executors that share
the output path); Spark's own writer (rmqdump.engines.spark.export) runs the same two steps inside mapInArrow.
The dataset is written into a temporary directory beside the target and renamed into place when complete
(rmqdump.common.publish).
"""

from __future__ import annotations

import dataclasses
import os
import time
import urllib.parse
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from rmqdump.common import writeback
from rmqdump.common.closing import Closing
from rmqdump.common.directfile import DirectFile
from rmqdump.common.jsontext import fields_of
from rmqdump.common.problems import Problem
from rmqdump.common.publish import check_target, publishing
from rmqdump.export import arrowbatch
from rmqdump.export.jsonlines import Lines
from rmqdump.scan.compaction import ServedView, served_views
from rmqdump.scan.ranges import SERIAL, Mapper, range_batches
from rmqdump.scan.scanner import Batch
from rmqdump.scan.splits import RANGE_BYTES, Split, StoreRef, group_splits, plan

FORMATS = ("parquet", "jsonl")
ROWS_PER_GROUP = 65536
ROWS_PER_GROUP_WITH_BODY = 8192  # bodies are up to 4 MiB: keep a row group's buffer small
BUFFER_BYTES = 16 << 20  # rows waiting for their row group, all topics together, per task (two run at once by default)
MAX_OPEN_FILES = 128
# JSON Lines part files past the page cache: a task's first DIRECT_FILES topics, each with a LINE_BUFFER buffer (two
# tasks at once hold 32 MiB); a store of many topics writes the rest through the cache
DIRECT_FILES = 8
LINE_BUFFER = 2 << 20
CACHED_BUFFER = 64 << 10
# Records per scan batch (~20 MB of the benchmark store's 1.2 KB records): fewer cost Python time per batch, more hold map pages.
EXPORT_BATCH_RECORDS = 16384
MAX_PROBLEMS = 1000  # problems kept for the report; all are counted
# Parquet columns with few distinct values per row group, the only ones dictionary-encoded: building a
# dictionary for near-unique columns (offsets, ids, timestamps) costs write time and makes files bigger.
DICTIONARY_COLUMNS = (
    "kind",
    "file",
    "broker",
    "magic_version",
    "queue_id",
    "sys_flag",
    "sys_flag_names.list.element",
    "transaction",
    "store_host",
    "born_host",  # a producer's address: a few per row group (64 in gen-1m's), 5% smaller files and 2% less write time
    "reconsume_times",
    "prepared_transaction_offset",
    "properties.key_value.key",
    "tags",
)
# Flat columns nobody filters on: no min/max statistics (comparing every value's bytes was a third of salvage's write).
UNSUMMARIZED = ("body", "raw_without_body")


def parquet_options(schema: pa.Schema) -> dict:
    """The ParquetWriter options of export and salvage (and diff's message sets): snappy, dictionaries where values repeat, and
    min/max statistics only on the flat columns a reader prunes row groups by (offsets, times, ids, hosts, tags).
    Named top-level, the statistics leave out the nested columns (properties, keys, flag names): their min and max
    over all elements prune nothing in DuckDB or Spark, and computing them was 2-3% of export's CPU."""
    return {
        "compression": "snappy",
        "use_dictionary": [c for c in DICTIONARY_COLUMNS if c.split(".")[0] in schema.names],
        "write_statistics": [n for n in schema.names if n not in UNSUMMARIZED],
    }


@dataclass
class SplitResult:
    messages: int = 0
    bytes: int = 0  # of the files' ranges read, preallocated zeros included
    problems: list[dict] = field(default_factory=list)
    problem_count: int = 0
    record_bytes: int = 0  # of the records decoded (their totalSize): what MB/s is measured on


@dataclass
class ExportResult:
    out: str
    format: str
    engine: str
    stores: int
    files: int
    splits: int
    messages: int = 0
    bytes: int = 0
    record_bytes: int = 0
    problems: list[dict] = field(default_factory=list)
    problem_count: int = 0
    seconds: float = 0.0
    startup_seconds: float | None = None

    def add(self, r: SplitResult) -> None:
        self.messages += r.messages
        self.bytes += r.bytes
        self.record_bytes += r.record_bytes
        self.problem_count += r.problem_count
        room = MAX_PROBLEMS - len(self.problems)
        if room > 0:
            self.problems.extend(r.problems[:room])

    def to_dict(self) -> dict:
        d = {"kind": "export", **fields_of(self, omit=("problems", "startup_seconds"), rename={"problem_count": "problems"}), "seconds": round(self.seconds, 3)}
        if self.startup_seconds is not None:
            d["spark_startup_seconds"] = round(self.startup_seconds, 3)
        return d


def problem_order(d: dict) -> tuple:
    return (d.get("broker") or "", d.get("file") or "", -1 if d.get("file_offset") is None else d["file_offset"], d.get("code") or "")


def split_batches(
    split: Split, result: SplitResult, *, with_body: bool = False, check_crc: bool = True, served: dict[str, ServedView] | None = None
) -> Iterator[pa.RecordBatch]:
    """The messages of one byte range as Arrow batches; problems and counts go into `result`.
    served: served_views() of the stores, for the compaction columns."""
    view = (served or {}).get(split.broker)
    for b in split_scan(split, result, check_crc):
        for rb in arrowbatch.record_batches(b, split.broker, with_body=with_body, by_topic=True, served=view):
            result.messages += rb.num_rows
            yield rb


def split_scan(split: Split, result: SplitResult, check_crc: bool = True) -> Iterator[Batch]:
    """The scanned batches of one byte range; their problems and bytes go into `result` (not their messages: the
    caller counts what it writes). A batch's pages of the map are given back once the caller is done with it."""

    def note(p: Problem) -> None:
        result.problem_count += 1
        if len(result.problems) < MAX_PROBLEMS:
            result.problems.append(p.to_dict(broker=split.broker))

    for b in range_batches(dataclasses.replace(split, check_crc=check_crc), keys=False, batch_records=EXPORT_BATCH_RECORDS):
        for p in b.flagged():  # problems of records still decoded, before them; what ended the batch, after
            note(p)
        if len(b):
            result.record_bytes += int(b.cols["total_size"].sum())
        yield b
        if len(b):  # the batch is written (copies): its pages of the map can go now, not at the scan's next release
            b.mf.release(int(b.cols["_pos"][0]), int(b.cols["_end"][-1]))
        for p in b.damage():
            note(p)
    result.bytes += split.length


def partition_dir(topic: str) -> str:
    """The hive-style directory of a topic (`topic=` + percent-encoded name), as Spark and pyarrow read it."""
    return "topic=" + urllib.parse.quote(topic, safe="")


def _group_batches(group: list[Split], result: SplitResult, with_body: bool, check_crc: bool, served: dict[str, ServedView] | None) -> Iterator[pa.RecordBatch]:
    for split in group:
        yield from split_batches(split, result, with_body=with_body, check_crc=check_crc, served=served)


def _one_value(arr: pa.Array) -> bool:
    """Whether every row of a string column holds its first row's value: its offsets and bytes compared by numpy, no
    hashing (and no pyarrow.compute, whose import is 60 ms of an export's start-up)."""
    if not len(arr) or arr.null_count or arr.type != pa.string():
        return False
    _, offs_buf, data_buf = arr.buffers()
    offs = np.frombuffer(offs_buf, dtype=np.int32)[arr.offset : arr.offset + len(arr) + 1]
    width = int(offs[1] - offs[0])
    if not (np.diff(offs) == width).all():
        return False
    if not width:
        return True
    rows = np.frombuffer(data_buf, dtype=np.uint8)[offs[0] : offs[-1]].reshape(len(arr), width)
    return bool((rows == rows[0]).all())


def _topic_parts(rb: pa.RecordBatch) -> list[tuple[str, pa.RecordBatch]]:
    """Each topic of a batch and its rows (in batch order), without the topic column. A batch of one topic (export's
    are: arrowbatch.record_batches by_topic) is found so by comparing bytes, not by hashing every row."""
    topic = rb.column("topic")
    rest = rb.drop_columns(["topic"])
    if _one_value(topic):
        return [(topic[0].as_py(), rest)]
    enc = topic.dictionary_encode()
    codes = enc.indices.to_numpy(zero_copy_only=False)
    order = np.argsort(codes, kind="stable")
    bounds = np.searchsorted(codes[order], np.arange(len(enc.dictionary) + 1))
    return [(t, rest.take(pa.array(order[bounds[k] : bounds[k + 1]]))) for k, t in enumerate(enc.dictionary.to_pylist())]


class TopicParquetWriter(Closing):
    """Part files of one task, one per topic directory, row groups of `rows` rows.

    Rows wait per topic until a row group is full, and the largest waiting
    group is written early when everything waiting passes BUFFER_BYTES, so
    memory is bounded whatever the number of topics. At most MAX_OPEN_FILES
    files are open; a topic whose file was closed continues in a new part.
    """

    def __init__(self, root: str, index: int, schema: pa.Schema, rows: int, writeback: bool = False):
        self.root, self.index, self.rows, self.writeback = root, index, rows, writeback
        self.paths: dict[str, str] = {}
        self.schema = schema.remove(schema.get_field_index("topic"))
        self.options = parquet_options(self.schema)
        self.writers: OrderedDict[str, pq.ParquetWriter] = OrderedDict()
        self.parts: dict[str, int] = {}
        self.waiting: dict[str, list[pa.RecordBatch]] = {}
        self.waiting_rows: dict[str, int] = {}
        self.waiting_size: dict[str, int] = {}
        self.waiting_bytes = 0

    def write(self, rb: pa.RecordBatch) -> None:
        for t, part in _topic_parts(rb):
            size = part.get_total_buffer_size()  # its buffers, counted once (nbytes walks the arrays: 0.4 ms a batch)
            self.waiting.setdefault(t, []).append(part)
            self.waiting_rows[t] = self.waiting_rows.get(t, 0) + part.num_rows
            self.waiting_size[t] = self.waiting_size.get(t, 0) + size
            self.waiting_bytes += size
            if self.waiting_rows[t] >= self.rows:
                self._flush(t)
        while self.waiting_bytes > BUFFER_BYTES and self.waiting:
            self._flush(max(self.waiting_rows, key=self.waiting_rows.get))

    def _flush(self, t: str) -> None:
        batches = self.waiting.pop(t)
        self.waiting_rows.pop(t)
        self.waiting_bytes -= self.waiting_size.pop(t)
        w = self.writers.get(t)
        if w is None:
            if len(self.writers) >= MAX_OPEN_FILES:
                self.writers.popitem(last=False)[1].close()
            d = os.path.join(self.root, partition_dir(t))
            os.makedirs(d, exist_ok=True)
            n = self.parts[t] = self.parts.get(t, -1) + 1
            path = self.paths[t] = os.path.join(d, f"part-{self.index:05d}-{n}.parquet")
            w = self.writers[t] = pq.ParquetWriter(path, self.schema, **self.options)
        else:
            self.writers.move_to_end(t)
        w.write_table(pa.Table.from_batches(batches, self.schema), row_group_size=self.rows)
        if self.writeback:  # its row groups on their way to the disk: the fsync before publication waits less
            writeback.start_path(self.paths[t])

    def close(self) -> None:
        for t in list(self.waiting):
            self._flush(t)
        while self.writers:
            self.writers.popitem(last=False)[1].close()


def write_split(
    index: int,
    group: list[Split],
    tmp: str,
    fmt: str,
    with_body: bool,
    check_crc: bool,
    served: dict[str, ServedView] | None = None,
    sync: bool = False,
) -> SplitResult:
    """Decode a task's ranges and write its part files under `tmp` (a worker thread, or a Spark task); with `sync`,
    their pages are started on their way to the disk as they are written (common.writeback)."""
    result = SplitResult()
    sch = arrowbatch.schema(with_body)
    batches = _group_batches(group, result, with_body, check_crc, served)
    if fmt == "parquet":
        with TopicParquetWriter(tmp, index, sch, ROWS_PER_GROUP_WITH_BODY if with_body else ROWS_PER_GROUP, writeback=sync) as w:
            for rb in batches:
                w.write(rb)
    else:
        write_jsonl(index, group, tmp, with_body, check_crc, served, result, sync)
    return result


class TopicLineFiles(Closing):
    """A task's JSON Lines part files, one per topic directory, each written from the start in order, past the page
    cache (common.directfile) for the first DIRECT_FILES topics a task meets, whose buffers bound its memory; the
    others through the cache, their pages started on their way to the disk as they grow, with `sync`."""

    def __init__(self, root: str, index: int, sync: bool):
        self.root, self.index, self.sync = root, index, sync
        self.files: dict[str, DirectFile] = {}

    def write(self, topic: str, pieces: list) -> None:
        f = self.files.get(topic)
        if f is None:
            d = os.path.join(self.root, partition_dir(topic))
            os.makedirs(d, exist_ok=True)
            direct = len(self.files) < DIRECT_FILES
            path = os.path.join(d, f"part-{self.index:05d}.jsonl")
            f = self.files[topic] = DirectFile(path, self.sync, LINE_BUFFER if direct else CACHED_BUFFER, direct)
        for p in pieces:
            f.write(p)

    def close(self) -> None:
        while self.files:
            self.files.popitem()[1].close()


def write_jsonl(index: int, group: list[Split], tmp: str, with_body: bool, check_crc: bool, served, result: SplitResult, sync: bool) -> None:
    """A task's ranges as JSON Lines part files under `tmp`, spelled by rmqdump.export.jsonlines."""
    with TopicLineFiles(tmp, index, sync) as files:
        for split in group:
            lines = Lines(split.broker, with_body, (served or {}).get(split.broker))
            for b in split_scan(split, result, check_crc):
                for topic, pieces in lines.batch(b):
                    files.write(topic, pieces)
                result.messages += len(b)


def start_export(stores: list[StoreRef], out: str, fmt: str, engine: str, range_bytes: int) -> tuple[list[Split], ExportResult]:
    """The byte ranges to decode, and a result that already holds the stores' layout problems (both engines)."""
    splits, layout = plan(stores, range_bytes)
    res = ExportResult(out, fmt, engine, len(stores), len({s.path for s in splits}), len(splits))
    for broker, p in layout:
        res.add(SplitResult(problems=[p.to_dict(broker=broker)], problem_count=1))
    return splits, res


def export_ranges(
    stores: list[StoreRef],
    out: str,
    *,
    fmt: str = "parquet",
    with_body: bool = False,
    mapper: Mapper = SERIAL,
    engine: str = "local",
    range_bytes: int = RANGE_BYTES,
    force: bool = False,
    check_crc: bool = True,
    on_bytes: Callable[[int], None] | None = None,
    sync: bool = True,
) -> ExportResult:
    """Write the dataset with `mapper`'s workers, each task writing its own part files; `engine` names them in the
    result. sync: every file on the disk before the dataset is renamed into place (common.publish)."""
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}")
    out = check_target(out, force=force, stores=[s.root for s in stores])
    t0 = time.perf_counter()
    splits, res = start_export(stores, out, fmt, engine, range_bytes)
    served = served_views(stores)
    with publishing(out, force=force, stores=[s.root for s in stores], sync=sync) as tmp:
        groups = group_splits(splits, mapper.workers)
        sizes = [sum(s.length for s in g) for g in groups]
        order = sorted(range(len(groups)), key=lambda i: -sizes[i])  # the biggest first: the last task to finish is a small one
        task = lambda i: write_split(i, groups[i], tmp, fmt, with_body, check_crc, served, sync)  # noqa: E731
        # the results are summed: taken as they finish where the engine can (a big task must not hold back the next)
        for k, r in mapper.unordered(task, order):
            res.add(r)
            if on_bytes:
                on_bytes(sizes[order[k]])
    res.problems.sort(key=problem_order)
    res.seconds = time.perf_counter() - t0
    return res
