"""`rmqdump.spark`: the sql tables as DataFrames over a fleet, with the local tables' columns and types, each value the
store's truth (manifests, crash.json, the broker's consumerOffset.json); and the README's PySpark job runs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from conftest import REAL, ROOT, manifest, need_pyspark, store_root

from rmqdump.readers.configfiles import loads_fastjson
from rmqdump.sql.tables import TABLES

need_pyspark()

FLEET = ["rmq4-basic", "rmq4-crash", "rmq4-flags"]


@pytest.fixture(scope="module")
def stores():
    return [str(store_root(n)) for n in FLEET]


def queued(m: dict) -> bool:
    return m["sysFlag"] & 0xC in (0, 0x8)  # prepared and rolled-back transaction messages get no unit


def undispatched(name: str) -> set[int]:
    """Records without a unit: rmq4-crash's dispatch stopped after 1500 (crash.json); elsewhere the unqueued kinds."""
    if name == "rmq4-crash":
        done = set(json.loads((REAL / name / "crash.json").read_text())["dispatchedSeqs"])
        return {m["wroteOffset"] for m in manifest(name) if m["seq"] not in done}
    return {m["wroteOffset"] for m in manifest(name) if not queued(m)}


@pytest.mark.parametrize("table", ["messages", "units", "index_entries", "problems", "offsets", "compacted"])
def test_every_table_has_the_local_tables_columns_and_types(spark, stores, table):
    from pyspark.sql.pandas.types import to_arrow_schema

    import rmqdump.spark as api

    df = getattr(api, table)(spark, stores)
    want = [(c.name, c.type) for c in TABLES[table] if c.name != "body"]
    assert [(f.name, f.type) for f in to_arrow_schema(df.schema)] == want
    other = next(n for n, _ in reversed(want) if n != "broker")
    picked = getattr(api, table)(spark, stores, columns=[other, "broker"])  # only those, in the table's order
    assert picked.columns == sorted(["broker", other], key=[n for n, _ in want].index)


def test_messages_are_each_stores_manifest(spark, stores):
    from rmqdump.spark import messages

    cols = ["broker", "phys_offset", "total_size", "topic", "queue_id", "queue_offset", "store_timestamp", "uniq_key", "keys", "tags", "body_crc"]
    got = {(r["broker"], r["phys_offset"]): r for r in (x.asDict() for x in messages(spark, stores, columns=cols).collect())}
    want = {
        (n, m["wroteOffset"]): {
            "broker": n,
            "phys_offset": m["wroteOffset"],
            "total_size": m["wroteBytes"],
            "topic": m["topic"],
            "queue_id": m["queueId"],
            "queue_offset": m["logicsOffset"],
            "store_timestamp": m["storeTimestamp"],
            "uniq_key": m["uniqKey"],
            "keys": m["keys"],
            "tags": m["tags"],
            "body_crc": m["bodyCRC"],
        }
        for n in FLEET
        for m in manifest(n)
    }
    assert got == want


def test_units_and_their_status_are_the_dispatched_records(spark, stores):
    from rmqdump.spark import units

    rows = units(spark, stores, columns=["broker", "topic", "queue_id", "queue_offset", "phys_offset", "size", "status"]).collect()
    got = sorted((r.broker, r.topic, r.queue_id, r.queue_offset, r.phys_offset, r.size, r.status) for r in rows)
    want = sorted(
        (n, m["topic"], m["queueId"], m["logicsOffset"], m["wroteOffset"], m["wroteBytes"], "ok")
        for n in FLEET
        for m in manifest(n)
        if queued(m) and m["wroteOffset"] not in undispatched(n)
    )
    assert got == want


def test_problems_are_the_crash_undispatched_messages(spark, stores):
    from rmqdump.spark import problems

    rows = problems(spark, stores, columns=["broker", "code", "phys_offset"]).collect()
    assert sorted((r.broker, r.code, r.phys_offset) for r in rows) == sorted(("rmq4-crash", "cq_missing_unit", o) for o in undispatched("rmq4-crash"))


def test_offsets_are_the_brokers_consumer_offsets(spark, stores):
    from rmqdump.spark import offsets

    got = {
        (r.broker, r.group, r.topic, r.queue_id): r.committed
        for r in offsets(spark, stores, columns=["broker", "group", "topic", "queue_id", "committed"]).collect()
    }
    want = {}
    for n in FLEET:
        path = store_root(n) / "config" / "consumerOffset.json"
        if path.exists():
            for key, queues in loads_fastjson(path.read_text())["offsetTable"].items():
                topic, group = key.split("@", 1)
                want.update({(n, group, topic, int(q)): off for q, off in queues.items()})
    assert want and got == want


def test_index_entries_are_one_per_key_and_uniq_key_of_each_indexed_message(spark, stores):
    """The broker indexes topic#UNIQ_KEY and topic#each key of every dispatched record but rolled-back ones (the stores' README.txt)."""
    from collections import Counter

    from rmqdump.spark import index_entries

    rows = index_entries(spark, stores, columns=["broker", "phys_offset"]).collect()
    got = Counter((r.broker, r.phys_offset) for r in rows)
    want = Counter()
    for n in FLEET:
        lost = undispatched(n) if n == "rmq4-crash" else set()
        for m in manifest(n):
            if m["wroteOffset"] not in lost and m["sysFlag"] & 0xC != 0xC:
                k = len(m["keys"]) + (m["uniqKey"] is not None)
                if k:
                    want[(n, m["wroteOffset"])] = k
    assert got == want


def test_compacted_is_the_consumer_view_the_broker_gives(spark):
    """rmq53-compaction: the compacted table is truth.json's consumerView of each queue, row for row (part: at or before
    the queue's compaction checkpoint, or after it)."""
    from rmqdump.spark import compacted

    t = json.loads((REAL / "rmq53-compaction" / "truth.json").read_text())
    cols = ["broker", "topic", "queue_id", "queue_offset", "keys", "uniq_key", "phys_offset", "compaction_log_offset", "part", "size", "body_length"]
    got = sorted(tuple(r) for r in compacted(spark, [str(store_root("rmq53-compaction"))], columns=cols).collect())
    want = sorted(
        (
            "rmq53-compaction",
            t["compactionTopic"]["name"],
            int(q),
            v["queueOffset"],
            v["keys"],
            v["uniqKey"],
            v["commitLogWroteOffset"],
            v["compactionLogOffset"],
            "compacted" if v["queueOffset"] <= tq["checkpointOffset"] else "after_checkpoint",
            v["size"],
            v["bodyLength"],
        )
        for q, tq in t["queues"].items()
        for v in tq["consumerView"]
    )
    assert want and got == want


def _readme_job() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## Your own Spark jobs") :]
    return re.search(r"```python\n(.*?)\n```", section, flags=re.S).group(1)


def test_readme_pyspark_job_runs_and_counts_each_brokers_truth():
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-c", _readme_job()], cwd=str(ROOT), env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    got = [line.split() for line in r.stdout.splitlines()]
    names = sorted(p.parent.name for p in REAL.glob("rmq4-*/store"))
    assert got == [[n, str(len(manifest(n))), str(len(undispatched(n)))] for n in names]
