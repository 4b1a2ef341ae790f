"""The Spark engine on a real SparkSession (local[2]): same rows, same problems as the local engine."""

from __future__ import annotations

import json
import os
import re
import subprocess
import zlib
from pathlib import Path

import numpy as np
import pytest
from conftest import REAL, SETTINGS, STORES, copy_store, manifest, need_pyspark, patch, run
from test_export import check_against_manifest, check_intact, read_dataset, read_jsonl, reader_rows

from rmqdump.export.dataset import export_ranges
from rmqdump.readers.commitlog import CommitLog
from rmqdump.scan.splits import StoreRef, resolve_stores

need_pyspark()


@pytest.fixture(scope="module")
def fleet():
    return resolve_stores([str(REAL / name / "store") for name in STORES])


@pytest.fixture(scope="module")
def spark_rows(spark, fleet, tmp_path_factory):
    from rmqdump.engines.spark.export import export_spark

    out = tmp_path_factory.mktemp("spark") / "fleet"
    res = export_spark(spark, fleet, str(out), with_body=True, writer="spark")
    assert res.problem_count == 0
    assert res.messages == sum(len(manifest(s)) for s in STORES)
    return read_dataset(out)


@pytest.mark.parametrize("name", STORES)
def test_spark_parquet_equals_manifest(spark_rows, name):
    rows = [r for r in spark_rows if r["broker"] == name]
    check_against_manifest(name, rows)
    assert rows == reader_rows(name, with_body=True)


def test_spark_tiny_splits_same_rows(spark, fleet, spark_rows, tmp_path):
    """Ranges of 4 KiB over every real store: every record once, none lost, none twice."""
    from rmqdump.engines.spark.export import export_spark

    res = export_spark(spark, fleet, str(tmp_path / "tiny"), with_body=True, range_bytes=4096, writer="spark")
    assert res.splits > 1000
    tiny = read_dataset(tmp_path / "tiny")
    assert len({(r["broker"], r["phys_offset"]) for r in tiny}) == len(tiny)
    assert tiny == spark_rows
    # the same with the tasks writing their part files themselves (--spark-writer arrow)
    told = []
    res = export_spark(spark, fleet, str(tmp_path / "arrow"), with_body=True, range_bytes=4096, writer="arrow", on_bytes=told.append)
    assert res.messages == len(tiny) and res.problem_count == 0
    assert read_dataset(tmp_path / "arrow") == spark_rows
    # the progress it tells: each task's bytes as it is done, adding up to every CommitLog file's data
    cls = [CommitLog.open(s.commitlog) for s in fleet]
    assert len(told) > 1 and min(told) > 0
    assert sum(told) == sum(min(os.stat(f.path).st_size, cl.file_size) for cl in cls for f in cl.files)


def test_spark_jsonl_equals_local_jsonl(spark, tmp_path):
    from rmqdump.engines.spark.export import export_spark

    stores = [StoreRef("rmq53-v2", str(REAL / "rmq53-v2" / "store")), StoreRef("rmq4-flags", str(REAL / "rmq4-flags" / "store"))]
    export_spark(spark, stores, str(tmp_path / "s"), fmt="jsonl", with_body=True, range_bytes=16384, writer="spark")
    export_ranges(stores, str(tmp_path / "l"), fmt="jsonl", with_body=True)
    export_spark(spark, stores, str(tmp_path / "a"), fmt="jsonl", with_body=True, range_bytes=16384, writer="arrow")
    assert read_jsonl(tmp_path / "s") == read_jsonl(tmp_path / "l") == read_jsonl(tmp_path / "a")
    lines = lambda d: sorted(line for f in d.rglob("part-*") for line in f.read_text(encoding="utf-8").splitlines())  # noqa: E731
    assert lines(tmp_path / "s") == lines(tmp_path / "l")
    assert {p.name for p in (tmp_path / "s").iterdir() if p.is_dir()} == {p.name for p in (tmp_path / "l").iterdir() if p.is_dir()}
    # Spark's writer's lines, topic by topic, are the manifest model's (tests/test_export_jsonl.py), bodies included
    import urllib.parse

    from test_export_jsonl import check_lines

    for name in ("rmq4-flags", "rmq53-v2"):
        out = tmp_path / f"one-{name}"
        export_spark(spark, [StoreRef(name, str(REAL / name / "store"))], str(out), fmt="jsonl", with_body=True, range_bytes=16384, writer="spark")
        got = {
            urllib.parse.unquote(d.name.removeprefix("topic=")): sorted(
                (line + "\n" for f in d.glob("part-*") for line in f.read_text(encoding="utf-8").splitlines()), key=lambda line: json.loads(line)["phys_offset"]
            )
            for d in out.iterdir()
            if d.is_dir()
        }
        check_lines(got, name, name, True)


def test_spark_damaged_store_same_rows_and_problems(spark, tmp_path):
    from rmqdump.engines.spark.export import export_spark

    root = copy_store("rmq4-basic", tmp_path)
    f = root / "commitlog" / f"{131072:020d}"
    with open(f, "r+b") as fh:  # a torn stretch in the middle of the second file
        fh.seek(40000)
        fh.write(b"\xee" * 3000)
    stores = [StoreRef("rmq4-basic", str(root))]
    local = export_ranges(stores, str(tmp_path / "l"))
    sp = export_spark(spark, stores, str(tmp_path / "s"), range_bytes=8192, writer="spark")
    ar = export_spark(spark, stores, str(tmp_path / "a"), range_bytes=8192, writer="arrow")
    assert local.problem_count > 0
    assert sp.problems == local.problems == ar.problems and sp.problem_count == local.problem_count == ar.problem_count
    assert read_dataset(tmp_path / "a") == read_dataset(tmp_path / "l")
    assert read_dataset(tmp_path / "s") == read_dataset(tmp_path / "l") == reader_rows("rmq4-basic", root)
    torn = int(f.name) + 40000
    check_intact("rmq4-basic", read_dataset(tmp_path / "s"), [(torn, torn + 3000)])  # every record the tear left alone, exactly


def test_spark_writer_auto_picks_pyarrow_only_where_the_path_is_shared():
    from rmqdump.engines.spark.export import pick_writer

    assert pick_writer("auto", "/data/out", "local[2]") == "arrow"
    assert pick_writer("auto", "/data/out", "spark://127.0.0.1:7077") == "arrow"
    assert pick_writer("auto", "s3a://bucket/out", "local[2]") == "spark"  # a URI: only Spark's writer reaches it
    assert pick_writer("auto", "/data/out", "yarn") == "spark"  # nodes elsewhere may not share the path
    assert pick_writer("spark", "/data/out", "local[2]") == "spark" and pick_writer("arrow", "/data/out", "yarn") == "arrow"


def test_cli_engine_spark(spark, tmp_path):
    """The command joins the running session (and leaves it running)."""
    out = tmp_path / "o"
    with pytest.warns(UserWarning, match="already running"):
        r = run("export", "-s", REAL / "rmq5-basic" / "store", "-o", out, "--engine", "spark")
    assert r.exit_code == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["engine"] == "spark" and summary["messages"] == len(manifest("rmq5-basic"))
    check_against_manifest("rmq5-basic", read_dataset(out))
    assert not spark.sparkContext._jsc.sc().isStopped()
    with pytest.warns(UserWarning, match="already running"):
        r = run("export", "-s", REAL / "rmq5-basic" / "store", "-o", out, "--engine", "spark")
    assert r.exit_code == 2 and "output_exists" in r.stderr


# cq verify --engine spark ------------------------------------------------------------------


def _verify_both(spark, root, **kw):
    from rmqdump.checks.cqunits import PROBLEM_COLUMNS
    from rmqdump.checks.cqverify import VerifyScope, VerifySummary, verify
    from rmqdump.engines.spark.verify import verify_spark
    from rmqdump.readers.store import Store

    s1, s2 = VerifySummary(), VerifySummary()
    local = [p.to_dict(PROBLEM_COLUMNS) for p in verify(Store.open(root), summary=s1, **kw)]
    sp = [p.to_dict(PROBLEM_COLUMNS) for p in verify_spark(spark, Store.open(root), VerifyScope(**kw), summary=s2, range_bytes=8192)]
    key = lambda d: json.dumps(d, sort_keys=True)  # noqa: E731
    assert sorted(sp, key=key) == sorted(local, key=key)
    assert s1.to_dict() == s2.to_dict() and s1.codes == s2.codes
    return local, s2


@pytest.mark.parametrize("name", STORES)
def test_spark_verify_equals_local_on_real_stores(spark, name):
    found, summary = _verify_both(spark, REAL / name / "store")
    assert summary.messages == len(manifest(name))
    if name == "rmq4-crash":  # the 500 undispatched messages (crash.json)
        assert {p["code"] for p in found} == {"cq_missing_unit"} and len(found) == 500
    else:
        assert found == []


def test_spark_verify_equals_local_on_damaged_store(spark, tmp_path):
    root = copy_store("rmq4-basic", tmp_path)
    cq = root / "consumequeue"
    queues = sorted((p for p in cq.glob("*/*") if len(list(p.iterdir())) > 1), key=str)
    q0, q1, q2 = queues[0], queues[1], queues[2]
    f0 = sorted(q0.iterdir())[0]
    patch(f0, 5 * 20 + 7, b"\x13")  # a unit's offset no longer a record start
    patch(f0, 9 * 20 + 8, (77).to_bytes(4, "big"))  # a unit's size
    patch(f0, 30 * 20, bytes(20))  # a hole
    with open(sorted(q1.iterdir())[0], "rb") as fh:
        foreign = fh.read(20)
    patch(sorted(q2.iterdir())[0], 3 * 20, foreign)  # a unit pointing at another queue's record
    os.remove(sorted(q1.iterdir())[1])  # a missing CQ file in the middle of a queue
    cl = sorted((root / "commitlog").iterdir())[5]
    patch(cl, 50000, b"\xee" * 3000)  # torn CommitLog bytes
    found, _ = _verify_both(spark, root)
    # What the damage breaks, from the manifest and the queue files: (code, topic, queue, unit or queue offset)
    t0, t1, t2 = ((p.parent.name, int(p.name)) for p in (q0, q1, q2))
    per_file = SETTINGS["rmq4-basic"]["cq_units"]
    assert [int(p.name) for p in sorted(q1.iterdir())][:2] == [0, 2 * per_file * 20]  # q1's second file is the one deleted
    torn = int(cl.name) + 50000
    hit = [m for m in manifest("rmq4-basic") if m["wroteOffset"] < torn + 3000 and torn < m["wroteOffset"] + m["wroteBytes"]]
    assert len(hit) == 1 and hit[0]["wroteOffset"] + 8 <= torn  # one record, torn past its totalSize and magic: its fields overrun it
    want = [
        ("cq_not_message_start", *t0, 5),  # offset no longer a record start; its record left without a unit
        ("cq_missing_unit", *t0, 5),
        ("cq_size_mismatch", *t0, 9),
        ("cq_hole", *t0, 30),  # a zero unit before valid ones; its record left without a unit
        ("cq_missing_unit", *t0, 30),
        ("cq_hole", *t1, per_file),  # the deleted file: its units' records have none
        *[("cq_missing_unit", *t1, i) for i in range(per_file, 2 * per_file)],
        ("cq_non_monotonic", *t2, 3),  # q1's first unit copied over q2's fourth
        ("cq_queue_mismatch", *t2, 3),
        ("cq_queue_offset_mismatch", *t2, 3),
        ("cq_missing_unit", *t2, 3),
        ("size_mismatch", None, None, None),  # the torn record, and the unit pointing at it
        ("cq_not_message_start", hit[0]["topic"], hit[0]["queueId"], hit[0]["logicsOffset"]),
    ]
    assert sorted(((p["code"], p["topic"], p["queue_id"], p["unit_index"]) for p in found), key=str) == sorted(want, key=str)
    _verify_both(spark, root, topic=q2.parent.name)


# rebuild --engine spark --------------------------------------------------------------------


def _tree(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def _rebuild_both(spark, root, tmp_path, **opts):
    from rmqdump.builders.rebuild import RebuildOptions, rebuild
    from rmqdump.builders.settings import resolve
    from rmqdump.engines.spark.rebuild import rebuild_spark

    settings = resolve(str(root), **{k: opts.pop(k) for k in ("index_entries", "hash_slots", "cq_units", "ext_bitmap_bits") if k in opts})
    a = rebuild(str(root), str(tmp_path / "local"), settings, RebuildOptions(sync=False, **opts))
    b = rebuild_spark(spark, str(root), str(tmp_path / "spark"), settings, RebuildOptions(sync=False, **opts), range_bytes=16384)
    ta, tb = _tree(tmp_path / "local"), _tree(tmp_path / "spark")
    assert ta.keys() == tb.keys() and ta == tb  # the same files, byte for byte
    sa, sb = a.summary(), b.summary()
    for k in ("seconds", "verify_seconds", "messages_per_second", "workers", "out"):
        sa.pop(k), sb.pop(k)
    assert sa == sb

    def norm(problems, out):  # the same findings, named in each output directory
        return sorted(json.dumps(p.to_dict(), sort_keys=True).replace(str(out), "OUT") for p in problems)

    assert norm(a.problems, tmp_path / "local") == norm(b.problems, tmp_path / "spark")
    assert [p.to_dict() for p in a.damaged] == [p.to_dict() for p in b.damaged]
    assert [p.to_dict() for p in a.flagged] == [p.to_dict() for p in b.flagged]
    return a, ta


@pytest.mark.parametrize("name", STORES)
def test_spark_rebuild_same_bytes(spark, name, tmp_path):
    rep, files = _rebuild_both(spark, REAL / name / "store", tmp_path)
    assert rep.verify["ok"]
    assert sum(q.units for q in rep.queues) == sum(1 for m in manifest(name) if m["sysFlag"] & 0xC in (0, 8))
    assert any(f.startswith("index/") for f in files) and any(f.startswith("consumequeue/") for f in files)


def test_spark_rebuild_topics_and_full_last_index_file(spark, tmp_path):
    """--topic, and maxIndexNum chosen so the keys fill a file exactly before a message without keys:
    the broker then makes an empty successor file. Also a topic set with no keys at all (one empty file)."""
    from rmqdump.builders.rebuild import RebuildOptions, rebuild
    from rmqdump.builders.settings import resolve

    name = "rmq4-flags"
    root = REAL / name / "store"
    rows = sorted(manifest(name), key=lambda m: m["wroteOffset"])
    keyless = lambda m: m["uniqKey"] is None and not m["keys"]  # noqa: E731
    last_of = {m["topic"]: m for m in rows}
    tail = next(t for t, m in last_of.items() if keyless(m))  # a topic whose last message has no keys
    topics = frozenset({tail} | {t for t, m in last_of.items() if m["wroteOffset"] < last_of[tail]["wroteOffset"] and not keyless(m)})
    slots = SETTINGS[name]["hash_slots"]
    probe = rebuild(
        str(root),
        str(tmp_path / "probe"),
        resolve(str(root), hash_slots=slots, index_entries=SETTINGS[name]["index_entries"]),
        RebuildOptions(sync=False, verify=False, only=("index",), topics=topics),
    )
    keys = probe.index_keys
    per_file = next(d for d in range(keys // 2, 1, -1) if keys % d == 0)
    rep, _ = _rebuild_both(spark, root, tmp_path / "full", index_entries=per_file + 1, hash_slots=slots, only=("index",), topics=topics)
    assert len(rep.index_files) == keys // per_file + 1 and rep.index_files[-1].entries == 0
    rep, _ = _rebuild_both(spark, root, tmp_path / "nokeys", topics=frozenset({tail}))
    assert [f.entries for f in rep.index_files] == [0]
    _rebuild_both(spark, REAL / "rmq53-v2" / "store", tmp_path / "topic", topics=frozenset({"orders"}))


def test_spark_rebuild_damaged_store(spark, tmp_path):
    root = copy_store("rmq4-basic", tmp_path)
    cl = sorted((root / "commitlog").iterdir())[3]
    patch(cl, 70000, b"\x5a" * 5000)
    m = next(m for m in sorted(manifest("rmq4-basic"), key=lambda m: m["wroteOffset"]) if m["wroteOffset"] > 5 * 131072 and m["body_len"] > 10)
    f = root / "commitlog" / f"{m['wroteOffset'] // 131072 * 131072:020d}"
    body_end = m["wroteOffset"] % 131072 + m["wroteBytes"] - 2 - len(m["propertiesString"].encode()) - len(m["topic"]) - 1
    patch(f, body_end - 1, b"\x00" if f.read_bytes()[body_end - 1] else b"\x01")  # the body's last byte: a CRC mismatch
    rep, _ = _rebuild_both(spark, root, tmp_path / "out", check_crc=True)
    assert rep.damaged and rep.skipped_bytes > 0
    assert [p.code for p in rep.flagged] == ["body_crc_mismatch"]


def test_cli_cq_verify_and_rebuild_engine_spark(spark, tmp_path):
    """`cq verify --engine spark` and `rebuild --engine spark` as commands (joining the running session)."""
    store = REAL / "rmq4-crash" / "store"
    local = run("cq", "verify", "-s", store, "-f", "jsonl")
    with pytest.warns(UserWarning, match="already running"):
        sp = run("cq", "verify", "-s", store, "-f", "jsonl", "--engine", "spark")
    assert sp.exit_code == local.exit_code == 1
    key = lambda line: json.dumps(json.loads(line), sort_keys=True)  # noqa: E731
    assert sorted(map(key, sp.stdout.splitlines())) == sorted(map(key, local.stdout.splitlines()))
    r1 = run("rebuild", store, "--out", tmp_path / "l", "--no-sync", "-f", "jsonl")
    with pytest.warns(UserWarning, match="already running"):
        r2 = run("rebuild", store, "--out", tmp_path / "s", "--no-sync", "-f", "jsonl", "--engine", "spark")
    assert r1.exit_code == r2.exit_code == 0, r2.stderr
    assert _tree(tmp_path / "l") == _tree(tmp_path / "s")
    assert not spark.sparkContext._jsc.sc().isStopped()


# every store in fixtures/real: verify, rebuild and export on Spark equal the local engine and the broker ------------


def _real_keys() -> list[str]:
    """Every store the fixtures hold: NAME (NAME/store, or NAME/store.tar.gz) and NAME/SIDE for the HA pairs."""
    keys = []
    for d in sorted(p for p in REAL.iterdir() if p.is_dir()):
        if (d / "store").is_dir() or (d / "store.tar.gz").is_file():
            keys.append(d.name)
        keys += [f"{d.name}/{side}" for side in ("master", "slave") if (d / side / "store").is_dir()]
    return keys


ALL_REAL = _real_keys()


@pytest.fixture(scope="module")
def real_root(tmp_path_factory):
    """A store's root; an archived one unpacked once (tar -S: the DLedger index file is sparse)."""
    unpacked: dict[str, Path] = {}

    def get(key: str) -> Path:
        name, _, side = key.partition("/")
        archive = REAL / name / "store.tar.gz"
        if archive.is_file():
            if name not in unpacked:
                dest = tmp_path_factory.mktemp(name)
                subprocess.run(["tar", "-xzSf", str(archive), "-C", str(dest)], check=True)
                unpacked[name] = dest / "store"
            return unpacked[name]
        return REAL / name / side / "store" if side else REAL / name / "store"

    return get


def _readme_settings(name: str) -> dict:
    """The broker's MessageStoreConfig values the store's README.txt lists (the rebuild's sizes)."""
    text = (REAL / name / "README.txt").read_text(encoding="utf-8")

    def value(key: str) -> int | None:
        m = re.search(rf"\b{key}(?:\s*=\s*|\s+)(\d+)", text)  # "key=value", or a settings table's "key   value"
        return int(m.group(1)) if m else None

    out = {"cq_units": value("mappedFileSizeConsumeQueue") // 20, "hash_slots": value("maxHashSlotNum"), "index_entries": value("maxIndexNum")}
    bits = value("bitMapLengthConsumeQueueExt")
    if bits is not None:
        out["ext_bitmap_bits"] = bits
    return out


def _manifest_records(name: str, side: str) -> list[tuple]:
    """(offset, size, topic, queue id, store time, msgId, body CRC, sysFlag) of every record the broker wrote, from the
    manifest: its commitlog_msg rows (read back through the store API) where it has them, else its puts."""
    rows = manifest(name)
    if any(m.get("kind") == "commitlog_msg" for m in rows):
        return sorted(
            (m["physicalOffset"], m["totalSize"], m["topic"], m["queueId"], m["storeTimestamp"], m["msgId"], m["bodyCRC"], m["sysFlag"])
            for m in rows
            if m.get("kind") == "commitlog_msg" and m.get("side", side or None) == (side or None)
        )
    if any(m.get("kind") == "store_msg" for m in rows):  # a whole broker's store: one line per ConsumeQueue unit, no body CRC
        log = (REAL / name / "store" / "commitlog" / "00000000000000000000").read_bytes()  # its one CommitLog file

        def body_crc(off: int, n: int) -> int:  # the broker's UtilAll.crc32 of the body (IPv4 hosts: body after byte 88)
            return zlib.crc32(log[off + 88 : off + 88 + n]) & 0x7FFFFFFF

        return sorted(
            (m["commitLogOffset"], m["storeSize"], m["topic"], m["queueId"], m["storeTimestamp"], m["offsetMsgId"], body_crc(m["commitLogOffset"], m["bodyLen"]), m["sysFlag"])
            for m in rows
            if m.get("kind") == "store_msg"
        )
    # a DLedger store's puts carry the put's time; its dledger_msg_lookup rows, each message read back, the stored one
    stored = {m["commitLogOffset"]: m["storeTimestamp"] for m in rows if m.get("kind") == "dledger_msg_lookup"}
    return sorted(
        (m["wroteOffset"], m["wroteBytes"], m["topic"], m["queueId"], stored.get(m["wroteOffset"], m["storeTimestamp"]), m["msgId"], m["bodyCRC"], m["sysFlag"])
        for m in rows
        if m.get("kind", "put") == "put" and m.get("status", "PUT_OK") == "PUT_OK"
    )


def _damage(name: str) -> list[tuple[int, int]]:
    """The CommitLog bytes [a, b) the fixture's damage.json says were changed (none for an intact store)."""
    f = REAL / name / "damage.json"
    if not f.is_file():
        return []
    d = json.loads(f.read_text(encoding="utf-8"))
    return [(d["physicalOffset"], d["physicalOffset"] + d["length"])]


CQ_UNIT = np.dtype([("offset", ">i8"), ("size", ">i4"), ("tags", ">i8")])  # the broker's 20-byte ConsumeQueue unit


def _units(raw: bytes) -> np.ndarray:
    return np.frombuffer(raw, dtype=CQ_UNIT)


def _export_rows(rows: list[dict]) -> list[tuple]:
    return [(r["phys_offset"], r["total_size"], r["topic"], r["queue_id"], r["store_timestamp"], r["msg_id"], r["body_crc"], r["sys_flag"]) for r in rows]


def _same_units_as_the_broker(ours: dict[str, bytes], theirs: dict[str, bytes], intact: set[int]) -> set[int]:
    """A damaged store (its broker crashed with dispatch behind, then the damage): every unit the broker wrote for a record
    the damage left alone is the rebuild's unit at that place. Returns the records the rebuild's units point at."""
    pointed: set[int] = set()
    same = 0
    for rel, raw in ours.items():
        mine, broker = _units(raw), _units(theirs.get(rel, b""))
        pointed |= set(mine["offset"][mine["size"] > 0].tolist())
        n = min(len(mine), len(broker))
        at = np.flatnonzero(np.isin(broker["offset"][:n], list(intact)) & (broker["size"][:n] > 0))
        assert (mine[at] == broker[at]).all(), rel
        same += len(at)
    assert same > 0
    return pointed


@pytest.mark.parametrize("key", ALL_REAL)
def test_spark_equals_local_and_the_broker_on_every_real_store(spark, real_root, key, tmp_path):
    """cq verify, rebuild and export with Spark on each store of fixtures/real: the local engine's findings, bytes and
    rows, and what the broker wrote (its queue files, or the units and records its manifest lists)."""
    from rmqdump.engines.spark.export import export_spark

    name, _, side = key.partition("/")
    root = real_root(key)
    records = _manifest_records(name, side)
    damage = _damage(name)
    touched = lambda o, s: any(a < o + s and o < b for a, b in damage)  # noqa: E731

    # cq verify: the same findings; an intact store whose broker dispatched everything has none
    found, summary = _verify_both(spark, root)
    if name == "rmq4-crash":  # the messages the crash left undispatched
        assert {p["code"] for p in found} == {"cq_missing_unit"} and len(found) == json.loads((REAL / name / "crash.json").read_text())["undispatchedCount"]
    elif not damage:
        assert found == [] and summary.messages == len(records)
    else:
        assert found

    # rebuild: byte-identical to the local rebuild, and to the broker's own queue files
    rep, _ = _rebuild_both(spark, root, tmp_path / "rb", **_readme_settings(name))
    assert rep.verify["ok"]
    out = tmp_path / "rb" / "local"
    compared = 0
    for part in ("consumequeue", "batchconsumequeue"):
        theirs = (REAL / name / "recovered" if name == "rmq4-crash" else root) / part
        if not theirs.is_dir() or (part, name) == ("consumequeue", "rmq53-rocksdbcq"):
            continue
        if damage:
            intact = {r[0] for r in records if not touched(r[0], r[1])}
            pointed = _same_units_as_the_broker(_tree(out / part), _tree(theirs), intact)
            assert {r[0] for r in records if r[0] in intact and r[7] & 0xC in (0, 8)} <= pointed  # and a unit for every intact message
        else:
            assert _tree(out / part) == _tree(theirs), part
        compared += 1
    if name == "rmq53-rocksdbcq":  # the broker's units are in RocksDB: its manifest lists them
        per = rep.settings.cq_units_per_file
        for u in (m for m in manifest(name) if m.get("kind") == "cq_unit"):
            f = out / "consumequeue" / u["topic"] / str(u["queueId"]) / f"{u['queueOffset'] // per * per * 20:020d}"
            got = _units(f.read_bytes())[u["queueOffset"] % per]
            assert (int(got["offset"]), int(got["size"]), int(got["tags"])) == (u["commitLogOffset"], u["size"], u["tagsCode"])
            compared += 1
    assert compared

    # export: Spark's decoder tasks give the local engine's rows, and they are the broker's records
    stores = [StoreRef(name, str(root))]
    loc = export_ranges(stores, str(tmp_path / "el"), with_body=True)
    sp = export_spark(spark, stores, str(tmp_path / "es"), with_body=True, range_bytes=16384, writer="spark")
    assert sp.problems == loc.problems and sp.problem_count == loc.problem_count and sp.messages == loc.messages
    rows = read_dataset(tmp_path / "es")
    assert rows == read_dataset(tmp_path / "el")
    got = _export_rows(rows)
    assert [r for r in records if not touched(r[0], r[1])] == [g for g in got if not touched(g[0], g[1])]
    assert len(got) <= len(records)


@pytest.mark.parametrize("name", ["rmq53-batchcq", "rmq53-rocksdbcq"])
def test_cli_engine_spark_takes_5x_queue_kinds(spark, name, tmp_path):
    """The commands no longer refuse a Batch ConsumeQueue or a RocksDB ConsumeQueue store: the local engine's
    findings and files, the batch queues byte-identical to the broker's."""
    store = REAL / name / "store"
    sizing = ["--hash-slots", "500", "--index-entries", "2000"]  # the README's maxHashSlotNum / maxIndexNum
    local = run("cq", "verify", "-s", store, "-f", "jsonl")
    with pytest.warns(UserWarning, match="already running"):
        sp = run("cq", "verify", "-s", store, "-f", "jsonl", "--engine", "spark")
    assert sp.exit_code == local.exit_code == 0, sp.stderr
    assert sp.stdout == local.stdout
    assert json.loads(sp.stdout.splitlines()[-1])["messages"] == len(_manifest_records(name, ""))
    r1 = run("rebuild", store, "--out", tmp_path / "l", "--no-sync", "-f", "jsonl", *sizing)
    with pytest.warns(UserWarning, match="already running"):
        r2 = run("rebuild", store, "--out", tmp_path / "s", "--no-sync", "-f", "jsonl", "--engine", "spark", *sizing)
    assert r1.exit_code == r2.exit_code == 0, r2.stderr
    assert _tree(tmp_path / "l") == _tree(tmp_path / "s")
    if name == "rmq53-batchcq":
        assert _tree(tmp_path / "s" / "batchconsumequeue") == _tree(store / "batchconsumequeue")


@pytest.mark.parametrize("writer", ["spark", "arrow"])
def test_spark_export_of_a_dledger_and_a_plain_store_together(spark, real_root, writer, tmp_path):
    """One dataset from a DLedger store and a plain one: the DLedger rows carry their entry's index (the put's seq:
    entries are numbered from 0 in put order) and term (0, the README's dledgerTerm); the plain rows null in the same
    columns, one schema for both."""
    from rmqdump.engines.spark.export import export_spark

    dl = real_root("rmq53-dledger")
    stores = [StoreRef("rmq53-dledger", str(dl)), StoreRef("rmq4-basic", str(REAL / "rmq4-basic" / "store"))]
    res = export_spark(spark, stores, str(tmp_path / "o"), range_bytes=16384, writer=writer)
    assert res.problem_count == 0
    rows = read_dataset(tmp_path / "o")
    puts = [m for m in manifest("rmq53-dledger") if m["kind"] == "put"]
    term = json.loads(re.search(r"^\{\n.*?^\}$", (REAL / "rmq53-dledger" / "README.txt").read_text(encoding="utf-8"), flags=re.M | re.S).group(0))["dledgerTerm"]
    got = sorted((r["phys_offset"], r["dledger_index"], r["dledger_term"]) for r in rows if r["broker"] == "rmq53-dledger")
    assert got == sorted((p["wroteOffset"], p["seq"], term) for p in puts)
    plain = [r for r in rows if r["broker"] == "rmq4-basic"]
    assert len(plain) == len(manifest("rmq4-basic")) and all(r["dledger_index"] is None and r["dledger_term"] is None for r in plain)
