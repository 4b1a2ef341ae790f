"""`cq dump` shows a queue's units (and their records); `cq seek` finds an offset by store time."""

from __future__ import annotations

import pytest
from conftest import HEALTHY, SETTINGS, copy_store, jsonl, manifest, patch, run, run_proc, store_root

from rmqdump.common.timeutil import iso
from rmqdump.query.cqseek import seek
from rmqdump.readers.store import Store


def queue_recs(name: str, topic: str, q: int) -> list[dict]:
    return sorted((m for m in manifest(name) if m["topic"] == topic and m["queueId"] == q and m["sysFlag"] & 0xC in (0, 8)), key=lambda m: m["logicsOffset"])


def test_dump_units_match_the_manifest():
    recs = queue_recs("rmq4-basic", "orders", 1)
    r = run("cq", "dump", "-s", store_root("rmq4-basic"), "--topic", "orders", "--queue", "1", "--from", "100", "--limit", "30", "-f", "jsonl")
    assert r.exit_code == 0
    rows = jsonl(r.stdout)
    assert [x["unit_index"] for x in rows] == list(range(100, 130))
    per_file = SETTINGS["rmq4-basic"]["cq_units"]
    for x in rows:
        m = recs[x["unit_index"]]
        assert (x["phys_offset"], x["size"], x["valid"], x["filler"]) == (m["wroteOffset"], m["wroteBytes"], True, False)
        assert x["cq_file"].endswith(f"{x['unit_index'] // per_file * per_file * 20:020d}") and x["file_offset"] == x["unit_index"] % per_file * 20
        assert "record" not in x


@pytest.mark.parametrize("name", HEALTHY)
def test_dump_resolve_shows_each_units_record(name):
    m0 = next(m for m in manifest(name) if m["sysFlag"] & 0xC in (0, 8))
    recs = queue_recs(name, m0["topic"], m0["queueId"])
    r = run("cq", "dump", "-s", store_root(name), "--topic", m0["topic"], "--queue", m0["queueId"], "--resolve", "-f", "jsonl")
    rows = jsonl(r.stdout)
    per_file = SETTINGS[name]["cq_units"]
    tail = rows.pop()
    assert r.exit_code == 0 and len(rows) == len(recs)  # the queue's units, then one line for the zero rest of the last file
    assert (tail["kind"], tail["first_unit"], tail["units"]) == ("unwritten", len(recs), -(-len(recs) // per_file) * per_file - len(recs))
    for x, m in zip(rows, recs, strict=False):
        rec = x["record"]
        assert rec["ok"] and (rec["store_timestamp"], rec["queue_offset"], rec["tags"], rec["keys"], rec["uniq_key"]) == (
            m["storeTimestamp"],
            m["logicsOffset"],
            m["tags"],
            m["keys"],
            m["uniqKey"],
        )


def test_dump_table_and_filler(tmp_path):
    root = copy_store("rmq5-basic", tmp_path)
    path = root / "consumequeue" / "orders" / "0" / f"{0:020d}"
    filler = (0).to_bytes(8, "big") + (0x7FFFFFFF).to_bytes(4, "big") + (0).to_bytes(8, "big")
    with open(path, "r+b") as f:
        f.write(filler * 2)
    r = run("cq", "dump", "-s", root, "--topic", "orders", "--queue", "0", "--limit", "3", "-f", "jsonl")
    rows = jsonl(r.stdout)
    assert [x["filler"] for x in rows] == [True, True, False] and not rows[0]["valid"]
    r = run_proc("cq", "dump", "-s", store_root("rmq5-basic"), "--topic", "orders", "--queue", "0", "--limit", "3", "--resolve")
    assert r.returncode == 0 and r.stdout.count(" ok") >= 3
    r = run("cq", "dump", "-s", store_root("rmq5-basic"), "--topic", "nope", "--queue", "0")
    assert r.exit_code == 2 and "no_queue" in r.stderr


def test_dump_resolve_exits_1_when_a_unit_is_not_its_record(tmp_path):
    """A unit whose size (table) or offset (JSON Lines) no longer matches the broker's record: shown, and exit 1."""
    root = copy_store("rmq4-basic", tmp_path)
    recs = queue_recs("rmq4-basic", "orders", 1)
    path = root / "consumequeue" / "orders" / "1" / f"{0:020d}"
    patch(path, 2 * 20 + 8, (recs[2]["wroteBytes"] + 1).to_bytes(4, "big"))  # unit 2's size
    patch(path, 3 * 20, (recs[4]["wroteOffset"]).to_bytes(8, "big"))  # unit 3 points at unit 4's record
    r = run_proc("cq", "dump", "-s", root, "--topic", "orders", "--queue", "1", "--limit", "5", "--resolve")
    assert r.returncode == 1 and r.stdout.count("\n 4 ") == 1, r.stdout  # the table shows all five units, and exits 1
    r = run("cq", "dump", "-s", root, "--topic", "orders", "--queue", "1", "--from", "3", "--limit", "1", "--resolve", "-f", "jsonl")
    (row,) = jsonl(r.stdout)
    assert r.exit_code == 1 and row["record"]["queue_offset"] == recs[4]["logicsOffset"] == 4
    r = run("cq", "dump", "-s", root, "--topic", "orders", "--queue", "1", "--from", "4", "--limit", "5", "--resolve", "-f", "jsonl")
    assert r.exit_code == 0 and len(jsonl(r.stdout)) == 5


def expected_seek(recs: list[dict], ts: int) -> int:
    return next((m["logicsOffset"] for m in recs if m["storeTimestamp"] >= ts), recs[-1]["logicsOffset"] + 1)


@pytest.mark.parametrize("name", ["rmq4-basic", "rmq53-v2"])
def test_seek_finds_the_first_message_at_or_after_a_time(name):
    st = Store.open(store_root(name))
    m0 = manifest(name)[0]
    recs = queue_recs(name, m0["topic"], m0["queueId"])
    times = [m["storeTimestamp"] for m in recs]
    assert times == sorted(times)
    probes = {times[0] - 1, times[0], times[len(times) // 2], times[len(times) // 2] + 1, times[-1], times[-1] + 1}
    dup = [t for t in set(times) if times.count(t) > 1]
    probes |= set(dup[:3])  # several messages in one millisecond: the first of them
    q = st.queue(m0["topic"], m0["queueId"])
    for ts in sorted(probes):
        r = seek(q, st.commitlog, ts)
        want = expected_seek(recs, ts)
        assert r.queue_offset == want, ts
        if want < len(recs):
            assert r.store_timestamp == recs[want]["storeTimestamp"] and r.phys_offset == recs[want]["wroteOffset"]
        assert r.probes <= 2 * max(1, len(recs)).bit_length() + 2


def test_seek_cli_iso_time_and_exit_codes():
    recs = queue_recs("rmq4-basic", "orders", 2)
    mid = recs[len(recs) // 3]
    r = run("cq", "seek", "-s", store_root("rmq4-basic"), "--topic", "orders", "--queue", "2", "--time", iso(mid["storeTimestamp"]), "-f", "jsonl")
    d = jsonl(r.stdout)[0]
    assert r.exit_code == 0 and d["queue_offset"] == expected_seek(recs, mid["storeTimestamp"]) and d["found"]
    r = run("cq", "seek", "-s", store_root("rmq4-basic"), "--topic", "orders", "--queue", "2", "--time", str(recs[-1]["storeTimestamp"] + 1))
    assert r.exit_code == 1 and "no message stored" in r.stdout
    r = run("cq", "seek", "-s", store_root("rmq4-basic"), "--topic", "orders", "--queue", "2", "--time", "yesterday")
    assert r.exit_code == 2 and "usage" in r.stderr
