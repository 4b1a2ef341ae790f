"""The compacted view as columns of `export` and `sql`'s messages, on rmq53-compaction (RocketMQ 5.3.3's CompactionStore).

Every put of the store's manifest is one exported row; its `compaction_part` and `compaction_log_offset` are
what the store's truth.json says a consumer of the compacted queue is served (`consumerView`, read back by
the broker after reopening): compacted or after_checkpoint with the copy's compaction-log offset, not_served
for every other put of the compaction topic, null for the normal topic. Both engines, and `sql`.
"""

from __future__ import annotations

import json

import pyarrow.dataset as ds
import pytest
from conftest import REAL, copy_store, jsonl, need_pyspark, run, store_root

from rmqdump.schemas import SparseConsumeQueueUnit

NAME = "rmq53-compaction"
UNIT = SparseConsumeQueueUnit.sizeof()


def truth() -> dict:
    with open(REAL / NAME / "truth.json", encoding="utf-8") as f:
        return json.load(f)


def expected() -> dict[int, tuple]:
    """phys offset -> (topic, compaction_part, compaction_log_offset) for every put of the manifest."""
    t = truth()
    served = {}
    for qid, q in t["queues"].items():
        for v in q["consumerView"]:
            part = "compacted" if v["queueOffset"] <= q["checkpointOffset"] else "after_checkpoint"
            served[v["commitLogWroteOffset"]] = (int(qid), v["queueOffset"], part, v["compactionLogOffset"])
    out = {}
    with open(REAL / NAME / "manifest.jsonl", encoding="utf-8") as f:
        for p in map(json.loads, f):
            if p["kind"] != "put":
                continue
            if p["topic"] != t["compactionTopic"]["name"]:
                out[p["wroteOffset"]] = (p["topic"], None, None)
            elif p["wroteOffset"] in served:
                qid, qo, part, log = served[p["wroteOffset"]]
                assert (qid, qo) == (p["queueId"], p["queueOffset"])
                out[p["wroteOffset"]] = (p["topic"], part, log)
            else:
                out[p["wroteOffset"]] = (p["topic"], "not_served", None)
    assert sum(v[1] in ("compacted", "after_checkpoint") for v in out.values()) == t["counts"]["consumerViewMessages"]
    return out


def rows_of(table) -> dict[int, tuple]:
    d = table.to_pydict()
    return {o: (t, p, c) for o, t, p, c in zip(d["phys_offset"], d["topic"], d["compaction_part"], d["compaction_log_offset"], strict=True)}


def test_export_compaction_columns_equal_truth(tmp_path):
    out = tmp_path / "out"
    res = run("export", "-s", store_root(NAME), "-o", out, "-j", "2", "--range-bytes", "256K")
    assert res.exit_code == 0, res.output
    assert rows_of(ds.dataset(out, format="parquet", partitioning="hive").to_table()) == expected()


def test_export_jsonl_compaction_columns(tmp_path):
    out = tmp_path / "out"
    assert run("export", "-s", store_root(NAME), "-o", out, "-f", "jsonl").exit_code == 0
    rows = [json.loads(line) for f in sorted(out.rglob("*.jsonl")) for line in f.read_text().splitlines()]
    assert {r["phys_offset"]: (r["topic"], r["compaction_part"], r["compaction_log_offset"]) for r in rows} == expected()


def test_sql_messages_compaction_columns():
    q = "SELECT phys_offset, topic, compaction_part, compaction_log_offset FROM messages"
    res = run("sql", "-s", store_root(NAME), "-f", "jsonl", q)
    assert res.exit_code == 0, res.output
    got = {r["phys_offset"]: (r["topic"], r["compaction_part"], r["compaction_log_offset"]) for r in jsonl(res.stdout)}
    assert got == expected()


def test_a_unit_lost_from_the_compaction_cq_makes_its_message_not_served(tmp_path):
    """Zero the queue's last SparseConsumeQueue unit (the queue then ends one unit sooner): the export says
    that message is no longer served, every other row unchanged."""
    t = truth()
    root = copy_store(NAME, tmp_path)
    q = t["queues"]["1"]
    f = [f for f in q["compactionCqFiles"] if any(u["size"] > 0 and u["compactionLogOffset"] >= 0 for u in f["units"])][-1]
    last = [u for u in f["units"] if u["size"] > 0 and u["compactionLogOffset"] >= 0][-1]
    path = root / f["file"]
    data = bytearray(path.read_bytes())
    data[last["pos"] : last["pos"] + UNIT] = bytes(UNIT)
    path.write_bytes(bytes(data))
    want = expected()
    gone = [v["commitLogWroteOffset"] for v in q["consumerView"] if v["compactionLogOffset"] == last["compactionLogOffset"]]
    assert len(gone) == 1
    want[gone[0]] = (want[gone[0]][0], "not_served", None)
    out = tmp_path / "out"
    run("export", "-s", root, "-o", out)
    assert rows_of(ds.dataset(out, format="parquet", partitioning="hive").to_table()) == want


def test_other_stores_have_null_compaction_columns(tmp_path):
    out = tmp_path / "out"
    assert run("export", "-s", store_root("rmq4-basic"), "-o", out).exit_code == 0
    table = ds.dataset(out, format="parquet", partitioning="hive").to_table(columns=["compaction_part", "compaction_log_offset"])
    assert table.num_rows > 0
    assert table.column("compaction_part").null_count == table.num_rows
    assert table.column("compaction_log_offset").null_count == table.num_rows


@pytest.mark.parametrize("writer", ["spark", "arrow"])
def test_spark_export_compaction_columns_equal_truth(tmp_path, writer):
    need_pyspark()
    from conftest import shared_spark

    from rmqdump.engines.spark.export import export_spark
    from rmqdump.scan.splits import resolve_stores

    out = tmp_path / "out"
    res = export_spark(shared_spark(), resolve_stores([str(store_root(NAME))]), str(out), writer=writer, range_bytes=256 << 10)
    assert res.problem_count == 0
    assert rows_of(ds.dataset(out, format="parquet", partitioning="hive").to_table()) == expected()


def test_pyspark_api_messages_compaction_columns():
    need_pyspark()
    from conftest import shared_spark

    from rmqdump.spark import messages

    rows = messages(shared_spark(), [str(store_root(NAME))], columns=["phys_offset", "topic", "compaction_part", "compaction_log_offset"]).collect()
    assert {r.phys_offset: (r.topic, r.compaction_part, r.compaction_log_offset) for r in rows} == expected()
