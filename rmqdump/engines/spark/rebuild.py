"""`rmqdump rebuild --engine spark`: the same ConsumeQueue and IndexFile bytes as the local rebuild, built by Spark.

1. mapInArrow over the CommitLog's byte ranges: each record's dispatch values
   and index key hashes (rmqdump.scan.dispatch.dispatch_columns, as the local
   rebuild), numbered within its range; the result is persisted.
2. ConsumeQueues: the queued records grouped by (topic, queue); each group is
   written by one task with the local engine's ConsumeQueueBuilder (a queue's
   files depend on that queue's messages only).
3. IndexFiles: the keys numbered globally (range counts summed on the driver)
   and cut into file segments of maxIndexNum - 1 keys, which is where the
   broker starts a new file; each segment is written by one task with the
   local engine's IndexBuilder, started with the previous file's end values
   (`after`) and fed from the record that makes the file, as the broker does.
   The driver then names the files in order (a name one millisecond after the
   previous one when two would collide, like the sequential builder).
4. The checkpoint, the self-check (cq verify / index verify on the new files)
   are the local rebuild's own functions; the publishing is rmqdump.common.publish, as everywhere.
The output directory must be on a filesystem the executors share with the driver.

A store with Batch ConsumeQueues, ConsumeQueue ext, LMQ queues or a RocksDB
ConsumeQueue is rebuilt by the local engine's own rebuild instead, its
CommitLog ranges scanned by Spark tasks (rmqdump.engines.spark.rangemap): the
builders of those kinds then run on the driver, as they do locally.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from rmqdump.builders import rebuild as R
from rmqdump.builders.cqbuild import CQ_UNSAFE_TOPIC, ConsumeQueueBuilder
from rmqdump.builders.indexbuild import IndexBuilder, IndexFileResult, index_file_name
from rmqdump.builders.queuefiles import QueueResult
from rmqdump.builders.settings import StoreSettings
from rmqdump.common.problems import InputError, Problem
from rmqdump.engines.spark.rangemap import SparkMap, batch_of, folds_on_driver, frame, persisted, ranges_stage, spark_schema
from rmqdump.readers.commitlog import CommitLog
from rmqdump.readers.store import Store
from rmqdump.scan.dispatch import DelayLevels
from rmqdump.scan.ranges import ScanOptions, scan_range
from rmqdump.scan.splits import RANGE_BYTES, Split, commitlog_splits

SPARK_UNSUPPORTED = "spark_unsupported"

RECORDS = pa.schema(
    [
        ("kind", pa.string()),
        ("split_no", pa.int32()),
        ("rec", pa.int64()),
        ("key0", pa.int64()),
        ("phys", pa.int64()),
        ("size", pa.int32()),
        ("store_ts", pa.int64()),
        ("tags_code", pa.int64()),
        ("queue_offset", pa.int64()),
        ("queue_id", pa.int32()),
        ("topic", pa.string()),
        ("queued", pa.bool_()),
        ("key_hashes", pa.list_(pa.int32())),
        ("scanned", pa.int64()),
        ("last_ts", pa.int64()),
        ("problem", pa.string()),
    ]
)
RESULT = pa.schema([("kind", pa.string()), ("seq", pa.int64()), ("payload", pa.string())])
BASES = pa.schema([("split_no", pa.int32()), ("rec_base", pa.int64()), ("key_base", pa.int64())])


def _records_fn(delays: DelayLevels, topics_wanted: frozenset[str] | None):
    """A range's records (dispatch values and key hashes, numbered within the range), its counts, its problems."""

    rows = functools.partial(batch_of, RECORDS)
    options = ScanOptions(keys=True, delays=delays, topics=topics_wanted)

    def decode(no: int, split: Split):
        scan = scan_range(split, options)
        d = scan.columns
        m = len(d)
        rec_base = key_base = 0
        if m:
            counts = d.key_counts()
            offs = np.zeros(m + 1, dtype=np.int32)
            np.cumsum(counts, out=offs[1:])
            hashes = pa.ListArray.from_arrays(pa.array(offs), pa.array(d.key_hash.astype(np.int32)))
            topic_names = pa.array(d.topics, pa.string()).take(pa.array(d.topic_id.astype(np.int32)))
            yield rows(
                kind=pa.array(["r"] * m, pa.string()),
                split_no=pa.array(np.full(m, no, dtype=np.int32)),
                rec=pa.array(np.arange(m, dtype=np.int64)),
                key0=pa.array(offs[:-1].astype(np.int64)),
                phys=pa.array(d.phys.astype(np.int64)),
                size=pa.array(d.size.astype(np.int32)),
                store_ts=pa.array(d.store_timestamp.astype(np.int64)),
                tags_code=pa.array(d.tags_code.astype(np.int64)),
                queue_offset=pa.array(d.queue_offset.astype(np.int64)),
                queue_id=pa.array(d.queue_id.astype(np.int32)),
                topic=topic_names,
                queued=pa.array(d.queued),
                key_hashes=hashes,
            )
            rec_base, key_base = m, int(offs[-1])
        yield rows(
            kind=pa.array(["s"], pa.string()),
            split_no=pa.array([no], pa.int32()),
            rec=pa.array([rec_base], pa.int64()),
            key0=pa.array([key_base], pa.int64()),
            scanned=pa.array([scan.records], pa.int64()),
            last_ts=pa.array([scan.last_ts], pa.int64()),
        )
        for kind, probs in (("p", scan.damaged), ("f", scan.flagged)):
            if probs:
                n = len(probs)
                yield rows(
                    kind=pa.array([kind] * n, pa.string()),
                    split_no=pa.array([no] * n, pa.int32()),
                    rec=pa.array(list(range(n)), pa.int64()),
                    problem=pa.array([json.dumps(p.to_dict()) for p in probs], pa.string()),
                )

    return decode


def _cq_fn(out_dir: str, units_per_file: int, sync: bool, display_dir: str):
    def build(key, table):  # no annotations: pyspark infers the UDF kind from them
        t = table.sort_by("phys")
        cqb = ConsumeQueueBuilder(out_dir, units_per_file, sync=sync, display_dir=display_dir)
        cqb.add(
            [key[0].as_py()],
            np.zeros(t.num_rows, dtype=np.int32),
            t.column("queue_id").to_numpy().astype(np.int64),
            t.column("queue_offset").to_numpy(),
            t.column("phys").to_numpy(),
            t.column("size").to_numpy(),
            t.column("tags_code").to_numpy(),
        )
        queues = cqb.finish()
        payload = [("q", 0, json.dumps(q.__dict__)) for q in queues] + [("p", int(p.phys_offset or 0), json.dumps(p.to_dict())) for p in cqb.problems]
        return pa.table({"kind": [x[0] for x in payload], "seq": [x[1] for x in payload], "payload": [x[2] for x in payload]}, schema=RESULT)

    return build


@dataclass(frozen=True)
class _Segment:
    """One IndexFile: its keys [g0, g1), the record that makes it, the previous file's end values."""

    no: int
    g0: int
    g1: int
    trigger: tuple[int, int, int]  # (global record number, phys, store time)
    after: tuple[int, int] | None  # (endTimestamp, endPhyOffset) of the previous file


def _build_segment(
    seg: _Segment, out_dir: str, settings: StoreSettings, sync: bool, rec: np.ndarray, phys: np.ndarray, ts: np.ndarray, hashes: np.ndarray
) -> dict:
    """Write one index file into out_dir/.seg-N/ from its keys (in put order) and their records."""
    d = os.path.join(out_dir, f".seg-{seg.no:06d}")
    os.makedirs(d, exist_ok=True)
    t_rec, t_phys, t_ts = seg.trigger
    recs, first = np.unique(np.concatenate([[t_rec], rec]), return_index=True)
    all_phys = np.concatenate([[t_phys], phys])[first]
    all_ts = np.concatenate([[t_ts], ts])[first]
    key_rec = np.searchsorted(recs, rec)
    ixb = IndexBuilder(d, settings.hash_slots, settings.index_entries, after=seg.after, sync=sync)
    ixb.add(all_phys, all_ts, key_rec, hashes)
    files = ixb.finish()
    assert len(files) == 1, f"segment {seg.no} made {len(files)} index files"
    return {"no": seg.no, **{k: v for k, v in files[0].__dict__.items()}}


def _index_fn(segments: dict[int, _Segment], out_dir: str, settings: StoreSettings, sync: bool):
    def build(key, table):  # no annotations: pyspark infers the UDF kind from them
        t = table.sort_by("g")
        seg = segments[key[0].as_py()]
        res = _build_segment(
            seg,
            out_dir,
            settings,
            sync,
            t.column("grec").to_numpy(),
            t.column("phys").to_numpy(),
            t.column("store_ts").to_numpy(),
            t.column("h").to_numpy().astype(np.int32),
        )
        return pa.table({"kind": ["i"], "seq": [seg.no], "payload": [json.dumps(res)]}, schema=RESULT)

    return build


def build_into_spark(spark, tmp: str, cl: CommitLog, settings: StoreSettings, options: R.RebuildOptions, report: R.RebuildReport, range_bytes: int) -> None:
    """consumequeue/, index/ and checkpoint under `tmp`, like rebuild.build_into."""
    from pyspark.sql import functions as F

    if options.index_after is not None or options.to_offset is not None:
        raise InputError(SPARK_UNSUPPORTED, report.store, "index_after/to_offset are local-engine library options")
    want_cq, want_index = "consumequeue" in options.only, "index" in options.only
    sc = spark.sparkContext
    splits = commitlog_splits(cl, range_bytes, check_crc=options.check_crc)
    with persisted(ranges_stage(spark, splits, _records_fn(settings.delays, options.topics), RECORDS)) as decoded:
        small = decoded.filter(F.col("kind") != "r").select("kind", "split_no", "rec", "key0", "scanned", "last_ts", "problem").collect()
        stats = {r["split_no"]: r for r in small if r["kind"] == "s"}
        for r in sorted((r for r in small if r["kind"] in ("p", "f")), key=lambda r: (r["split_no"], r["rec"])):
            (report.damaged if r["kind"] == "p" else report.flagged).append(Problem.from_dict(json.loads(r["problem"])))
        rec_base, key_base, nrec, nkey, last_ts = {}, {}, 0, 0, None
        for no in range(len(splits)):
            s = stats[no]
            rec_base[no], key_base[no] = nrec, nkey
            nrec += s["rec"]
            nkey += s["key0"]
            report.records += s["scanned"]
            if s["last_ts"] is not None:
                last_ts = s["last_ts"]
        report.messages = nrec
        records = decoded.filter(F.col("kind") == "r")
        bases = frame(spark, [(no, rec_base[no], key_base[no]) for no in range(len(splits))], BASES)
        records = records.join(F.broadcast(bases), "split_no").withColumn("grec", F.col("rec") + F.col("rec_base"))
        last_queued_ts = None
        if want_cq:
            os.makedirs(os.path.join(tmp, "consumequeue"))
            queued = records.filter(F.col("queued")).select("topic", "queue_id", "queue_offset", "phys", "size", "tags_code", "store_ts")
            if queued.limit(1).count():
                last_queued_ts = queued.orderBy(F.col("phys").desc()).select("store_ts").first()[0]
            nq = max(1, 4 * sc.defaultParallelism)
            out = (
                queued.repartition(nq, "topic", "queue_id")
                .groupBy("topic", "queue_id")
                .applyInArrow(
                    _cq_fn(os.path.join(tmp, "consumequeue"), settings.cq_units_per_file, options.sync, os.path.join(report.out, "consumequeue")), spark_schema(RESULT)
                )
                .collect()
            )
            report.queues = sorted((_queue_result(json.loads(r["payload"])) for r in out if r["kind"] == "q"), key=lambda q: (q.topic, q.queue_id))
            report.problems.extend(
                _dedupe_unsafe([Problem.from_dict(json.loads(r["payload"])) for r in sorted((r for r in out if r["kind"] == "p"), key=lambda r: r["seq"])])
            )
        if want_index:
            index_dir = os.path.join(tmp, "index")
            os.makedirs(index_dir)
            report.index_files = _build_index(spark, records, nrec, nkey, index_dir, settings, options.sync)
            report.index_keys = nkey
    report.checkpoint = R.write_checkpoint(tmp, report, last_ts, last_queued_ts, options.sync)


def _queue_result(d: dict) -> QueueResult:
    """A QueueResult back from JSON: pairs were tuples."""
    for k, v in d.items():
        if isinstance(v, list) and k != "files":
            d[k] = [tuple(x) if isinstance(x, list) else x for x in v]
    for k in ("first_gap", "first_dup"):
        if isinstance(d.get(k), list):
            d[k] = tuple(d[k])
    return QueueResult(**d)


def _dedupe_unsafe(problems: list[Problem]) -> list[Problem]:
    """A topic that cannot be a directory is reported once (first message), as by one builder."""
    out, seen = [], set()
    for p in sorted(problems, key=lambda p: p.phys_offset or 0):
        if p.code == CQ_UNSAFE_TOPIC:
            if p.detail in seen:
                continue
            seen.add(p.detail)
        out.append(p)
    return out


def _build_index(spark, records, nrec: int, nkey: int, index_dir: str, settings: StoreSettings, sync: bool) -> list[IndexFileResult]:
    from pyspark.sql import functions as F

    per_file = settings.index_entries - 1  # indexCount starts at 1; a file is full at maxIndexNum
    if nrec == 0:
        return []
    keys = records.select("grec", "phys", "store_ts", (F.col("key0") + F.col("key_base")).alias("kbase"), F.posexplode("key_hashes").alias("pos", "h")).select(
        "grec", "phys", "store_ts", "h", (F.col("kbase") + F.col("pos")).alias("g")
    )
    nseg = -(-nkey // per_file) if nkey else 0
    # the keys around each file boundary, and the records that may make a file
    edges = sorted({g for j in range(1, nseg + 1) for g in (j * per_file - 1, j * per_file) if 0 <= g < nkey})
    at = {r["g"]: r for r in keys.filter(F.col("g").isin(edges)).select("g", "grec", "phys", "store_ts").collect()} if edges else {}
    want_recs = {0} | {at[j * per_file - 1]["grec"] + 1 for j in range(1, nseg + 1) if j * per_file - 1 in at}
    recs = {
        r["grec"]: (r["grec"], r["phys"], r["store_ts"])
        for r in records.filter(F.col("grec").isin(sorted(want_recs))).select("grec", "phys", "store_ts").collect()
    }
    segments: dict[int, _Segment] = {}
    j = 0
    while True:
        g0, g1 = j * per_file, min(nkey, (j + 1) * per_file)
        if j == 0:
            trigger, after = recs[0], None
        else:
            last = at[g0 - 1]
            after = (last["store_ts"], last["phys"])
            nxt = at.get(g0)
            if nxt is not None and nxt["grec"] == last["grec"]:
                trigger = (nxt["grec"], nxt["phys"], nxt["store_ts"])  # the same message still has keys
            elif last["grec"] + 1 < nrec:
                trigger = recs[last["grec"] + 1]  # the next message, with or without keys
            else:
                break  # the last file filled with the last message: no successor
        segments[j] = _Segment(j, g0, g1, trigger, after)
        if g1 >= nkey and (g1 - g0 < per_file or nkey == 0):
            break
        j += 1
    results: dict[int, dict] = {}
    with_keys = [s for s in segments.values() if s.g1 > s.g0]
    if with_keys:
        segs = {s.no: s for s in with_keys}
        keyed = keys.withColumn("seg", F.expr(f"g div {per_file}"))
        nparts = max(1, min(len(segs), 4 * spark.sparkContext.defaultParallelism))
        out = keyed.repartition(nparts, "seg").groupBy("seg").applyInArrow(_index_fn(segs, index_dir, settings, sync), spark_schema(RESULT)).collect()
        for r in out:
            d = json.loads(r["payload"])
            results[d["no"]] = d
    for s in segments.values():
        if s.g1 == s.g0:  # a file the broker makes and leaves empty
            e = np.zeros(0, dtype=np.int64)
            results[s.no] = _build_segment(s, index_dir, settings, sync, e, e, e, np.zeros(0, dtype=np.int32))
    files: list[IndexFileResult] = []
    last_ms = -1
    for no in sorted(results):
        d = results[no]
        src = d["path"]
        trig_ms = segments[no].trigger[2]
        ms = max(int(trig_ms), last_ms + 1)
        last_ms = ms
        name = index_file_name(ms)
        dst = os.path.join(index_dir, name)
        os.rename(src, dst)
        os.rmdir(os.path.dirname(src))
        fields = {k: v for k, v in d.items() if k not in ("no", "name", "path")}
        files.append(IndexFileResult(name, dst, **fields))
    return files


def rebuild_spark(
    spark, store: str, out: str, settings: StoreSettings, options: R.RebuildOptions | None = None, *, range_bytes: int = RANGE_BYTES
) -> R.RebuildReport:
    """rebuild.rebuild with the scan and the builders run by Spark; same checks, same publishing."""
    options = options or R.RebuildOptions()
    if folds_on_driver(Store.open(store)):
        return R.rebuild(store, out, settings, dataclasses.replace(options, mapper=SparkMap(spark), range_bytes=range_bytes))

    def build(tmp: str, cl: CommitLog, report: R.RebuildReport) -> None:
        report.workers = spark.sparkContext.defaultParallelism
        build_into_spark(spark, tmp, cl, settings, options, report, range_bytes)

    return R.rebuild(store, out, settings, options, build=build)

