"""`rmqdump rebuild` on the real stores: ConsumeQueue and IndexFile bytes equal to what the broker wrote.

rmq4-crash is compared with recovered/, the broker's own rebuild after the
crash. Its ConsumeQueues are byte-identical. Its index cannot be, from
nothing: the broker kept the first (full) index file, and its rebuild indexed
the message at that file's endPhyOffset (seq 809) a second time. The tests
prove that this is the only difference: building on after the kept file, as
the broker's recovery does, gives recovered/'s later index files byte for
byte, and the entries of recovered/ are ours with seq 809's keys once more.
"""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path

import numpy as np
import pytest
from conftest import REAL, SETTINGS, STORES, jsonl, manifest, run, store_root

from rmqdump.builders.indexbuild import index_file_name
from rmqdump.builders.rebuild import RebuildOptions, rebuild
from rmqdump.builders.settings import resolve
from rmqdump.common.javahash import java_hash
from rmqdump.common.problems import InputError
from rmqdump.engines.local import LocalMap
from rmqdump.readers.commitlog import CommitLog
from rmqdump.readers.fastpath import numpy_dtype
from rmqdump.readers.mapped import MappedFile
from rmqdump.scan import scanner
from rmqdump.scan.dispatch import DelayLevels, dispatch_columns
from rmqdump.schemas import Checkpoint, IndexEntry, IndexHeader

HEADER = numpy_dtype(IndexHeader)
ENTRY = numpy_dtype(IndexEntry)


def flags(name: str) -> list[str]:
    s = SETTINGS[name]
    return ["--cq-units-per-file", str(s["cq_units"]), "--hash-slots", str(s["hash_slots"]), "--index-entries", str(s["index_entries"])]


def reference(name: str):
    """What the broker wrote when its dispatch had caught up: the store, or for the crash its recovered/."""
    return REAL / name / "recovered" if name == "rmq4-crash" else store_root(name)


def cq_tree(root) -> dict[str, bytes]:
    out = {}
    base = os.path.join(root, "consumequeue")
    for d, _, files in os.walk(base):
        for f in files:
            p = os.path.join(d, f)
            out[os.path.relpath(p, base)] = Path(p).read_bytes()
    return out


def index_files(root) -> list[tuple[str, bytes]]:
    d = os.path.join(root, "index")
    return [(n, Path(d, n).read_bytes()) for n in sorted(os.listdir(d))]


def header(raw: bytes):
    return np.frombuffer(raw[: HEADER.itemsize], dtype=HEADER)[0]


def entries(raw: bytes, slots: int) -> np.ndarray:
    h = header(raw)
    at = HEADER.itemsize + 4 * slots
    return np.frombuffer(raw[at : at + ENTRY.itemsize * int(h["index_count"])], dtype=ENTRY)[1:]


def index_keys(m: dict) -> list[str]:
    """topic#UNIQ_KEY then topic#each key, as the broker puts them (none for ROLLBACK)."""
    if m["sysFlag"] & 0xC == 0xC:
        return []
    keys = [m["uniqKey"]] if m.get("uniqKey") is not None else []
    keys += [k for k in m.get("keys") or [] if k]
    return [f"{m['topic']}#{k}" for k in keys]


@pytest.fixture(scope="module")
def rebuilt(tmp_path_factory):
    """Each real store rebuilt once through the CLI, with its README settings."""
    cache = {}

    def get(name: str):
        if name not in cache:
            out = tmp_path_factory.mktemp("rebuild") / name
            r = run("rebuild", store_root(name), "--out", out, *flags(name), "-f", "jsonl")
            cache[name] = (out, r)
        return cache[name]

    return get


@pytest.mark.parametrize("name", STORES)
def test_consumequeue_bytes_equal_the_brokers(name, rebuilt):
    out, r = rebuilt(name)
    assert r.exit_code == 0, r.stdout + r.stderr
    ours, theirs = cq_tree(out), cq_tree(reference(name))
    assert sorted(ours) == sorted(theirs)
    for rel, data in theirs.items():
        assert ours[rel] == data, rel
    queued = [m for m in manifest(name) if m["sysFlag"] & 0xC in (0, 0x8)]
    summary = jsonl(r.stdout)[-1]
    assert summary["cq_units"] == len(queued)
    assert summary["queues"] == len({(m["topic"], m["queueId"]) for m in queued})


@pytest.mark.parametrize("name", [n for n in STORES if n != "rmq4-crash"])
def test_index_bytes_equal_the_brokers_in_name_order(name, rebuilt):
    out, _ = rebuilt(name)
    ours, theirs = index_files(out), index_files(reference(name))
    assert len(ours) == len(theirs)
    for (_, a), (tname, b) in zip(ours, theirs, strict=True):
        assert a == b, tname


@pytest.mark.parametrize("name", STORES)
def test_index_names_are_the_store_time_that_made_each_file(name, rebuilt):
    """yyyyMMddHHmmssSSS of the message whose dispatch made the file: within ms of the broker's wall-clock names."""
    out, _ = rebuilt(name)
    names = [n for n, _ in index_files(out)]
    assert names == sorted(set(names))
    first_ts = manifest(name)[0]["storeTimestamp"]
    assert names[0] == index_file_name(first_ts)


def test_crash_index_first_file_identical_and_the_difference_is_seq_809(rebuilt):
    name = "rmq4-crash"
    out, _ = rebuilt(name)
    slots = SETTINGS[name]["hash_slots"]
    ours, theirs = index_files(out), index_files(reference(name))
    assert ours[0][1] == theirs[0][1]  # the file the broker kept
    kept = header(theirs[0][1])
    m = manifest(name)
    seq = [x for x in m if x["wroteOffset"] == int(kept["end_phy_offset"])]
    assert len(seq) == 1 and seq[0]["index"] == 809
    keys809 = index_keys(seq[0])
    # the kept file ends part way through seq 809's keys; our next file starts with the rest, as the broker's did
    first = entries(theirs[0][1], slots)
    in_kept = int((first["phys_offset"] == kept["end_phy_offset"]).sum())
    assert 0 < in_kept < len(keys809)
    as_pairs = lambda keys: [(abs(java_hash(k)), seq[0]["wroteOffset"]) for k in keys]  # noqa: E731
    pairs = lambda e: list(zip(e["key_hash"].tolist(), e["phys_offset"].tolist(), strict=True))  # noqa: E731
    assert pairs(first[-in_kept:]) == as_pairs(keys809[:in_kept])
    ours_e = np.concatenate([entries(raw, slots) for _, raw in ours])
    theirs_e = np.concatenate([entries(raw, slots) for _, raw in theirs])
    n1 = len(first)
    assert pairs(ours_e[n1 : n1 + len(keys809) - in_kept]) == as_pairs(keys809[in_kept:])
    # recovered/ = our entries with the keys of seq 809 that the kept file had, put once more where the new file starts
    assert pairs(theirs_e) == pairs(ours_e[:n1]) + as_pairs(keys809[:in_kept]) + pairs(ours_e[n1:])
    assert len(theirs_e) - len(ours_e) == in_kept == 3  # recovered.json: 3 duplicate entries


def test_crash_index_built_on_after_the_kept_file_is_byte_identical(tmp_path):
    """What the broker's recovery did: keep the full first file, index again from its endPhyOffset."""
    name = "rmq4-crash"
    s = SETTINGS[name]
    theirs = index_files(reference(name))
    kept = header(theirs[0][1])
    st = resolve(str(store_root(name)), cq_units=s["cq_units"], hash_slots=s["hash_slots"], index_entries=s["index_entries"])
    opts = RebuildOptions(only=("index",), index_after=(int(kept["end_timestamp"]), int(kept["end_phy_offset"])), verify=False)
    rebuild(str(store_root(name)), str(tmp_path / "out"), st, opts)
    ours = index_files(tmp_path / "out")
    assert [raw for _, raw in ours] == [raw for _, raw in theirs[1:]]


def test_crash_store_itself_equals_a_rebuild_up_to_the_dispatch_position(tmp_path):
    """The crashed store's own CQ and index are exactly a rebuild that stops where its dispatch stopped."""
    name = "rmq4-crash"
    s = SETTINGS[name]
    crash = json.loads((REAL / name / "crash.json").read_text())
    stop = crash["store"]["reputFromOffset"]
    st = resolve(str(store_root(name)), cq_units=s["cq_units"], hash_slots=s["hash_slots"], index_entries=s["index_entries"])
    rebuild(str(store_root(name)), str(tmp_path / "out"), st, RebuildOptions(to_offset=stop, verify=False))
    assert cq_tree(tmp_path / "out") == cq_tree(store_root(name))
    assert [raw for _, raw in index_files(tmp_path / "out")] == [raw for _, raw in index_files(store_root(name))]
    assert sum(1 for m in manifest(name) if m["wroteOffset"] < stop) == crash["dispatchedCount"]


@pytest.mark.parametrize("name", STORES)
def test_rebuild_is_verified_and_checkpoint_written(name, rebuilt):
    out, r = rebuilt(name)
    summary = jsonl(r.stdout)[-1]
    assert summary["verify"]["ok"] is True
    assert summary["verify"]["consumequeue"]["problems"] == 0 and summary["verify"]["index"]["problems"] == 0
    m = manifest(name)
    cp = Checkpoint.parse((out / "checkpoint").read_bytes())
    assert (out / "checkpoint").stat().st_size == 4096
    assert cp.physic_msg_timestamp == m[-1]["storeTimestamp"]
    assert cp.logics_msg_timestamp == [x for x in m if x["sysFlag"] & 0xC in (0, 0x8)][-1]["storeTimestamp"]
    last = header(index_files(out)[-1][1])
    assert cp.index_msg_timestamp == int(last["end_timestamp"])
    assert not (out / "commitlog").exists()
    assert sorted(os.listdir(out)) == ["checkpoint", "consumequeue", "index"]
    assert summary["records"] == len(m) and summary["index_entries"] == sum(len(index_keys(x)) for x in m)


def reference_dispatch(batch, delays):
    """A plain per-record parse of the properties (how rmqdump.scan.dispatch first did it): the oracle for the columnar one."""
    c = batch.cols
    view = batch.mf.view
    topics, keys, uniqs = [], [], []
    codes = np.zeros(len(batch), dtype=np.int64)
    for i in range(len(batch)):
        tp, tl = int(c["topic_pos"][i]), int(c["topic_length"][i])
        t = bytes(view[tp : tp + tl]).decode("utf-8", errors="replace")
        pp, pl = int(c["properties_pos"][i]), int(c["properties_length"][i])
        props = {}
        if pl > 0:
            for item in bytes(view[pp : pp + pl]).decode("utf-8", errors="replace").split("\x02"):
                name, sep, value = item.partition("\x01")
                if sep and name in ("TAGS", "KEYS", "UNIQ_KEY", "DELAY"):
                    props[name] = value
        topics.append(t)
        if props.get("TAGS"):
            codes[i] = java_hash(props["TAGS"])
        if t == "SCHEDULE_TOPIC_XXXX" and "DELAY" in props:
            try:
                level = int(props["DELAY"])
            except ValueError:
                level = 0
            if level > 0:
                codes[i] = delays.deliver_time(level, int(c["store_timestamp"][i]))
        keys.append([k for k in props["KEYS"].split(" ") if k] if props.get("KEYS") else [])
        uniqs.append(props.get("UNIQ_KEY"))
    return topics, codes, keys, uniqs


def manifest_tags_code(m: dict, delays: DelayLevels) -> int:
    """The tagsCode the broker dispatches for a manifest entry: its delivery time if scheduled, else hashCode(TAGS)."""
    level = m["properties"].get("DELAY") if m["topic"] == "SCHEDULE_TOPIC_XXXX" else None
    if level is not None and int(level) > 0:
        return delays.deliver_time(int(level), m["storeTimestamp"])
    return java_hash(m["tags"]) if m["tags"] else 0


def kernel_key_texts(batch) -> tuple[list[list[str]], list[str | None]]:
    """Each record's KEYS tokens and UNIQ_KEY, read from the record bytes at the offsets the scan kernel found."""
    keys: list[list[str]] = [[] for _ in range(len(batch))]
    uniqs: list[str | None] = [None] * len(batch)
    f, view = batch.found, batch.mf.view
    for r, a, n, u in zip(f["key_rec"].tolist(), f["key_pos"].tolist(), f["key_len"].tolist(), f["key_uniq"].tolist(), strict=True):
        text = bytes(view[a : a + n]).decode("utf-8", errors="replace")
        if u:
            uniqs[r] = text
        else:
            keys[r].append(text)
    return keys, uniqs


@pytest.mark.parametrize("name", STORES)
def test_dispatch_equals_a_plain_parse(name):
    """dispatch_columns (what every command computes with) gives the topics, tagsCode and index keys of a plain parse and of the manifest, on every real record."""
    cl = CommitLog.open(str(store_root(name) / "commitlog"))
    delays = DelayLevels.parse()
    by_offset = {m["wroteOffset"]: m for m in manifest(name)}
    n = 0
    for b in scanner.batches(cl, check_crc=False, keys=True):
        if not len(b):
            continue
        topics, codes, keys, uniqs = reference_dispatch(b, delays)
        c = dispatch_columns(b, delays)
        man = [by_offset[p] for p in c.phys.tolist()]
        assert topics == [m["topic"] for m in man]
        assert [c.topics[i] for i in c.topic_id.tolist()] == topics
        assert c.queue_id.tolist() == [m["queueId"] for m in man]
        assert c.queue_offset.tolist() == [m["logicsOffset"] for m in man]
        assert np.array_equal(c.tags_code, codes)
        assert c.tags_code.tolist() == [manifest_tags_code(m, delays) for m in man]
        k_keys, k_uniqs = kernel_key_texts(b)
        assert k_keys == keys == [[k for k in m.get("keys") or [] if k] for m in man]
        assert k_uniqs == uniqs == [m.get("uniqKey") for m in man]
        want = [(i, k) for i, m in enumerate(man) for k in index_keys(m)]  # UNIQ_KEY, then KEYS; none for ROLLBACK
        assert c.key_rec.tolist() == [i for i, _ in want]
        assert c.key_hash.tolist() == [java_hash(k) for _, k in want]
        n += len(b)
    assert n == len(manifest(name))


@pytest.mark.parametrize("name", ["rmq4-flags", "rmq53-v2"])
def test_dispatch_columns_fallback_paths_agree(name, monkeypatch):
    """The paths taken only for key-heavy records (the kernel runs out of key room) or tiny batches give the same values."""
    import rmqdump.scan._walk as CL

    delays = DelayLevels.parse()

    def columns(**kw):
        out = []
        cl = CommitLog.open(str(store_root(name) / "commitlog"))
        for seg in cl.files:
            with MappedFile(seg.path, limit=cl.file_size) as mf:
                for b in scanner.file_batches_from(seg, mf, check_crc=False, keys=True, **kw):
                    d = dispatch_columns(b, delays)
                    out.append(
                        (d.phys.tolist(), [d.topics[i] for i in d.topic_id.tolist()], d.tags_code.tolist(), d.phys[d.key_rec].tolist(), d.key_hash.tolist())
                    )
        return [list(itertools.chain.from_iterable(o[k] for o in out)) for k in range(5)]

    fast = columns()
    with monkeypatch.context() as m:
        m.setattr(CL, "KEYS_PER_RECORD", 0)
        m.setattr(CL, "KEY_ROOM_MIN", 1)  # every batch starts with room for one key and grows
        assert columns() == fast
        assert columns(batch_records=2) == fast
    assert len(fast[0]) == len(manifest(name))


@pytest.mark.parametrize("name", STORES)
def test_settings_inferred_from_the_store_files(name):
    st = resolve(str(store_root(name)))
    s = SETTINGS[name]
    assert (st.cq_units_per_file, st.hash_slots, st.index_entries) == (s["cq_units"], s["hash_slots"], s["index_entries"])
    assert "inferred" in st.source["cq_units_per_file"] and "inferred" in st.source["hash_slots"]


def test_broker_conf_gives_the_settings(tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_text("# broker\nbrokerName = b1\nmappedFileSizeConsumeQueue=2000\nmaxHashSlotNum : 64\nmaxIndexNum 256\nmessageDelayLevel=1s 5s \\\n  10s\n")
    st = resolve(str(tmp_path), broker_conf=str(conf))
    assert (st.cq_units_per_file, st.hash_slots, st.index_entries, st.delay_spec) == (100, 64, 256, "1s 5s 10s")
    conf.write_text("mappedFileSizeConsumeQueue=2001\n")  # the broker rounds up to whole 20-byte units
    assert resolve(str(tmp_path), broker_conf=str(conf)).cq_units_per_file == 101


def test_rebuild_with_broker_conf_equals_the_broker(tmp_path):
    name = "rmq4-flags"
    s = SETTINGS[name]
    conf = tmp_path / "broker.conf"
    conf.write_text(f"mappedFileSizeConsumeQueue={s['cq_units'] * 20}\nmaxHashSlotNum={s['hash_slots']}\nmaxIndexNum={s['index_entries']}\n")
    r = run("rebuild", store_root(name), "--out", tmp_path / "out", "--broker-conf", conf, "--no-verify")
    assert r.exit_code == 0, r.stderr
    assert cq_tree(tmp_path / "out") == cq_tree(store_root(name))
    assert [b for _, b in index_files(tmp_path / "out")] == [b for _, b in index_files(store_root(name))]


def test_only_and_topic_subset(tmp_path):
    name = "rmq4-basic"
    ref = cq_tree(store_root(name))
    r = run("rebuild", store_root(name), "--out", tmp_path / "cq", *flags(name), "--only", "consumequeue", "--topic", "orders", "-f", "jsonl")
    assert r.exit_code == 0, r.stdout + r.stderr
    ours = cq_tree(tmp_path / "cq")
    assert ours == {k: v for k, v in ref.items() if k.startswith("orders" + os.sep)}
    assert not (tmp_path / "cq" / "index").exists()
    r = run("rebuild", store_root(name), "--out", tmp_path / "ix", *flags(name), "--only", "index")
    assert r.exit_code == 0, r.stdout + r.stderr
    assert not (tmp_path / "ix" / "consumequeue").exists()
    assert [b for _, b in index_files(tmp_path / "ix")] == [b for _, b in index_files(store_root(name))]
    r = run("rebuild", store_root(name), "--out", tmp_path / "ixt", *flags(name), "--only", "index", "--topic", "orders", "-f", "jsonl")
    assert r.exit_code == 0
    want = sum(len(index_keys(m)) for m in manifest(name) if m["topic"] == "orders")
    assert jsonl(r.stdout)[-1]["index_entries"] == want


def test_table_output_names_sources_and_verification(tmp_path):
    r = run("rebuild", store_root("rmq53-v2"), "--out", tmp_path / "out")
    assert r.exit_code == 0, r.stderr
    assert "inferred from 16 ConsumeQueue files of 2400 bytes" in r.stdout
    assert "verify consumequeue: ok" in r.stdout and "verify index: ok" in r.stdout
    assert f"records: {len(manifest('rmq53-v2'))} scanned" in r.stdout


def test_workers_give_the_same_bytes(tmp_path, rebuilt):
    name = "rmq4-basic"
    r = run("rebuild", store_root(name), "--out", tmp_path / "out", *flags(name), "--workers", "2", "--no-verify")
    assert r.exit_code == 0, r.stderr
    out, _ = rebuilt(name)
    assert cq_tree(tmp_path / "out") == cq_tree(out)
    assert index_files(tmp_path / "out") == index_files(out)


@pytest.mark.parametrize(
    "name,sabotage,workers",
    [("rmq4-basic", False, 1), ("rmq4-crash", False, 1), ("rmq53-v2", False, 2), ("rmq4-basic", True, 1), ("rmq53-v2", True, 2)],
)
def test_self_check_from_the_scan_columns_equals_a_rescan(tmp_path, monkeypatch, name, sabotage, workers):
    """rebuild's self-check (the written files read back, compared with its own scan's columns) finds what a fresh scan finds.

    With `sabotage` the builders are fed a wrong tagsCode for one record in
    ten and no index key for one in seven: both self-checks must see it.
    """
    import rmqdump.builders.rebuild as R
    from rmqdump.builders.cqbuild import ConsumeQueueBuilder
    from rmqdump.builders.indexbuild import IndexBuilder
    from rmqdump.builders.selfcheck import SPILL_DIR

    if sabotage:
        cq_add, ix_add = ConsumeQueueBuilder.add, IndexBuilder.add

        def bad_cq(self, topics, topic_id, queue_id, queue_offset, phys, size, tags_code):
            tags_code = tags_code.copy()
            tags_code[::10] += 1
            return cq_add(self, topics, topic_id, queue_id, queue_offset, phys, size, tags_code)

        def bad_ix(self, phys, store_ts, key_rec, key_hash):
            keep = np.asarray(key_rec) % 7 != 3
            return ix_add(self, phys, store_ts, np.asarray(key_rec)[keep], np.asarray(key_hash)[keep])

        monkeypatch.setattr(ConsumeQueueBuilder, "add", bad_cq)
        monkeypatch.setattr(IndexBuilder, "add", bad_ix)
    s = SETTINGS[name]
    st = resolve(str(store_root(name)), cq_units=s["cq_units"], hash_slots=s["hash_slots"], index_entries=s["index_entries"])
    opts = RebuildOptions(mapper=LocalMap(workers), sync=False)  # 2: the two verifiers side by side
    reports = []
    for from_columns in (True, False):
        monkeypatch.setattr(R, "VERIFY_FROM_COLUMNS", from_columns)
        reports.append(rebuild(str(store_root(name)), str(tmp_path / f"out-{from_columns}"), st, opts).verify)
        assert not any(SPILL_DIR in n for _, dirs, files in os.walk(tmp_path / f"out-{from_columns}") for n in dirs + files)
    cols, rescan = reports
    assert cols == rescan
    assert cols["ok"] is not sabotage
    if sabotage:
        assert cols["consumequeue"]["codes"] and cols["index"]["codes"]


def test_an_index_builder_failure_beside_the_scan_fails_the_rebuild_and_writes_nothing(tmp_path, monkeypatch):
    """With two workers the index is built on a thread of its own: what it raises reaches the caller, and nothing is published."""
    from rmqdump.builders.indexbuild import IndexBuilder

    calls = []
    add = IndexBuilder.add

    def failing(self, *a):
        calls.append(1)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        return add(self, *a)

    monkeypatch.setattr(IndexBuilder, "add", failing)
    name = "rmq4-basic"
    s = SETTINGS[name]
    st = resolve(str(store_root(name)), cq_units=s["cq_units"], hash_slots=s["hash_slots"], index_entries=s["index_entries"])
    with pytest.raises(InputError, match="No space left") as e:  # publishing names the full disk (output_no_space)
        rebuild(str(store_root(name)), str(tmp_path / "out"), st, RebuildOptions(mapper=LocalMap(2), sync=False))
    assert e.value.code == "output_no_space" and isinstance(e.value.__cause__, OSError)
    assert len(calls) >= 2
    assert not (tmp_path / "out").exists() and os.listdir(tmp_path) == []
