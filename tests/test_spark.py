"""The Spark engine on a real SparkSession (local[2]): same rows, same problems as the local engine."""

from __future__ import annotations

import json
import os

import pytest
from conftest import REAL, STORES, copy_store, manifest, run
from test_export import check_against_manifest, read_dataset, read_jsonl, reader_rows

from rmqdump.export import export_local
from rmqdump.splits import StoreRef, resolve_stores

pytest.importorskip("pyspark")


@pytest.fixture(scope="module")
def spark():
    from rmqdump.spark.session import build_session

    s = build_session("local[2]", ["spark.sql.shuffle.partitions=4"], driver_memory="1g")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def fleet():
    return resolve_stores([str(REAL / "*" / "store")])


@pytest.fixture(scope="module")
def spark_rows(spark, fleet, tmp_path_factory):
    from rmqdump.spark.export import export_spark

    out = tmp_path_factory.mktemp("spark") / "fleet"
    res = export_spark(spark, fleet, str(out), with_body=True)
    assert res.problem_count == 0
    assert res.messages == sum(len(manifest(s)) for s in STORES)
    return read_dataset(out)


@pytest.mark.parametrize("name", STORES)
def test_spark_parquet_equals_manifest(spark_rows, name):
    rows = [r for r in spark_rows if r["broker"] == name]
    check_against_manifest(name, rows)
    assert rows == reader_rows(name, with_body=True)


def test_spark_tiny_splits_same_rows(spark, fleet, spark_rows, tmp_path):
    """Ranges of 4 KiB over every real store: every record once, none lost, none twice."""
    from rmqdump.spark.export import export_spark

    res = export_spark(spark, fleet, str(tmp_path / "tiny"), with_body=True, split_size=4096)
    assert res.splits > 1000
    tiny = read_dataset(tmp_path / "tiny")
    assert len({(r["broker"], r["phys_offset"]) for r in tiny}) == len(tiny)
    assert tiny == spark_rows


def test_spark_jsonl_equals_local_jsonl(spark, tmp_path):
    from rmqdump.spark.export import export_spark

    stores = [StoreRef("rmq53-v2", str(REAL / "rmq53-v2" / "store")), StoreRef("rmq4-flags", str(REAL / "rmq4-flags" / "store"))]
    export_spark(spark, stores, str(tmp_path / "s"), fmt="jsonl", with_body=True, split_size=16384)
    export_local(stores, str(tmp_path / "l"), fmt="jsonl", with_body=True)
    assert read_jsonl(tmp_path / "s") == read_jsonl(tmp_path / "l")
    lines = lambda d: sorted(line for f in d.rglob("part-*") for line in f.read_text(encoding="utf-8").splitlines())  # noqa: E731
    assert lines(tmp_path / "s") == lines(tmp_path / "l")
    assert {p.name for p in (tmp_path / "s").iterdir() if p.is_dir()} == {p.name for p in (tmp_path / "l").iterdir() if p.is_dir()}


def test_spark_damaged_store_same_rows_and_problems(spark, tmp_path):
    from rmqdump.spark.export import export_spark

    root = copy_store("rmq4-basic", tmp_path)
    f = root / "commitlog" / f"{131072:020d}"
    with open(f, "r+b") as fh:  # a torn stretch in the middle of the second file
        fh.seek(40000)
        fh.write(b"\xee" * 3000)
    stores = [StoreRef("rmq4-basic", str(root))]
    local = export_local(stores, str(tmp_path / "l"))
    sp = export_spark(spark, stores, str(tmp_path / "s"), split_size=8192)
    assert local.problem_count > 0
    assert sp.problems == local.problems and sp.problem_count == local.problem_count
    assert read_dataset(tmp_path / "s") == read_dataset(tmp_path / "l") == reader_rows("rmq4-basic", root)


def test_cli_engine_spark(spark, tmp_path):
    """The command joins the running session (and leaves it running)."""
    out = tmp_path / "o"
    r = run("export", "-s", REAL / "rmq5-basic" / "store", "-o", out, "--engine", "spark")
    assert r.exit_code == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["engine"] == "spark" and summary["messages"] == len(manifest("rmq5-basic"))
    check_against_manifest("rmq5-basic", read_dataset(out))
    assert not spark.sparkContext._jsc.sc().isStopped()
    r = run("export", "-s", REAL / "rmq5-basic" / "store", "-o", out, "--engine", "spark")
    assert r.exit_code == 2 and "output_exists" in r.stderr


# cq verify --engine spark ------------------------------------------------------------------


def _verify_both(spark, root, **kw):
    from rmqdump.cqverify import VerifySummary, problem_dict, verify
    from rmqdump.spark.verify import verify_spark
    from rmqdump.store import Store

    s1, s2 = VerifySummary(), VerifySummary()
    local = [problem_dict(p) for p in verify(Store.open(root), summary=s1, **kw)]
    sp = [problem_dict(p) for p in verify_spark(spark, Store.open(root), summary=s2, split_size=8192, **kw)]
    key = lambda d: json.dumps(d, sort_keys=True)  # noqa: E731
    assert sorted(sp, key=key) == sorted(local, key=key)
    assert s1.to_dict() == s2.to_dict() and s1.codes == s2.codes
    return local, s2


@pytest.mark.parametrize("name", STORES)
def test_spark_verify_equals_local_on_real_stores(spark, name):
    found, summary = _verify_both(spark, REAL / name / "store")
    assert summary.messages == len(manifest(name))
    if name == "rmq4-crash":  # the 500 undispatched messages (crash.json)
        assert {p["code"] for p in found} == {"cq_missing_unit"} and len(found) == 500
    else:
        assert found == []


def _patch(path, pos, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(pos)
        f.write(data)


def test_spark_verify_equals_local_on_damaged_store(spark, tmp_path):
    root = copy_store("rmq4-basic", tmp_path)
    cq = root / "consumequeue"
    queues = sorted((p for p in cq.glob("*/*") if len(list(p.iterdir())) > 1), key=str)
    q0, q1, q2 = queues[0], queues[1], queues[2]
    f0 = sorted(q0.iterdir())[0]
    _patch(f0, 5 * 20 + 7, b"\x13")  # a unit's offset no longer a record start
    _patch(f0, 9 * 20 + 8, (77).to_bytes(4, "big"))  # a unit's size
    _patch(f0, 30 * 20, bytes(20))  # a hole
    with open(sorted(q1.iterdir())[0], "rb") as fh:
        foreign = fh.read(20)
    _patch(sorted(q2.iterdir())[0], 3 * 20, foreign)  # a unit pointing at another queue's record
    os.remove(sorted(q1.iterdir())[1])  # a missing CQ file in the middle of a queue
    cl = sorted((root / "commitlog").iterdir())[5]
    _patch(cl, 50000, b"\xee" * 3000)  # torn CommitLog bytes
    found, _ = _verify_both(spark, root)
    codes = {p["code"] for p in found}
    assert {"cq_not_message_start", "cq_size_mismatch", "cq_hole", "cq_missing_unit"} <= codes
    assert {"bad_magic", "size_mismatch", "bad_total_size", "record_past_end", "body_crc_mismatch"} & codes
    assert {"cq_topic_mismatch", "cq_queue_mismatch"} & codes
    _verify_both(spark, root, topic=q2.parent.name)
