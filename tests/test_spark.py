"""The Spark engine on a real SparkSession (local[2]): same rows, same problems as the local engine."""

from __future__ import annotations

import json

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
