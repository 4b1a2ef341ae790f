"""The 5.3 RocksDB ConsumeQueue (rmq53-rocksdbcq) read through rocksdict, against the manifest; the evidence is never written."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
from collections import defaultdict
from pathlib import Path

import pytest
from conftest import REAL, flip, jsonl, manifest, run, run_proc

from rmqdump.schemas import RocksCQKey, RocksCQValue, RocksOffsetKey, RocksOffsetValue

NAME = "rmq53-rocksdbcq"
ROOT = REAL / NAME / "store"
UNITS = [m for m in manifest(NAME) if m["kind"] == "cq_unit"]
PER_QUEUE: dict[tuple[str, int], list[dict]] = defaultdict(list)
for _m in UNITS:
    PER_QUEUE[(_m["topic"], _m["queueId"])].append(_m)


def snapshot(d: Path) -> dict:
    """Every file under d with its size, mtime and content hash (the evidence must not change)."""
    out = {}
    for dirpath, _, files in os.walk(d):
        for f in files:
            p = Path(dirpath, f)
            st = p.stat()
            out[str(p.relative_to(d))] = (st.st_size, st.st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
    return out


@pytest.fixture(scope="module")
def evidence(tmp_path_factory) -> Path:
    """A read-only copy of the store: every command must work without write access to it."""
    root = tmp_path_factory.mktemp("rdb") / "store"
    shutil.copytree(ROOT, root)
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            os.chmod(os.path.join(dirpath, f), 0o444)
    for dirpath, dirs, _ in os.walk(root, topdown=False):
        for d in dirs:
            os.chmod(os.path.join(dirpath, d), 0o555)
    os.chmod(root, 0o555)
    yield root
    for dirpath, _dirs, _ in os.walk(root):
        os.chmod(dirpath, 0o755)


def test_commands_never_write_the_database():
    before = snapshot(ROOT)
    assert run("cq", "verify", "-s", ROOT).exit_code == 0
    assert run("cq", "dump", "-s", ROOT, "--topic", "RocksTopicA", "--queue", "0").exit_code == 0
    assert run("info", "-s", ROOT, "--no-recovery").exit_code == 0
    assert snapshot(ROOT) == before


def test_keys_and_values_are_the_schemas_layouts():
    from rocksdict import AccessType, Options, Rdict

    from rmqdump.readers.rocksdbcq import _mirror

    mirror = _mirror(str(ROOT / "consumequeue"))
    db = Rdict(
        mirror,
        options=Options(raw_mode=True),
        column_families={"default": Options(raw_mode=True), "offset": Options(raw_mode=True)},
        access_type=AccessType.read_only(),
    )
    want = {(m["topic"], m["queueId"], m["queueOffset"]): (m["commitLogOffset"], m["size"], m["tagsCode"], m["storeTime"]) for m in UNITS}
    got = {}
    for k, v in db.get_column_family("default").items():
        key, val = RocksCQKey.parse(k), RocksCQValue.parse(v)
        assert RocksCQKey.build(key) == k and RocksCQValue.build(val) == v
        got[(key.topic.decode(), key.queue_id, key.cq_offset)] = (val.commit_log_offset, val.size, val.tags_code, val.store_time)
    assert got == want
    bounds = {}
    for k, v in db.get_column_family("offset").items():
        key = RocksOffsetKey.parse(k)
        assert RocksOffsetKey.build(key) == k
        if key.topic == b"CHECKPOINT_TOPIC":
            continue
        val = RocksOffsetValue.parse(v)
        assert RocksOffsetValue.build(val) == v
        bounds[(key.topic.decode(), key.queue_id, key.bound.decode())] = val.cq_offset
    for (t, q), units in PER_QUEUE.items():
        offs = [u["queueOffset"] for u in units]
        assert bounds[(t, q, "min")] == min(offs) and bounds[(t, q, "max")] == max(offs)
    db.close()
    shutil.rmtree(mirror)


def test_cq_dump_gives_every_unit_of_the_manifest(evidence):
    for (t, q), units in PER_QUEUE.items():
        r = run("cq", "dump", "-s", evidence, "--topic", t, "--queue", q, "-f", "jsonl")
        assert r.exit_code == 0
        rows, tail = jsonl(r.stdout)[:-1], jsonl(r.stdout)[-1]
        assert (tail["kind"], tail["units"]) == ("unwritten", 0)  # RocksDB keeps written units only
        assert [(x["topic"], x["queue_id"], x["queue_offset"], x["phys_offset"], x["size"], x["tags_code"], x["store_time"]) for x in rows] == [
            (t, q, u["queueOffset"], u["commitLogOffset"], u["size"], u["tagsCode"], u["storeTime"]) for u in sorted(units, key=lambda u: u["queueOffset"])
        ]
    r = run("cq", "dump", "-s", evidence, "--topic", "RocksTopicB", "--queue", "1", "--from", "60", "--limit", "3", "--resolve", "-f", "jsonl")
    rows = jsonl(r.stdout)
    assert [x["queue_offset"] for x in rows] == [60, 61, 62]
    assert all(x["record"]["ok"] and x["record"]["queue_offset"] == x["queue_offset"] and x["record"]["total_size"] == x["size"] for x in rows)


def test_cq_verify_is_clean_with_exactly_the_manifest_units(evidence):
    r = run("cq", "verify", "-s", evidence, "-f", "jsonl")
    assert r.exit_code == 0, r.stdout[:2000]
    (s,) = jsonl(r.stdout)
    msgs = [m for m in manifest(NAME) if m["kind"] == "commitlog_msg"]
    assert (s["queues"], s["units"], s["messages"], s["problems"]) == (len(PER_QUEUE), len(UNITS), len(msgs), 0)


def test_info_and_seek_read_the_rocksdb_queues(evidence):
    r = run("info", "-s", evidence, "-f", "jsonl")
    assert r.exit_code == 0
    rows = jsonl(r.stdout)
    rec = next(x for x in rows if x["kind"] == "recovery")
    last = max(u["commitLogOffset"] + u["size"] for u in UNITS)  # the end of the last record a unit points at
    assert rec["truncated_bytes"] == 0 and rec["cq_max_phys_offset"] == last
    summary = json.loads(
        (REAL / NAME / "README.txt")
        .read_text()
        .split("Counts / results (summary written by the driver)")[1]
        .split("-\n{", 1)[1]
        .rsplit("}\n\nmanifest", 1)[0]
        .join("{}")
    )
    queues = {(x["topic"], x["queue_id"]): x for x in rows if x["kind"] == "queue"}
    assert {f"{t}/{q}": (x["min_offset"], x["max_offset"]) for (t, q), x in queues.items()} == {
        k: (v["minOffset"], v["maxOffset"]) for k, v in summary["queues"].items()
    }
    for key, units in PER_QUEUE.items():
        by = sorted(units, key=lambda u: u["queueOffset"])
        assert queues[key]["first_store_timestamp"] == by[0]["storeTime"] and queues[key]["last_store_timestamp"] == by[-1]["storeTime"]
    assert not [x for x in rows if x["kind"] in ("problem", "unsupported")]
    by = sorted(PER_QUEUE[("RocksTopicA", 2)], key=lambda u: u["queueOffset"])
    r = run("cq", "seek", "-s", evidence, "--topic", "RocksTopicA", "--queue", "2", "--time", str(by[30]["storeTime"]), "-f", "jsonl")
    (x,) = jsonl(r.stdout)
    assert x["queue_offset"] == min(u["queueOffset"] for u in by if u["storeTime"] >= by[30]["storeTime"])


def test_offsets_use_the_rocksdb_bounds(tmp_path):
    root = tmp_path / "store"
    shutil.copytree(ROOT, root)
    (root / "config").mkdir()
    table = {"RocksTopicA@g1": {"0": 10, "1": 99}, "RocksTopicB@g1": {"2": 70}}
    (root / "config" / "consumerOffset.json").write_text(json.dumps({"offsetTable": table}))
    r = run("offsets", "-s", root, "-f", "jsonl")
    rows = {(x["topic"], x["queue_id"]): x for x in jsonl(r.stdout) if x["kind"] != "summary"}
    qmax = {k: max(u["queueOffset"] for u in v) + 1 for k, v in PER_QUEUE.items()}  # each queue's max offset: its last unit + 1 (manifest)
    assert min(u["queueOffset"] for u in PER_QUEUE[("RocksTopicA", 0)]) == 0
    assert (rows[("RocksTopicA", 0)]["min_offset"], rows[("RocksTopicA", 0)]["max_offset"], rows[("RocksTopicA", 0)]["lag"]) == (
        0,
        qmax[("RocksTopicA", 0)],
        qmax[("RocksTopicA", 0)] - 10,
    )
    assert qmax[("RocksTopicA", 1)] < 99 and "above_max" in rows[("RocksTopicA", 1)]["flags"]
    assert qmax[("RocksTopicB", 2)] <= 70
    assert rows[("RocksTopicB", 2)]["lag"] == 0 and r.exit_code == 1


def test_renamed_copy_reads_the_same(tmp_path):
    other = tmp_path / "some" / "other-broker"
    shutil.copytree(ROOT, other)
    r = run("cq", "verify", "-s", other, "-f", "jsonl")
    assert r.exit_code == 0 and jsonl(r.stdout)[-1]["units"] == len(UNITS)


def _rewrite(root: Path, edit) -> None:
    """Change a copy's database through RocksDB itself (tests only; the evidence is never opened for writing)."""
    from rocksdict import AccessType, Options, Rdict

    db = Rdict(
        str(root / "consumequeue"),
        options=Options(raw_mode=True),
        column_families={"default": Options(raw_mode=True), "offset": Options(raw_mode=True)},
        access_type=AccessType.read_write(),
    )
    edit(db.get_column_family("default"))
    db.flush()
    db.close()


def _key(topic: str, qid: int, off: int) -> bytes:
    return RocksCQKey.build({"topic_length": len(topic), "topic": topic.encode(), "queue_id": qid, "cq_offset": off})


def test_damaged_units_are_found_at_their_key(tmp_path):
    root = tmp_path / "store"
    shutil.copytree(ROOT, root)
    u = next(m for m in UNITS if m["topic"] == "RocksTopicB" and m["queueId"] == 1 and m["queueOffset"] == 7)
    w = next(m for m in UNITS if m["topic"] == "RocksTopicA" and m["queueId"] == 2 and m["queueOffset"] == 12)

    def edit(cf):
        cf[_key("RocksTopicB", 1, 7)] = RocksCQValue.build(
            {"commit_log_offset": u["commitLogOffset"], "size": u["size"] + 1, "tags_code": u["tagsCode"], "store_time": u["storeTime"]}
        )
        cf[_key("RocksTopicA", 2, 12)] = b"\x00" * 27
        del cf[_key("RocksTopicB", 0, 20)]

    _rewrite(root, edit)
    r = run("cq", "verify", "-s", root, "-f", "jsonl")
    assert r.exit_code == 1
    probs = [x for x in jsonl(r.stdout) if x["kind"] == "problem"]
    at = {(p["code"], p["topic"], p["queue_id"], p["unit_index"]) for p in probs}
    # a value that is no unit, or a deleted key, leaves a hole in the queue at that offset (and its record without a unit)
    assert at == {
        ("cq_size_mismatch", "RocksTopicB", 1, 7),
        ("rocksdb_cq_bad_value", "RocksTopicA", 2, 12),
        ("cq_hole", "RocksTopicA", 2, 12),
        ("cq_missing_unit", "RocksTopicA", 2, 12),
        ("cq_hole", "RocksTopicB", 0, 20),
        ("cq_missing_unit", "RocksTopicB", 0, 20),
    }
    assert all(p["cq_file"] == str(root / "consumequeue") for p in probs if p["topic"] in ("RocksTopicA", "RocksTopicB") and p["unit_index"] in (7, 12))
    assert w["commitLogOffset"] in {p["phys_offset"] for p in probs}  # its record now has no readable unit


@pytest.mark.parametrize("at", [100, 3000, 6000, 7900])
def test_a_flipped_byte_in_a_data_block_is_a_corruption_at_its_block(tmp_path, at):
    root = tmp_path / "store"
    shutil.copytree(ROOT, root)
    sst = root / "consumequeue" / "000009.sst"
    flip(sst, at)
    r = run("cq", "verify", "-s", root, "-f", "jsonl")
    assert r.exit_code == 1, r.stderr  # a damaged block is a finding, not an unusable store
    probs = [x for x in jsonl(r.stdout) if x["kind"] == "problem" and x["code"] == "rocksdb_corruption"]
    # each position is inside the table's first data block, which starts the file: the block is named at offset 0
    assert [(p["file"], p["file_offset"]) for p in probs] == [(str(sst), 0)]


def _manifest_records(data: bytes) -> list[int]:
    """Offsets of the MANIFEST's physical log records (7-byte headers: crc u32, length u16, type u8; 32 KiB blocks)."""
    out, at = [], 0
    while at + 7 <= len(data):
        block_left = 32768 - at % 32768
        _crc, length, kind = struct.unpack_from("<IHB", data, at)
        if block_left < 7 or (kind == 0 and length == 0):
            at += block_left
            continue
        out.append(at)
        at += 7 + length
    return out


@pytest.mark.parametrize("kind", [5, 8, 11])
def test_a_recyclable_record_type_in_the_manifest_is_refused_at_its_byte(tmp_path, kind):
    """RocksDB's MANIFEST reader loops forever (holding the GIL) on a recycled WAL's record type, which its MANIFEST
    writer never writes: the command must name the record and stop, not hang. Run as a process, under a time limit."""
    root = tmp_path / "store"
    shutil.copytree(ROOT, root)
    man = root / "consumequeue" / (root / "consumequeue" / "CURRENT").read_text().strip()
    data = bytearray(man.read_bytes())
    at = _manifest_records(bytes(data))[3]  # a record in the middle: the walk must step over the ones before it
    data[at + 6] = kind
    man.write_bytes(bytes(data))
    r = run_proc("cq", "verify", "-s", root, timeout=60)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == [r.stderr.strip()]
    assert r.stderr.startswith(f"rmqdump: rocksdb_unreadable: {man}@{at}: record type {kind} "), r.stderr


def test_a_current_file_naming_no_manifest_is_one_error_line(tmp_path):
    """CURRENT damaged into a name no file can have (a NUL byte): RocksDB's own refusal, one line, exit 2."""
    root = tmp_path / "store"
    shutil.copytree(ROOT, root)
    cur = root / "consumequeue" / "CURRENT"
    cur.write_bytes(cur.read_bytes()[:9] + b"\0" + cur.read_bytes()[10:])
    r = run("cq", "dump", "-s", root, "--topic", "RocksTopicA", "--queue", "0")
    assert r.exit_code == 2, r.stderr
    assert r.stderr.startswith(f"rmqdump: rocksdb_unreadable: {root / 'consumequeue'}: ") and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_rebuild_writes_the_file_based_consumequeue_and_says_so(tmp_path):
    from rmqdump.schemas import ConsumeQueueUnit

    out = tmp_path / "out"
    r = run("rebuild", ROOT, "--out", out, "--hash-slots", "500", "--index-entries", "2000", "--cq-units-per-file", "120", "-f", "jsonl")
    assert r.exit_code == 0, r.stderr
    summary = jsonl(r.stdout)[-1]
    assert "RocksDB" in summary["note"] and "file-based" in summary["note"] and "RocksDB" in r.stderr
    for (t, q), units in PER_QUEUE.items():
        want = b"".join(
            ConsumeQueueUnit.build({"commit_log_offset": u["commitLogOffset"], "size": u["size"], "tags_code": u["tagsCode"]})
            for u in sorted(units, key=lambda u: u["queueOffset"])
        )
        got = (out / "consumequeue" / t / str(q) / f"{0:020d}").read_bytes()
        assert len(got) == 120 * 20 and got[: len(want)] == want and not any(got[len(want) :])


@pytest.mark.parametrize("damaged", [False, True])
def test_a_process_that_never_closes_the_database_leaves_no_mirror(tmp_path, damaged):
    """A Spark Python worker opens the queues and exits without closing them or running atexit hooks: its temp
    directory holds nothing of rmqdump's afterwards, whether the database opened or was refused."""
    import subprocess
    import sys

    db = ROOT / "consumequeue"
    if damaged:
        db = tmp_path / "db"
        shutil.copytree(ROOT / "consumequeue", db)
        (db / "CURRENT").write_text("MANIFEST-000099\n")  # a MANIFEST that is not there: refused after the mirror is made
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    code = (
        "import os, sys\n"
        "from rmqdump.common.problems import InputError\n"
        "from rmqdump.readers.rocksdbcq import open_queues\n"
        "try:\n"
        "    db, queues, _ = open_queues(sys.argv[1])\n"
        "    n = sum(q.bounds()[1] - q.bounds()[0] for q in queues.values())\n"
        "except InputError as e:\n"
        "    n = e.code\n"
        "print(n, flush=True)\n"
        "os._exit(0)\n"
    )
    r = subprocess.run([sys.executable, "-c", code, str(db)], capture_output=True, text=True, env=dict(os.environ, TMPDIR=str(scratch)), timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == ("rocksdb_unreadable" if damaged else str(len(UNITS)))
    assert sorted(p.name for p in scratch.iterdir()) == []


def test_a_database_file_that_cannot_be_copied_is_named_and_leaves_no_mirror(tmp_path, monkeypatch):
    """The mirror copies the database's mutable files (CURRENT, MANIFEST, OPTIONS, the WAL): one that cannot be read
    is the one-line input error naming it, exit 2, and nothing of the mirror stays in the temp directory."""
    import errno
    import tempfile

    import rmqdump.readers.rocksdbcq as R

    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    real_copy = R.shutil.copyfile

    def copy(src, dst, *a, **kw):
        if os.path.basename(src).startswith("OPTIONS-"):
            raise OSError(errno.EIO, os.strerror(errno.EIO), src)
        return real_copy(src, dst, *a, **kw)

    monkeypatch.setattr(R.shutil, "copyfile", copy)
    r = run("cq", "verify", "-s", ROOT)
    options = next(p for p in (ROOT / "consumequeue").iterdir() if p.name.startswith("OPTIONS-"))
    lines = r.stderr.strip().splitlines()
    assert r.exit_code == 2 and len(lines) == 1, r.stderr
    assert lines[0].startswith(f"rmqdump: rocksdb_unreadable: {options}") and os.strerror(errno.EIO) in lines[0] and "Traceback" not in r.stderr
    assert sorted(p.name for p in scratch.iterdir()) == []
