"""The Spark engine's own problem codes, each produced by the input that causes it (one line, exit 2 where a command is run)."""

from __future__ import annotations

import sys

import pytest
from conftest import REAL, need_pyspark, run

from rmqdump.common.problems import InputError

STORE = REAL / "rmq4-flags" / "store"


def test_bad_spark_conf(tmp_path):
    r = run("export", "-s", STORE, "-o", tmp_path / "out", "--engine", "spark", "--spark-conf", "novalue")
    assert r.exit_code == 2 and r.stderr.strip().splitlines() == ["rmqdump: bad_spark_conf: novalue: expected KEY=VALUE, e.g. spark.executor.memory=4g"]
    assert not (tmp_path / "out").exists()


def test_pyspark_missing(tmp_path, monkeypatch):
    """Without PySpark importable (None in sys.modules makes `import pyspark` fail), --engine spark is one line naming the extra."""
    for name in [m for m in sys.modules if m == "pyspark" or m.startswith("pyspark.")] + ["pyspark"]:
        monkeypatch.setitem(sys.modules, name, None)
    r = run("cq", "verify", "-s", STORE, "--engine", "spark")
    assert r.exit_code == 2 and r.stderr.strip().splitlines() == [
        "rmqdump: pyspark_missing: pyspark: --engine spark needs PySpark: pip install 'rmqdump[spark]'"
    ]


def test_spark_unsupported_library_options(tmp_path):
    """index_after / to_offset are options of the local engine's library only: the Spark build refuses them before any job."""
    need_pyspark()
    from rmqdump.builders.rebuild import RebuildOptions, RebuildReport
    from rmqdump.builders.settings import resolve
    from rmqdump.engines.spark.rebuild import build_into_spark
    from rmqdump.readers.commitlog import CommitLog

    settings = resolve(str(STORE), cq_units=100, hash_slots=64, index_entries=256)  # rmq4-flags' README.txt
    opts = RebuildOptions(to_offset=4096)
    report = RebuildReport(str(STORE), str(tmp_path / "out"), settings, opts)
    with pytest.raises(InputError) as e:
        build_into_spark(None, str(tmp_path), CommitLog.open(str(STORE / "commitlog")), settings, opts, report, 1 << 20)  # refused before Spark is used
    assert (e.value.code, e.value.path) == ("spark_unsupported", str(STORE))


def test_spark_writer_needs_shared_path(tmp_path):
    """--spark-writer arrow writes with pyarrow on each executor: a URI (no shared path) is refused before any job."""
    need_pyspark()
    from conftest import shared_spark

    from rmqdump.engines.spark.export import export_spark
    from rmqdump.scan.splits import StoreRef

    with pytest.raises(InputError) as e:
        export_spark(shared_spark(), [StoreRef("rmq4-flags", str(STORE))], "s3a://bucket/out", writer="arrow")
    assert (e.value.code, e.value.path) == ("spark_writer_needs_shared_path", "s3a://bucket/out")
