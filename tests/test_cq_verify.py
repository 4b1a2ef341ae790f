"""`cq verify` on the real stores: clean where the broker left them clean, the crash's 500 exactly."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import HEALTHY, REAL, copy_store, jsonl, manifest, run, run_proc, store_root

from rmqdump.checks.cqunits import PROBLEM_KEYS, CommitLogExtent, check_units, missing_units
from rmqdump.checks.cqverify import scan_records
from rmqdump.readers.consumequeue import read_units
from rmqdump.readers.store import Store

ISSUE_KEYS = {"kind", "code", "topic", "queue_id", "cq_file", "unit_index", "phys_offset", "detail"}


def queued(m: dict) -> bool:
    return m["sysFlag"] & 0xC in (0, 0x8)


def verify(root, *args):
    r = run("cq", "verify", "-s", root, "-f", "jsonl", *args)
    rows = jsonl(r.stdout)
    return r.exit_code, [x for x in rows if x["kind"] == "problem"], rows[-1]


@pytest.mark.parametrize("name", HEALTHY)
def test_healthy_stores_verify_clean(name):
    code, probs, summary = verify(store_root(name))
    m = manifest(name)
    assert code == 0 and probs == []
    assert summary == {
        "kind": "summary",
        "queues": len({(x["topic"], x["queueId"]) for x in m if queued(x)}),
        "units": sum(1 for x in m if queued(x)),
        "messages": len(m),
        "problems": 0,
    }


def test_crash_store_reports_exactly_the_undispatched_messages():
    crash = json.loads((REAL / "rmq4-crash" / "crash.json").read_text())
    dispatched = set(crash["dispatchedSeqs"])
    lost = [m for m in manifest("rmq4-crash") if m["seq"] not in dispatched]
    assert len(lost) == 500
    code, probs, summary = verify(store_root("rmq4-crash"))
    assert code == 1
    assert {p["code"] for p in probs} == {"cq_missing_unit"}
    got = {(p["topic"], p["queue_id"], p["unit_index"], p["phys_offset"]) for p in probs}
    assert got == {(m["topic"], m["queueId"], m["logicsOffset"], m["wroteOffset"]) for m in lost}
    assert len(probs) == 500 and summary["problems"] == 500 and summary["units"] == 1500 and summary["messages"] == 2000
    for p in probs:
        assert set(p) >= ISSUE_KEYS
        assert p["cq_file"].endswith(f"{p['unit_index'] * 20 // 2400 * 2400:020d}")


@pytest.mark.parametrize("range_bytes", [128 << 20, 7000])
def test_parallel_scan_gives_the_same_lines(range_bytes):
    """Threads over byte ranges (whole files, or ranges that cut records) give the one-thread lines, which are the broker's truth."""
    from rmqdump.checks.cqverify import verify as verify_lib
    from rmqdump.engines.local import LocalMap

    def lines(mapper):
        return [p.to_dict() for p in verify_lib(Store.open(store_root("rmq4-crash")), mapper=mapper, range_bytes=range_bytes)]

    serial = lines(map)
    assert lines(LocalMap(2)) == serial
    crash = json.loads((REAL / "rmq4-crash" / "crash.json").read_text())
    lost = {m["wroteOffset"] for m in manifest("rmq4-crash") if m["seq"] not in set(crash["dispatchedSeqs"])}
    assert {p["phys_offset"] for p in serial if p["code"] == "cq_missing_unit"} == lost


def test_crash_store_after_broker_recovery_is_clean():
    code, probs, summary = verify(REAL / "rmq4-crash" / "recovered")
    assert code == 0 and probs == [] and summary["units"] == 2000


def test_filters_limit_units_and_missing_messages():
    root = store_root("rmq4-crash")
    crash = json.loads((REAL / "rmq4-crash" / "crash.json").read_text())
    dispatched = set(crash["dispatchedSeqs"])
    code, probs, summary = verify(root, "--topic", "orders", "--queue", "2")
    want = [m for m in manifest("rmq4-crash") if m["topic"] == "orders" and m["queueId"] == 2]
    assert summary["queues"] == 1 and summary["units"] == sum(1 for m in want if m["seq"] in dispatched)
    assert sorted(p["unit_index"] for p in probs) == sorted(m["logicsOffset"] for m in want if m["seq"] not in dispatched)
    code, probs, summary = verify(root, "--topic", "orders")
    assert code == 1 and summary["queues"] == 4 and {p["topic"] for p in probs} == {"orders"}


def test_table_output_and_exit_codes():
    r = run_proc("cq", "verify", "-s", store_root("rmq4-crash"))
    assert r.returncode == 1
    assert "cq_missing_unit" in r.stdout and "500 problems" in r.stderr
    r = run("cq", "verify", "-s", store_root("rmq4-basic"))
    assert r.exit_code == 0 and "0 problems" in r.stderr


def test_unusable_input_exits_2_with_one_line(tmp_path):
    r = run("cq", "verify", "-s", tmp_path / "nope")
    assert r.exit_code == 2 and r.stderr.count("\n") == 1 and "not_found" in r.stderr
    r = run("cq", "verify", "-s", store_root("rmq4-basic") / "commitlog")
    assert r.exit_code == 2 and "not_a_store" in r.stderr and "Traceback" not in r.stderr
    (tmp_path / "s" / "consumequeue").mkdir(parents=True)
    r = run("cq", "verify", "-s", tmp_path / "s")
    assert r.exit_code == 2 and "no_commitlog" in r.stderr
    r = run("cq", "verify", "-s", store_root("rmq4-basic"), "--delay-levels", "1x")
    assert r.exit_code == 2 and "usage" in r.stderr


def test_delay_levels_decide_schedule_topic_tags_codes():
    root = store_root("rmq4-flags")
    code, probs, _ = verify(root)
    assert code == 0
    levels = "2s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"  # level 1 changed
    code, probs, _ = verify(root, "--delay-levels", levels)
    level1 = [m for m in manifest("rmq4-flags") if m["topic"] == "SCHEDULE_TOPIC_XXXX" and m["properties"].get("DELAY") == "1"]
    assert code == 1 and level1
    assert {(p["code"], p["queue_id"], p["unit_index"]) for p in probs} == {("cq_tags_code_mismatch", 0, m["logicsOffset"]) for m in level1}


def test_pure_core_runs_per_queue_on_plain_arrays():
    """The API another engine calls: structured unit arrays in, problems and covered records out."""
    st = Store.open(store_root("rmq53-v2"))
    records, cl_problems = scan_records(st.commitlog)
    assert cl_problems == []
    extent = CommitLogExtent.of(st.commitlog, records.data_end)
    covered = np.zeros(len(records), dtype=bool)
    for q in st.select_queues():
        for f in q.files:
            arr = read_units(f)  # big-endian structured array derived from schemas.ConsumeQueueUnit
            res = check_units(arr, q.topic, q.queue_id, records, extent, first_index=f.first_index)
            assert res.problems == []
            covered[res.covered] = True
    assert covered.all()
    assert list(missing_units(records, covered)) == []
    # and the reverse direction finds what is not covered
    covered[:3] = False
    miss = list(missing_units(records, covered))
    assert [p.phys_offset for p in miss] == records.phys[:3].tolist()
    assert all(set(PROBLEM_KEYS) - {"code", "detail", "phys_offset"} <= set(p.extra) for p in miss)


def test_problem_lines_of_commitlog_damage_have_the_same_shape(tmp_path):
    root = copy_store("rmq5-basic", tmp_path)
    m = manifest("rmq5-basic")[10]
    f = root / "commitlog" / "00000000000000000000"
    with open(f, "r+b") as fh:
        fh.seek(m["wroteOffset"] + 4)
        fh.write(b"\x00\x00\x00\x00")
    code, probs, _ = verify(root)
    assert code == 1
    for p in probs:
        assert set(p) >= ISSUE_KEYS
    assert [p["code"] for p in probs if not p["code"].startswith("cq_")] == ["bad_magic"]


def _construct_units(raw: bytes) -> list[tuple[int, int, int]]:
    from rmqdump.schemas import ConsumeQueueUnit

    n = len(raw) // ConsumeQueueUnit.sizeof()
    units = [ConsumeQueueUnit.parse(raw[i * 20 : i * 20 + 20]) for i in range(n)]
    return [(u.commit_log_offset, u.size, u.tags_code) for u in units]


def _as_tuples(u) -> list[tuple[int, int, int]]:
    return list(zip(u.offset.tolist(), u.size.tolist(), u.tags_code.tolist(), strict=True))


@pytest.mark.parametrize("name", HEALTHY)
def test_file_units_equal_constructs_parse_of_every_real_queue_file(name):
    from rmqdump.readers.consumequeue import file_units, reads_cached

    st = Store.open(str(store_root(REAL / name)))
    files = [f for q in st.queues.values() for f in q.files]
    assert files
    with reads_cached():
        for f in files:
            raw = Path(f.path).read_bytes()
            u = file_units(f)
            assert _as_tuples(u) == _construct_units(raw)
            assert u.index.tolist() == list(range(f.first_index, f.first_index + len(raw) // 20))
            assert file_units(f) is u  # read once in a run
    assert file_units(files[0]) is not file_units(files[0])  # outside a run nothing is kept


def test_file_units_of_a_sparse_file_read_its_data_and_zeros(tmp_path):
    """A preallocated queue file copied with its holes: units before, between and after holes all read."""
    from rmqdump.readers.consumequeue import CQFile, file_units

    src = next((REAL / "rmq4-basic").glob("store/consumequeue/TopicTest/0/00000000000000000000"))
    real = src.read_bytes()
    size = 3 << 20
    path = tmp_path / "00000000000000000000"
    with open(path, "wb") as fh:
        fh.truncate(size)  # a hole of 3 MiB
        fh.write(real)  # data at the start
        fh.seek(1 << 20)
        fh.write(real)  # data after a hole
    whole = path.read_bytes()
    u = file_units(CQFile(str(path), 0, size))
    assert len(u) == size // 20
    assert _as_tuples(u) == _construct_units(whole)
