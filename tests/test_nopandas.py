"""Local commands run without loading pandas, which pyarrow would otherwise import at their start (rmqdump.cli.nopandas).

pandas is installed here (the `spark` extra), as on many operators' machines: a
command run as the operator runs it must not load it, and still write what the
broker wrote; a command line that names Spark keeps it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import subprocess
import sys

import pyarrow.parquet as pq
import pytest
from conftest import REAL, manifest

from rmqdump.cli.nopandas import keep_out, names_spark

# run the console script's main() (what `rmqdump` and `python -m rmqdump` run) and say at exit whether pandas was loaded
_PROBE = """
import atexit, sys
atexit.register(lambda: sys.stderr.write("pandas loaded: %s\\n" % ("pandas" in sys.modules)))
sys.argv = ["rmqdump", *sys.argv[1:]]
from rmqdump.cli.entry import main
main()
"""


def _run(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _PROBE, *map(str, args)], capture_output=True, text=True, timeout=300)


def test_pandas_is_installed_here():
    # what the other tests mean rests on it: without pandas nothing would load it anyway
    assert importlib.util.find_spec("pandas") is not None, "install the spark extra (pip install -e '.[test,spark]'): it brings pandas"


def test_export_runs_without_loading_pandas_and_writes_every_put(tmp_path):
    name = "rmq53-v2"
    out = tmp_path / "out.parquet"
    r = _run("export", "-s", REAL / name / "store", "-o", out, "--body", "raw")
    assert r.returncode == 0, r.stderr
    assert r.stderr.strip().splitlines()[-1] == "pandas loaded: False", r.stderr
    t = pq.read_table(out, columns=["phys_offset", "total_size", "body"]).sort_by("phys_offset").to_pydict()
    puts = sorted(manifest(name), key=lambda m: m["wroteOffset"])
    assert t["phys_offset"] == [m["wroteOffset"] for m in puts]
    assert t["total_size"] == [m["wroteBytes"] for m in puts]
    assert [hashlib.sha256(b).hexdigest() for b in t["body"]] == [m["body_sha256"] for m in puts]


def test_a_command_line_naming_spark_keeps_pandas_importable(monkeypatch):
    assert names_spark(["cq", "verify", "-s", "S", "--engine", "spark"])
    assert names_spark(["sql", "--engine=spark", "q"]) and names_spark(["sql", "--engine", "SPARK", "q"])
    assert names_spark(["export", "--master", "spark://h:7077"])
    assert not names_spark(["salvage", "STORE", "--out", "D", "--topic", "orders"])
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))  # whatever keep_out installs goes with the test
    monkeypatch.delitem(sys.modules, "pandas", raising=False)
    assert keep_out(["cq", "verify", "--engine", "spark"]) is False
    assert keep_out(["salvage", "S", "--out", "D"]) is True
    assert importlib.util.find_spec("numpy") is not None  # other imports still resolve
    with pytest.raises(ImportError, match="kept out"):
        __import__("pandas")
