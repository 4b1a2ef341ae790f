"""`rmqdump commitlog` options, formats and exit codes on the real stores."""

from __future__ import annotations

import csv
import io

from conftest import SETTINGS, jsonl, manifest, run, run_proc, store_root

CL = store_root("rmq4-basic") / "commitlog"


def _msgs(*args):
    r = run("commitlog", CL, "-f", "jsonl", *args)
    assert r.exit_code == 0, r.stderr
    return [x for x in jsonl(r.stdout) if x["kind"] == "message"]


def test_filters_match_manifest():
    man = manifest("rmq4-basic")
    assert [m["phys_offset"] for m in _msgs("--topic", "orders")] == sorted(x["wroteOffset"] for x in man if x["topic"] == "orders")
    assert len(_msgs("--queue", "2")) == sum(x["queueId"] == 2 for x in man)
    assert len(_msgs("--tag", "订单创建")) == sum(x["tags"] == "订单创建" for x in man)
    key = next(k for x in man for k in x["keys"] if k.startswith("dup-key"))
    assert {m["phys_offset"] for m in _msgs("--key", key)} == {x["wroteOffset"] for x in man if key in x["keys"]}
    uniq = man[42]["uniqKey"]
    assert [m["phys_offset"] for m in _msgs("--key", uniq)] == [man[42]["wroteOffset"]]
    t0, t1 = man[100]["storeTimestamp"], man[200]["storeTimestamp"]
    want = sorted(x["wroteOffset"] for x in man if t0 <= x["storeTimestamp"] < t1)
    assert [m["phys_offset"] for m in _msgs("--since", str(t0), "--until", str(t1))] == want
    assert len(_msgs("--limit", "7")) == 7


def test_offset_range_resyncs_from_any_byte():
    man = sorted(manifest("rmq4-basic"), key=lambda x: x["wroteOffset"])
    a, b = man[10]["wroteOffset"] + 3, man[20]["wroteOffset"]
    got = [m["phys_offset"] for m in _msgs("--from-offset", str(a), "--to-offset", str(b))]
    assert got == [x["wroteOffset"] for x in man[11:20]]


def test_iso_time_filter():
    man = manifest("rmq4-basic")
    from rmqdump.common.timeutil import iso

    t = man[1500]["storeTimestamp"]
    assert len(_msgs("--since", iso(t))) == sum(x["storeTimestamp"] >= t for x in man)


def test_csv_and_table_formats():
    r = run("commitlog", CL, "-f", "csv", "--limit", "3")
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert r.exit_code == 0 and [row["kind"] for row in rows[:3]] == ["message"] * 3
    assert int(rows[0]["phys_offset"]) == 0
    r = run("commitlog", CL, "--limit", "2")
    assert r.exit_code == 0 and "TopicTest" in r.stdout and "2 messages" in r.stderr


def test_body_encodings():
    first = manifest("rmq4-basic")[0]
    for how in ("hex", "base64", "text"):
        m = _msgs("--limit", "1", "--body", how)[0]
        assert m["body_encoding"] == ("utf-8" if how == "text" else how)
    m = _msgs("--limit", "1", "--body", "hex")[0]
    assert len(bytes.fromhex(m["body"])) == first["body_len"]


def test_single_file_and_help():
    files = sorted(CL.iterdir())
    r = run("commitlog", files[3], "-f", "jsonl")
    rows = jsonl(r.stdout)
    assert r.exit_code == 0
    size = SETTINGS["rmq4-basic"]["commitlog"]  # mappedFileSizeCommitLog (README.txt)
    want = sorted(m["wroteOffset"] for m in manifest("rmq4-basic") if size * 3 <= m["wroteOffset"] < size * 4)
    assert want and [x["phys_offset"] for x in rows if x["kind"] == "message"] == want  # exactly the broker's records of that file
    h = run_proc("commitlog", "--help")
    assert h.returncode == 0 and "--from-offset" in h.stdout and "Example" in h.stdout
    top = run_proc("--help")
    assert top.returncode == 0 and "commitlog" in top.stdout


def test_piped_output_has_no_progress_noise(warm_kernels):
    r = run_proc("commitlog", CL, "-f", "jsonl", "--limit", "1")
    assert r.returncode == 0
    assert r.stderr == ""
