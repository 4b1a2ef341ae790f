"""`rmqdump repair`, judged by the broker's own recovery.

Each damaged store written by RocketMQ 5.3.3 (fixtures/real/rmq53-damaged-*) is
repaired, then the broker oracle (Apache RocketMQ 5.3.3's store code, unmodified)
restarts from the repaired copy. The truth is the store's manifest (every put:
wroteOffset, logicsOffset, uniqKey) and damage.json (the records the damage hit):
every intact message must still be readable at its physical offset, in its queue
at its queue offset, and the broker must truncate nothing. Hypothesis damages
copies of the real 4.x and 5.x fixtures at other places, with the oracle as judge.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import zlib
from pathlib import Path

import pytest
from conftest import ORACLE, REAL, ROOT, SETTINGS, broker_recovery, copy_store, flip, jsonl, need_oracle, patch, run, run_proc, unpack_store
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from rmqdump.schemas import BlankMarker, MessageRecord, message_header

DAMAGED = ["bodycrc", "clean-flip", "midfile-magic", "size-field", "unscanned-magic", "zeroed-page"]
SIZING = ["--hash-slots", "500", "--index-entries", "2000"]  # each damaged store's README.txt: maxHashSlotNum=500, maxIndexNum=2000
HOLE = 2147483647  # the broker's filler unit size (ConsumeQueue fillPreBlank: Integer.MAX_VALUE)
ROLLBACK = 0xC  # MessageSysFlag.TRANSACTION_ROLLBACK_TYPE


def puts(name: str) -> list[dict]:
    with open(REAL / name / "manifest.jsonl", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return [r for r in rows if r.get("kind", "put") == "put" and r.get("status", "PUT_OK") == "PUT_OK"]


def queued(m: dict) -> bool:
    """The broker's ConsumeQueue dispatcher takes transaction types none and commit only."""
    return m["sysFlag"] & 0xC in (0x0, 0x8)


def check_broker_keeps(o: dict, intact: list[dict]) -> None:
    """Every intact message readable in the walk at its offset, and in its queue at its queue offset; nothing truncated."""
    walk = {m["offset"]: m for m in o["commitLogWalk"]["messages"]}
    units = {k: {u[0]: u for u in q["units"]} for k, q in o["consumeQueues"].items()}
    missing = []
    for m in intact:
        w = walk.get(m["wroteOffset"])
        if w is None or w.get("uniqKey") != m.get("uniqKey") or w["size"] != m["wroteBytes"] or w["queueOffset"] != m["logicsOffset"]:
            missing.append(("walk", m["wroteOffset"]))
        elif queued(m) and units.get(f"{m['topic']}/{m['queueId']}", {}).get(m["logicsOffset"]) != [m["logicsOffset"], m["wroteOffset"], m["wroteBytes"]]:
            missing.append(("queue", m["topic"], m["queueId"], m["logicsOffset"]))
    assert missing == []
    end = max(m["wroteOffset"] + m["wroteBytes"] for m in intact)
    assert o["afterRecovery"]["maxPhyOffset"] == end  # the broker truncates nothing
    fillers = {off for off, w in walk.items() if w["sysFlag"] & 0xC == ROLLBACK and w["topic"] == ""}
    # no consumer is served a filler: no unit points at one (a hole's unit (0, Integer.MAX_VALUE) selects nothing, see check_hole)
    assert not [u for q in o["consumeQueues"].values() for u in q["units"] if u[1] in fillers and u[2] != HOLE]


def header_only(damage: dict) -> list[str] | None:
    """damage.json's one record hit, when only header fields (magicCode, totalSize) were: those fields."""
    hits = damage["recordsHit"]
    if len(hits) != 1 or not set(hits[0]["fieldsHit"]) <= {"magicCode", "totalSize"}:
        return None
    return hits[0]["fieldsHit"]


def check_hole(o: dict, m: dict) -> None:
    """The queue offset of a destroyed message: a filler unit (0, Integer.MAX_VALUE), or the queue's end if it was the last.

    What the broker serves there: DefaultMessageStore.getMessage asks CommitLog.getMessage(0, Integer.MAX_VALUE),
    which selects nothing (MappedFile.selectMappedBuffer needs pos + size <= its read position, and the record the
    walk shows at offset 0 is far shorter), so the pull steps past that queue offset to the next unit.
    """
    q = o["consumeQueues"][f"{m['topic']}/{m['queueId']}"]
    unit = next((u for u in q["units"] if u[0] == m["logicsOffset"]), None)
    if unit is None:
        assert q["maxOffset"] == m["logicsOffset"]
        return
    assert unit == [m["logicsOffset"], 0, HOLE]
    first = next(w for w in o["commitLogWalk"]["messages"] if w["offset"] == 0)
    assert first["size"] < HOLE


BLANK_MAGIC = 0xCBD43194  # CommitLog.BLANK_MAGIC_CODE
FILLER_HEAD = 91  # a V1 record with IPv4 hosts, empty body, topic and properties: 4+4+4+4+4+8+8+4+8+8+8+8+4+8+4+1+2


def replaced_bytes_model(new: Path, r: dict) -> bytes:
    """What a replaced range must hold, built here from the schemas: a BLANK marker (totalSize = the bytes left in the
    file, then zeros), or a rolled-back V1 record of exactly the range's length at its own offset (empty topic and
    properties, its body's CRC; only its body text and times are taken from the bytes written)."""
    with open(new / "commitlog" / Path(r["file"]).name, "rb") as f:
        f.seek(r["file_offset"])
        got = f.read(r["length"])
    if r["action"] == "blank":
        return BlankMarker.build({"total_size": r["length"], "magic": BLANK_MAGIC}) + bytes(r["length"] - 8)
    assert r["action"] == "filler"
    rec = MessageRecord.parse(got)
    body = rec.body
    assert len(body) == r["length"] - FILLER_HEAD
    host = {"address": bytes(4), "port": 0}
    return MessageRecord.build(
        {
            "total_size": r["length"], "magic": 0xDAA320A7, "body_crc": zlib.crc32(body) & 0x7FFFFFFF, "queue_id": 0, "flag": 0,
            "queue_offset": 0, "phys_offset": r["phys_offset"], "sys_flag": ROLLBACK, "born_timestamp": rec.born_timestamp,
            "born_host": host, "store_timestamp": rec.store_timestamp, "store_host": host, "reconsume_times": 0,
            "prepared_transaction_offset": 0, "body_length": len(body), "body": body, "topic_length": 0, "topic": b"",
            "properties_length": 0, "properties": b"",
        }
    )  # fmt: skip


def check_replaced_bytes(new: Path, ranges: list[dict]) -> None:
    for r in ranges:
        if r["action"] in ("blank", "filler"):
            with open(new / "commitlog" / Path(r["file"]).name, "rb") as f:
                f.seek(r["file_offset"])
                assert f.read(r["length"]) == replaced_bytes_model(new, r), r


def check_markers_walked(o: dict, ranges: list[dict], size: int) -> None:
    """The broker walks each BLANK marker repair wrote as one, going on at the next file; nothing is undecodable."""
    events = {e["offset"]: e for e in o["commitLogWalk"]["events"]}
    assert not [e for e in events.values() if "BLANK" not in e["event"]]
    for r in ranges:
        if r["action"] == "blank":
            e = events.get(r["phys_offset"])
            assert e is not None and e["event"].startswith("BLANK end-of-file marker") and e["continuedAt"] == (r["phys_offset"] // size + 1) * size, e


def _classpath() -> str:
    """The oracle's classpath, as its `recover` script builds it (RocketMQ 5.3.3's classes, pyspark's and Debian's jars)."""
    import glob

    import pyspark

    jars = os.path.join(os.path.dirname(pyspark.__file__), "jars")
    cp = [str(ORACLE.parent / "rmq533-recover-oracle.jar")]
    skip = ("netty-all-", "tcnative", "kqueue", "aarch", "riscv", "osx", "windows")
    cp += [f for f in sorted(glob.glob(f"{jars}/netty-*.jar")) if not any(k in os.path.basename(f) for k in skip)]
    for name in ("guava", "failureaccess", "commons-lang3", "commons-io", "commons-codec", "lz4-java", "zstd-jni", "rocksdbjni", "slf4j-api"):
        cp += sorted(glob.glob(f"{jars}/{name}-*.jar"))
    cp += [f"/usr/share/java/{n}.jar" for n in ("jna", "commons-validator", "commons-collections3")]
    return ":".join(cp)


def broker_program(tmp_path_factory, name: str):
    """run(*args) -> the JSON lines tests/broker/NAME.java prints, compiled once against the oracle's classes (the
    broker's own store code); `copy_of(store)` gives a scratch copy for it to open."""
    need_oracle()
    jvm = Path("/usr/lib/jvm")
    java = next(iter(sorted(jvm.glob("java-17-openjdk-*/bin/java"))), None) or shutil.which("java")
    javac = next((str(j) for j in [Path(java or "/").parent / "javac", *sorted(jvm.glob("*/bin/javac"))] if j.exists()), None) or shutil.which("javac")
    if java is None or javac is None:
        if os.environ.get("CI"):
            pytest.fail("a Java 17 runtime and a javac (17 or later) are needed to run the broker's store code (.ci/run installs them)")
        pytest.skip("no java 17 and javac")
    classes = tmp_path_factory.mktemp(name.lower())
    cp = _classpath()
    sources = sorted(str(f) for f in (ROOT / "tests" / "broker").glob("*.java"))  # together: one program uses another's helpers
    subprocess.run([javac, "--release", "17", "-nowarn", "-d", str(classes), "-cp", cp, *sources], check=True)
    opens = [f"--add-opens=java.base/{m}=ALL-UNNAMED" for m in ("java.nio", "sun.nio.ch", "java.lang", "jdk.internal.misc", "java.util")]

    def run(store: Path, args_before: list, args_after: list) -> list[dict]:
        copy = tmp_path_factory.mktemp(f"{name.lower()}copy") / "store"
        shutil.copytree(store, copy)
        cmd = [str(java), "-Xmx512m", "--add-exports=java.base/sun.nio.ch=ALL-UNNAMED", *opens, "-Djna.boot.library.path=/usr/lib/jni"]
        cmd += ["-cp", f"{classes}:{cp}", f"rmqdumptest.{name}", *map(str, args_before), str(copy), *map(str, args_after)]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stdout + p.stderr[-2000:]
        shutil.rmtree(copy.parent, ignore_errors=True)
        return [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]

    return run


@pytest.fixture(scope="session")
def broker_pull(tmp_path_factory):
    """pull(store, topic, queue_id, offsets, sizes) -> what DefaultMessageStore.getMessage serves at each offset after
    the broker's restart on a copy of the store (tests/broker/PullAt.java)."""
    run = broker_program(tmp_path_factory, "PullAt")

    def pull(store: Path, topic: str, queue_id: int, offsets: list[int], sizes: list[int]) -> list[dict]:
        return run(store, [], [*sizes, topic, queue_id, *offsets])

    return pull


def served(every: list[dict], topic: str, queue_id: int, start: int, gone: set[int], n: int = 32) -> list[list[int]]:
    """What a pull from `start` must serve, from the manifest: the queue's next n queue offsets, the destroyed ones left out."""
    q = sorted((m for m in every if m["topic"] == topic and m["queueId"] == queue_id and m["logicsOffset"] >= start), key=lambda m: m["logicsOffset"])
    return [[m["logicsOffset"], m["wroteOffset"], m["wroteBytes"]] for m in q[:n] if m["wroteOffset"] not in gone]


def repair_cli(*args) -> tuple[int, list[dict]]:
    r = run("repair", *args, "-f", "jsonl")
    return r.exit_code, jsonl(r.stdout)


# --- the filler: bytes the broker's recovery accepts ------------------------------------------------


def test_filler_is_a_rolled_back_record_of_the_range_length():
    """calMsgLength (MessageExtEncoder) of the parsed fields equals the length; body CRC as UtilAll.crc32; rollback type."""
    from rmqdump.builders.filler import MIN_FILLER, blank_marker, filler_record

    for length in (MIN_FILLER, MIN_FILLER + 1, 247, 4553):
        data = filler_record(1_420_015, length, 1795644235799)
        r = MessageRecord.parse(data)
        # 4 totalSize, 4 magic, 4 bodyCRC, 4 queueId, 4 flag, 8 queueOffset, 8 physicalOffset, 4 sysFlag, 8 bornTimestamp,
        # 8 bornHost (IPv4), 8 storeTimestamp, 8 storeHost, 4 reconsumeTimes, 8 preparedTransactionOffset, 4 + body,
        # 1 + topic (V1), 2 + properties
        cal = 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + 8 + 8 + 8 + 4 + 8 + 4 + r.body_length + 1 + r.topic_length + 2 + r.properties_length
        assert len(data) == r.total_size == cal == length
        assert r.magic == 0xDAA320A7 and r.sys_flag & 0xC == ROLLBACK and r.phys_offset == 1_420_015
        assert r.body_crc == zlib.crc32(r.body) & 0x7FFFFFFF
    assert MIN_FILLER == 91
    with pytest.raises(ValueError):
        filler_record(0, MIN_FILLER - 1, 0)
    b = blank_marker(300)
    assert len(b) == 300 and b[:8] == (300).to_bytes(4, "big") + bytes.fromhex("CBD43194")


# --- the damaged stores, judged by the broker ---------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["local", "spark"])
@pytest.mark.parametrize("name", DAMAGED)
def test_broker_restarts_from_repair_keeping_every_intact_message(name, engine, tmp_path, request):
    """Also with --engine spark: each range scanned and copied by a Spark task on a real local[2] session."""
    base = REAL / f"rmq53-damaged-{name}"
    damage = json.loads((base / "damage.json").read_text(encoding="utf-8"))
    before = json.loads((base / "broker-recovery.json").read_text(encoding="utf-8"))
    hit = {r["physicalOffset"] for r in damage["recordsHit"]}
    every = puts(f"rmq53-damaged-{name}")
    intact = [m for m in every if m["wroteOffset"] not in hit]
    end = max(m["wroteOffset"] + m["wroteBytes"] for m in every)
    assert before["afterRecovery"]["maxPhyOffset"] < end or name == "unscanned-magic"  # what the broker does without repair

    new = tmp_path / "new"
    spark = ()
    if engine == "spark":
        request.getfixturevalue("spark")  # the module's session, which the command then uses
        spark = ("--engine", "spark", "--master", "local[2]")
    code, rows = repair_cli("-s", base / "store", "--out", new, *SIZING, *spark)
    assert code == 1
    ranges = [r for r in rows if r["kind"] == "range"]
    restored = header_only(damage)  # the damaged record's header alone: written back restored, the broker keeps it
    assert ranges and all(r["action"] == ("header_restored" if restored else "filler") for r in ranges)
    assert not (new / "abort").exists()

    o = broker_recovery(new, tmp_path / "oracle.json")
    assert o["recoveryPath"].startswith("normal")
    check_broker_keeps(o, every if restored else intact)
    check_markers_walked(o, ranges, 262144)  # README.txt: mappedFileSizeCommitLog=262144
    check_replaced_bytes(new, ranges)

    walk = {w["offset"]: w for w in o["commitLogWalk"]["messages"]}
    for m in every:
        if m["wroteOffset"] not in hit or restored:
            continue
        w = walk.get(m["wroteOffset"])
        if w is not None and not (w["sysFlag"] & 0xC == ROLLBACK and w["topic"] == ""):
            # the half-zeroed record of zeroed-page: the broker accepts it as it is (README), so repair leaves it
            assert name == "zeroed-page" and w["uniqKey"] != m["uniqKey"]
            continue
        # destroyed: inside a replaced range, its queue offset a hole
        assert any(r["phys_offset"] <= m["wroteOffset"] < r["end"] for r in ranges)
        check_hole(o, m)
    # every damaged byte lies in a replaced range, and the quarantine holds the original bytes of each
    lo, hi = damage["physicalOffset"], damage["physicalOffset"] + damage["length"]
    assert any(r["phys_offset"] <= lo and hi <= r["end"] for r in ranges) or name == "zeroed-page"
    index = json.loads((new / "rmqdump-repair" / "quarantine.json").read_text(encoding="utf-8"))
    qbytes = (new / "rmqdump-repair" / "quarantine.bin").read_bytes()
    assert len(index["ranges"]) == len(ranges)
    for q in index["ranges"]:
        with open(base / "store" / q["file"], "rb") as f:
            f.seek(q["file_offset"])
            src = f.read(q["length"])
        assert qbytes[q["quarantine_offset"] : q["quarantine_offset"] + q["length"]] == src
        assert hashlib.sha256(src).hexdigest() == q["sha256"]
    # a record whose header still reads (body CRC mismatch) is named in its range: damage.json's record
    if restored:  # the record written back is the one the broker wrote: the store's bytes with damage.json's old bytes
        (r,) = ranges
        (h,) = damage["recordsHit"]
        assert (r["phys_offset"], r["length"]) == (h["physicalOffset"], h["size"])
        assert r["restored"]["header_fields"] == [{"magicCode": "magic_code", "totalSize": "total_size"}[f] for f in restored]
        want = bytearray((base / "store" / damage["file"]).read_bytes())
        want[damage["fileOffset"] : damage["fileOffset"] + damage["length"]] = bytes.fromhex(damage["oldBytesHex"])
        got = (new / damage["file"]).read_bytes()
        at = r["file_offset"]
        assert got[at : at + r["length"]] == want[at : at + r["length"]]
        assert index["ranges"][0]["replaced_by"] == "header_restored"
    named = [(d["phys_offset"], d["topic"], d["queue_id"], d["queue_offset"], d["uniq_key"]) for r in ranges for d in r["destroyed"]]
    crc_hit = [
        (h["physicalOffset"], h["topic"], h["queueId"], h["queueOffset"], h["uniqKey"]) for h in damage["recordsHit"] if name in ("bodycrc", "clean-flip")
    ]
    assert named == crc_hit
    report = json.loads((new / "rmqdump-repair" / "report.json").read_text(encoding="utf-8"))
    assert [r["phys_offset"] for r in report["ranges"]] == [r["phys_offset"] for r in ranges]


@pytest.mark.slow
def test_zeroed_page_range_and_neighbours(tmp_path):
    """The zeroed page: one range from the first record whose header was zeroed to the next whole record (damage.json)."""
    base = REAL / "rmq53-damaged-zeroed-page"
    damage = json.loads((base / "damage.json").read_text(encoding="utf-8"))
    hit = sorted(damage["recordsHit"], key=lambda r: r["physicalOffset"])
    headers = [r for r in hit if any(f.startswith("header") for f in r["fieldsHit"])]
    start = headers[0]["physicalOffset"]
    stop = headers[-1]["physicalOffset"] + headers[-1]["size"]
    code, rows = repair_cli("-s", base / "store", "--out", tmp_path / "new", *SIZING)
    ranges = [r for r in rows if r["kind"] == "range"]
    assert code == 1 and [(r["phys_offset"], r["end"], r["codes"], r["action"]) for r in ranges] == [(start, stop, ["zeroed_range"], "filler")]
    survivor = hit[0]  # properties half zeroed, header intact: the record before the range
    assert ranges[0]["before"]["phys_offset"] == survivor["physicalOffset"]
    nxt = min((m for m in puts("rmq53-damaged-zeroed-page") if m["wroteOffset"] >= stop), key=lambda m: m["wroteOffset"])
    assert ranges[0]["after"]["uniq_key"] == nxt["uniqKey"] and ranges[0]["after"]["phys_offset"] == stop


@pytest.mark.slow
def test_zeroed_file_tail_before_later_files_gets_a_blank_marker(tmp_path):
    """The last record of the first file and its BLANK marker zeroed: the broker would stop at the zeros and delete
    every later file; repair closes the file with a BLANK marker and the walk goes on in the next file."""
    name = "rmq4-basic"
    root = copy_store(name, tmp_path)
    size = SETTINGS[name]["commitlog"]
    every = sorted(puts(name), key=lambda m: m["wroteOffset"])
    last = max((m for m in every if m["wroteOffset"] < size), key=lambda m: m["wroteOffset"])
    path = root / "commitlog" / f"{0:020d}"
    data = bytearray(path.read_bytes())
    data[last["wroteOffset"] :] = bytes(size - last["wroteOffset"])
    path.write_bytes(bytes(data))
    s = SETTINGS[name]
    code, rows = repair_cli("-s", root, "--out", tmp_path / "new", "--hash-slots", s["hash_slots"], "--index-entries", s["index_entries"])
    ranges = [r for r in rows if r["kind"] == "range"]
    assert code == 1
    assert [(r["phys_offset"], r["end"], r["codes"], r["action"]) for r in ranges] == [(last["wroteOffset"], size, ["zeroed_range"], "blank")]
    check_replaced_bytes(tmp_path / "new", ranges)
    o = broker_recovery(tmp_path / "new", tmp_path / "oracle.json")
    check_broker_keeps(o, [m for m in every if m is not last])
    check_markers_walked(o, ranges, size)
    check_hole(o, last)
    # after a crash (abort file) with a checkpoint older than every file, the broker's abnormal recovery walks every
    # file from the first, across the marker, and re-dispatches: it keeps every intact message all the same
    crashed = tmp_path / "crashed"
    shutil.copytree(tmp_path / "new", crashed)
    (crashed / "abort").write_bytes(b"")
    patch(crashed / "checkpoint", 0, bytes(16))  # physicMsgTimestamp, logicsMsgTimestamp: 0
    o = broker_recovery(crashed, tmp_path / "oracle-abort.json")
    assert o["recoveryPath"].startswith("abnormal")
    walked = [x["message"] for x in o["log"]["infoDuringLoad"] if x["message"].startswith("recover next physics file")]
    assert walked[0].endswith(f"/commitlog/{size:020d}")  # it started in the first file and crossed its marker
    check_broker_keeps(o, [m for m in every if m is not last])
    check_markers_walked(o, ranges, size)


@pytest.mark.slow
def test_damage_in_the_last_record_is_left_to_the_broker(tmp_path):
    """Nothing intact after the damage: the range is left (the broker's truncation there loses nothing)."""
    name = "rmq4-basic"
    root = copy_store(name, tmp_path)
    every = sorted(puts(name), key=lambda m: m["wroteOffset"])
    _damage(root, name, every[-1], "magic", 0)
    s = SETTINGS[name]
    code, rows = repair_cli("-s", root, "--out", tmp_path / "new", "--hash-slots", s["hash_slots"], "--index-entries", s["index_entries"])
    ranges = [r for r in rows if r["kind"] == "range"]
    assert code == 1
    assert [(r["phys_offset"], r["action"]) for r in ranges] == [(every[-1]["wroteOffset"], "left")]
    assert "loses nothing" in ranges[0]["why"]
    o = broker_recovery(tmp_path / "new", tmp_path / "oracle.json")
    check_broker_keeps(o, every[:-1])


def _cq_units(root: Path, topic: str, queue_id: int) -> bytes:
    """A queue's ConsumeQueue files, one after the other (each file holds SETTINGS' cq_units units of 20 bytes)."""
    qdir = root / "consumequeue" / topic / str(queue_id)
    return b"".join((qdir / n).read_bytes() for n in sorted(os.listdir(qdir)))


def test_body_crc_failed_in_the_last_record_is_left_with_the_unit_the_broker_wrote(tmp_path):
    """A body CRC failure in the last record: nothing intact follows, so the record is left as it is and the
    rebuilt queue keeps the unit the broker wrote for it. (The scan holds a CRC-failed record back from the
    builders until the plan says whether it is replaced; one left is given to them after every other record.)"""
    name = "rmq4-basic"
    root = copy_store(name, tmp_path)
    every = sorted(puts(name), key=lambda m: m["wroteOffset"])
    last = every[-1]
    assert queued(last) and last["body_len"] > 0
    _damage(root, name, last, "body_flip", 0)
    s = SETTINGS[name]
    code, rows = repair_cli("-s", root, "--out", tmp_path / "new", "--hash-slots", s["hash_slots"], "--index-entries", s["index_entries"], "--cq-units-per-file", s["cq_units"])
    ranges = [r for r in rows if r["kind"] == "range"]
    assert code == 1
    assert [(r["phys_offset"], r["codes"], r["action"]) for r in ranges] == [(last["wroteOffset"], ["body_crc_mismatch"], "left")]
    assert not [r for r in rows if r["kind"] == "hole"]
    (summary,) = [r for r in rows if r["kind"] == "summary"]
    assert summary["records"] == summary["rebuild"]["records"] == summary["rebuild"]["messages"] == len(every)  # each record once
    at = last["logicsOffset"] * 20
    broker = _cq_units(root, last["topic"], last["queueId"])  # the broker's own queue, untouched by the damage
    assert _cq_units(tmp_path / "new", last["topic"], last["queueId"])[: at + 20] == broker[: at + 20]
    assert int.from_bytes(broker[at : at + 8], "big") == last["wroteOffset"]


@pytest.mark.parametrize(("which", "cut"), [("second", 1000), ("first", 0), ("last", 10_000)])
def test_a_commitlog_file_cut_short_is_padded_and_the_broker_loads_the_repaired_copy(tmp_path, which, cut):
    """A copy of a store cut short (one file of 1000, 0 or 10,000 bytes, the others 131072): the broker refuses to load
    such a store at all (MappedFileQueue.load: a file of another size). Repair pads the file's copy to the configured
    size and closes what is left of it with a BLANK marker where its intact records end (the last file: left, nothing
    intact follows), and the broker's own recovery of NEWDIR keeps every message the cut did not take with it."""
    name = "rmq4-basic"
    root = copy_store(name, tmp_path)
    size = SETTINGS[name]["commitlog"]
    base = {"first": 0, "second": size, "last": max(int(p.name) for p in (root / "commitlog").iterdir())}[which]
    os.truncate(root / "commitlog" / f"{base:020d}", cut)
    every = sorted(puts(name), key=lambda m: m["wroteOffset"])
    lost = [m for m in every if base <= m["wroteOffset"] < base + size and m["wroteOffset"] + m["wroteBytes"] > base + cut]  # not whole in the cut file
    intact = [m for m in every if m not in lost]
    lost_from = min(m["wroteOffset"] for m in lost)
    s = SETTINGS[name]
    code, rows = repair_cli("-s", root, "--out", tmp_path / "new", "--hash-slots", s["hash_slots"], "--index-entries", s["index_entries"])
    assert code == 1
    ranges = [r for r in rows if r["kind"] == "range"]
    source = run("info", "-s", root).stdout  # info names what keeps the broker from loading it, and the way out
    assert f"the broker would refuse to load: commitlog_file_size: {root / 'commitlog' / f'{base:020d}'}@{cut}: " in source
    assert f"a copy it loads (files padded or cut to size): rmqdump repair {root} --out NEWDIR" in source
    assert "refuse to load" not in run("info", "-s", tmp_path / "new").stdout
    want = (lost_from, base + cut, "left") if which == "last" else (lost_from, base + size, "blank")
    assert [(r["phys_offset"], r["end"], r["action"]) for r in ranges] == [want]
    assert (tmp_path / "new" / "commitlog" / f"{base:020d}").stat().st_size == size
    o = broker_recovery(tmp_path / "new", tmp_path / "oracle.json")
    assert o["recoveryPath"].startswith("normal")
    check_broker_keeps(o, intact)


def test_a_commitlog_file_grown_past_the_others_is_cut_and_its_excess_kept_in_the_quarantine(tmp_path):
    """264 bytes appended to a CommitLog file (the broker refuses to load a file of another size): its copy is cut to
    the configured size, the 264 bytes go to the quarantine, and the broker's recovery of NEWDIR keeps every put."""
    name = "rmq4-basic"
    root = copy_store(name, tmp_path)
    size = SETTINGS[name]["commitlog"]
    grown = root / "commitlog" / f"{3 * size:020d}"
    tail = bytes(i % 251 + 1 for i in range(264))
    with open(grown, "ab") as f:
        f.write(tail)
    s = SETTINGS[name]
    code, rows = repair_cli("-s", root, "--out", tmp_path / "new", "--hash-slots", s["hash_slots"], "--index-entries", s["index_entries"])
    assert code == 1 and not [r for r in rows if r["kind"] == "range"]  # no record was damaged; the file's size was wrong
    (summary,) = [r for r in rows if r["kind"] == "summary"]
    assert summary["resized_files"] == [grown.name] and summary["layout_problems"] == []
    assert {p.stat().st_size for p in (tmp_path / "new" / "commitlog").iterdir()} == {size}
    index = json.loads((tmp_path / "new" / "rmqdump-repair" / "quarantine.json").read_text(encoding="utf-8"))
    (q,) = index["ranges"]
    assert (q["file"], q["file_offset"], q["length"], q["replaced_by"]) == (f"commitlog/{grown.name}", size, 264, "cut")
    assert (tmp_path / "new" / "rmqdump-repair" / "quarantine.bin").read_bytes()[q["quarantine_offset"] :][:264] == tail
    o = broker_recovery(tmp_path / "new", tmp_path / "oracle.json")
    check_broker_keeps(o, puts(name))


@pytest.mark.slow
def test_broker_pull_steps_over_a_hole(tmp_path, broker_pull):
    """bodycrc's destroyed message (orders/1 queue offset 244, damage.json): after the restart on NEWDIR the broker's
    pull from 243 serves 243, 245, 246 ... and from 244 starts at 245: the hole is stepped over, nothing else missed."""
    base = REAL / "rmq53-damaged-bodycrc"
    hit = json.loads((base / "damage.json").read_text(encoding="utf-8"))["recordsHit"][0]
    new = tmp_path / "new"
    assert repair_cli("-s", base / "store", "--out", new, *SIZING)[0] == 1
    every = puts("rmq53-damaged-bodycrc")
    topic, qid, qo = hit["topic"], hit["queueId"], hit["queueOffset"]
    got = broker_pull(new, topic, qid, [qo - 1, qo], [262144, 6000, 500, 2000])  # the README.txt's file sizes
    gone = {hit["physicalOffset"]}
    assert got[0]["status"] == "FOUND" and got[0]["messages"] == served(every, topic, qid, qo - 1, gone, 33)[:32]
    assert got[1]["status"] == "FOUND" and got[1]["messages"] == served(every, topic, qid, qo + 1, gone)


@pytest.mark.slow
def test_hole_in_the_first_commitlog_file_caveat(tmp_path, broker_pull):
    """The documented caveat, shown by the broker: the first record of rmq4-basic destroyed (TopicTest/2 queue offset 0).
    A pull from 1 serves 1, 2, ...; a pull from the hole misses at offset 0 and skips the units below the end of the
    first CommitLog file (131072, README.txt) in that pull. repair's report flags that hole."""
    name = "rmq4-basic"
    root = copy_store(name, tmp_path)
    every = sorted(puts(name), key=lambda m: m["wroteOffset"])
    first = every[0]
    _damage(root, name, first, "magic", 0)
    assert first["body_len"] > 0
    _damage(root, name, first, "body_flip", 0)  # its body CRC fails too: nothing proves it, it is destroyed
    s = SETTINGS[name]
    new = tmp_path / "new"
    code, rows = repair_cli("-s", root, "--out", new, "--hash-slots", s["hash_slots"], "--index-entries", s["index_entries"])
    holes = [r for r in rows if r["kind"] == "hole"]
    assert code == 1 and [(h["topic"], h["queue_id"], h["from"], h["to"]) for h in holes] == [(first["topic"], first["queueId"], 0, 1)]
    assert "caveat" in holes[0]
    sizes = [s["commitlog"], s["cq_units"] * 20, s["hash_slots"], s["index_entries"]]
    got = broker_pull(new, first["topic"], first["queueId"], [1, 0], sizes)
    gone = {first["wroteOffset"]}
    assert got[0]["messages"] == served(every, first["topic"], first["queueId"], 1, gone)
    after_first_file = [u for u in served(every, first["topic"], first["queueId"], 0, gone, 200) if u[1] >= s["commitlog"]]
    assert got[1]["messages"] == after_first_file[: len(got[1]["messages"])] and got[1]["messages"]


@pytest.mark.slow
def test_range_shorter_than_any_record_is_left_and_said(tmp_path):
    """50 garbage bytes, then a whole valid record up to the next one (crafted from schemas.MessageRecord): no filler
    fits in 50 bytes, so repair leaves that range and says why. In the last data file (which the normal recovery
    walks) the broker then truncates there, and nowhere before."""
    name = "rmq4-basic"
    root = copy_store(name, tmp_path)
    size = SETTINGS[name]["commitlog"]
    every = sorted(puts(name), key=lambda m: m["wroteOffset"])
    last_file = every[-1]["wroteOffset"] // size * size
    rec = next(m for m in every if m["wroteOffset"] >= last_file and m["wroteBytes"] >= 200 and m is not every[-1])
    at, n = rec["wroteOffset"] + 50, rec["wroteBytes"] - 50
    fake = {"total_size": n, "magic": 0xDAA320A7, "body_crc": 0, "queue_id": 0, "flag": 0, "queue_offset": 0, "phys_offset": at}
    fake |= {"sys_flag": ROLLBACK, "born_timestamp": 1, "born_host": {"address": bytes(4), "port": 0}, "store_timestamp": 1}
    fake |= {"store_host": {"address": bytes(4), "port": 0}, "reconsume_times": 0, "prepared_transaction_offset": 0}
    fake |= {"body_length": 0, "body": b"", "topic_length": 1, "topic": b"x", "properties_length": n - 92, "properties": b"a" * (n - 92)}
    raw = MessageRecord.build(fake)
    assert len(raw) == n
    path = root / "commitlog" / f"{at // size * size:020d}"
    data = bytearray(path.read_bytes())
    base = at // size * size
    data[rec["wroteOffset"] - base : at - base] = b"\x5a" * 50
    data[at - base : at - base + n] = raw
    path.write_bytes(bytes(data))
    s = SETTINGS[name]
    code, rows = repair_cli("-s", root, "--out", tmp_path / "new", "--hash-slots", s["hash_slots"], "--index-entries", s["index_entries"])
    ranges = [r for r in rows if r["kind"] == "range"]
    assert code == 1
    assert [(r["phys_offset"], r["length"], r["action"]) for r in ranges] == [(rec["wroteOffset"], 50, "left")]
    assert "shorter than the smallest record" in ranges[0]["why"]
    o = broker_recovery(tmp_path / "new", tmp_path / "oracle.json")
    assert o["afterRecovery"]["maxPhyOffset"] == rec["wroteOffset"]  # the broker's truncation, at that range
    check_broker_keeps_before(o, [m for m in every if m["wroteOffset"] < rec["wroteOffset"]])


def check_broker_keeps_before(o: dict, kept: list[dict]) -> None:
    walk = {m["offset"]: m for m in o["commitLogWalk"]["messages"]}
    assert [m["wroteOffset"] for m in kept if m["wroteOffset"] not in walk or walk[m["wroteOffset"]].get("uniqKey") != m.get("uniqKey")] == []


@pytest.mark.slow
def test_rocksdb_consumequeue_store_gets_file_queues_the_broker_serves(tmp_path):
    """rmq53-rocksdbcq (storeType=defaultRocksDB): NEWDIR holds the file-based ConsumeQueue, the report says to start
    with storeType=default, and the broker (file-based, as the oracle runs) serves every put from it."""
    name = "rmq53-rocksdbcq"
    new = tmp_path / "new"
    code, rows = repair_cli("-s", REAL / name / "store", "--out", new, *SIZING)  # README.txt: maxHashSlotNum=500, maxIndexNum=2000
    summary = rows[-1]
    assert code == 0 and any("storeType=default" in n for n in summary["notes"])
    check_broker_keeps(broker_recovery(new, tmp_path / "oracle.json"), puts(name))


# --- Hypothesis: damage anywhere in real 4.x and 5.x stores, the broker as judge ---------------------

KINDS = ["body_flip", "magic", "total_size", "zero_span"]


def _damage(root: Path, name: str, rec: dict, kind: str, extra: int) -> tuple[int, int]:
    """Damage one record of a copied store; the physical byte range changed."""
    size = SETTINGS[name]["commitlog"]
    base = rec["wroteOffset"] // size * size
    path = root / "commitlog" / f"{base:020d}"
    at = rec["wroteOffset"] - base
    data = bytearray(path.read_bytes())
    if kind == "body_flip":  # the body starts after the fixed header: 88 bytes with IPv4 hosts, 12 more per IPv6 host
        head = 88 + 12 * bool(rec["sysFlag"] & 0x10) + 12 * bool(rec["sysFlag"] & 0x20)
        pos, n = at + head + extra % max(1, rec.get("body_len", 1)), 1
        data[pos] ^= 0xFF
    elif kind == "magic":
        pos, n = at + 4, 4
        data[pos : pos + 4] = b"ZZZZ"
    elif kind == "total_size":
        pos, n = at, 4
        data[pos : pos + 4] = (rec["wroteBytes"] + 8 + extra % 64).to_bytes(4, "big")
    else:
        pos, n = at + extra % 64, 128 + extra % 600
        n = min(n, len(data) - pos)
        data[pos : pos + n] = bytes(n)
    path.write_bytes(bytes(data))
    return base + pos, base + pos + n


@pytest.mark.slow
@settings(
    max_examples=5, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate], suppress_health_check=[HealthCheck.function_scoped_fixture]
)  # no shrinking: each example is a broker restart (~5 s); a failure prints its inputs
@given(name=st.sampled_from(["rmq4-basic", "rmq53-v2"]), pick=st.floats(0.0, 0.97), kind=st.sampled_from(KINDS), extra=st.integers(0, 10_000))
@example(name="rmq53-v2", pick=0.5247, kind="magic", extra=0)  # a V2 record (2-byte topic length) of the 187-character topic
def test_hypothesis_damage_repaired_broker_keeps_intact(tmp_path_factory, name, pick, kind, extra):
    tmp = tmp_path_factory.mktemp("hyp")
    root = copy_store(name, tmp)
    every = sorted(puts(name), key=lambda m: m["wroteOffset"])
    rec = every[int(pick * len(every))]
    if kind == "body_flip" and rec.get("body_len", 0) == 0:
        kind = "magic"
    lo, hi = _damage(root, name, rec, kind, extra)
    intact = [m for m in every if m["wroteOffset"] + m["wroteBytes"] <= lo or m["wroteOffset"] >= hi]
    if kind in ("magic", "total_size") and rec.get("body_len", 0) > 0:
        intact.append(rec)  # its header alone damaged, its body CRC proves it: written back restored, the broker keeps it
    s = SETTINGS[name]
    new = tmp / "new"
    code, rows = repair_cli("-s", root, "--out", new, "--hash-slots", s["hash_slots"], "--index-entries", s["index_entries"])
    assert code == 1
    assert [r for r in rows if r["kind"] == "range"]
    o = broker_recovery(new, tmp / "oracle.json")
    check_broker_keeps(o, intact)
    shutil.rmtree(tmp, ignore_errors=True)


# --- clean input and errors ------------------------------------------------------------------------------


def test_clean_store_exit_0_and_a_clean_copy(tmp_path):
    """A store with nothing to repair: exit 0, every CommitLog byte copied as it is, no range, nothing quarantined."""
    src = REAL / "rmq4-basic" / "store"
    new = tmp_path / "new"
    s = SETTINGS["rmq4-basic"]
    code, rows = repair_cli("-s", src, "--out", new, "--hash-slots", s["hash_slots"], "--index-entries", s["index_entries"])
    assert code == 0
    assert [r for r in rows if r["kind"] in ("range", "hole")] == []
    for f in sorted((src / "commitlog").iterdir()):
        assert (new / "commitlog" / f.name).read_bytes() == f.read_bytes()
    assert (new / "rmqdump-repair" / "quarantine.bin").read_bytes() == b""
    assert sorted(p.name for p in (new / "config").iterdir()) == sorted(p.name for p in (src / "config").iterdir())
    assert not (new / "abort").exists() and not (new / "lock").exists()


@pytest.mark.slow
def test_info_on_the_repaired_store_previews_a_clean_recovery(tmp_path):
    """`info` on NEWDIR: normal recovery that walks to the end of the data (manifest) and drops nothing."""
    base = REAL / "rmq53-damaged-midfile-magic"
    new = tmp_path / "new"
    assert repair_cli("-s", base / "store", "--out", new, *SIZING)[0] == 1
    rec = next(r for r in jsonl(run("info", "-s", new, "-f", "jsonl").stdout) if r["kind"] == "recovery")
    every = puts("rmq53-damaged-midfile-magic")
    assert rec["abnormal"] is False
    assert rec["valid_end"] == max(m["wroteOffset"] + m["wroteBytes"] for m in every)
    assert rec["truncated_messages"] == 0 and rec["commitlog_files_dropped"] == [f"{1835008:020d}"]  # the preallocated empty file


def test_not_a_store(tmp_path):
    (tmp_path / "empty").mkdir()
    r = run_proc("repair", "-s", tmp_path / "empty", "--out", tmp_path / "new")
    assert r.returncode == 2 and r.stderr.startswith("rmqdump: no_commitlog: ")
    r = run_proc("repair", "-s", tmp_path / "missing", "--out", tmp_path / "new")
    assert r.returncode == 2 and r.stderr.startswith("rmqdump: not_a_store: ")
    assert not (tmp_path / "new").exists()


def test_output_inside_the_store_is_refused(tmp_path):
    root = copy_store("rmq4-basic", tmp_path)
    before = sorted(p.name for p in root.iterdir())
    r = run_proc("repair", "-s", root, "--out", root / "repaired")
    assert r.returncode == 2 and "output_inside_store" in r.stderr.split(":")[1]
    assert sorted(p.name for p in root.iterdir()) == before


def test_existing_output_needs_force(tmp_path):
    new = tmp_path / "new"
    new.mkdir()
    (new / "keep").write_text("x")
    s = SETTINGS["rmq4-basic"]
    args = ("repair", "-s", REAL / "rmq4-basic" / "store", "--out", new, "--hash-slots", s["hash_slots"], "--index-entries", s["index_entries"])
    r = run_proc(*args)
    assert r.returncode == 2 and r.stderr.startswith("rmqdump: output_exists: ")
    assert (new / "keep").read_text() == "x"
    assert run_proc(*args, "--force").returncode == 0
    assert not (new / "keep").exists() and (new / "commitlog").is_dir()


def test_dledger_store_is_refused(tmp_path):
    root = next(p.parent for p in unpack_store("rmq53-dledger", tmp_path / "dl").rglob("dledger-*"))
    r = run_proc("repair", "-s", root, "--out", tmp_path / "new")
    assert r.returncode == 2 and r.stderr.split(":")[1].strip() == "repair_dledger_unsupported"


def test_usage_store_twice(tmp_path):
    r = run_proc("repair", REAL / "rmq4-basic" / "store", "-s", REAL / "rmq4-basic" / "store", "--out", tmp_path / "new")
    assert r.returncode == 2 and r.stderr.startswith("rmqdump: usage: rmqdump repair:")


def test_an_empty_body_is_never_a_crc_stop_as_the_broker_checks_only_a_body(tmp_path):
    """checkMessageAndReturnSize checks the body CRC only when bodyLen > 0: a record with an empty body and any
    bodyCRC field is accepted. One such record (a rolled-back one, bodyCRC 12345) written after the last record of a
    clean copy: the broker's recovery walks it; rmqdump's preview stops where the broker does, and repair finds
    nothing to replace."""
    from rmqdump.builders.filler import MIN_FILLER, _record

    name = "rmq4-basic"
    root = copy_store(name, tmp_path)
    size = SETTINGS[name]["commitlog"]
    end = max(m["wroteOffset"] + m["wroteBytes"] for m in puts(name))
    rec = bytearray(_record(end, b"", 1795305360000, MIN_FILLER))
    rec[8:12] = (12345).to_bytes(4, "big")  # bodyCRC: not the CRC of an empty body (0)
    with open(root / "commitlog" / f"{end // size * size:020d}", "r+b") as f:
        f.seek(end % size)
        f.write(rec)
    o = broker_recovery(root, tmp_path / "oracle.json")
    assert o["afterRecovery"]["maxPhyOffset"] == end + len(rec)  # the broker walked it
    rows = jsonl(run("info", "-s", root, "-f", "jsonl").stdout)
    (preview,) = [r for r in rows if r["kind"] == "recovery"]
    assert preview["valid_end"] == end + len(rec) and preview["truncated_bytes"] == 0
    s = SETTINGS[name]
    code, out = repair_cli("-s", root, "--out", tmp_path / "new", "--hash-slots", s["hash_slots"], "--index-entries", s["index_entries"])
    assert code == 0 and [r for r in out if r["kind"] == "range"] == []


@pytest.mark.parametrize("name", ["midfile-magic", "size-field"])
def test_header_damage_with_a_broken_body_crc_stays_a_filler(name, tmp_path):
    """A copy of the store whose header-damaged record also has a body byte flipped: nothing proves the record any
    more (its body CRC fails), so repair replaces it by a filler, its queue offset a hole, as any damage; the broker
    (oracle, on midfile-magic) keeps every other put."""
    full = f"rmq53-damaged-{name}"
    damage = json.loads((REAL / full / "damage.json").read_text(encoding="utf-8"))
    (hit,) = damage["recordsHit"]
    root = copy_store(full, tmp_path)
    record_at = damage["fileOffset"] - (damage["physicalOffset"] - hit["physicalOffset"])
    flip(root / damage["file"], record_at + message_header().sizeof() + 5, 0x10)  # IPv4 hosts: the body's 6th byte
    code, rows = repair_cli("-s", root, "--out", tmp_path / "new", *SIZING)
    ranges = [r for r in rows if r["kind"] == "range"]
    assert code == 1
    assert [(r["phys_offset"], r["length"], r["action"], r["restored"]) for r in ranges] == [(hit["physicalOffset"], hit["size"], "filler", None)]
    check_replaced_bytes(tmp_path / "new", ranges)
    holes = [(h["topic"], h["queue_id"], h["from"], h["to"]) for h in rows if h["kind"] == "hole"]
    assert holes == [(hit["topic"], hit["queueId"], hit["queueOffset"], hit["queueOffset"] + 1)]
    if name == "midfile-magic":
        o = broker_recovery(tmp_path / "new", tmp_path / "oracle.json")
        every = puts(full)
        check_broker_keeps(o, [m for m in every if m["wroteOffset"] != hit["physicalOffset"]])
        check_hole(o, next(m for m in every if m["wroteOffset"] == hit["physicalOffset"]))
        check_markers_walked(o, ranges, 262144)


def test_a_restored_record_beside_a_destroyed_one_stays_its_own_range(tmp_path):
    """midfile-magic with the body of the record right after the header-damaged one flipped too: two ranges that touch,
    kept apart: the first written back restored (the broker keeps it), the second a filler (its queue offset a hole)."""
    full = "rmq53-damaged-midfile-magic"
    damage = json.loads((REAL / full / "damage.json").read_text(encoding="utf-8"))
    (hit,) = damage["recordsHit"]
    every = sorted(puts(full), key=lambda m: m["wroteOffset"])
    nxt = next(m for m in every if m["wroteOffset"] == hit["physicalOffset"] + hit["size"])
    root = copy_store(full, tmp_path)
    record_at = damage["fileOffset"] - (damage["physicalOffset"] - hit["physicalOffset"])
    flip(root / damage["file"], record_at + hit["size"] + message_header().sizeof() + 3, 0x10)  # the next record's body
    code, rows = repair_cli("-s", root, "--out", tmp_path / "new", *SIZING)
    ranges = [r for r in rows if r["kind"] == "range"]
    assert code == 1
    assert [(r["phys_offset"], r["length"], r["action"]) for r in ranges] == [
        (hit["physicalOffset"], hit["size"], "header_restored"),
        (nxt["wroteOffset"], nxt["wroteBytes"], "filler"),
    ]
    check_replaced_bytes(tmp_path / "new", ranges)
    o = broker_recovery(tmp_path / "new", tmp_path / "oracle.json")
    check_broker_keeps(o, [m for m in every if m is not nxt])
    check_hole(o, nxt)
    check_markers_walked(o, ranges, 262144)
