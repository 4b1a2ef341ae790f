"""The Spark tests never skip silently under CI: one helper (conftest.need_pyspark) decides, as need_oracle does."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from conftest import need_pyspark


def _outcome():
    """What need_pyspark() raises (a skip caught here too: it must not skip this test)."""
    try:
        need_pyspark()
    except BaseException as e:  # pytest's Failed and Skipped are BaseExceptions
        return e
    return None


def test_without_pyspark_ci_fails_and_elsewhere_skips(monkeypatch):
    monkeypatch.setitem(sys.modules, "pyspark", None)  # `import pyspark` raises ImportError
    monkeypatch.setenv("CI", "1")
    got = _outcome()
    assert isinstance(got, pytest.fail.Exception) and "pyspark is not installed" in str(got)
    monkeypatch.delenv("CI")
    assert isinstance(_outcome(), pytest.skip.Exception)


def test_every_spark_test_asks_the_helper():
    """No test module skips on a missing pyspark by itself (pytest.importorskip skips under CI too)."""
    here = Path(__file__).parent
    own = [p.name for p in here.glob("*.py") if re.search(r"importorskip\(\s*[\"']pyspark", p.read_text(encoding="utf-8"))]
    assert own == []
    users = [p.name for p in here.glob("test_*.py") if "need_pyspark()" in p.read_text(encoding="utf-8")]
    assert "test_spark_api.py" in users and "test_spark_sql.py" in users
