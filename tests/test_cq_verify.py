"""`cq verify` on the real stores: clean where the broker left them clean, the crash's 500 exactly."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
from conftest import HEALTHY, REAL, SETTINGS, copy_store, jsonl, manifest, patch, run, run_proc, store_root

from rmqdump.checks.cqunits import PROBLEM_KEYS, CommitLogExtent, check_units, missing_units
from rmqdump.checks.cqverify import record_windows
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
        "filler_units": 0,  # no repair by rmqdump
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
    ((records, cl_problems),) = record_windows(st.commitlog, window_records=1 << 62)  # one table: the whole CommitLog
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


# --- a store repaired by `rmqdump repair`: its filler units are listed, not reported as problems ---

DAMAGED = ["bodycrc", "clean-flip", "midfile-magic", "size-field", "unscanned-magic", "zeroed-page"]
DAMAGED_CQ_FILE = 6000  # each damaged store's README.txt: mappedFileSizeConsumeQueue=6000
FILLER_UNIT = (0, 2147483647, 0)  # the broker's filler unit (ConsumeQueue fillPreBlank: Integer.MAX_VALUE)


def expected_filler_units(name: str) -> list[dict]:
    """From damage.json and the manifest alone: each destroyed message that was not its queue's last leaves a filler
    unit at its queue offset, standing for the range from the first destroyed record to the end of the last.

    Destroyed: a record the damage hit in its header or body; one hit only in its topic and properties is kept by the
    broker (zeroed-page's README: it passed the store's check), as its walk in broker-recovery.json shows."""
    base = REAL / f"rmq53-damaged-{name}"
    damage = json.loads((base / "damage.json").read_text(encoding="utf-8"))
    walk = {w["offset"] for w in json.loads((base / "broker-recovery.json").read_text(encoding="utf-8"))["commitLogWalk"]["messages"]}
    kept = [r for r in damage["recordsHit"] if all(f.startswith("topic+properties") for f in r["fieldsHit"])]
    assert all(r["physicalOffset"] in walk for r in kept)
    # a record hit only in its magic code or totalSize is written back whole by repair (its body CRC, properties and
    # size prove the rest; the broker keeps it after repair): no filler stands for it
    restored = [r for r in damage["recordsHit"] if set(r["fieldsHit"]) <= {"magicCode", "totalSize"}]
    gone = [r for r in damage["recordsHit"] if r not in kept and r not in restored]
    if not gone:
        return []
    lo = min(r["physicalOffset"] for r in gone)
    hi = max(r["physicalOffset"] + r["size"] for r in gone)
    puts = [m for m in manifest(f"rmq53-damaged-{name}") if m.get("kind", "put") == "put"]
    last = {}
    for m in puts:
        k = (m["topic"], m["queueId"])
        last[k] = max(last.get(k, -1), m["logicsOffset"])
    out = []
    for r in sorted(gone, key=lambda r: (r["topic"], r["queueId"], r["queueOffset"])):
        if queued(r) and r["queueOffset"] < last[(r["topic"], r["queueId"])]:
            i = r["queueOffset"]
            out.append(
                {
                    "topic": r["topic"],
                    "queue_id": r["queueId"],
                    "unit_index": i,
                    "cq_file": f"consumequeue/{r['topic']}/{r['queueId']}/{i * 20 // DAMAGED_CQ_FILE * DAMAGED_CQ_FILE:020d}",
                    "file_offset": i * 20 % DAMAGED_CQ_FILE,
                    "phys_offset": lo,
                    "length": hi - lo,
                    "replaced_by": "filler",
                }
            )
    return out


def repaired(name: str, tmp_path: Path) -> Path:
    new = tmp_path / "new"
    r = run("repair", "-s", REAL / f"rmq53-damaged-{name}" / "store", "--out", new, "--hash-slots", "500", "--index-entries", "2000", "--no-sync", "--no-verify")
    assert r.exit_code == 1  # damage was found and replaced
    return new


@pytest.mark.slow
@pytest.mark.parametrize("name", DAMAGED)
def test_repaired_store_lists_repairs_filler_units_and_nothing_else(name, tmp_path):
    new = repaired(name, tmp_path)
    r = run("cq", "verify", "-s", new, "-f", "jsonl")
    rows = jsonl(r.stdout)
    assert r.exit_code == 0
    assert [x for x in rows if x["kind"] not in ("filler_unit", "summary")] == []
    fillers = [x for x in rows if x["kind"] == "filler_unit"]
    want = expected_filler_units(name)
    got = sorted(({k: v for k, v in x.items() if k != "kind"} | {"cq_file": str(Path(x["cq_file"]).relative_to(new))} for x in fillers), key=lambda x: (x["topic"], x["queue_id"], x["unit_index"]))
    assert got == want
    for x in want:  # and each is the broker's filler unit in the file, where the row says
        raw = (new / x["cq_file"]).read_bytes()[x["file_offset"] : x["file_offset"] + 20]
        assert struct.unpack(">qiq", raw) == FILLER_UNIT
    assert rows[-1]["problems"] == 0 and rows[-1]["filler_units"] == len(want)
    table = run("cq", "verify", "-s", new)
    assert table.exit_code == 0 and (f"{len(want)} filler units of rmqdump repair" in table.stderr if want else "filler unit" not in table.stderr)


def _plant_filler_unit(root: Path, name: str) -> tuple[dict, dict]:
    """A filler unit written by hand over a message's unit in the middle of its queue: (that message, the record at 0)."""
    puts = sorted((m for m in manifest(name) if queued(m)), key=lambda m: m["wroteOffset"])
    first = puts[0]
    victim = next(m for m in puts if m["logicsOffset"] == 5 and (m["topic"], m["queueId"]) != (first["topic"], first["queueId"]))
    units = SETTINGS[name]["cq_units"]
    i = victim["logicsOffset"]
    patch(root / "consumequeue" / victim["topic"] / str(victim["queueId"]) / f"{i // units * units * 20:020d}", i % units * 20, struct.pack(">qiq", *FILLER_UNIT))
    return victim, first


def _java_hash(s: str) -> int:
    h = 0
    for (unit,) in struct.iter_unpack(">H", s.encode("utf-16-be")):  # String.hashCode over UTF-16 code units
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def _today(victim: dict, first: dict) -> set[tuple]:
    """What a filler unit in the middle of a queue is on a store rmqdump did not repair: a unit pointing at the record at
    offset 0 (another queue's), and the message it replaced without a unit."""
    t, q, i = victim["topic"], victim["queueId"], victim["logicsOffset"]
    at = {("cq_non_monotonic", t, q, i), ("cq_size_mismatch", t, q, i), ("cq_queue_offset_mismatch", t, q, i)}
    if first["topic"] != t:
        at.add(("cq_topic_mismatch", t, q, i))
    if first["queueId"] != q:
        at.add(("cq_queue_mismatch", t, q, i))
    if _java_hash(first.get("tags") or "") != 0:  # the record's tagsCode: String.hashCode of its TAGS (0 without)
        at.add(("cq_tags_code_mismatch", t, q, i))
    return at | {("cq_missing_unit", t, q, i)}


@pytest.mark.parametrize("with_report", [False, True])
def test_filler_unit_not_written_by_rmqdump_keeps_todays_problems(with_report, tmp_path):
    """A filler unit without repair's marker: no report, or a report naming the hole but no filler record of repair's
    in the CommitLog (the message's own record is still there)."""
    name = "rmq4-basic"
    root = copy_store(name, tmp_path)
    victim, first = _plant_filler_unit(root, name)
    if with_report:
        (root / "rmqdump-repair").mkdir()
        t, q, i = victim["topic"], victim["queueId"], victim["logicsOffset"]
        rng = {"phys_offset": victim["wroteOffset"], "length": victim["wroteBytes"], "action": "filler", "destroyed": []}
        hole = {"kind": "hole", "topic": t, "queue_id": q, "from": i, "to": i + 1}
        (root / "rmqdump-repair" / "report.json").write_text(json.dumps({"ranges": [rng], "holes": [hole]}), encoding="utf-8")
    code, probs, summary = verify(root)
    assert code == 1
    assert {(p["code"], p["topic"], p["queue_id"], p["unit_index"]) for p in probs} == _today(victim, first)
    assert summary["filler_units"] == 0


# --- the table: causes, not rows ---


def cq_units_on_disk(root: Path) -> set[tuple[str, int, int]]:
    """(topic, queue, queue offset) of every valid unit, parsed from the ConsumeQueue files' bytes (20-byte units:
    offset int64, size int32, tagsCode int64, big-endian; a file's name is its first unit's byte position)."""
    out = set()
    for qdir in (root / "consumequeue").glob("*/*"):
        for f in qdir.iterdir():
            data = f.read_bytes()
            for k in range(len(data) // 20):
                off, size, _ = struct.unpack_from(">qiq", data, k * 20)
                if off >= 0 and size > 0:
                    out.add((qdir.parent.name, int(qdir.name), (int(f.name) + k * 20) // 20))
    return out


def missing_runs(name: str, split_at: int | None = None) -> list[tuple]:
    """The manifest's queued messages with no unit on disk (the damaged record aside), as runs of consecutive queue
    offsets per queue: (topic, queue, first, last, count, first wroteOffset, last wroteOffset, wroteOffset >= split_at)."""
    base = REAL / name
    hit = {r["physicalOffset"] for r in json.loads((base / "damage.json").read_text(encoding="utf-8"))["recordsHit"]}
    have = cq_units_on_disk(base / "store")
    miss = sorted(
        (m["topic"], m["queueId"], m["logicsOffset"], m["wroteOffset"])
        for m in manifest(name)
        if m.get("kind", "put") == "put" and queued(m) and m["wroteOffset"] not in hit and (m["topic"], m["queueId"], m["logicsOffset"]) not in have
    )
    runs: list[list] = []
    for t, q, i, w in miss:
        late = split_at is not None and w >= split_at
        r = runs[-1] if runs else None
        if r and (r[0], r[1], r[7]) == (t, q, late) and r[3] == i - 1:
            r[3], r[4], r[6] = i, r[4] + 1, w
        else:
            runs.append([t, q, i, i, 1, w, w, late])
    return [tuple(r) for r in runs]


def test_table_shows_a_run_per_queue_the_damage_first():
    """midfile-magic: 1 bad_magic and 3,499 missing units (the crash's dispatch lag) are 1 + a line per run, not 3,500 rows."""
    name = "rmq53-damaged-midfile-magic"
    r = run("cq", "verify", "-s", REAL / name / "store")
    assert r.exit_code == 1
    lines = [x.split() for x in r.stdout.split("\n") if x.startswith(" bad_magic") or x.startswith(" cq_")]
    damage = json.loads((REAL / name / "damage.json").read_text(encoding="utf-8"))["recordsHit"][0]
    assert lines[0][:3] == ["bad_magic", "1", str(damage["physicalOffset"])]  # no topic, queue or units: count, phys
    want = missing_runs(name)
    got = [(x[1], int(x[2]), x[3], int(x[4]), x[5]) for x in lines[1:]]
    fmt = lambda a, b: str(a) if a == b else f"{a}..{b}"  # noqa: E731
    assert sorted(got) == sorted((t, q, fmt(a, b), n, fmt(wa, wb)) for t, q, a, b, n, wa, wb, _ in want)
    assert [x[0] for x in lines[1:]] == ["cq_missing_unit"] * len(want)
    assert "3,499 units missing in 12 queues" in r.stderr and len(want) < 30
