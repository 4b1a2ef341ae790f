"""The recovery preview against what the broker's own recovery did (rmq4-crash/recovered.json)."""

from __future__ import annotations

import json
import os
import re
import shutil

import pytest
from conftest import HEALTHY, REAL, SETTINGS, copy_store, jsonl, manifest, run, store_root

from rmqdump.checks.recovery import NORMAL_FROM_CQ, preview
from rmqdump.readers.fastpath import field_offset
from rmqdump.readers.store import Store
from rmqdump.schemas import message_header

RECOVERED = json.loads((REAL / "rmq4-crash" / "recovered.json").read_text())


def test_crash_preview_matches_what_the_broker_did():
    cmp_ = RECOVERED["independentComparison"]
    r = preview(Store.open(store_root("rmq4-crash")))
    assert r.abnormal is RECOVERED["abortFileBeforeLoad"] is True
    # the broker logged no "recover from this mapped file": it scanned from the first file
    assert not any("recover from this mapped file" in line for line in RECOVERED["storeLogDuringRecovery"])
    first_next = next(line for line in RECOVERED["storeLogDuringRecovery"] if "recover next physics file" in line)
    assert r.scan_from == 0 and first_next.endswith(f"{SETTINGS['rmq4-crash']['commitlog']:020d}")
    assert r.valid_end == cmp_["maxPhyOffsetAfterRecovery"] == RECOVERED["afterStartAndDispatch"]["maxPhyOffset"]
    assert r.truncated_bytes == cmp_["logicallyTruncatedBytes"]
    assert r.truncated_messages == len(cmp_["messagesLostByRecovery"])
    assert r.records_walked == cmp_["commitLogRecordsParsedAfter"]
    assert r.index_files_dropped == cmp_["indexFilesDestroyedByRecovery"]
    assert r.commitlog_files_dropped == cmp_["commitLogFilesDeleted"]
    # every record was dispatched again: from the scan start, the reput then starts at the end
    assert r.redispatch_from == r.scan_from
    set_reput = next(line for line in RECOVERED["storeLogDuringRecovery"] if "[SetReputOffset]" in line)
    assert f"maxPhysicalPosInLogicQueue={r.valid_end}" in set_reput
    # the index is rebuilt from the kept file's endPhyOffset: the message there is indexed twice
    kept = [f for f in RECOVERED["indexFilesBeforeLoad"] if f["file"] not in cmp_["indexFilesDestroyedByRecovery"]]
    assert r.index_redispatch_from == kept[-1]["endPhyOffset"]
    dup_seq = cmp_["messagesWithDuplicatedIndexEntriesAfter"][0]
    assert manifest("rmq4-crash")[dup_seq]["wroteOffset"] == r.index_redispatch_from


def test_crash_preview_jsonl_line():
    res = run("info", "-s", store_root("rmq4-crash"), "-f", "jsonl")
    rec = [x for x in jsonl(res.stdout) if x["kind"] == "recovery"]
    assert len(rec) == 1
    d = rec[0]
    assert {
        k: d[k] for k in ("kind", "abnormal", "scan_from", "valid_end", "truncated_bytes", "truncated_messages", "redispatch_from", "index_files_dropped")
    } == {
        "kind": "recovery",
        "abnormal": True,
        "scan_from": 0,
        "valid_end": RECOVERED["independentComparison"]["maxPhyOffsetAfterRecovery"],
        "truncated_bytes": 0,
        "truncated_messages": 0,
        "redispatch_from": 0,
        "index_files_dropped": RECOVERED["independentComparison"]["indexFilesDestroyedByRecovery"],
    }


@pytest.mark.parametrize("name", HEALTHY)
def test_clean_stores_recover_normally_from_the_third_last_file_before_5_3_2(name):
    st = Store.open(store_root(name), (5, 3, 1))
    r = preview(st)
    assert r.rules == "5.0 to 5.3.1"
    m = manifest(name)
    end = max(x["wroteOffset"] + x["wroteBytes"] for x in m)
    assert not r.abnormal
    assert r.scan_from == st.commitlog.files[max(0, len(st.commitlog.files) - 3)].base
    assert r.valid_end == end and r.truncated_bytes == 0 and r.truncated_messages == 0
    assert r.redispatch_from == end  # ConsumeQueues are complete: nothing to re-dispatch
    assert r.index_files_dropped == [] and r.commitlog_files_dropped == []
    assert r.records_walked == sum(1 for x in m if x["wroteOffset"] >= r.scan_from)


@pytest.mark.parametrize(("version", "from_cq"), [((4, 9, 7), True), ((5, 0, 0), False), ((5, 3, 1), False), ((5, 3, 3), True)])
def test_what_a_normal_restart_dispatches_again_is_the_releases(version, from_cq, tmp_path):
    """rmq5-basic (a clean shutdown) without the ConsumeQueues of its last message's queue and one other, a model of
    each release's code: 4.x's
    reput starts at the ConsumeQueues' max offset (offset + size of their last units) and dispatches every record from
    there; 5.0 to 5.3.1 dispatch nothing (recoverNormally's doDispatch is false and the reput starts at the CommitLog's
    end); 5.3.2 on dispatch in the walk the records whose offset is greater than that max, so not the one starting at
    it (its end: the model reads the manifest). The 5.3.3 case is the broker's own code in test_report and test_salvage."""
    root = copy_store("rmq5-basic", tmp_path)
    last = max(manifest("rmq5-basic"), key=lambda x: x["wroteOffset"])["queueId"]
    gone = {last, (last + 2) % 4}
    for qdir in (root / "consumequeue").glob("*/*"):
        if int(qdir.name) in gone:
            shutil.rmtree(qdir)
    kept = [x for x in manifest("rmq5-basic") if x["queueId"] not in gone]
    cq_max = max(x["wroteOffset"] + x["wroteBytes"] for x in kept)
    end = max(x["wroteOffset"] + x["wroteBytes"] for x in manifest("rmq5-basic"))
    at = [x for x in manifest("rmq5-basic") if x["wroteOffset"] == cq_max]
    r = preview(Store.open(root, version))
    assert (r.valid_end, r.cq_max_phys_offset) == (end, cq_max) and cq_max < end and at
    if version < (5,):
        assert r.redispatch_from == cq_max
    elif not from_cq:
        assert r.redispatch_from == end
    else:
        assert r.redispatch_from == cq_max + at[0]["wroteBytes"]


def test_recovered_store_recovers_normally_with_nothing_to_do():
    r = preview(Store.open(REAL / "rmq4-crash" / "recovered"))
    assert not r.abnormal and r.valid_end == RECOVERED["afterStartAndDispatch"]["maxPhyOffset"] and r.redispatch_from == r.valid_end


def test_corrupt_body_truncates_at_that_record(tmp_path):
    root = copy_store("rmq4-crash", tmp_path)
    m = manifest("rmq4-crash")
    victim = next(x for x in m[1800:] if x["body_len"] > 0)
    size = SETTINGS["rmq4-crash"]["commitlog"]
    body_at = victim["wroteOffset"] + field_offset(message_header(), "body_length") + 4
    path = root / "commitlog" / f"{body_at // size * size:020d}"
    with open(path, "r+b") as f:
        f.seek(body_at % size)
        b = f.read(1)[0]
        f.seek(body_at % size)
        f.write(bytes([b ^ 0x10]))
    r = preview(Store.open(root))
    after = [x for x in m if x["wroteOffset"] >= victim["wroteOffset"]]
    end = max(x["wroteOffset"] + x["wroteBytes"] for x in m)
    assert r.abnormal and r.valid_end == victim["wroteOffset"] and r.stop.startswith("body_crc_mismatch")
    assert r.truncated_messages == len(after) and r.truncated_bytes == end - victim["wroteOffset"]
    assert r.commitlog_files_dropped == [
        f"{b:020d}" for b in range(0, 20 * size, size) if b > victim["wroteOffset"] and os.path.exists(root / "commitlog" / f"{b:020d}")
    ]
    # without the CRC check (checkCRCOnRecover=false) the broker keeps it
    assert preview(Store.open(root), check_crc=False).truncated_messages == 0
    res = run("info", "-s", root)
    assert res.exit_code == 1 and "dropped on restart" in res.stdout


def test_newer_checkpoint_moves_the_scan_start(tmp_path):
    root = copy_store("rmq4-crash", tmp_path)
    m = manifest("rmq4-crash")
    size = SETTINGS["rmq4-crash"]["commitlog"]
    firsts = {x["wroteOffset"]: x["storeTimestamp"] for x in m if x["wroteOffset"] % size == 0}
    pick = sorted(firsts)[len(firsts) // 2]
    stamp = firsts[pick] + 3000  # min(physic, logics) - 3 s == that file's first store time
    with open(root / "checkpoint", "r+b") as f:
        f.write(stamp.to_bytes(8, "big") * 2)
    r = preview(Store.open(root))
    want = max(b for b, t in firsts.items() if t <= stamp - 3000)
    assert r.scan_from == want == pick and r.redispatch_from == pick
    assert r.records_walked == sum(1 for x in m if x["wroteOffset"] >= pick)


def test_without_abort_5_3_2_starts_from_the_consume_queue_max(tmp_path):
    """A 5.3.2+ broker: CommitLog.recoverNormally starts at the file holding the ConsumeQueues' max offset (asked for
    by --broker-version or by the start rule itself); a 4.x broker, the one that wrote rmq4-basic, at the third-last."""
    st = Store.open(store_root("rmq4-basic"))
    last = st.commitlog.files[-1]
    for r in (preview(st, normal_start=NORMAL_FROM_CQ), preview(Store.open(store_root("rmq4-basic"), (5, 3, 3)))):
        assert r.scan_from == last.base and r.cq_max_phys_offset == r.valid_end
    r = preview(st)
    end = max(x["wroteOffset"] + x["wroteBytes"] for x in manifest("rmq4-basic"))
    assert (r.rules, r.scan_from, r.valid_end) == ("4.x", st.commitlog.files[-3].base, end)


def _written_by(name: str) -> tuple[int, ...]:
    """The release that wrote a fixture store, as its README (written with the store) says."""
    text = (REAL / name / "README.txt").read_text(encoding="utf-8")
    return tuple(int(x) for x in re.search(r"(?:rocketmq-all-|RocketMQ )(\d+)\.(\d+)\.(\d+)", text).groups())


@pytest.mark.parametrize("name", sorted(p.name for p in REAL.iterdir() if (p / "store").is_dir()))
def test_rules_are_those_of_the_release_that_wrote_the_store(name):
    """No --broker-version: the preview follows the rules of the release that wrote the store (its README says which),
    and says so; --broker-version still overrides."""
    from rmqdump.checks.recovery import broker_rules

    want = broker_rules((4,) if _written_by(name)[0] == 4 else None)  # a 5.x store: the newest 5.x rules
    r = preview(Store.open(store_root(name)), count_after=False)
    assert (r.rules, r.rules_why.startswith("inferred: ")) == (want.name, True)
    assert preview(Store.open(store_root(name), (4, 9, 7)), count_after=False).rules == "4.x"


def test_rules_inferred_from_a_v2_record_alone(tmp_path):
    """A 5.x store stripped of every 5.x file and config: its V2 records still say 5.x (a file's first record)."""
    root = copy_store("rmq53-v2", tmp_path)
    for name in ("abort.bak", "compaction", "config"):
        p = root / name
        shutil.rmtree(p) if p.is_dir() else p.unlink()
    size = SETTINGS["rmq53-v2"]["commitlog"]
    head = min(x["wroteOffset"] for x in manifest("rmq53-v2") if x["messageVersion"] == "MESSAGE_VERSION_V2" and x["wroteOffset"] % size == 0)
    r = preview(Store.open(root), count_after=False)
    assert r.rules == "5.3.2 on" and f"V2 record at {head}" in r.rules_why


def test_info_says_which_rules_and_why():
    """The preview line names the rules and how they were chosen, on screen and in jsonl."""
    screen = run("info", "-s", store_root("rmq4-basic")).stdout
    assert "recovery (rules: 4.x, inferred: no 5.x file, config field or V2 record in the store)" in screen
    rec = next(x for x in jsonl(run("info", "-s", store_root("rmq4-basic"), "-f", "jsonl", "--broker-version", "5.3.3").stdout) if x["kind"] == "recovery")
    assert (rec["broker_rules"], rec["broker_rules_why"]) == ("5.3.2 on", "--broker-version 5.3.3")


@pytest.mark.parametrize("ahead", [None, 4096, 1000, 1 << 27])
def test_a_4x_broker_stops_at_the_first_v2_record(ahead):
    """Walked alone, or stepping over chains read ahead on two threads at several range sizes (a chain of a 4.x
    walk ends before a V2 record)."""
    from rmqdump.engines.local import LocalMap

    st = Store.open(store_root("rmq53-v2"))
    r = preview(st, allow_v2=False) if ahead is None else preview(st, allow_v2=False, mapper=LocalMap(2), range_bytes=ahead)
    base = r.scan_from
    v2 = min(x["wroteOffset"] for x in manifest("rmq53-v2") if x["messageVersion"] == "MESSAGE_VERSION_V2" and x["wroteOffset"] >= base)
    assert r.valid_end == v2 and "V2" in r.stop
    assert r.records_walked == sum(1 for x in manifest("rmq53-v2") if base <= x["wroteOffset"] < v2)


DAMAGED = sorted(p.parent.name for p in REAL.glob("rmq53-damaged-*/broker-recovery.json"))


@pytest.mark.parametrize("range_bytes", [4096, 1000, 1 << 27])
@pytest.mark.parametrize("name", DAMAGED)
def test_preview_read_ahead_on_two_threads_is_the_brokers_walk(name, range_bytes, monkeypatch):
    """With two workers the ranges past the start are read side by side first and the walk steps over their clean
    chains: where it starts, how many records it reads and where it stops are still the broker's own walk's
    (broker-recovery.json), at range sizes that cut records anywhere; every range was read ahead."""
    from rmqdump.checks import recovery
    from rmqdump.engines.local import LocalMap

    read, chain_of = [], recovery.chain_of
    monkeypatch.setattr(recovery, "chain_of", lambda sp, **kw: read.append(sp) or chain_of(sp, **kw))
    broker = json.loads((REAL / name / "broker-recovery.json").read_text())
    named = [int(e["message"].rsplit("/", 1)[1]) for e in broker["log"]["infoDuringLoad"] if e["message"].startswith("recover from this mapped file")]
    told = []
    st = Store.open(store_root(name))
    r = preview(st, mapper=LocalMap(2), range_bytes=range_bytes, on_bytes=told.append)
    first = named[0] if named else r.scan_from  # a normal recovery logs no start (test_clean_stores_recover_normally... holds it)
    end = broker["afterRecovery"]["maxPhyOffset"]
    walked = sum(1 for m in broker["commitLogWalk"]["messages"] if first <= m["offset"] < end)  # the records it kept from there
    assert (r.scan_from, r.valid_end, r.records_walked) == (first, end, walked)
    past = sum(f.stat().st_size for f in (store_root(name) / "commitlog").iterdir() if int(f.name) >= first)  # the files from the start
    assert sum(sp.end - sp.start for sp in read) == sum(told) == past

