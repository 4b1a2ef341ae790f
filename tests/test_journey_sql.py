"""The journey tables of `rmqdump sql` (DuckDB) and `rmqdump.spark` (Spark) against truth.json of the lifecycle stores."""

from __future__ import annotations

import pytest
from conftest import REAL, jsonl, run
from test_journey import LIFECYCLE, expected_evidence, expected_state, truth


def _sql(name: str, query: str) -> list[dict]:
    r = run("sql", "-s", REAL / name / "store", query, "-f", "jsonl")
    assert r.exit_code == 0, r.stderr
    return jsonl(r.stdout)


@pytest.mark.parametrize("name", LIFECYCLE)
def test_duckdb_journey_tables_are_the_truth(name):
    msgs = truth(name)["messages"]
    states = {r["uniq_key"]: r["state"] for r in _sql(name, "SELECT uniq_key, state FROM journeys")}
    assert states == {m["uniqKey"]: expected_state(m) for m in msgs}
    copies = {(r["uniq_key"], r["topic"], r["queue_id"], r["queue_offset"], r["phys_offset"]) for r in _sql(name, "SELECT * FROM copies")}
    assert copies == {(m["uniqKey"], c["topic"], c["queueId"], c["queueOffset"], c["commitLogOffset"]) for m in msgs for c in m["storeCopies"]}
    ev = _sql(name, "SELECT uniq_key, hop, phys_offset, names_topic, names_queue_id, names_queue_offset, held_in_timer FROM evidence")
    assert {tuple(r.values()) for r in ev} == expected_evidence(name)
    by_state = {r["state"]: r["n"] for r in _sql(name, "SELECT state, count(*) AS n FROM journeys GROUP BY state")}
    want: dict[str, int] = {}
    for m in msgs:
        want[expected_state(m)] = want.get(expected_state(m), 0) + 1
    assert by_state == want


def test_spark_journey_tables_over_a_fleet_are_the_truth(spark):
    from rmqdump.spark import copies, journeys

    stores = [f"{n}={REAL / n / 'store'}" for n in LIFECYCLE]
    got = {(r.broker, r.uniq_key): r.state for r in journeys(spark, stores, ["broker", "uniq_key", "state"]).collect()}
    assert got == {(n, m["uniqKey"]): expected_state(m) for n in LIFECYCLE for m in truth(n)["messages"]}
    n_copies = copies(spark, stores, ["broker"]).groupBy("broker").count().collect()
    assert {r.broker: r["count"] for r in n_copies} == {n: sum(len(m["storeCopies"]) for m in truth(n)["messages"]) for n in LIFECYCLE}


def _want_views(name: str) -> tuple[set, set, set]:
    msgs = truth(name)["messages"]
    tx = {(m["uniqKey"], expected_state(m), sum(c["topic"] == "RMQ_SYS_TRANS_HALF_TOPIC" for c in m["storeCopies"])) for m in msgs if m["kind"] == "transaction"}
    pops = {(m["uniqKey"], "GID_lc_pop", "acked" if m["popAcked"] else "unacked") for m in msgs if m["kind"] == "pop" and m.get("pops")}
    delays = set()
    for m in msgs:
        last = max(m["storeCopies"], key=lambda c: c["commitLogOffset"])
        if expected_state(m) == "scheduled" and last["topic"] == "SCHEDULE_TOPIC_XXXX":
            delays.add((m["uniqKey"], last["queueId"] + 1, last["queueOffset"], last["commitLogOffset"]))
    return tx, pops, delays


@pytest.mark.parametrize("name", LIFECYCLE)
def test_duckdb_lifecycle_tables_are_the_truth(name):
    tx, pops, delays = _want_views(name)
    assert {tuple(r.values()) for r in _sql(name, "SELECT uniq_key, state, halves FROM transactions")} == tx
    assert {tuple(r.values()) for r in _sql(name, 'SELECT uniq_key, "group", state FROM pops')} == pops
    assert {tuple(r.values()) for r in _sql(name, "SELECT uniq_key, level, queue_offset, phys_offset FROM delays")} == delays


def test_spark_lifecycle_tables_are_the_truth(spark):
    from rmqdump.spark import delays, pops, transactions

    name = "rmq53-lifecycle-crash"
    tx, pp, dl = _want_views(name)
    store = str(REAL / name / "store")
    assert {(r.uniq_key, r.state, r.halves) for r in transactions(spark, store, ["uniq_key", "state", "halves"]).collect()} == tx
    assert {(r.uniq_key, r.group, r.state) for r in pops(spark, store, ["uniq_key", "group", "state"]).collect()} == pp
    assert {(r.uniq_key, r.level, r.queue_offset, r.phys_offset) for r in delays(spark, store, ["uniq_key", "level", "queue_offset", "phys_offset"]).collect()} == dl
