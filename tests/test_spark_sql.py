"""`sql --engine spark` (local[2]): for every real store and for all of them as one fleet, each query gives the
same rows as DuckDB, and where the store's truth says what the rows must be (the manifests, rmq4-crash's
crash.json), that too."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from conftest import HEALTHY, REAL, STORES, jsonl, manifest, need_pyspark, run, store_root

need_pyspark()

NAMES = sorted(p.parent.name for p in REAL.glob("*/store"))
FLEET = str(REAL / "*" / "store")
KEY = "k1_0"


def window(name: str) -> tuple[int, int]:
    """The middle half of a store's put times (its manifest's storeTimestamps)."""
    ts = sorted(m["storeTimestamp"] for m in manifest(name) if "storeTimestamp" in m)
    return ts[len(ts) // 4], ts[3 * len(ts) // 4]


def queries(names: list[str]) -> dict[str, str]:
    """The queries, in SQL both engines take (no DuckDB- or Spark-only syntax)."""
    when = " OR ".join(f"(broker = '{n}' AND store_timestamp >= {lo} AND store_timestamp < {hi})" for n in names for lo, hi in [window(n)])
    return {
        "counts": "SELECT broker, topic, queue_id, count(*) AS n FROM messages GROUP BY broker, topic, queue_id",
        "window": f"SELECT broker, count(*) AS n, min(phys_offset) AS first, max(store_timestamp) AS last FROM messages WHERE {when} GROUP BY broker",
        "key": f"SELECT broker, phys_offset, uniq_key, topic FROM messages WHERE array_contains(keys, '{KEY}')",
        "undispatched": "SELECT m.broker, m.topic, m.phys_offset FROM messages m "
        "WHERE NOT EXISTS (SELECT 1 FROM units u WHERE u.broker = m.broker AND u.phys_offset = m.phys_offset)",
        "problems": "SELECT broker, code, count(*) AS n FROM problems GROUP BY broker, code",
    }


FLEET_ONLY = {  # the other tables, over the fleet
    "status": "SELECT broker, status, count(*) AS n, sum(size) AS bytes FROM units GROUP BY broker, status",
    "index": "SELECT broker, count(*) AS n, max(entry) AS hi, sum(CAST(slot AS BIGINT)) AS s FROM index_entries GROUP BY broker",
    "key_hash": f"SELECT broker, count(*) AS n FROM index_entries WHERE key_hash = rmq_key_hash('TopicTest', '{KEY}') GROUP BY broker",
    "offsets": "SELECT broker, topic, queue_id, committed, lag FROM offsets",
    "compacted": "SELECT broker, topic, count(*) AS n, max(queue_offset) AS hi FROM compacted GROUP BY broker, topic",
}


def rows(stores: str, query: str, *engine: str) -> list[dict]:
    r = run("sql", "-s", stores, "-f", "jsonl", *engine, query)
    assert r.exit_code == 0, r.stderr[-2000:]
    return jsonl(r.stdout)


def both(stores: str, query: str) -> list[dict]:
    """The rows of DuckDB and of Spark (local[2]), the same rows; returned sorted."""
    key = lambda d: json.dumps(d, sort_keys=True)  # noqa: E731
    duck = sorted(rows(stores, query), key=key)
    spark = sorted(rows(stores, query, "--engine", "spark", "--master", "local[2]"), key=key)
    assert spark == duck, query
    return duck


def records(name: str) -> list[dict]:
    """The CommitLog records a store's manifest lists (STORES: each proven record by record in test_commitlog_decode)."""
    return list(manifest(name))


def truth(name: str, what: str):
    """What a query's rows must say for one of STORES, from its manifest (and crash.json)."""
    ms = records(name)
    if what == "counts":
        return Counter((m["topic"], m["queueId"]) for m in ms)
    if what == "window":
        lo, hi = window(name)
        return sum(lo <= m["storeTimestamp"] < hi for m in ms)
    if what == "key":
        return sorted((m["wroteOffset"], m["uniqKey"]) for m in ms if KEY in m["keys"])
    if what == "undispatched":
        if name == "rmq4-crash":  # dispatch stopped after 1500 messages: the others have no unit
            done = set(json.loads((REAL / name / "crash.json").read_text())["dispatchedSeqs"])
            return sorted(m["wroteOffset"] for m in ms if m["seq"] not in done)
        return sorted(m["wroteOffset"] for m in ms if m["sysFlag"] & 0xC in (0x4, 0xC))  # prepared and rolled back: never queued
    if what == "problems":
        if name == "rmq4-crash":  # the messages put but never dispatched have no unit
            crash = json.loads((REAL / name / "crash.json").read_text())
            return {"cq_missing_unit": crash["messagesPut"] - len(crash["dispatchedSeqs"])}
        return {}
    raise KeyError(what)


def check_truth(name: str, what: str, got: list[dict]) -> None:
    mine = [r for r in got if r["broker"] == name]
    want = truth(name, what)
    if what == "counts":
        assert Counter({(r["topic"], r["queue_id"]): r["n"] for r in mine}) == want
    elif what == "window":
        assert sum(r["n"] for r in mine) == want and want > 0
    elif what == "key":
        assert sorted((r["phys_offset"], r["uniq_key"]) for r in mine) == want
    elif what == "undispatched":
        assert sorted(r["phys_offset"] for r in mine) == want
    elif what == "problems":
        assert {r["code"]: r["n"] for r in mine} == want


@pytest.mark.parametrize("name", NAMES)
def test_each_store_same_rows_on_both_engines(spark, name):
    got = {what: both(str(store_root(name)), q) for what, q in queries([name]).items()}
    assert got["counts"] and all(r["broker"] == name for rs in got.values() for r in rs)
    if name in STORES:
        for what, rs in got.items():
            check_truth(name, what, rs)


@pytest.fixture(scope="module")
def fleet_rows(spark):
    return {what: both(FLEET, q) for what, q in {**queries(NAMES), **FLEET_ONLY}.items()}


def test_fleet_same_rows_on_both_engines_and_every_broker_answers(fleet_rows):
    assert {r["broker"] for r in fleet_rows["counts"]} == set(NAMES)
    assert {r["broker"] for r in fleet_rows["window"]} == set(NAMES)
    assert {r["broker"] for r in fleet_rows["status"]} >= set(HEALTHY)
    assert {r["broker"] for r in fleet_rows["index"]} >= set(STORES)
    assert fleet_rows["compacted"]


@pytest.mark.parametrize("what", ["counts", "window", "key", "undispatched", "problems"])
def test_fleet_rows_are_each_stores_truth(fleet_rows, what):
    for name in STORES:
        check_truth(name, what, fleet_rows[what])
    if what == "counts":  # nothing else: the fleet's messages are its stores' messages
        assert sum(r["n"] for r in fleet_rows["counts"] if r["broker"] in STORES) == sum(len(records(n)) for n in STORES)


def test_fleet_unit_status_is_the_verify_finding_at_the_unit(fleet_rows):
    """rmq53-damaged-zeroed-page: the units cq verify flags carry its code (the 11 units pointing into the zeroed page
    and the one with a wrong tags code); clean stores' units are all ok (a unit per queued manifest record)."""
    status = {(r["broker"], r["status"]): r["n"] for r in fleet_rows["status"]}
    problems = {(r["broker"], r["code"]): r["n"] for r in fleet_rows["problems"]}
    for code in ("cq_not_message_start", "cq_tags_code_mismatch"):
        assert status[("rmq53-damaged-zeroed-page", code)] == problems[("rmq53-damaged-zeroed-page", code)]
    for name in HEALTHY:
        queued = sum(1 for m in records(name) if m["sysFlag"] & 0xC in (0, 0x8))
        assert status[(name, "ok")] == queued


def _dispatched(name: str, queued: bool = True) -> list[dict]:
    """The manifest records the broker dispatched: on rmq4-crash only those before the crash (crash.json); queued: only
    those given a ConsumeQueue unit (not prepared or rolled-back transaction records)."""
    ms = [m for m in records(name) if m["sysFlag"] & 0xC in (0, 0x8) or not queued]
    if name == "rmq4-crash":
        done = set(json.loads((REAL / name / "crash.json").read_text())["dispatchedSeqs"])
        ms = [m for m in ms if m["seq"] in done]
    return ms


def test_fleet_unit_status_of_the_crash_is_its_dispatched_records(fleet_rows):
    """rmq4-crash: every unit the broker wrote before the crash is ok, and there is no other (crash.json)."""
    status = {r["status"]: r["n"] for r in fleet_rows["status"] if r["broker"] == "rmq4-crash"}
    assert status == {"ok": len(_dispatched("rmq4-crash"))}


def test_fleet_index_entries_are_each_indexed_key_and_uniq_key(fleet_rows):
    """The broker indexes topic#UNIQ_KEY and topic#each key of every dispatched record but rolled-back ones, prepared
    ones included (README.txt);
    rmq_key_hash finds exactly the TopicTest messages carrying KEY, once per time they carry it."""
    count = {r["broker"]: r["n"] for r in fleet_rows["index"]}
    hashed = {r["broker"]: r["n"] for r in fleet_rows["key_hash"]}
    for name in STORES:
        indexed = [m for m in _dispatched(name, queued=False) if m["sysFlag"] & 0xC != 0xC]
        assert count[name] == sum(len(m["keys"]) + (m["uniqKey"] is not None) for m in indexed), name
        assert hashed.get(name, 0) == sum(m["keys"].count(KEY) for m in indexed if m["topic"] == "TopicTest"), name


def test_fleet_offsets_are_the_brokers_consumer_offsets_and_lag(fleet_rows):
    """committed: the broker's config/consumerOffset.json; lag: the queue's units (its manifest's dispatched records,
    the queue's max offset) minus committed."""
    from rmqdump.readers.configfiles import loads_fastjson

    got = {(r["broker"], r["topic"], r["queue_id"]): (r["committed"], r["lag"]) for r in fleet_rows["offsets"]}
    checked = 0
    for name in STORES:
        path = store_root(name) / "config" / "consumerOffset.json"
        if not path.exists():
            assert not any(b == name for b, _, _ in got), name
            continue
        top = Counter()
        for m in _dispatched(name):
            top[(m["topic"], m["queueId"])] = max(top[(m["topic"], m["queueId"])], m["logicsOffset"] + 1)
        for key, queues in loads_fastjson(path.read_text())["offsetTable"].items():
            topic = key.split("@", 1)[0]
            for q, committed in queues.items():
                assert got[(name, topic, int(q))] == (committed, top[(topic, int(q))] - committed), (name, topic, q)
                checked += 1
    assert checked


def test_fleet_compacted_is_the_brokers_consumer_view(fleet_rows):
    """rmq53-compaction: what a consumer of the compacted topic gets is truth.json's consumerView, per queue."""
    t = json.loads((REAL / "rmq53-compaction" / "truth.json").read_text())
    views = [v for q in t["queues"].values() for v in q["consumerView"]]
    want = [{"broker": "rmq53-compaction", "topic": t["compactionTopic"]["name"], "n": len(views), "hi": max(v["queueOffset"] for v in views)}]
    assert len(views) == t["counts"]["consumerViewMessages"] and fleet_rows["compacted"] == want


def test_spark_bad_query_is_one_line(spark):
    r = run("sql", "-s", str(store_root("rmq4-flags")), "--engine", "spark", "--master", "local[2]", "SELECT store_timestam FROM messages")
    assert r.exit_code == 2 and r.stderr.startswith("rmqdump: bad_query: query:") and len(r.stderr.strip().splitlines()) == 1
    assert "store_timestam`" in r.stderr and "`store_timestamp`" in r.stderr  # Spark's suggestions come from every column, not only the decoded ones


@pytest.mark.parametrize("fmt", ["parquet", "jsonl", "csv"])
def test_spark_out_file_is_the_local_result(spark, tmp_path, fmt):
    import pyarrow.parquet as pq

    q = "SELECT broker, topic, keys, count(*) AS n FROM messages GROUP BY broker, topic, keys"
    outs = {}
    for engine in ("local", "spark"):
        out = tmp_path / f"{engine}.{fmt}"
        extra = ["--engine", "spark", "--master", "local[2]"] if engine == "spark" else []
        r = run("sql", "-s", str(store_root("rmq4-flags")), "-f", fmt, "-o", str(out), *extra, q)
        assert r.exit_code == 0, r.stderr
        outs[engine] = pq.read_table(out).to_pylist() if fmt == "parquet" else out.read_text().splitlines()
    key = lambda d: json.dumps(d, sort_keys=True)  # noqa: E731
    assert sorted(outs["spark"], key=key) == sorted(outs["local"], key=key)
    if fmt == "parquet":  # every message of the store counted once (its manifest's records)
        assert sum(r["n"] for r in outs["spark"]) == len(records("rmq4-flags"))


def test_only_the_tables_and_columns_a_query_names_are_built(spark):
    """As locally: the views hold only the column names DuckDB's parse of the query finds, in any table that has them
    (a Python task's output is not pruned by Spark)."""
    from rmqdump.engines.spark.sql import query_frame
    from rmqdump.scan.splits import resolve_stores

    stores = resolve_stores([str(store_root("rmq4-flags"))])
    query_frame(spark, stores, "SELECT m.topic, count(*) FROM messages m JOIN units u ON u.phys_offset = m.phys_offset GROUP BY m.topic")
    assert spark.table("messages").columns == ["phys_offset", "topic"] and spark.table("units").columns == ["topic", "phys_offset"]
    assert not spark.catalog.tableExists("problems")  # never built: its cq verify task does not run


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_spark_out_uri_is_written_by_spark(spark, tmp_path, fmt):
    """An --out URI is a directory of part files written by Spark's writer; its rows are the local result's (lists as JSON text in CSV)."""
    import pyarrow.csv as pcsv
    import pyarrow.dataset as ds

    q = "SELECT broker, topic, keys, count(*) AS n FROM messages GROUP BY broker, topic, keys"
    out = tmp_path / "result"
    r = run("sql", "-s", str(store_root("rmq4-flags")), "-f", fmt, "-o", out.as_uri(), "--engine", "spark", "--master", "local[2]", q)
    assert r.exit_code == 0, r.stderr
    parts = sorted(out.glob("part-*"))
    assert parts
    if fmt == "parquet":
        got = ds.dataset(str(out), format="parquet").to_table().to_pylist()
    else:
        got = [{**x, "keys": json.loads(x["keys"])} for p in parts for x in pcsv.read_csv(p).to_pylist()]
    want = rows(str(store_root("rmq4-flags")), q)
    key = lambda d: json.dumps(d, sort_keys=True)  # noqa: E731
    assert sorted(got, key=key) == sorted(want, key=key)
    assert sum(x["n"] for x in got) == len(records("rmq4-flags"))
    again = run("sql", "-s", str(store_root("rmq4-flags")), "-f", fmt, "-o", out.as_uri(), "--engine", "spark", "--master", "local[2]", q)
    assert again.exit_code != 0  # no overwrite without --force
