"""`cq dump` and `timer list` stop at the queue's (log's) end and close with one line counting what is unwritten after it.

Truth: every queue file of every store in fixtures/real parsed here with
`struct` and cut where the broker's ConsumeQueue.recover ends a queue (the
first unit with offset < 0 or size <= 0; for a Batch ConsumeQueue also
msgBaseOffset < 0 or batchSize <= 0), and the units each manifest says the
broker wrote (its `cq_unit` records, or for the older manifests every PUT_OK
put at its queue offset).
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
from pathlib import Path

import pytest
from conftest import REAL, jsonl, patch, run

CQ_UNIT = struct.Struct(">qiq")  # commitLogOffset, size, tagsCode (ConsumeQueue.CQ_STORE_UNIT_SIZE = 20)
BCQ_UNIT = struct.Struct(">qiqqqhii")  # offset, size, tagsCode, storeTime, msgBaseOffset, batchSize, compactedOffset, reserved (46)
TIMER_UNIT = 52  # TimerLog.UNIT_SIZE


def _roots() -> list[tuple[str, str]]:
    """(manifest dir name, store path relative to it or to the unpacked archive) of every store in fixtures/real."""
    out = []
    for d in sorted(p for p in REAL.iterdir() if p.is_dir()):
        for rel in ("store", "recovered", "master/store", "slave/store", "store.tar.gz"):
            if (d / rel).exists():
                out.append((d.name, rel))
    return out


ROOTS = _roots()


@pytest.fixture(scope="module")
def unpacked(tmp_path_factory):
    cache: dict[str, Path] = {}

    def get(name: str, rel: str) -> Path:
        if not rel.endswith(".tar.gz"):
            return REAL / name / rel
        if name not in cache:
            dest = tmp_path_factory.mktemp(name)
            subprocess.run(["tar", "-xzf", str(REAL / name / rel), "-C", str(dest)], check=True)
            cache[name] = dest / "store"
        return cache[name]

    return get


def _files(qdir: Path) -> list[Path]:
    return sorted(p for p in qdir.iterdir() if len(p.name) == 20 and p.name.isdigit())


def broker_queue(qdir: Path, batch: bool) -> tuple[list[tuple], int, int]:
    """(units up to the queue's end, unwritten units after it, the end's queue offset) as the broker's recovery walks the files."""
    units, rest, end_index, _ = unwritten_tail(qdir, batch)
    return units, rest, end_index


def unwritten_tail(qdir: Path, batch: bool) -> tuple[list[tuple], int, int, dict]:
    """broker_queue's answer and where the unwritten tail starts in the bytes: {cq_file, file_offset (in that file),
    not_zero (its units holding a byte other than zero)}."""
    unit = BCQ_UNIT if batch else CQ_UNIT
    units: list[tuple] = []
    rest = 0
    end_index = None
    tail = {"cq_file": None, "file_offset": None, "not_zero": 0}
    for f in _files(qdir):
        data = f.read_bytes()
        first = int(f.name) // unit.size
        for k in range(len(data) // unit.size):
            u = unit.unpack_from(data, k * unit.size)
            ok = u[0] >= 0 and u[1] > 0 and (not batch or (u[4] >= 0 and u[5] > 0))
            if rest or not ok:
                if end_index is None:
                    end_index = first + k
                    tail.update(cq_file=f.name, file_offset=k * unit.size)
                rest += 1
                tail["not_zero"] += any(data[k * unit.size : (k + 1) * unit.size])
            else:
                units.append(u if batch else (first + k, *u))
    return units, rest, end_index, tail


def _queues(root: Path) -> list[tuple[str, int, Path, bool]]:
    out = []
    for sub, batch in (("consumequeue", False), ("batchconsumequeue", True)):
        base = root / sub
        if not base.is_dir() or (base / "CURRENT").exists():  # a RocksDB ConsumeQueue: its own test below
            continue
        for t in sorted(base.iterdir()):
            for q in sorted(t.iterdir()):
                if q.is_dir() and _files(q):
                    out.append((t.name, int(q.name), q, batch))
    return out


def dump(root: Path, topic: str, qid: int, *args) -> tuple[int, list[dict], list[dict]]:
    r = run("cq", "dump", "-s", root, "-t", topic, "-q", qid, "-f", "jsonl", *args)
    rows = jsonl(r.stdout)
    return r.exit_code, [x for x in rows if x["kind"] == "unit"], rows


def _manifest(name: str) -> list[dict]:
    with open(REAL / name / "manifest.jsonl", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def manifest_units(name: str, rel: str) -> dict[tuple[str, int], set[tuple[int, int, int]]] | None:
    """(topic, queue) -> {(queue offset, commitLogOffset, size)} the manifest says the broker wrote; None where it says nothing about this root."""
    m = _manifest(name)
    side = rel.split("/")[0] if "/" in rel else None
    cq = [x for x in m if x.get("kind") == "cq_unit" and (side is None or x.get("side") == side)]
    if cq:
        out: dict = {}
        for x in cq:
            out.setdefault((x["topic"], x["queueId"]), set()).add((x["queueOffset"], x["commitLogOffset"], x["size"]))
        return out
    if any("kind" in x for x in m) or rel != "store":  # newer manifests without cq_unit: the puts below; crash's `recovered`: its own truth
        puts = [x for x in m if x.get("kind") == "put" and x.get("status") == "PUT_OK"]
    else:
        puts = [x for x in m if x.get("status") == "PUT_OK" and x.get("sysFlag", 0) & 0xC in (0, 8)]
    if not puts or rel != "store":
        return None
    out = {}
    for x in puts:
        out.setdefault((x["topic"], x["queueId"]), set()).add((x["logicsOffset"], x["wroteOffset"], x["wroteBytes"]))
    return out


@pytest.mark.parametrize(("name", "rel"), ROOTS, ids=[f"{n}/{r}" for n, r in ROOTS])
def test_dump_is_exactly_the_brokers_units_then_one_tail_line(name, rel, unpacked):
    root = unpacked(name, rel)
    queues = _queues(root)
    want = manifest_units(name, rel)
    seen: dict[tuple[str, int], set] = {}
    for topic, qid, qdir, batch in queues:
        units, rest, end, where = unwritten_tail(qdir, batch)
        code, got, rows = dump(root, topic, qid)
        assert code == (0 if units else 1), (topic, qid)
        tail = rows[-1]
        assert [x["kind"] for x in rows] == ["unit"] * len(units) + ["unwritten"], (topic, qid)
        assert (tail["topic"], tail["queue_id"], tail["units"]) == (topic, qid, rest)
        # where the tail starts: the byte offset in its own file, not the queue's; and how many of its units hold data
        assert (tail["cq_file"] and Path(tail["cq_file"]).name, tail["file_offset"], tail["not_zero"]) == (where["cq_file"], where["file_offset"], where["not_zero"]), (topic, qid)
        if batch:
            assert [(x["phys_offset"], x["size"], x["tags_code"], x["store_time"], x["queue_offset"], x["batch_size"]) for x in got] == [u[:6] for u in units]
        else:
            raw = [x.get("ext_address", x["tags_code"]) for x in got]
            assert [(x["unit_index"], x["phys_offset"], x["size"]) for x in got] == [u[:3] for u in units]
            assert raw == [u[3] for u in units]
            assert tail["first_unit"] == (end if end is not None else units[-1][0] + 1)
            if rest:
                assert tail["cq_file"].endswith(
                    f"{end * 20 // os.path.getsize(qdir / _files(qdir)[0].name) * os.path.getsize(qdir / _files(qdir)[0].name):020d}"
                )
        assert all(x["valid"] for x in got)
        seen[(topic, qid)] = {(x["queue_offset"], x["phys_offset"], x["size"]) for x in got if not x["filler"]}
    if want is not None:
        crashed = (root / "abort").exists()  # a crashed store's queues stop where their last flush did: a prefix of the puts
        for key, units in want.items():
            if key in seen:  # SimpleCQ / BatchCQ files (a RocksDB queue has its own test)
                end = max((u[0] for u in seen[key]), default=-1) if crashed else max(u[0] for u in units)
                assert seen[key] == {u for u in units if u[0] <= end}, key


def test_dump_all_lists_the_unwritten_units_too():
    root = REAL / "rmq4-basic" / "store"
    qdir = root / "consumequeue" / "TopicTest" / "0"
    units, rest, _ = broker_queue(qdir, False)
    assert rest  # the last file's unwritten tail
    code, got, rows = dump(root, "TopicTest", 0, "--all")
    assert code == 0 and len(got) == len(units) + rest and rows[-1]["units"] == rest
    assert all(x["valid"] for x in got[: len(units)]) and not any(x["valid"] for x in got[len(units) :])
    assert all((x["phys_offset"], x["size"], x["tags_code"]) == (0, 0, 0) for x in got[len(units) :])
    r = run("cq", "dump", "-s", root, "-t", "TopicTest", "-q", 0)  # the table: one line for the tail
    lines = r.stdout.strip("\n").split("\n")
    assert len(lines) == 1 + len(units) + 1 and lines[-1].startswith(f"end of queue: {rest} unwritten units")


def test_a_zero_unit_before_valid_ones_is_a_hole_still_listed(tmp_path):
    import shutil

    root = tmp_path / "s"
    shutil.copytree(REAL / "rmq4-basic" / "store", root)
    path = root / "consumequeue" / "orders" / "1" / f"{0:020d}"
    patch(path, 5 * 20, bytes(20))  # unit 5 zeroed, the units after it intact
    units, rest, _ = broker_queue(path.parent, False)
    code, got, rows = dump(root, "orders", 1)
    assert code == 0 and len(units) == 5  # the broker's recovery would end the queue there
    assert [x["unit_index"] for x in got] == list(range(len(got))) and len(got) > 6
    assert [x["valid"] for x in got[4:7]] == [True, False, True]
    assert rows[-1]["units"] == rest - (len(got) - 5)  # only what follows the last valid unit is unwritten
    r = run("cq", "verify", "-s", root, "-t", "orders", "-q", 1, "-f", "jsonl")
    hole = [(x["code"], x["unit_index"], x["file_offset"]) for x in jsonl(r.stdout) if x["kind"] == "problem" and x["code"] == "cq_hole"]
    assert r.exit_code == 1 and hole == [("cq_hole", 5, 5 * 20)]


def test_batch_hole_is_listed_and_the_tail_counted(tmp_path):
    import shutil

    root = tmp_path / "s"
    shutil.copytree(REAL / "rmq53-batchcq" / "store", root)
    qdir = root / "batchconsumequeue" / "BatchTopicBCQ" / "1"
    patch(qdir / f"{0:020d}", 2 * 46, bytes(46))
    before, _, _ = broker_queue(REAL / "rmq53-batchcq" / "store" / "batchconsumequeue" / "BatchTopicBCQ" / "1", True)
    code, got, rows = dump(root, "BatchTopicBCQ", 1)
    assert code == 0 and len(got) == len(before) and [x["valid"] for x in got[1:4]] == [True, False, True]
    assert rows[-1]["kind"] == "unwritten"


def test_rocksdb_queue_has_no_unwritten_units():
    root = REAL / "rmq53-rocksdbcq" / "store"
    want = {}
    for x in _manifest("rmq53-rocksdbcq"):
        if x["kind"] == "cq_unit":
            want.setdefault((x["topic"], x["queueId"]), []).append((x["queueOffset"], x["commitLogOffset"], x["size"], x["tagsCode"]))
    for (topic, qid), units in sorted(want.items()):
        code, got, rows = dump(root, topic, qid)
        assert code == 0 and [(x["queue_offset"], x["phys_offset"], x["size"], x["tags_code"]) for x in got] == sorted(units)
        assert rows[-1]["kind"] == "unwritten" and rows[-1]["units"] == 0 and len(rows) == len(units) + 1


def test_a_limited_listing_has_no_tail_line():
    root = REAL / "rmq4-basic" / "store"
    code, _, rows = dump(root, "TopicTest", 0, "--limit", 3)
    assert code == 0 and [x["kind"] for x in rows] == ["unit"] * 3


def test_timer_list_stops_at_the_logs_end_and_counts_the_unwritten_units(unpacked):
    root = unpacked("rmq53-timer", "store.tar.gz")
    m = _manifest("rmq53-timer")
    units = [x for x in m if x["kind"] == "timerlog_unit"]
    files = _files(root / "timerlog")
    last = files[-1]
    data = last.read_bytes()
    n = len(data) // TIMER_UNIT
    live = [k for k in range(n) if any(data[k * TIMER_UNIT : (k + 1) * TIMER_UNIT])]
    end = live[-1] + 1  # the last file holds no blank marker: the log ends after its last non-zero unit
    r = run("timer", "list", "-s", root, "-f", "jsonl")
    rows = jsonl(r.stdout)
    assert r.exit_code == 0 and [x["kind"] for x in rows] == ["timer"] * len(units) + ["unwritten"]
    tail = rows[-1]
    assert (tail["units"], tail["timer_log_offset"], tail["file_offset"]) == (n - end, int(last.name) + end * TIMER_UNIT, end * TIMER_UNIT)
    assert tail["timer_log_file"].endswith(last.name)


def test_dirty_unwritten_units_are_counted_where_the_tail_starts(tmp_path):
    """Bytes after a queue's end (a unit with offset -1 written three units past it): the closing row's not_zero and
    file_offset against the test's own parse of the file; a queue spanning files puts the tail in its last one."""
    import shutil

    root = tmp_path / "s"
    shutil.copytree(REAL / "rmq4-basic" / "store", root)
    qdir = root / "consumequeue" / "TopicTest" / "0"
    assert len(_files(qdir)) > 1  # the tail's file offset differs from its queue-wide one
    _, _, end, where = unwritten_tail(qdir, False)
    patch(qdir / where["cq_file"], where["file_offset"] + 3 * 20, CQ_UNIT.pack(-1, 7, 0))
    _, rest, end2, where2 = unwritten_tail(qdir, False)
    assert end2 == end and where2["not_zero"] == 1 and where2["file_offset"] < end * 20
    code, _, rows = dump(root, "TopicTest", 0)
    tail = rows[-1]
    assert code == 0
    assert (Path(tail["cq_file"]).name, tail["file_offset"], tail["not_zero"], tail["units"]) == (where2["cq_file"], where2["file_offset"], 1, rest)
