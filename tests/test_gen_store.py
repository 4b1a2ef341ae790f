"""bench/gen_store.py writes CommitLogs the broker could have written.

The benchmarks and scale tests of every command rest on the generated store,
so it is held to the same standard as the real fixtures: each record equals
MessageRecord.build of what the generator meant (its manifest), the scan
decodes it with no problems, and file ends follow the broker's rules.
"""

from __future__ import annotations

import hashlib
import importlib.util
import itertools
import os
import subprocess
import sys
import zlib

import pytest
from conftest import ROOT, jsonl, run
from construct import Container

from rmqdump.readers.commitlog import Blank, CommitLog
from rmqdump.readers.message import format_host
from rmqdump.scan import scanner
from rmqdump.schemas import BlankMarker, MessageRecord
from rmqdump.schemas import constants as C

GEN = ROOT / "bench" / "gen_store.py"
FILE_SIZE = 256 * 1024
SIZE = 2 * FILE_SIZE - 4096  # two files; the second ends in zeros


def _load():
    spec = importlib.util.spec_from_file_location("gen_store", GEN)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["gen_store"] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


gen = _load()


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    out = tmp_path_factory.mktemp("gen") / "store"
    summary = gen.generate(str(out), SIZE, file_size=FILE_SIZE, seed=7, manifest=True)
    recs = jsonl((out / "manifest.jsonl").read_text(encoding="utf-8"))
    return out, summary, recs


def _files(out):
    d = out / "commitlog"
    return sorted(d.iterdir())


def _host(text: str) -> Container:
    ip, port = text.rsplit(":", 1)
    return Container(address=bytes(int(x) for x in ip.split(".")), port=int(port))


def _record_bytes(out, rec) -> bytes:
    """The stored bytes of one manifest record, read back from the files."""
    base = rec["wroteOffset"] // FILE_SIZE * FILE_SIZE
    with open(out / "commitlog" / f"{base:020d}", "rb") as f:
        f.seek(rec["wroteOffset"] - base)
        return f.read(rec["wroteBytes"])


def _body(out, rec) -> bytes:
    return MessageRecord.parse(_record_bytes(out, rec)).body


def test_layout_files_and_end_markers(store):
    out, summary, recs = store
    files = _files(out)
    assert [p.name for p in files] == [f"{i * FILE_SIZE:020d}" for i in range(len(files))] == summary.files
    assert len(files) == 2 and all(p.stat().st_size == FILE_SIZE for p in files)
    assert summary.messages == len(recs) and summary.blanks == 1
    assert not list(out.glob(".commitlog.tmp*")) and not list(out.glob("manifest.jsonl.tmp*"))
    # Each file: records back to back from 0; the first ends with a BLANK marker
    # because the next record did not fit (record + 8 > bytes left), the last with zeros.
    for i, p in enumerate(files):
        base = i * FILE_SIZE
        mine = [r for r in recs if base <= r["wroteOffset"] < base + FILE_SIZE]
        assert mine[0]["wroteOffset"] == base
        for a, b in itertools.pairwise(mine):
            assert a["wroteOffset"] + a["wroteBytes"] == b["wroteOffset"]
        end = mine[-1]["wroteOffset"] + mine[-1]["wroteBytes"] - base
        tail = p.read_bytes()[end:]
        if i == 0:
            nxt = recs[len(mine)]
            assert end + nxt["wroteBytes"] + 8 > FILE_SIZE
            assert tail[:8] == BlankMarker.build(Container(total_size=FILE_SIZE - end, magic=C.MAGIC_BLANK))
            assert tail[8:] == bytes(len(tail) - 8)
        else:
            assert tail == bytes(len(tail)) and base + end + recs[-1]["wroteBytes"] > SIZE - FILE_SIZE


def test_every_record_is_what_the_schema_builds(store):
    out, _, recs = store
    for r in recs:
        raw = _record_bytes(out, r)
        body = _body(out, r)
        topic = r["topic"].encode()
        props = r["propertiesString"].encode()
        want = MessageRecord.build(
            Container(
                total_size=r["wroteBytes"],
                magic=C.MAGIC_V1,
                body_crc=zlib.crc32(body) & 0x7FFFFFFF,
                queue_id=r["queueId"],
                flag=r["flag"],
                queue_offset=r["logicsOffset"],
                phys_offset=r["wroteOffset"],
                sys_flag=r["sysFlag"],
                born_timestamp=r["bornTimestamp"],
                born_host=_host(r["bornHost"]),
                store_timestamp=r["storeTimestamp"],
                store_host=_host(r["storeHost"]),
                reconsume_times=0,
                prepared_transaction_offset=0,
                body_length=len(body),
                body=body,
                topic_length=len(topic),
                topic=topic,
                properties_length=len(props),
                properties=props,
            )
        )
        assert raw == want
        assert MessageRecord.build(MessageRecord.parse(raw)) == raw
        assert hashlib.sha256(body).hexdigest() == r["body_sha256"] and r["bodyCRC"] == zlib.crc32(body) & 0x7FFFFFFF


def test_content_is_realistic(store):
    _, _, recs = store
    per_queue: dict[tuple[str, int], list[int]] = {}
    for r in recs:
        per_queue.setdefault((r["topic"], r["queueId"]), []).append(r["logicsOffset"])
        assert gen.BODY_MIN <= r["body_len"] <= gen.BODY_MAX
        assert 1 <= len(r["keys"]) <= 2
        u = r["uniqKey"]
        assert len(u) == 32 and int(u, 16) >= 0 and u.startswith(gen.UNIQ_IP.hex().upper())
        assert list(r["properties"])[:2] == [C.PROPERTY_UNIQ_KEY, C.PROPERTY_CLUSTER]
        assert r["bornTimestamp"] < r["storeTimestamp"]
    assert {q: offs for q, offs in per_queue.items()} == {q: list(range(len(offs))) for q, offs in per_queue.items()}
    assert len(per_queue) == len(gen.DEFAULT_TOPICS) * 4
    st = [r["storeTimestamp"] for r in recs]
    assert all(a < b for a, b in itertools.pairwise(st))
    assert len({r["uniqKey"] for r in recs}) == len(recs)
    assert 1 < len({r["bornHost"] for r in recs}) <= gen.PRODUCERS and {r["storeHost"] for r in recs} == {"10.0.0.5:10911"}
    tagged = sum(r["tags"] is not None for r in recs) / len(recs)
    assert 0.7 < tagged < 0.97


def test_scan_decodes_everything_with_no_problems(store):
    out, _, recs = store
    cl = CommitLog.open(str(out / "commitlog"))
    assert cl.problems == []
    got, blanks = [], []
    for b in scanner.batches(cl, check_crc=True):
        assert b.record_problems == {}
        got.extend(b.messages(with_body=True))
        blanks.extend(e for e in b.events if isinstance(e, Blank))
        assert all(isinstance(e, Blank) for e in b.events)
    assert [(x.marker, x.phys_offset) for x in blanks] == [
        ("blank", recs[0]["wroteOffset"] + sum(r["wroteBytes"] for r in recs if r["wroteOffset"] < FILE_SIZE)),
        ("zeros", recs[-1]["wroteOffset"] + recs[-1]["wroteBytes"]),
    ]
    assert len(got) == len(recs)
    for m, r in zip(got, recs, strict=True):
        assert m.crc_ok and m.prop_crc_ok is None
        assert (m.phys_offset, m.total_size, m.topic, m.queue_id, m.queue_offset, m.flag, m.sys_flag) == (
            r["wroteOffset"],
            r["wroteBytes"],
            r["topic"],
            r["queueId"],
            r["logicsOffset"],
            r["flag"],
            r["sysFlag"],
        )
        assert (m.born_timestamp, m.store_timestamp, m.born_host, m.store_host, m.msg_id) == (
            r["bornTimestamp"],
            r["storeTimestamp"],
            r["bornHost"],
            r["storeHost"],
            r["msgId"],
        )
        assert (m.properties, m.tags, m.keys, m.uniq_key, m.body_crc) == (r["properties"], r["tags"], r["keys"], r["uniqKey"], r["bodyCRC"])
        assert hashlib.sha256(m.body).hexdigest() == r["body_sha256"]


def test_cli_decodes_it_clean(store):
    out, _, recs = store
    res = run("commitlog", out / "commitlog", "-f", "jsonl")
    assert res.exit_code == 0, res.stderr
    lines = jsonl(res.stdout)
    msgs = [x for x in lines if x["kind"] == "message"]
    assert [m["phys_offset"] for m in msgs] == [r["wroteOffset"] for r in recs]
    assert [m["uniq_key"] for m in msgs] == [r["uniqKey"] for r in recs]
    assert not [x for x in lines if x["kind"] == "problem"]
    assert format_host(bytes([10, 0, 0, 5]), 10911) == msgs[0]["store_host"]


def test_deterministic_and_refuses_to_overwrite(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    gen.generate(str(a), 64 * 1024, file_size=32 * 1024, seed=3, topics=("t1", "t2"), queues=2)
    gen.generate(str(b), 64 * 1024, file_size=32 * 1024, seed=3, topics=("t1", "t2"), queues=2)
    assert [p.read_bytes() for p in _files(a)] == [p.read_bytes() for p in _files(b)]
    c = tmp_path / "c"
    gen.generate(str(c), 64 * 1024, file_size=32 * 1024, seed=4, topics=("t1", "t2"), queues=2)
    assert [p.read_bytes() for p in _files(a)] != [p.read_bytes() for p in _files(c)]
    with pytest.raises(FileExistsError):
        gen.generate(str(a), 64 * 1024, file_size=32 * 1024)
    before = [p.read_bytes() for p in _files(a)]
    p = subprocess.run([sys.executable, str(GEN), str(a), "--size", "64KiB", "--file-size", "32KiB"], capture_output=True, text=True)
    assert p.returncode == 2 and "exists" in p.stderr and "Traceback" not in p.stderr
    assert [p.read_bytes() for p in _files(a)] == before
    p = subprocess.run(
        [sys.executable, str(GEN), str(a), "--size", "64KiB", "--file-size", "32KiB", "--count", "10", "--force", "--manifest"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert p.returncode == 0, p.stderr
    assert len((a / "manifest.jsonl").read_text(encoding="utf-8").splitlines()) == 10


def test_parse_size():
    assert gen.parse_size("1GiB") == 1 << 30
    assert gen.parse_size("256KiB") == 256 << 10
    assert gen.parse_size("1.5G") == 3 << 29
    assert gen.parse_size("100MB") == 100_000_000
    assert gen.parse_size("4096") == 4096
    with pytest.raises(ValueError):
        gen.parse_size("lots")


@pytest.mark.parametrize("spare", [8, 4])
def test_blank_rule_record_needs_eight_bytes_after_it(tmp_path, spare):
    """DefaultAppendMessageCallback: a record goes in only if 8 bytes stay free for the BLANK marker."""
    probe = tmp_path / "probe"
    gen.generate(str(probe), 1 << 20, file_size=1 << 20, seed=5, manifest=True)
    sizes = [r["wroteBytes"] for r in jsonl((probe / "manifest.jsonl").read_text(encoding="utf-8"))]
    k = 20
    file_size = sum(sizes[: k + 1]) + spare
    out = tmp_path / "out"
    gen.generate(str(out), 2 * file_size, file_size=file_size, seed=5, manifest=True)
    recs = jsonl((out / "manifest.jsonl").read_text(encoding="utf-8"))
    assert [r["wroteBytes"] for r in recs] == sizes[: len(recs)]
    in_first = k + 1 if spare >= 8 else k
    assert recs[in_first]["wroteOffset"] == file_size
    blank_at = sum(sizes[:in_first])
    first = _files(out)[0].read_bytes()
    assert BlankMarker.parse(first[blank_at : blank_at + 8]) == Container(total_size=file_size - blank_at, magic=C.MAGIC_BLANK)
