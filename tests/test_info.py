"""`rmqdump info` agrees with each store's manifest and the crash's own records."""

from __future__ import annotations

import json
import os
from collections import defaultdict

import pytest
from conftest import HEALTHY, REAL, SETTINGS, STORES, copy_store, jsonl, manifest, patch, run, run_proc, store_root

CRASH = json.loads((REAL / "rmq4-crash" / "crash.json").read_text())


def info_rows(root) -> tuple[int, list[dict]]:
    r = run("info", "-s", root, "-f", "jsonl")
    return r.exit_code, jsonl(r.stdout)


def queued(m: dict) -> bool:
    return m["sysFlag"] & 0xC in (0, 0x8)


@pytest.mark.parametrize("name", HEALTHY)
def test_info_agrees_with_the_manifest(name):
    code, rows = info_rows(store_root(name))
    assert code == 0
    m = manifest(name)
    per: dict[tuple[str, int], list[dict]] = defaultdict(list)
    for x in m:
        if queued(x):
            per[(x["topic"], x["queueId"])].append(x)
    queues = {(q["topic"], q["queue_id"]): q for q in rows if q["kind"] == "queue"}
    assert set(queues) == set(per)
    for key, recs in per.items():
        q = queues[key]
        by_off = sorted(recs, key=lambda x: x["logicsOffset"])
        assert q["units"] == len(recs) and q["min_offset"] == 0 and q["max_offset"] == by_off[-1]["logicsOffset"] + 1
        assert q["first_store_timestamp"] == by_off[0]["storeTimestamp"] and q["last_store_timestamp"] == by_off[-1]["storeTimestamp"]
        assert q["last_phys_offset"] == by_off[-1]["wroteOffset"]
    cl = next(r for r in rows if r["kind"] == "commitlog")
    assert cl["data_end"] == max(x["wroteOffset"] + x["wroteBytes"] for x in m)
    assert cl["file_size"] == SETTINGS[name]["commitlog"] and cl["min_offset"] == 0
    assert cl["files"] * cl["file_size"] == cl["bytes"] == cl["files_end"]
    store = next(r for r in rows if r["kind"] == "store")
    assert store["abort"] is False and store["cq_file_size"] == SETTINGS[name]["cq_units"] * 20
    index = [r for r in rows if r["kind"] == "index"]
    assert index and all(r["size"] == 40 + 4 * SETTINGS[name]["hash_slots"] + 20 * SETTINGS[name]["index_entries"] for r in index)
    assert index[0]["begin_phy_offset"] == 0 and index[-1]["end_phy_offset"] <= cl["data_end"]
    assert not [r for r in rows if r["kind"] in ("problem", "unsupported")]


def test_info_on_the_crash_store_matches_crash_json():
    code, rows = info_rows(store_root("rmq4-crash"))
    assert code == 0  # unclean, but a restart drops nothing
    store = next(r for r in rows if r["kind"] == "store")
    assert store["abort"] is True and store["lock"] is True
    ck = CRASH["store"]["checkpointFile"]
    assert {k: store["checkpoint"][k] for k in ("physic_msg_timestamp", "logics_msg_timestamp", "index_msg_timestamp")} == {
        "physic_msg_timestamp": ck["physicMsgTimestamp"],
        "logics_msg_timestamp": ck["logicsMsgTimestamp"],
        "index_msg_timestamp": ck["indexMsgTimestamp"],
    }
    idx = [r for r in rows if r["kind"] == "index"]
    assert [
        (r["file"], r["begin_timestamp"], r["end_timestamp"], r["begin_phy_offset"], r["end_phy_offset"], r["hash_slot_count"], r["index_count"]) for r in idx
    ] == [
        (f["file"], f["beginTimestamp"], f["endTimestamp"], f["beginPhyOffset"], f["endPhyOffset"], f["hashSlotCount"], f["indexCount"])
        for f in CRASH["store"]["indexFilesOnDisk"]
    ]
    queues = {f"{r['topic']}-{r['queue_id']}": r for r in rows if r["kind"] == "queue"}
    for key, cq in CRASH["store"]["consumeQueues"].items():
        if cq["maxPhysicOffset"] < 0:
            continue  # SCHEDULE_TOPIC queues the broker created in memory only
        q = queues[key]
        assert (q["min_offset"], q["max_offset"]) == (cq["minOffsetInQueue"], cq["maxOffsetInQueue"])
    cl = next(r for r in rows if r["kind"] == "commitlog")
    assert cl["data_end"] == CRASH["store"]["maxPhyOffset"]
    assert cl["files"] == len(CRASH["store"]["commitLogFilesOnDisk"])


@pytest.mark.parametrize("name", STORES)
def test_info_table(name):
    r = run_proc("info", "-s", store_root(name)) if name == "rmq4-crash" else run("info", "-s", store_root(name))
    assert (r.returncode if name == "rmq4-crash" else r.exit_code) == 0, r.stderr
    assert "Recovery preview" in r.stdout and "ConsumeQueues" in r.stdout and "Index files" in r.stdout
    assert ("ABNORMAL" in r.stdout) == (name == "rmq4-crash")


def test_info_lists_config_files_and_notes():
    code, rows = info_rows(store_root("rmq5-basic"))
    assert code == 0
    names = sorted(r["path"].rsplit("/", 1)[1] for r in rows if r["kind"] == "config")
    assert names == ["consumerOffset.json", "topics.json"] and all(r["ok"] for r in rows if r["kind"] == "config")
    store = next(r for r in rows if r["kind"] == "store")
    assert any("abort.bak" in n for n in store["notes"])


def test_info_names_what_it_does_not_decode(tmp_path):
    import shutil

    root = tmp_path / "s"
    shutil.copytree(store_root("rmq4-flags"), root)
    (root / "batchconsumequeue" / "T" / "0").mkdir(parents=True)
    (root / "consumequeue_ext").mkdir()
    (root / "dledger-n0" / "data").mkdir(parents=True)
    rdb = root / "rocksdbstore"
    rdb.mkdir()
    (rdb / "CURRENT").write_text("MANIFEST-000001\n")
    (rdb / "MANIFEST-000001").write_bytes(b"x")
    code, rows = info_rows(root)
    kinds = sorted(r["what"] for r in rows if r["kind"] == "unsupported")
    assert kinds == ["dledger", "rocksdb"]  # timer files are decoded: tests/test_timer.py; batch and ext queues: tests/test_cq5_kinds.py
    assert code == 0  # named, not misread: the plain parts are still fine


def test_info_on_a_wrong_directory_is_one_line_exit_2(tmp_path):
    r = run_proc("info", "-s", store_root("rmq4-basic") / "commitlog")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "not_a_store" in r.stderr and "give its parent" in r.stderr
    (tmp_path / "f").write_text("x")
    r = run("info", "-s", tmp_path / "f")
    assert r.exit_code == 2 and "not_a_store" in r.stderr


def test_short_checkpoint_is_a_problem_not_a_crash(tmp_path):
    from conftest import copy_store

    root = copy_store("rmq4-crash", tmp_path)
    os.truncate(root / "checkpoint", 10)
    code, rows = info_rows(root)
    assert code == 1
    probs = [r for r in rows if r["kind"] == "problem"]
    assert [(p["code"], p["file_offset"]) for p in probs] == [("checkpoint_short", 10)]
    rec = next(r for r in rows if r["kind"] == "recovery")
    assert rec["scan_from"] == 0 and rec["min_timestamp"] is None


# --- progress: the walks tell of every byte they go past, once; a bar on a terminal, nothing when piped -------------

HEADER_V1_IPV4 = 88  # bytes before the body of a V1 record with IPv4 hosts (store-format.md: fixed fields + bodyLength)


def _commitlog_sizes(root) -> dict[int, int]:
    """The CommitLog files on disk: start offset (the file name) -> size."""
    d = root / "commitlog"
    return {int(n): os.path.getsize(d / n) for n in os.listdir(d)}


def _walked(root, version=None, **kw) -> tuple[list[int], object]:
    from rmqdump.checks.recovery import preview
    from rmqdump.readers.store import Store

    told: list[int] = []
    r = preview(Store.open(root, version), on_bytes=told.append, **kw)
    return told, r


@pytest.mark.parametrize("name", STORES)
def test_recovery_preview_tells_each_byte_from_its_start_file_on(name):
    """The bytes told add up to the CommitLog files from the one the broker starts at (the preview's scan_from) to the last."""
    from rmqdump.checks.recovery import preview_bytes
    from rmqdump.readers.store import Store

    root = store_root(name)
    told, r = _walked(root)
    sizes = _commitlog_sizes(root)
    span = sum(n for base, n in sizes.items() if base >= r.scan_from)
    assert all(n > 0 for n in told) and sum(told) == span == preview_bytes(Store.open(root))
    assert len(told) >= sum(1 for base in sizes if base >= r.scan_from)  # at least once a file: the bar moves during the walk
    # crash: from 0; normal, 4.x (the release that wrote rmq4-*): the third-last file; 5.3.2 on (the newest 5.x rules
    # for a 5.x store): the file holding the ConsumeQueues' max offset, the last here
    want = 0 if name == "rmq4-crash" else sorted(sizes)[-3] if name.startswith("rmq4") else max(sizes)
    assert r.scan_from == want


def test_recovery_preview_progress_through_a_bad_body(tmp_path):
    """The walk stops at a flipped body byte; the dropped records after it are walked on: still each byte once."""
    from rmqdump.checks.recovery import preview_bytes
    from rmqdump.readers.store import Store

    root = copy_store("rmq4-basic", tmp_path)
    sizes = _commitlog_sizes(root)
    base = sorted(sizes)[-2]
    victim = next(m for m in manifest("rmq4-basic") if base <= m["wroteOffset"] < base + sizes[base] and m["body_len"] > 0)
    patch(root / "commitlog" / f"{base:020d}", victim["wroteOffset"] - base + HEADER_V1_IPV4, b"\xff")
    told, r = _walked(root, (5, 3, 1))  # before 5.3.2 a normal recovery walks the last three files: the damage too
    assert r.valid_end == victim["wroteOffset"] and r.truncated_messages > 0
    assert sum(told) == sum(n for b, n in sizes.items() if b >= r.scan_from) == preview_bytes(Store.open(root, (5, 3, 1)))


def test_store_info_tells_the_data_end_file_and_the_preview():
    from rmqdump.query.storeinfo import store_info, walk_bytes
    from rmqdump.readers.store import Store

    root = store_root("rmq4-crash")
    told: list[int] = []
    inf = store_info(Store.open(root), on_bytes=told.append)
    sizes = _commitlog_sizes(root)
    last_with_data = max(b for b in sizes if b < inf.commitlog.data_end)
    want = sizes[last_with_data] + sum(n for b, n in sizes.items() if b >= inf.recovery.scan_from)
    assert sum(told) == want == walk_bytes(Store.open(root))
    told.clear()
    inf = store_info(Store.open(root), with_recovery=False, on_bytes=told.append)
    assert sum(told) == sizes[last_with_data] == walk_bytes(Store.open(root), with_recovery=False)


def test_info_progress_bar_on_a_terminal_only(monkeypatch):
    """A rich bar on stderr when it is a terminal, run to its total; nothing of it when stderr is not one."""
    import io
    import re

    from rich.console import Console

    from rmqdump.cli import render as R

    root = store_root("rmq4-crash")
    buf = io.StringIO()
    monkeypatch.setattr(R, "err", Console(file=buf, force_terminal=True, width=120))
    r = run("info", "-s", root)
    assert r.exit_code == 0 and "Recovery preview" in r.stdout
    shown = buf.getvalue()
    assert "info" in shown and "━" in shown
    done, total = re.findall(r"(\d+\.\d)/(\d+\.\d) MB", shown)[-1]  # the last frame drawn
    total_bytes = sum(_commitlog_sizes(root).values()) + SETTINGS["rmq4-crash"]["commitlog"]  # walked from 0 (abnormal), and the data end's file
    assert done == total == f"{total_bytes / 1e6:.1f}"
    buf.seek(0)
    buf.truncate(0)
    monkeypatch.setattr(R, "err", Console(file=buf, force_terminal=False, width=120))
    assert run("info", "-s", root).exit_code == 0 and buf.getvalue() == ""


def test_info_piped_has_no_progress_and_a_pty_has_it(warm_kernels):
    """As an operator runs it: stderr a pipe, nothing on it; stderr a terminal (a pty), the bar is drawn there."""
    import pty
    import subprocess
    import sys
    import threading

    root = store_root("rmq4-basic")
    r = run_proc("info", "-s", root)
    assert r.returncode == 0 and r.stderr == "" and "Recovery preview" in r.stdout
    r = run_proc("info", "-s", root, "-f", "jsonl")
    assert r.returncode == 0 and r.stderr == ""

    master, slave = pty.openpty()
    chunks: list[bytes] = []

    def drain():
        while True:
            try:
                b = os.read(master, 65536)
            except OSError:  # the other end closed
                return
            if not b:
                return
            chunks.append(b)

    t = threading.Thread(target=drain, daemon=True)
    t.start()
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "120"}
    env.pop("NO_COLOR", None)
    p = subprocess.run([sys.executable, "-m", "rmqdump", "info", "-s", str(root)], stdout=subprocess.PIPE, stderr=slave, env=env, timeout=120)
    os.close(slave)
    t.join(10)
    os.close(master)
    shown = b"".join(chunks).decode("utf-8", "replace")
    assert p.returncode == 0 and b"Recovery preview" in p.stdout
    assert "info" in shown and "━" in shown and "MB" in shown


def test_a_commitlog_of_random_bytes_is_not_called_unwritten(tmp_path):
    """A CommitLog file of random bytes holds no record: info says so, rather than 'data ends at 0 (N bytes unwritten)',
    and prints no Python None for the sizes it cannot know (no ConsumeQueues here)."""
    import random

    size = 1 << 20
    (tmp_path / "commitlog").mkdir()
    (tmp_path / "commitlog" / f"{0:020d}").write_bytes(random.Random(3).randbytes(size))
    screen = run("info", "-s", tmp_path, "--no-recovery").stdout
    assert f"no record decodes: {size} bytes from 0 on hold none" in screen and "unwritten" not in screen
    assert "ConsumeQueues (0 queues)" in screen and "None" not in screen
    cl = next(x for x in jsonl(run("info", "-s", tmp_path, "--no-recovery", "-f", "jsonl").stdout) if x["kind"] == "commitlog")
    assert (cl["data_end"], cl["data_end_is_record"], cl["files_end"]) == (0, False, size)
    healthy = next(x for x in jsonl(run("info", "-s", store_root("rmq4-basic"), "--no-recovery", "-f", "jsonl").stdout) if x["kind"] == "commitlog")
    end = max(m["wroteOffset"] + m["wroteBytes"] for m in manifest("rmq4-basic"))
    assert (healthy["data_end"], healthy["data_end_is_record"]) == (end, True)
