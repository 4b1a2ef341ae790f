"""`rmqdump cq verify --engine spark`: the same findings as rmqdump.checks.cqverify.verify, computed by Spark.

1. The CommitLog's byte ranges are decoded by mapInArrow into record headers
   with their dispatch values (rmqdump.scan.dispatch.dispatch_columns without
   the index keys, as the local engine computes them), plus the scan's problems as rows; the result is persisted.
2. Every selected queue's valid unit offsets are read by tasks (one row per
   queue in, offsets out) and joined to the records on the physical offset.
3. Per (topic, queue) group, the records its units hit and the records that
   belong to it are rebuilt into a RecordTable, and the local engine's pure
   functions run on it: cqunits.check_units over the queue's files, chunk by
   chunk with the same carry, then cqunits.missing_units. No check is
   written here; only where rows go. The filler units a repair by rmqdump
   left (rmqdump.checks.repairholes) are taken out of each queue's chunks
   first and come back as listed rows, as in the local engine's order pass.
The driver puts the findings back into the local engine's order.

A store with Batch ConsumeQueues, ConsumeQueue ext, LMQ queues or a RocksDB
ConsumeQueue is checked by the local engine's own verify instead, its
CommitLog ranges scanned by Spark tasks (rmqdump.engines.spark.rangemap).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rmqdump.checks.cqunits import CommitLogExtent, RecordTable, check_units, missing_units
from rmqdump.checks.cqverify import VerifyScope, VerifySummary, cq_locator, verify
from rmqdump.checks.repairholes import RepairHoles
from rmqdump.common.problems import Problem
from rmqdump.engines.spark.rangemap import SparkMap, arrow_stage, batch_of, folds_on_driver, frame, persisted, ranges_stage, spark_schema
from rmqdump.readers.consumequeue import ConsumeQueue, unit_path
from rmqdump.readers.store import Store
from rmqdump.scan.dispatch import DelayLevels, DispatchColumns
from rmqdump.scan.ranges import ScanOptions, scan_range
from rmqdump.scan.splits import RANGE_BYTES, Split, commitlog_splits

RECORDS = pa.schema(
    [
        ("kind", pa.string()),
        ("phys", pa.int64()),
        ("size", pa.int32()),
        ("topic", pa.string()),
        ("queue_id", pa.int32()),
        ("queue_offset", pa.int64()),
        ("tags_code", pa.int64()),
        ("store_timestamp", pa.int64()),
        ("queued", pa.bool_()),
        ("split_no", pa.int32()),
        ("seq", pa.int32()),
        ("problem", pa.string()),
    ]
)
QUEUES = pa.schema([("topic", pa.string()), ("queue_id", pa.int32())])
UNITS = pa.schema([("u_topic", pa.string()), ("u_queue", pa.int32()), ("offset", pa.int64())])
FINDINGS = pa.schema([("section", pa.int32()), ("a", pa.int64()), ("b", pa.int64()), ("seq", pa.int32()), ("problem", pa.string()), ("units", pa.int64())])
_REC_COLS = ["phys", "size", "topic", "queue_id", "queue_offset", "tags_code", "store_timestamp", "queued"]


def _records_fn(delays: DelayLevels):
    """A range's record headers with their dispatch values, and its problems as rows of their own."""

    def records(d: DispatchColumns) -> pa.RecordBatch:
        n = len(d)
        topic = pa.DictionaryArray.from_arrays(pa.array(d.topic_id.astype(np.int32)), pa.array(d.topics, pa.string()))
        return batch_of(
            RECORDS,
            kind=pa.array(["r"] * n, pa.string()),
            phys=pa.array(d.phys.astype(np.int64)),
            size=pa.array(d.size.astype(np.int32)),
            topic=topic.cast(pa.string()),
            queue_id=pa.array(np.asarray(d.queue_id).astype(np.int32)),
            queue_offset=pa.array(np.asarray(d.queue_offset).astype(np.int64)),
            tags_code=pa.array(d.tags_code.astype(np.int64)),
            store_timestamp=pa.array(np.asarray(d.store_timestamp).astype(np.int64)),
            queued=pa.array(d.queued.astype(bool)),
        )

    def problems(no: int, found: list[Problem]) -> pa.RecordBatch:
        n = len(found)
        return batch_of(
            RECORDS,
            kind=pa.array(["p"] * n, pa.string()),
            split_no=pa.array([no] * n, pa.int32()),
            seq=pa.array(list(range(n)), pa.int32()),
            problem=pa.array([json.dumps(p.to_dict()) for p in found], pa.string()),
        )

    options = ScanOptions(keys=False, delays=delays)

    def decode(no: int, split: Split):
        scan = scan_range(split, options)
        if len(scan.columns):
            yield records(scan.columns)
        if scan.problems:
            yield problems(no, scan.problems)

    return decode


def _units_fn(queues: dict[tuple[str, int], str], file_size: int | None):
    """A queue's valid unit offsets."""

    def read(queue: tuple[str, int]):
        t, q = queue
        cq = ConsumeQueue.open(queues[queue], t, q, file_size)
        for chunk in cq.chunks():
            off = chunk.offset[chunk.valid_mask()]
            if len(off):
                n = len(off)
                yield pa.RecordBatch.from_arrays([pa.array([t] * n, pa.string()), pa.array([q] * n, pa.int32()), pa.array(off.astype(np.int64))], schema=UNITS)

    return read


@dataclass(frozen=True)
class _Plan:
    """What every group task needs to know about the store (small, shipped in the closure)."""

    root: str
    queues: dict[tuple[str, int], str]  # selected queue -> its directory
    order: dict[tuple[str, int], int]  # selected queue -> its position in the local engine's loop
    file_size: int | None
    extent: CommitLogExtent
    check_tags: bool
    scope: VerifyScope
    fillers: RepairHoles | None  # the holes a repair by rmqdump left: their filler units are listed, not checked


def _expected_path(plan: _Plan, t: str, qid: int, index: int, cq: ConsumeQueue | None) -> str:
    return cq.expected_path(index) if cq is not None else unit_path(os.path.join(plan.root, "consumequeue", t, str(qid)), plan.file_size, index)


def _group_fn(plan: _Plan):
    def check(key, table):  # no annotations: pyspark infers the UDF kind from them
        t, qid = key[0].as_py(), key[1].as_py()
        recs = table.filter(pc.is_valid(table.column("phys")))
        cols = {c: recs.column(c).to_numpy(zero_copy_only=False) for c in _REC_COLS}
        phys, first = np.unique(cols["phys"].astype(np.int64), return_index=True)
        topics_all = recs.column("topic").to_pylist()
        tmap: dict[str, int] = {}
        topic_id = np.array([tmap.setdefault(topics_all[i], len(tmap)) for i in first.tolist()], dtype=np.int32)
        records = RecordTable(
            phys=phys,
            size=cols["size"][first].astype(np.int32),
            topic_id=topic_id,
            queue_id=cols["queue_id"][first].astype(np.int32),
            queue_offset=cols["queue_offset"][first].astype(np.int64),
            tags_code=cols["tags_code"][first].astype(np.int64),
            store_timestamp=cols["store_timestamp"][first].astype(np.int64),
            queued=cols["queued"][first].astype(bool),
            topics=list(tmap),
        )
        rows: list[tuple] = []
        covered = np.zeros(len(records), dtype=bool)
        units = 0
        cq = None
        if (t, qid) in plan.queues:
            cq = ConsumeQueue.open(plan.queues[(t, qid)], t, qid, plan.file_size)
            where = cq_locator(cq)
            last_valid = cq.last_valid_index()
            prev, seen = -1, False
            for chunk in cq.chunks():
                if plan.fillers is not None:
                    chunk, taken = plan.fillers.take(chunk, t, qid, where)
                    for row in taken:
                        rows.append((3, plan.order[(t, qid)], 0, len(rows), json.dumps(row)))
                res = check_units(
                    chunk,
                    t,
                    qid,
                    records,
                    plan.extent,
                    last_valid_index=last_valid,
                    prev_offset=prev,
                    seen_real=seen,
                    cq_file_of=where,
                    check_tags=plan.check_tags,
                )
                prev, seen = res.last_offset, res.seen_real
                units += res.units
                covered[res.covered] = True
                for p in res.problems:
                    rows.append((0, plan.order[(t, qid)], 0, len(rows), json.dumps(p.to_dict())))
        mine = (records.topic_id == records.topic_code(t)) & (records.queue_id == qid)
        selected = plan.scope.selects(t, qid)
        if selected:
            for p in missing_units(records, covered, select=mine, cq_file_of=lambda tt, qq, ix: _expected_path(plan, tt, qq, ix, cq)):
                rows.append((1, p.phys_offset, 0, 0, json.dumps(p.to_dict())))
        n = len(rows)
        return pa.Table.from_arrays(
            [
                pa.array([r[0] for r in rows] + [2], pa.int32()),
                pa.array([r[1] for r in rows] + [0], pa.int64()),
                pa.array([r[2] for r in rows] + [0], pa.int64()),
                pa.array([r[3] for r in rows] + [0], pa.int32()),
                pa.array([r[4] for r in rows] + [None], pa.string()),
                pa.array([None] * n + [units], pa.int64()),
            ],
            schema=FINDINGS,
        )

    return check


def verify_spark(spark, store: Store, scope: VerifyScope, *, summary: VerifySummary | None = None, range_bytes: int = RANGE_BYTES) -> list[Problem]:
    """Every finding of `cq verify` over `scope`, in the local engine's order (rmqdump.checks.cqverify.verify)."""
    from pyspark.sql import functions as F

    s = summary if summary is not None else VerifySummary()
    if folds_on_driver(store):
        mapper = SparkMap(spark)
        return list(verify(store, topic=scope.topic, queue_id=scope.queue_id, check_crc=scope.check_crc, delays=scope.delays, summary=s, mapper=mapper, range_bytes=range_bytes))
    topic, queue_id, check_crc = scope.topic, scope.queue_id, scope.check_crc
    delays = scope.delays or DelayLevels.parse()
    queues = scope.queues(store)
    s.queues = len(queues)
    out = scope.layout_problems(store, queues)

    splits = commitlog_splits(store.commitlog, range_bytes, check_crc=check_crc)
    sc = spark.sparkContext
    with persisted(ranges_stage(spark, splits, _records_fn(delays), RECORDS)) as rec_all:
        cl_problems = rec_all.filter(F.col("kind") == "p").select("split_no", "seq", "problem").collect()
        records = rec_all.filter(F.col("kind") == "r")
        stats = records.agg(F.count(F.lit(1)).alias("n"), F.max(F.col("phys") + F.col("size")).alias("end")).collect()[0]
        s.messages = int(stats["n"])
        data_end = int(stats["end"] or 0)
        for r in sorted(cl_problems, key=lambda r: (r["split_no"], r["seq"])):
            out.append(Problem.from_dict(json.loads(r["problem"])))

        plan = _Plan(
            root=store.root,
            queues={(q.topic, q.queue_id): q.path for q in queues},
            order={(q.topic, q.queue_id): i for i, q in enumerate(queues)},
            file_size=store.cq_file_size,
            extent=CommitLogExtent.of(store.commitlog, data_end),
            check_tags=not (store.ext_queues or os.path.isdir(os.path.join(store.root, "consumequeue_ext"))),
            scope=scope,
            fillers=RepairHoles.of(store),
        )
        qrows = [(q.topic, q.queue_id) for q in queues]
        units = arrow_stage(spark, qrows, _units_fn(plan.queues, plan.file_size), UNITS, 2 * sc.defaultParallelism)
        rec = records.select(*_REC_COLS)
        hit = units.join(rec, units["offset"] == rec["phys"], "inner").select(F.col("u_topic").alias("k_topic"), F.col("u_queue").alias("k_queue"), *_REC_COLS)
        own = rec
        if topic is not None:
            own = own.filter(F.col("topic") == topic)
        if queue_id is not None:
            own = own.filter(F.col("queue_id") == queue_id)
        own = own.select(F.col("topic").alias("k_topic"), F.col("queue_id").alias("k_queue"), *_REC_COLS)
        marks = frame(spark, qrows, QUEUES).select(
            F.col("topic").alias("k_topic"), F.col("queue_id").alias("k_queue"), *[F.lit(None).cast(rec.schema[c].dataType).alias(c) for c in _REC_COLS]
        )
        nq = max(1, min(len(qrows) + 1, 4 * sc.defaultParallelism))
        grouped = hit.unionByName(own).unionByName(marks).repartition(nq, "k_topic", "k_queue").groupBy("k_topic", "k_queue")
        findings = grouped.applyInArrow(_group_fn(plan), spark_schema(FINDINGS)).collect()
    unit_rows = sorted((r for r in findings if r["section"] == 0), key=lambda r: (r["a"], r["seq"]))
    missing = sorted((r for r in findings if r["section"] == 1), key=lambda r: r["a"])
    s.units = sum(r["units"] for r in findings if r["section"] == 2)
    s.filler_units += [json.loads(r["problem"]) for r in sorted((r for r in findings if r["section"] == 3), key=lambda r: (r["a"], r["seq"]))]
    out.extend(Problem.from_dict(json.loads(r["problem"])) for r in unit_rows)
    out.extend(Problem.from_dict(json.loads(r["problem"])) for r in missing)
    for p in out:
        s.count(p)
    return out

