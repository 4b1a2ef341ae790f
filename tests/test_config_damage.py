"""Damaged config files and system queues under the commands that read them (offsets, the lifecycle views, journey):
a config file that does not parse, or whose entries are not what the broker writes, is named (bad_config, with its
file and key) and never taken for an absent one; a system queue's unit that names no record of its queue is a problem
and not counted in the queue's bounds; a store without CommitLog files is the input error no_commitlog. Expectations
come from the damage the tests write, the stores' own files and truth.json (the broker's view before shutdown).
"""

from __future__ import annotations

import json
import random
import shutil
import struct

import pytest
from conftest import REAL, copy_store, jsonl, run
from test_lifecycle_views import broker_queues

from rmqdump.readers.configfiles import loads_fastjson

LIFECYCLE = "rmq53-lifecycle"
SCHEDULE, HALF, OP, REVIVE = "SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC", "rmq_sys_REVIVE_LOG_LcCluster"
VIEWS = ("retry", "tx", "pop", "delay")
CQ_UNIT_CODES = {
    "cq_dangling",
    "cq_offset_out_of_range",
    "cq_not_message_start",
    "cq_size_mismatch",
    "cq_topic_mismatch",
    "cq_queue_mismatch",
    "cq_queue_offset_mismatch",
}


def problems(rows, code: str = "bad_config") -> list[dict]:
    return [r for r in rows if r["kind"] == "problem" and r["code"] == code]


def rows_of(rows, kind: str) -> list[dict]:
    return [r for r in rows if r["kind"] == kind]


def jsonl_run(*args):
    r = run(*args, "-f", "jsonl")
    assert "internal_error" not in r.stderr and "Traceback" not in r.stderr, r.stderr
    return r.exit_code, jsonl(r.stdout)


# --- 1. nesting deeper than a parser's stack -------------------------------------------------------------------------


def test_deeply_nested_config_is_bad_config_naming_the_file(tmp_path):
    """100000 nested arrays in consumerOffset.json: every command reading it names the file (bad_config), where each of
    them used to end in internal_error (a RecursionError) without it."""
    root = copy_store("rmq4-basic", tmp_path)
    path = root / "config" / "consumerOffset.json"
    path.write_text("[" * 100000 + "]" * 100000 + "\n")
    r = run("offsets", "-s", root)  # no .bak: neither file parses, the input error
    assert r.exit_code == 2 and r.stderr.startswith(f"rmqdump: bad_config: {path}@256: ") and "nested" in r.stderr, r.stderr
    for cmd in (*VIEWS, "journey"):
        code, rows = jsonl_run(cmd, "-s", root, *(["--all"] if cmd == "journey" else []))
        assert code == 1, cmd
        assert [(p["file"], p["file_offset"]) for p in problems(rows)] == [(str(path), 256)], cmd


def test_read_config_depth_error_is_the_files_byte(tmp_path):
    from rmqdump.readers.configfiles import MAX_DEPTH, read_config

    raw = '{"a":"[[[[",\n"b":' + "[" * 300 + "]" * 300 + "}"  # brackets inside a string do not count
    (tmp_path / "c.json").write_text(raw)
    cf = read_config(str(tmp_path / "c.json"))
    assert cf.data is None and cf.offset == raw.index("[", raw.index('"b"')) + MAX_DEPTH - 1
    (tmp_path / "ok.json").write_text('{"a":' + "[" * 50 + "]" * 50 + "}")
    assert read_config(str(tmp_path / "ok.json")).error is None


# --- 2. config files that do not parse are named, absent ones are fine -----------------------------------------------


def _break(root, *names: str) -> list[str]:
    out = []
    for n in names:
        for p in (root / "config" / n, root / "config" / (n + ".bak")):
            p.write_text('{"x":')
            out.append(str(p))
    return out


def test_config_files_that_do_not_parse_are_named_by_every_view(tmp_path):
    """subscriptionGroup.json, delayOffset.json and their .bak cut short: retry, delay and journey --all name the four
    files (bad_config, the byte where the JSON stops) and exit 1, where they answered as if the store had none (retry: 0
    problems and no retry limit; delay: no delay offsets)."""
    root = copy_store(LIFECYCLE, tmp_path)
    broken = _break(root, "delayOffset.json", "subscriptionGroup.json")
    for cmd in (*VIEWS, "journey"):
        code, rows = jsonl_run(cmd, "-s", root, *(["--all"] if cmd == "journey" else []))
        assert code == 1, cmd
        assert sorted((p["file"], p["file_offset"]) for p in problems(rows)) == sorted((b, 5) for b in broken), cmd
    _, rows = jsonl_run("retry", "-s", root)
    assert [g["retry_limit"] for g in rows_of(rows, "group")] == [None]  # not known: and said so above
    _, rows = jsonl_run("delay", "-s", root)
    assert {r["delay_offset"] for r in rows_of(rows, "level")} == {None}


def test_a_store_without_those_config_files_is_fine(tmp_path):
    """A store that never wrote subscriptionGroup.json nor delayOffset.json: no bad_config, and no retry problem."""
    root = copy_store(LIFECYCLE, tmp_path)
    for n in ("delayOffset.json", "subscriptionGroup.json"):
        for p in (root / "config" / n, root / "config" / (n + ".bak")):
            p.unlink()
    for cmd in ("retry", "delay"):
        code, rows = jsonl_run(cmd, "-s", root)
        assert code == 0 and not [r for r in rows if r["kind"] == "problem"], cmd


def test_the_bak_is_read_when_the_file_does_not_parse_and_the_file_is_named(tmp_path):
    """subscriptionGroup.json cut short, its .bak whole: the broker's fallback gives the retry limit (the .bak's), and the
    file is named."""
    root = copy_store(LIFECYCLE, tmp_path)
    main = root / "config" / "subscriptionGroup.json"
    main.write_text('{"x":')
    limit = loads_fastjson((root / "config" / "subscriptionGroup.json.bak").read_text())["subscriptionGroupTable"]["GID_lc_push"]["retryMaxTimes"]
    code, rows = jsonl_run("retry", "-s", root)
    assert code == 1 and [p["file"] for p in problems(rows)] == [str(main)]
    assert [(g["group"], g["retry_limit"]) for g in rows_of(rows, "group")] == [("GID_lc_push", limit)]


# --- 3. entries of the wrong shape are named, not dropped or accepted ------------------------------------------------


def test_offset_table_of_the_wrong_type_is_named(tmp_path):
    root = copy_store("rmq4-basic", tmp_path)
    path = root / "config" / "consumerOffset.json"
    path.write_text('{"offsetTable":[1,2,3]}')
    code, rows = jsonl_run("offsets", "-s", root)
    assert code == 1 and not rows_of(rows, "offset")
    assert [(p["file"], p["detail"]) for p in problems(rows)] == [(str(path), "offsetTable is not an object but list")]


def test_offset_entries_of_the_wrong_type_are_named_by_their_keys(tmp_path):
    """null, a string and an offset past a Java long, a queue id that is not a number: each named with its key; the
    entries the broker reads (a negative offset is a long: listed, with the flags `offsets` gives it) listed."""
    root = copy_store("rmq4-basic", tmp_path)
    path = root / "config" / "consumerOffset.json"
    path.write_text('{"offsetTable":{"orders@g1":{"0":null,"x":5,"1":"7","2":9,"3":-5,"4":99999999999999999999999}}}')
    code, rows = jsonl_run("offsets", "-s", root)
    assert code == 1
    assert [(r["group"], r["topic"], r["queue_id"], r["committed"]) for r in rows_of(rows, "offset")] == [("g1", "orders", 2, 9), ("g1", "orders", 3, -5)]
    named = problems(rows)
    assert {p["file"] for p in named} == {str(path)}
    assert [p["detail"].split(":")[0] for p in named] == [
        "offsetTable['orders@g1']['0']", "offsetTable['orders@g1']", "offsetTable['orders@g1']['1']",
        "offsetTable['orders@g1']['4']",
    ]  # fmt: skip
    assert "'x'" in named[1]["detail"]
    code, rows = jsonl_run("tx", "-s", root)  # the views read the same file
    assert code == 1 and len(problems(rows)) == 4


def test_delay_offsets_of_the_wrong_type_or_range_are_named(tmp_path):
    """delayOffset.json as the broker wrote it, three levels damaged: a string, a negative offset, one past a Java long.
    Each is named by its level and its delay_offset left blank; the others are the file's."""
    root = copy_store(LIFECYCLE, tmp_path)
    path = root / "config" / "delayOffset.json"
    doc = loads_fastjson(path.read_text())
    table = {int(k): v for k, v in doc["offsetTable"].items()}
    doc["offsetTable"] = {**{str(k): v for k, v in table.items()}, "1": "x", "2": -5, "3": 99999999999999999999999}
    path.write_text(json.dumps(doc))
    code, rows = jsonl_run("delay", "-s", root)
    assert code == 1
    assert sorted(p["detail"].split(":")[0] for p in problems(rows)) == ["offsetTable['1']", "offsetTable['2']", "offsetTable['3']"]
    assert {p["file"] for p in problems(rows)} == {str(path)}
    got = {r["level"]: r["delay_offset"] for r in rows_of(rows, "level")}
    assert got == {lv: (None if lv in (1, 2, 3) else table.get(lv)) for lv in got} and set(table) <= set(got)


def test_retry_limit_of_the_wrong_type_is_named(tmp_path):
    root = copy_store(LIFECYCLE, tmp_path)
    path = root / "config" / "subscriptionGroup.json"
    doc = loads_fastjson(path.read_text())
    doc["subscriptionGroupTable"]["GID_lc_push"]["retryMaxTimes"] = "2"
    path.write_text(json.dumps(doc))
    code, rows = jsonl_run("retry", "-s", root)
    assert code == 1
    assert [(p["file"], p["detail"].split(":")[0]) for p in problems(rows)] == [(str(path), "subscriptionGroupTable['GID_lc_push']")]
    assert [g["retry_limit"] for g in rows_of(rows, "group")] == [None]


# --- 4. system queues whose units name no record of theirs ----------------------------------------------------------


def test_system_queues_of_garbage_are_problems_and_not_bounds(tmp_path):
    """Every ConsumeQueue file of the delay, transaction and revive queues overwritten with random bytes: delay, tx and
    pop report their units (cq verify's codes) and exit 1, and show no bounds for those queues, where they exited 0
    with the garbage's min and max offsets."""
    root = copy_store(LIFECYCLE, tmp_path)
    rnd = random.Random(7)
    cq = root / "consumequeue"
    for topic in (SCHEDULE, HALF, OP, REVIVE):
        for f in sorted((cq / topic).glob("*/*")):
            f.write_bytes(rnd.randbytes(12000))
    views = {"delay": ("level", ("min_offset", "max_offset"), {SCHEDULE}), "tx": ("check_progress", ("max_offset", "behind"), {HALF, OP}),
             "pop": ("revive_progress", ("max_offset",), {REVIVE})}  # fmt: skip
    for cmd, (kind, cols, topics) in views.items():
        code, rows = jsonl_run(cmd, "-s", root)
        assert code == 1, cmd
        units = [r for r in rows if r["kind"] == "problem"]
        assert units and {p["code"] for p in units} <= CQ_UNIT_CODES and {p["topic"] for p in units} == topics, cmd
        assert all(str(cq) in p["file"] and p["file_offset"] == p["unit_index"] % 600 * 20 for p in units), cmd
        assert rows_of(rows, kind) and all(r[c] is None for r in rows_of(rows, kind) for c in cols), cmd


def test_a_unit_naming_another_topics_record_is_not_counted(tmp_path):
    """The last unit of delay level 3's queue pointed at a record of LcOrders: cq verify's findings at that unit, and the
    level's max offset one below the broker's (truth.json)."""
    root = copy_store(LIFECYCLE, tmp_path)
    sched = root / "consumequeue" / SCHEDULE / "2" / "00000000000000000000"
    orders = (root / "consumequeue" / "LcOrders" / "0" / "00000000000000000000").read_bytes()[:20]
    hi = broker_queues(LIFECYCLE)[(SCHEDULE, 2)]["maxOffset"]
    with open(sched, "r+b") as f:
        f.seek((hi - 1) * 20)
        f.write(orders)
    code, rows = jsonl_run("delay", "-s", root)
    assert code == 1
    bad = [r for r in rows if r["kind"] == "problem"]
    phys = struct.unpack(">q", orders[:8])[0]
    # as cq verify reports it: the record is LcOrders queue 0's first (queue offset 0), not level 3's unit hi - 1
    codes = ["cq_topic_mismatch", "cq_queue_mismatch"] + (["cq_queue_offset_mismatch"] if hi - 1 != 0 else [])
    assert [(p["code"], p["unit_index"], p["phys_offset"], p["file"], p["file_offset"]) for p in bad] == [
        (c, hi - 1, phys, str(sched), (hi - 1) * 20) for c in sorted(codes)
    ]
    level3 = next(r for r in rows_of(rows, "level") if r["level"] == 3)
    assert (level3["min_offset"], level3["max_offset"]) == (broker_queues(LIFECYCLE)[(SCHEDULE, 2)]["minOffset"], hi - 1)


def test_healthy_system_queues_keep_the_brokers_bounds():
    """The check changes nothing on a healthy store: every level's bounds are the broker's (truth.json)."""
    code, rows = jsonl_run("delay", "-s", REAL / LIFECYCLE / "store")
    assert code == 0
    truth = broker_queues(LIFECYCLE)
    for r in rows_of(rows, "level"):
        b = truth.get((SCHEDULE, r["schedule_queue_id"]))
        if b is not None:
            assert (r["min_offset"], r["max_offset"]) == (b["minOffset"], b["maxOffset"]), r


# --- 5. no CommitLog ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cmd", VIEWS)
def test_views_without_a_commitlog_are_no_commitlog(tmp_path, cmd):
    """The views read the CommitLog: without its files they are the input error cq verify and commitlog give (exit 2),
    not an empty view that exits 0."""
    root = copy_store("rmq4-basic", tmp_path)
    shutil.rmtree(root / "commitlog")
    r = run(cmd, "-s", root)
    assert r.exit_code == 2 and r.stderr.startswith(f"rmqdump: no_commitlog: {root / 'commitlog'}: "), r.stderr
