"""`sql --engine spark` on a standalone cluster (master and two workers on 127.0.0.1, rmqdump shipped as a zip to
executors that cannot import it otherwise): a fleet's rows equal DuckDB's and the stores' truth."""

from __future__ import annotations

import json
import os
from collections import Counter

import pytest
from conftest import REAL, ROOT, jsonl, manifest, need_pyspark, run, run_proc, store_root
from test_spark_cluster import _spark_args, cluster, executor_python  # noqa: F401  (the cluster fixtures)

need_pyspark()

pytestmark = pytest.mark.cluster

FLEET = ["rmq4-crash", "rmq4-flags", "rmq53-v2"]
QUERY = (
    "SELECT m.broker, m.topic, count(*) AS n, sum(CASE WHEN u.phys_offset IS NULL THEN 1 ELSE 0 END) AS undispatched "
    "FROM messages m LEFT JOIN units u ON u.broker = m.broker AND u.phys_offset = m.phys_offset GROUP BY m.broker, m.topic"
)


def truth() -> Counter:
    """(broker, topic) -> (messages, messages without a unit), from the manifests and rmq4-crash's crash.json."""
    done = set(json.loads((REAL / "rmq4-crash" / "crash.json").read_text())["dispatchedSeqs"])
    out: dict = {}
    for n in FLEET:
        for m in manifest(n):
            lost = (m["seq"] not in done) if n == "rmq4-crash" else m["sysFlag"] & 0xC in (0x4, 0xC)
            k = (n, m["topic"])
            a, b = out.get(k, (0, 0))
            out[k] = (a + 1, b + int(lost))
    return out


def test_sql_on_standalone_cluster(cluster, executor_python, tmp_path):  # noqa: F811
    url, _ = cluster
    args = ["sql", *[a for n in FLEET for a in ("-s", str(store_root(n)))], "-f", "jsonl"]
    env = dict(os.environ, PYTHONPATH=str(ROOT))  # this checkout's rmqdump on the driver, which zips it for the executors
    r = run_proc(*args, *_spark_args(url, executor_python), QUERY, cwd=str(tmp_path), env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    got = sorted(jsonl(r.stdout), key=lambda d: (d["broker"], d["topic"]))
    duck = run(*args, QUERY)
    assert got == sorted(jsonl(duck.stdout), key=lambda d: (d["broker"], d["topic"]))
    assert {(d["broker"], d["topic"]): (d["n"], d["undispatched"]) for d in got} == truth()
