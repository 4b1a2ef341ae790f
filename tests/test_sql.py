"""`rmqdump sql`: DuckDB over the stores' tables, checked against the manifests and the broker's own files."""

from __future__ import annotations

import json
from collections import Counter

import pyarrow.parquet as pq
import pytest
from conftest import HEALTHY, REAL, SETTINGS, copy_store, flip, jsonl, manifest, patch, run, run_proc, store_root

from rmqdump.common.problems import InputError
from rmqdump.readers.configfiles import loads_fastjson
from rmqdump.sql import query as Q
from rmqdump.sql.tables import TABLES, columns_of

LONG = "benchmark-topic-with-a-rather-long-name_for_testing-0123456789_abcdefghijklmnopqrstuvwxyz_ABCDEFGHIJ"


def sql(*stores, query: str, args: tuple = ()) -> list[dict]:
    r = run("sql", *[a for s in stores for a in ("-s", s)], "-f", "jsonl", *args, query)
    assert r.exit_code == 0, r.stderr
    return jsonl(r.stdout)


def crash() -> tuple[list[dict], set[int]]:
    m = list(manifest("rmq4-crash"))
    dispatched = set(json.loads((REAL / "rmq4-crash" / "crash.json").read_text())["dispatchedSeqs"])
    return m, dispatched


@pytest.mark.parametrize("name", [*HEALTHY, "rmq4-crash"])
def test_counts_by_topic_and_queue(name):
    rows = sql(store_root(name), query="SELECT topic, queue_id, count(*) AS n FROM messages GROUP BY ALL")
    assert {(r["topic"], r["queue_id"]): r["n"] for r in rows} == Counter((m["topic"], m["queueId"]) for m in manifest(name))


def test_time_window():
    m = manifest("rmq4-basic")
    times = sorted(x["storeTimestamp"] for x in m)
    lo, hi = times[len(times) // 4], times[3 * len(times) // 4]
    q = f"SELECT phys_offset FROM messages WHERE store_timestamp >= {lo} AND store_timestamp < {hi}"
    got = sorted(r["phys_offset"] for r in sql(store_root("rmq4-basic"), query=q))
    assert got == sorted(x["wroteOffset"] for x in m if lo <= x["storeTimestamp"] < hi) and got


def test_key_search():
    m = manifest("rmq4-basic")
    key = next(k for x in m for k in (x["keys"] or []) if k.startswith("user_"))
    q = f"SELECT msg_id, uniq_key, queue_offset FROM messages WHERE list_contains(keys, '{key}') ORDER BY phys_offset"
    rows = sql(store_root("rmq4-basic"), query=q)
    want = [x for x in m if key in (x["keys"] or [])]
    assert [(r["msg_id"], r["uniq_key"], r["queue_offset"]) for r in rows] == [(x["msgId"], x["uniqKey"], x["logicsOffset"]) for x in want]


def test_messages_missing_from_their_consume_queue_on_the_crashed_store():
    m, dispatched = crash()
    q = """SELECT m.phys_offset, m.topic, m.queue_id, m.queue_offset
           FROM messages m LEFT JOIN units u ON u.phys_offset = m.phys_offset AND u.topic = m.topic AND u.queue_id = m.queue_id
           WHERE u.phys_offset IS NULL ORDER BY m.phys_offset"""
    rows = sql(store_root("rmq4-crash"), query=q)
    want = [x for x in m if x["seq"] not in dispatched]
    info = json.loads((REAL / "rmq4-crash" / "crash.json").read_text())
    assert len(want) == info["messagesPut"] - info["dispatchedCount"]  # crash.json: put, then dispatched before the halt
    assert [(r["phys_offset"], r["topic"], r["queue_id"], r["queue_offset"]) for r in rows] == [
        (x["wroteOffset"], x["topic"], x["queueId"], x["logicsOffset"]) for x in want
    ]


def test_units_and_their_status_on_the_crashed_store():
    m, dispatched = crash()
    rows = sql(store_root("rmq4-crash"), query="SELECT topic, queue_id, queue_offset, phys_offset, size, status FROM units")
    assert sorted((r["topic"], r["queue_id"], r["queue_offset"], r["phys_offset"], r["size"]) for r in rows) == sorted(
        (x["topic"], x["queueId"], x["logicsOffset"], x["wroteOffset"], x["wroteBytes"]) for x in m if x["seq"] in dispatched
    )
    assert {r["status"] for r in rows} == {"ok"}
    # the broker's own recovery gives every surviving message its unit
    rec = sql(REAL / "rmq4-crash" / "recovered", query="SELECT count(*) AS n, count(DISTINCT phys_offset) AS d FROM units")
    survived = len(manifest("rmq4-crash"))  # every put survived the crash (crash.json: messagesPut, the manifest's lines)
    assert survived == json.loads((REAL / "rmq4-crash" / "crash.json").read_text())["messagesPut"]
    assert rec == [{"n": survived, "d": survived}]


def test_problems_are_the_missing_units():
    m, dispatched = crash()
    rows = sql(store_root("rmq4-crash"), query="SELECT code, phys_offset, unit_index FROM problems ORDER BY phys_offset")
    want = [x for x in m if x["seq"] not in dispatched]
    assert [(r["code"], r["phys_offset"], r["unit_index"]) for r in rows] == [("cq_missing_unit", x["wroteOffset"], x["logicsOffset"]) for x in want]


def test_index_entries_are_the_keys_of_the_dispatched_messages():
    m, dispatched = crash()
    rows = sql(store_root("rmq4-crash"), query="SELECT phys_offset, count(*) AS n FROM index_entries GROUP BY phys_offset")
    want = Counter()
    for x in m:
        if x["seq"] in dispatched:
            n = (x["uniqKey"] is not None) + len([k for k in x["keys"] or [] if k])
            if n:
                want[x["wroteOffset"]] = n
    assert {r["phys_offset"]: r["n"] for r in rows} == dict(want)
    assert sum(want.values()) == 3704  # README.txt: 3704 entries in 2 files
    chains = sql(store_root("rmq4-crash"), query="SELECT count(*) AS bad FROM index_entries WHERE prev_entry >= entry OR slot <> key_hash % 500")
    assert chains == [{"bad": 0}]
    # a key looked up through the index, as the broker's queryMessage does: only dispatched messages are found
    q = "SELECT phys_offset FROM index_entries WHERE key_hash = rmq_key_hash('TopicTest', 'user_3') ORDER BY phys_offset"
    found = [r["phys_offset"] for r in sql(store_root("rmq4-crash"), query=q)]
    assert found == sorted(x["wroteOffset"] for x in m if x["seq"] in dispatched and x["topic"] == "TopicTest" and "user_3" in (x["keys"] or []))
    assert len(found) < sum(1 for x in m if x["topic"] == "TopicTest" and "user_3" in (x["keys"] or []))


def test_offsets_with_lag():
    raw = loads_fastjson((store_root("rmq4-basic") / "config" / "consumerOffset.json").read_text())["offsetTable"]
    sizes = Counter((x["topic"], x["queueId"]) for x in manifest("rmq4-basic"))
    rows = sql(store_root("rmq4-basic"), query='SELECT "group", topic, queue_id, committed, lag FROM offsets')
    want = {(k.split("@")[1], k.split("@")[0], int(q)): (v, sizes[(k.split("@")[0], int(q))] - v) for k, per in raw.items() for q, v in per.items()}
    assert {(r["group"], r["topic"], r["queue_id"]): (r["committed"], r["lag"]) for r in rows} == want


def test_several_stores_carry_their_broker():
    rows = sql("a=" + str(store_root("rmq4-basic")), "b=" + str(store_root("rmq4-flags")), query="SELECT broker, count(*) AS n FROM messages GROUP BY broker")
    assert {r["broker"]: r["n"] for r in rows} == {"a": len(manifest("rmq4-basic")), "b": len(manifest("rmq4-flags"))}


def test_only_named_columns_are_decoded():
    assert Q.plan_of("SELECT topic, count(*) FROM messages GROUP BY topic").columns == {"messages": ["topic"]}
    assert Q.plan_of("SELECT count(*) FROM messages").columns == {"messages": ["phys_offset"]}
    assert Q.plan_of('SELECT "Topic", QUEUE_ID FROM Messages').columns == {"messages": ["queue_id", "topic"]}
    p = Q.plan_of("SELECT m.msg_id FROM messages m JOIN units u USING (phys_offset) WHERE u.status <> 'ok'")
    assert p.columns == {"messages": ["phys_offset", "msg_id"], "units": ["phys_offset", "status"]}
    assert "body" not in Q.plan_of("SELECT * EXCLUDE (body) FROM messages").columns["messages"]
    assert Q.plan_of("SELECT * FROM messages").columns["messages"] == columns_of("messages")
    assert Q.plan_of("SELECT count(*) FROM messages a JOIN messages b USING (queue_offset)").repeated == {"messages"}
    assert Q.scans(Q.plan_of("SELECT * FROM offsets")) == 0
    assert Q.scans(Q.plan_of("SELECT status, count(*) FROM units GROUP BY 1")) == 1


def test_bodies_only_when_named():
    rows = sql(store_root("rmq4-basic"), query="SELECT body, body_length FROM messages ORDER BY phys_offset LIMIT 3")
    import base64
    import hashlib

    want = manifest("rmq4-basic")[:3]
    assert [hashlib.sha256(base64.b64decode(r["body"])).hexdigest() for r in rows] == [x["body_sha256"] for x in want]
    assert [r["body_length"] for r in rows] == [x["body_len"] for x in want]


def test_a_self_join_reads_the_table_once():
    rows = sql(store_root("rmq4-flags"), query="SELECT count(*) AS n FROM messages a JOIN messages b ON a.phys_offset = b.phys_offset")
    assert rows == [{"n": len(manifest("rmq4-flags"))}]


def test_bad_queries_are_one_line_and_exit_2():
    for q in ("SELEC 1", "SELECT tpic FROM messages", "SELECT 1; SELECT 2", "DELETE FROM messages", "SELECT * FROM read_csv('/etc/passwd')"):
        r = run("sql", "-s", store_root("rmq4-flags"), q)
        assert r.exit_code == 2, (q, r.stderr)
        assert r.stderr.startswith("rmqdump: bad_query: ") and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr
    r = run_proc("sql", "-s", store_root("rmq4-flags"), "SELECT tpic FROM messages")
    assert r.returncode == 2 and r.stderr.startswith("rmqdump: bad_query: ") and r.stderr.count("\n") == 1
    assert '"topic"' in r.stderr  # candidates from the table's real columns
    with pytest.raises(InputError) as e:
        Q.plan_of("SELECT 1 FROM messages; SELECT 2")
    assert e.value.code == "bad_query"
    r = run("sql", "-s", store_root("rmq4-flags"), "--memory-limit", "lots", "SELECT 1")
    assert r.exit_code == 2 and r.stderr.startswith("rmqdump: usage: --memory-limit: ")


def test_out_files_are_published_and_never_in_the_store(tmp_path):
    root = store_root("rmq4-basic")
    out = tmp_path / "by-topic.parquet"
    q = "SELECT topic, count(*) AS n FROM messages GROUP BY topic"
    assert run("sql", "-s", root, "-f", "parquet", "-o", out, q).exit_code == 0
    got = {r["topic"]: r["n"] for r in pq.read_table(out).to_pylist()}
    assert got == Counter(x["topic"] for x in manifest("rmq4-basic"))
    r = run("sql", "-s", root, "-f", "csv", "-o", out, q)
    assert r.exit_code == 2 and "output_exists" in r.stderr
    assert run("sql", "-s", root, "-f", "csv", "-o", out, "--force", q).exit_code == 0
    lines = out.read_text().splitlines()
    assert lines[0] == "topic,n" and len(lines) == 1 + len(got)
    copy = copy_store("rmq4-flags", tmp_path)
    r = run("sql", "-s", copy, "-f", "csv", "-o", copy / "x.csv", q)
    assert r.exit_code == 2 and "output_inside_store" in r.stderr and not (copy / "x.csv").exists()
    r = run("sql", "-s", copy, "--temp-dir", copy, q)
    assert r.exit_code == 2 and "output_inside_store" in r.stderr
    assert run("sql", "-s", root, "-f", "parquet", q).exit_code == 2
    spill = tmp_path / "spill"
    assert (
        run("sql", "-s", root, "--temp-dir", spill, "--memory-limit", "16MB", "SELECT count(*) FROM messages a JOIN messages b USING (msg_id)").exit_code == 0
    )
    assert list(spill.iterdir()) == []  # DuckDB's directory for this run is removed
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_a_damaged_store_still_answers(tmp_path):
    copy = copy_store("rmq4-basic", tmp_path)
    m = manifest("rmq4-basic")
    victim = m[10]
    seg = sorted((copy / "commitlog").iterdir())[0]
    flip(seg, victim["wroteOffset"] + 4, 0xFF)  # the magic of message 10
    rows = sql(copy, query="SELECT code, phys_offset FROM problems WHERE code = 'bad_magic'")
    assert rows and rows[0]["phys_offset"] == victim["wroteOffset"]
    n = sql(copy, query="SELECT count(*) AS n FROM messages")[0]["n"]
    assert n == len(m) - 1


def test_schema_lists_every_table_and_column():
    r = run("sql", "--schema", "-f", "jsonl")
    assert r.exit_code == 0
    rows = jsonl(r.stdout)
    assert {(x["table"], x["column"]) for x in rows} == {(t, c.name) for t, cols in TABLES.items() for c in cols}
    assert all(x["meaning"] for x in rows)
    assert set(TABLES) == {"messages", "units", "index_entries", "problems", "offsets", "compacted", "copies", "evidence", "journeys", "transactions", "pops", "delays"}
    from rmqdump.export.arrowbatch import schema

    assert columns_of("messages") == schema(with_body=True).names


def test_schema_in_csv_and_table():
    """`--schema -f csv` is a header and one row per column as csv reads them back; the table names every column."""
    import csv
    import io

    want = [[t, c.name, str(c.type), c.meaning] for t, cols in TABLES.items() for c in cols]
    r = run("sql", "--schema", "-f", "csv")
    assert r.exit_code == 0 and not r.stderr
    assert list(csv.reader(io.StringIO(r.stdout))) == [["table", "column", "type", "meaning"], *want]
    r = run("sql", "--schema", "-f", "table")
    assert r.exit_code == 0
    assert all(c in r.stdout for _t, c, _ty, _m in want)


def test_unit_status_names_the_damage(tmp_path):
    copy = copy_store("rmq4-basic", tmp_path)
    m = [x for x in manifest("rmq4-basic") if x["topic"] == "orders" and x["queueId"] == 2]
    victim = m[7]
    per_file = SETTINGS["rmq4-basic"]["cq_units"]
    cq = copy / "consumequeue" / "orders" / "2" / f"{victim['logicsOffset'] // per_file * per_file * 20:020d}"
    patch(cq, victim["logicsOffset"] % per_file * 20 + 8, (victim["wroteBytes"] + 1).to_bytes(4, "big"))  # the unit's size
    rows = sql(copy, query="SELECT topic, queue_id, queue_offset, phys_offset, size, status FROM units")
    assert len(rows) == len(manifest("rmq4-basic"))
    bad = [r for r in rows if r["status"] != "ok"]
    assert bad == [
        {
            "topic": "orders",
            "queue_id": 2,
            "queue_offset": victim["logicsOffset"],
            "phys_offset": victim["wroteOffset"],
            "size": victim["wroteBytes"] + 1,
            "status": "cq_size_mismatch",
        }
    ]
    found = sql(copy, query="SELECT code, topic, queue_id, unit_index FROM problems")
    assert found == [{"code": "cq_size_mismatch", "topic": "orders", "queue_id": 2, "unit_index": victim["logicsOffset"]}]


def test_an_unreadable_table_gives_its_own_code(tmp_path):
    copy = copy_store("rmq4-flags", tmp_path)
    first = sorted((copy / "index").iterdir())[0]
    with open(first, "r+b") as f:
        f.truncate(1000)
    r = run("sql", "-s", copy, "SELECT count(*) FROM index_entries")
    assert r.exit_code == 2 and r.stderr.startswith("rmqdump: index_layout_unknown: ") and str(first) in r.stderr and r.stderr.count("\n") == 1
    assert sql(copy, query="SELECT count(*) AS n FROM messages") == [{"n": len(manifest("rmq4-flags"))}]


@pytest.mark.parametrize("workers", ["1", "2", "3"])
def test_ranges_read_side_by_side_come_in_store_order(workers):
    """The messages table's ranges are read by the local engine's threads (-j); without ORDER BY, DuckDB keeps
    a table's order (preserve_insertion_order): every manifest record, in CommitLog order, whatever -j."""
    got = sql(store_root("rmq4-basic"), query="SELECT phys_offset, topic, queue_id, uniq_key FROM messages", args=("-j", workers))
    want = [
        {"phys_offset": m["wroteOffset"], "topic": m["topic"], "queue_id": m["queueId"], "uniq_key": m["uniqKey"]}
        for m in sorted(manifest("rmq4-basic"), key=lambda m: m["wroteOffset"])
    ]
    assert got == want
