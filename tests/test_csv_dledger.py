"""`commitlog -f csv` carries the DLedger entry's index and term as its last two columns, empty for a plain CommitLog.

Truth: rmq53-dledger's manifest (one entry per put, numbered from 0 in put order: the put's seq) and its README (term
0, the single node's only term); rmq4-basic's manifest for a plain store.
"""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import pytest
from conftest import REAL, manifest, run, store_root, unpack_store

NAME = "rmq53-dledger"
TERM = json.loads(re.search(r"^\{\n.*?^\}$", (REAL / NAME / "README.txt").read_text(encoding="utf-8"), flags=re.M | re.S).group(0))["dledgerTerm"]


@pytest.fixture(scope="module")
def unpacked(tmp_path_factory) -> Path:
    return unpack_store(NAME, tmp_path_factory.mktemp("dledger"))


def _rows(text: str) -> list[dict]:
    return list(csv.DictReader(io.StringIO(text)))


@pytest.mark.parametrize("body", [None, "text"])  # the compiled row writer, and Python's csv.writer (with bodies)
def test_dledger_commitlog_csv_has_each_entry_index_and_term(unpacked, body):
    r = run("commitlog", "-s", unpacked, "-f", "csv", *(["--body", body] if body else []))
    assert r.exit_code == 0, r.stderr
    rows = _rows(r.stdout)
    assert list(rows[0])[-2:] == ["dledger_index", "dledger_term"]
    puts = sorted((m for m in manifest(NAME) if m["kind"] == "put"), key=lambda m: m["seq"])
    got = [(int(d["phys_offset"]), d["msg_id"], int(d["dledger_index"]), int(d["dledger_term"])) for d in rows if d["kind"] == "message"]
    assert got == [(p["wroteOffset"], p["msgId"], p["seq"], TERM) for p in puts]
    assert [d for d in rows if d["kind"] == "problem"] == []


def test_plain_commitlog_csv_leaves_the_entry_columns_empty():
    r = run("commitlog", "-s", store_root("rmq4-basic"), "-f", "csv")
    assert r.exit_code == 0, r.stderr
    rows = [d for d in _rows(r.stdout) if d["kind"] == "message"]
    assert sorted(int(d["phys_offset"]) for d in rows) == sorted(m["wroteOffset"] for m in manifest("rmq4-basic"))
    assert all(d["dledger_index"] == "" and d["dledger_term"] == "" and None not in d for d in rows)
