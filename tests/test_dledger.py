"""A DLedger CommitLog (RocketMQ 5.3.3 with enableDLegerCommitLog) read as a plain one, against the broker's own files.

fixtures/real/rmq53-dledger holds the store as store.tar.gz (its entry index
file is a 160 MB sparse file): each test module unpacks it once into a
temporary directory and copies it for damage tests.
"""

from __future__ import annotations

import filecmp
import os
import random
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import REAL, flip, jsonl, run, unpack_store

from rmqdump.readers import dledger as D
from rmqdump.readers.commitlog import CommitLog, SegmentFile
from rmqdump.readers.fastpath import numpy_dtype
from rmqdump.readers.mapped import MappedFile
from rmqdump.readers.store import Store
from rmqdump.scan import scanner
from rmqdump.schemas import MessageRecord
from rmqdump.schemas import dledger as DL

NAME = "rmq53-dledger"
FILE_SIZE = 131072  # mappedFileSizeCommitLog (README.txt)
N = int(
    re.search(r'^ "messages": (\d+),$', (REAL / NAME / "README.txt").read_text(encoding="utf-8"), flags=re.M).group(1)
)  # entries = messages put (README.txt)


@pytest.fixture(scope="module")
def unpacked(tmp_path_factory) -> Path:
    return unpack_store(NAME, tmp_path_factory.mktemp("dledger"))


def _sparse_copy(src: str, dst: str) -> None:
    """Copy a file leaving its zero MiBs as holes (the 160 MB entry index file is almost all holes)."""
    step = 1 << 20
    with open(src, "rb") as f, open(dst, "wb") as g:
        while chunk := f.read(step):
            if chunk.count(0) == len(chunk):
                g.seek(len(chunk), os.SEEK_CUR)
            else:
                g.write(chunk)
        g.truncate()
    shutil.copystat(src, dst)


@pytest.fixture()
def copy(unpacked, tmp_path) -> Path:
    out = tmp_path / "store"
    shutil.copytree(unpacked, out, copy_function=_sparse_copy)
    assert os.stat(out / "dledger-n0" / "index" / "00000000000000000000").st_blocks * 512 < 4 << 20
    return out


@pytest.fixture(scope="module")
def man() -> dict[str, list[dict]]:
    import json

    out: dict[str, list[dict]] = {}
    with open(REAL / NAME / "manifest.jsonl", encoding="utf-8") as f:
        for line in f:
            d = json.loads(line)
            out.setdefault(d["kind"], []).append(d)
    return out


def data_files(root: Path) -> list[Path]:
    return sorted((root / "dledger-n0" / "data").iterdir())


def entries_by_construct(root: Path) -> list[tuple[Path, int, dict, dict]]:
    """Every entry walked with the construct schemas alone: (file, position, entry header, message record)."""
    out = []
    for f in data_files(root):
        raw = f.read_bytes()
        p = 0
        while p + DL.EntryHeader.sizeof() <= len(raw):
            e = DL.EntryHeader.parse(raw[p:])
            if e.magic != DL.ENTRY_MAGIC:
                break
            m = MessageRecord.parse(raw[p + DL.EntryHeader.sizeof() : p + e.size])
            out.append((f, p, e, m))
            p += e.size
    return out


def test_unpacked_store_stays_sparse(unpacked):
    idx = unpacked / "dledger-n0" / "index" / "00000000000000000000"
    st = os.stat(idx)
    assert st.st_size == DL.INDEX_FILE_UNITS * D.UNIT_SIZE == 167_772_160
    assert st.st_blocks * 512 < 1 << 20


def test_layouts_as_the_readme_gives_them():
    assert DL.EntryHeader.sizeof() == 48 and D.HEADER == 48
    assert DL.IndexUnit.sizeof() == 32 and D.UNIT_SIZE == 32
    assert numpy_dtype(DL.EntryHeader).names == ("magic", "size", "index", "term", "pos", "channel", "chain_crc", "body_crc", "body_size")
    assert numpy_dtype(DL.IndexUnit).names == ("magic", "pos", "size", "index", "term")


def test_scan_matches_construct_walk(unpacked):
    walked = entries_by_construct(unpacked)
    assert len(walked) == N
    cl = CommitLog.open(unpacked)
    assert [f.frame for f in cl.files] == [48, 48]
    got = []
    for b in scanner.batches(cl):
        for i in range(len(b)):
            m = b.message(i, with_body=True)
            got.append((m, b.entries[i]))
    assert len(got) == len(walked)
    for (m, ent), (f, p, e, rec) in zip(got, walked, strict=True):
        base = int(f.name)
        assert m.phys_offset == base + p + 48 == e.pos + 48 == rec.phys_offset
        assert (int(ent["index"]), int(ent["term"]), int(ent["pos"]), int(ent["size"])) == (e.index, e.term, e.pos, e.size)
        assert (m.extra["dledger_index"], m.extra["dledger_term"]) == (e.index, e.term)
        assert e.size == 48 + e.body_size == 48 + rec.total_size == 48 + m.total_size
        assert (m.queue_id, m.queue_offset, m.body_crc, m.store_timestamp, m.body) == (
            rec.queue_id,
            rec.queue_offset,
            rec.body_crc,
            rec.store_timestamp,
            rec.body,
        )
        assert m.crc_ok is True


def test_commitlog_jsonl_vs_manifest(unpacked, man):
    r = run("commitlog", unpacked, "-f", "jsonl")
    assert r.exit_code == 0, r.output
    rows = jsonl(r.stdout)
    msgs = [d for d in rows if d["kind"] == "message"]
    assert [d for d in rows if d["kind"] == "problem"] == []
    puts = man["put"]
    assert len(msgs) == len(puts) == N
    lookups = {d["commitLogOffset"]: d for d in man["dledger_msg_lookup"]}
    for m, p in zip(msgs, puts, strict=True):  # one entry per put, in put order
        assert m["dledger_index"] == p["seq"] and m["dledger_term"] == 0
        assert m["phys_offset"] == p["wroteOffset"] and m["total_size"] == p["wroteBytes"]
        assert (m["topic"], m["queue_id"], m["queue_offset"], m["msg_id"]) == (p["topic"], p["queueId"], p["queueOffset"], p["msgId"])
        assert (m["keys"], m["tags"], m["uniq_key"], m["sys_flag"], m["born_timestamp"]) == (
            [p["keys"]],
            p["tags"],
            p["uniqKey"],
            p["sysFlag"],
            p["bornTimestamp"],
        )
        assert (m["body_length"], m["body_crc"], m["properties"]) == (p["bodyLength"], p["bodyCRC"], p["propertiesWritten"])
        lk = lookups[m["phys_offset"]]  # read back through DefaultMessageStore.lookMessageByOffset
        assert (m["total_size"], m["topic"], m["queue_id"], m["queue_offset"]) == (lk["size"], lk["topic"], lk["queueId"], lk["queueOffset"])
        assert (m["msg_id"], m["store_timestamp"], m["body_crc"], m["properties"]) == (lk["msgId"], lk["storeTimestamp"], lk["bodyCRC"], lk["properties"])
    blanks = [d for d in rows if d["kind"] == "blank"]
    assert [(b["phys_offset"], b["length"], b["marker"]) for b in blanks] == [(130790, FILE_SIZE - 130790, "blank"), (233650, 2 * FILE_SIZE - 233650, "zeros")]


def test_cq_verify_and_units(unpacked, man):
    r = run("cq", "verify", "-s", unpacked, "-f", "jsonl")
    assert r.exit_code == 0, r.output
    assert [d for d in jsonl(r.stdout) if d["kind"] == "problem"] == []
    cl = CommitLog.open(unpacked)
    units = man["cq_unit"]
    assert len(units) == N
    for u in units:  # every unit points at entry pos + 48, where the message is
        m = scanner.record_at(cl, u["commitLogOffset"])
        assert (m.topic, m.queue_id, m.queue_offset, m.total_size, m.store_timestamp) == (u["topic"], u["queueId"], u["queueOffset"], u["size"], u["storeTime"])
    r = run("cq", "dump", "-s", unpacked, "--topic", "DLedgerTopicB", "--queue", "1", "-f", "jsonl", "--resolve")
    dumped = [d for d in jsonl(r.stdout) if d.get("kind") == "unit" and d["valid"]]
    want = [u for u in units if (u["topic"], u["queueId"]) == ("DLedgerTopicB", 1)]
    assert [(d["unit_index"], d["phys_offset"], d["size"], d["tags_code"]) for d in dumped] == [
        (u["queueOffset"], u["commitLogOffset"], u["size"], u["tagsCode"]) for u in want
    ]
    assert [(d["record"]["ok"], d["record"]["queue_offset"], d["record"]["store_timestamp"]) for d in dumped] == [
        (True, u["queueOffset"], u["storeTime"]) for u in want
    ]


def test_index_lookup(unpacked, man):
    for p in man["put"][::97]:
        for key in (p["keys"], p["uniqKey"]):
            r = run("index", "lookup", "-s", unpacked, key, "-f", "jsonl")
            assert r.exit_code == 0, r.output
            found = [d for d in jsonl(r.stdout) if d["kind"] == "message"]
            assert [(d["phys_offset"], d["msg_id"], d["dledger_index"]) for d in found] == [(p["wroteOffset"], p["msgId"], p["seq"])]
    r = run("index", "verify", "-s", unpacked, "-f", "jsonl")
    assert r.exit_code == 0, r.output


def test_rebuild_byte_identical(unpacked, tmp_path):
    out = tmp_path / "out"
    r = run("rebuild", unpacked, "-o", out, "--hash-slots", "500", "--index-entries", "2000", "-f", "jsonl")
    assert r.exit_code == 0, r.output
    cq = [p.relative_to(unpacked) for p in (unpacked / "consumequeue").rglob("*") if p.is_file()]
    assert len(cq) == 8
    for rel in cq:
        assert filecmp.cmp(unpacked / rel, out / rel, shallow=False), rel
    (mine,) = (out / "index").iterdir()
    (theirs,) = (unpacked / "index").iterdir()  # named by the broker's clock when it was created: only the content is derivable
    assert mine.read_bytes() == theirs.read_bytes()
    assert not (out / "commitlog").exists() and not (out / "dledger-n0").exists()


def test_export(unpacked, tmp_path, man):
    out = tmp_path / "ds"
    r = run("export", "-s", unpacked, "-o", out, "-f", "jsonl")
    assert r.exit_code == 0, r.output
    rows = [d for f in sorted(out.rglob("*.jsonl")) for d in jsonl(f.read_text())]
    assert sorted((d["phys_offset"], d["msg_id"], d["topic"]) for d in rows) == sorted((p["wroteOffset"], p["msgId"], p["topic"]) for p in man["put"])
    # the entry index and term of each message: the put's seq (DLedger numbers entries from 0 in put order), term 0 (README)
    assert sorted((d["phys_offset"], d["dledger_index"], d["dledger_term"]) for d in rows) == sorted((p["wroteOffset"], p["seq"], 0) for p in man["put"])


def test_export_parquet_has_the_entry_columns_and_a_plain_store_nulls(unpacked, tmp_path, man):
    import pyarrow.dataset as ds

    r = run("export", "-s", unpacked, "-o", tmp_path / "dl")
    assert r.exit_code == 0, r.output
    t = ds.dataset(tmp_path / "dl", format="parquet", partitioning="hive").to_table(columns=["phys_offset", "dledger_index", "dledger_term"])
    assert sorted(zip(*(t[c].to_pylist() for c in t.column_names), strict=True)) == sorted((p["wroteOffset"], p["seq"], 0) for p in man["put"])
    r = run("export", "-s", REAL / "rmq4-basic" / "store", "-o", tmp_path / "plain")
    assert r.exit_code == 0, r.output
    t = ds.dataset(tmp_path / "plain", format="parquet", partitioning="hive").to_table(columns=["dledger_index", "dledger_term"])
    assert t.num_rows > 0 and t["dledger_index"].null_count == t.num_rows and t["dledger_term"].null_count == t.num_rows


def test_info(unpacked):
    r = run("info", "-s", unpacked, "-f", "jsonl")
    assert r.exit_code == 0, r.output
    rows = jsonl(r.stdout)
    (dl,) = [d for d in rows if d["kind"] == "dledger"]
    ck = (unpacked / "dledger-n0" / "checkpoint").read_text()
    assert f"committedIndex={dl['committed_index']}" in ck and f"endIndex={dl['end_index']}" in ck
    assert (dl["self_id"], dl["current_term"], dl["vote_leader"]) == ("n0", 0, "n0")  # currterm
    assert (dl["entries"], dl["first_index"], dl["last_index"], dl["index_units_checked"]) == (N, 0, N - 1, N)  # README: ledger 0..499
    assert dl["index_files"][0]["size"] == 167_772_160
    assert [d for d in rows if d["kind"] in ("unsupported", "problem")] == []
    (cl,) = [d for d in rows if d["kind"] == "commitlog"]
    assert (cl["files"], cl["file_size"], cl["data_end"]) == (2, FILE_SIZE, 233650)  # README: maxPhyOffset


def test_other_names_and_given_directly(copy, man):
    os.rename(copy / "dledger-n0", copy / "dledger-b1")
    st = Store.open(copy)
    assert st.dledger is not None and st.dledger.self_id == "b1" and len(st.commitlog.files) == 2
    r = run("cq", "verify", "-s", copy)
    assert r.exit_code == 0, r.output
    for given in (copy / "dledger-b1", copy / "dledger-b1" / "data", sorted((copy / "dledger-b1" / "data").iterdir())[1]):
        rows = jsonl(run("commitlog", given, "-f", "jsonl").stdout)
        assert {d["kind"] for d in rows} <= {"message", "blank", "summary"}
        assert [d["dledger_index"] for d in rows if d["kind"] == "message"][-1] == 499


def test_byte_range_splits_give_each_record_once(unpacked):
    cl = CommitLog.open(unpacked)
    whole = [(int(f.base), int(p)) for b in scanner.batches(cl) for f in [b.seg] for p in b.cols["_pos"]]
    for step in (1000, 4096, 33333):
        got = []
        for seg in cl.files:
            with MappedFile(seg.path) as mf:
                for s in range(0, seg.size, step):
                    for b in scanner.file_batches_from(seg, mf, start=s, end=min(s + step, seg.size), check_crc=False):
                        got.extend((seg.base, int(p)) for p in b.cols["_pos"])
                        assert not [e for e in b.events if not hasattr(e, "marker")], b.events
        assert got == whole, step


# --- damage -------------------------------------------------------------------------------------------------------

CHECKED = {
    "magic": "dledger_bad_entry_magic",
    "size": "dledger_entry_size_mismatch",
    "pos": "dledger_entry_pos_mismatch",
    "body_size": "dledger_entry_size_mismatch",
}


def _entry(root: Path, k: int):
    return [w for w in entries_by_construct(root)][k]


@pytest.mark.parametrize("name", list(CHECKED))
def test_flipped_entry_header_byte_found_at_its_entry(copy, name):
    f, p, e, _ = _entry(copy, 137)
    off = sum(sc.sizeof() for sc in DL.EntryHeader.subcons[: [sc.name for sc in DL.EntryHeader.subcons].index(name)])
    width = dict((sc.name, sc.sizeof()) for sc in DL.EntryHeader.subcons)[name]
    for byte in range(width):
        for mask in (0x01, 0x80):
            flip(f, p + off + byte, mask)
            r = run("commitlog", copy, "-f", "jsonl")
            flip(f, p + off + byte, mask)
            assert r.exit_code == 1, (name, byte, mask)
            rows = jsonl(r.stdout)
            probs = [d for d in rows if d["kind"] == "problem"]
            assert [(d["code"], d["file"], d["file_offset"], d["phys_offset"]) for d in probs] == [(CHECKED[name], str(f), p, e.pos + 48)], (name, byte, mask)
            idx = [d["dledger_index"] for d in rows if d["kind"] == "message"]
            assert idx == [i for i in range(N) if i != 137]  # the walk resumes at the next entry


def test_damaged_message_inside_a_sound_entry(copy):
    f, p, e, _ = _entry(copy, 42)
    flip(f, p + 48 + 4 + 3)  # the message's magic
    rows = jsonl(run("commitlog", copy, "-f", "jsonl").stdout)
    probs = [d for d in rows if d["kind"] == "problem"]
    assert [(d["code"], d["file_offset"], d["phys_offset"], d["dledger_index"]) for d in probs] == [("bad_magic", p + 48, e.pos + 48, 42)]
    assert len([d for d in rows if d["kind"] == "message"]) == 499


def test_flipped_index_or_term_found_by_info(copy):
    f, p, e, _ = _entry(copy, 300)
    flip(f, p + 8 + 7)  # the entry's index: 300 -> 301
    rows = jsonl(run("info", "-s", copy, "-f", "jsonl", "--no-recovery").stdout)
    got = sorted((d["code"], d["file_offset"], d["dledger_index"]) for d in rows if d["kind"] == "problem")
    assert got == sorted([("dledger_index_sequence", p, 301), ("dledger_index_sequence", _entry(copy, 301)[1], 301), ("dledger_index_mismatch", 301 * 32, 301)])
    flip(f, p + 8 + 7)
    flip(f, p + 16 + 7)  # the entry's term
    rows = jsonl(run("info", "-s", copy, "-f", "jsonl", "--no-recovery").stdout)
    assert [(d["code"], d["file_offset"], d["phys_offset"]) for d in rows if d["kind"] == "problem"] == [("dledger_index_mismatch", 300 * 32, e.pos + 48)]


def test_every_flipped_index_unit_byte_found_at_its_unit(copy):
    idx = copy / "dledger-n0" / "index" / "00000000000000000000"
    _, _, e, _ = _entry(copy, 211)
    for byte in range(D.UNIT_SIZE):
        flip(idx, 211 * 32 + byte, 0x04)
        r = run("info", "-s", copy, "-f", "jsonl", "--no-recovery")
        flip(idx, 211 * 32 + byte, 0x04)
        assert r.exit_code == 1
        probs = [d for d in jsonl(r.stdout) if d["kind"] == "problem"]
        assert [(d["code"], d["file"], d["file_offset"], d["phys_offset"], d["dledger_index"]) for d in probs] == [
            ("dledger_index_mismatch", str(idx), 211 * 32, e.pos + 48, 211)
        ], byte


def test_checkpoint_ahead_of_the_entries(copy):
    (copy / "dledger-n0" / "checkpoint").write_text("committedIndex=499\nendIndex=620\n")
    rows = jsonl(run("info", "-s", copy, "-f", "jsonl", "--no-recovery").stdout)
    assert [d["code"] for d in rows if d["kind"] == "problem"] == ["dledger_checkpoint_ahead"]


def test_blank_entry_damage(copy):
    f = data_files(copy)[0]
    flip(f, 130790 + 7)  # the BLANK's size
    rows = jsonl(run("commitlog", copy, "-f", "jsonl").stdout)
    assert [(d["code"], d["file_offset"]) for d in rows if d["kind"] == "problem"] == [("dledger_bad_blank", 130790)]
    assert len([d for d in rows if d["kind"] == "message"]) == N


def test_random_flips_never_crash(copy):
    rnd = random.Random(5306)
    files = data_files(copy)
    for _ in range(40):
        f = rnd.choice(files)
        pos = rnd.randrange(0, 102578 if f == files[1] else 131072)
        mask = 1 << rnd.randrange(8)
        flip(f, pos, mask)
        for args in (("commitlog", copy, "-f", "jsonl"), ("cq", "verify", "-s", copy, "-f", "jsonl")):
            r = run(*args)
            assert r.exit_code in (0, 1), (pos, mask, r.output)
        flip(f, pos, mask)


def test_entry_header_dtype_reads_like_construct(unpacked):
    f, p, e, _ = _entry(unpacked, 5)
    raw = np.frombuffer(f.read_bytes()[p : p + 48], dtype=numpy_dtype(DL.EntryHeader))[0]
    assert {n: int(raw[n]) for n in raw.dtype.names} == {k: v for k, v in e.items() if not k.startswith("_")}
    seg = SegmentFile(str(f), int(f.name), f.stat().st_size)
    assert seg.frame == DL.EntryHeader.sizeof()


def test_offset_range_is_in_message_offsets(unpacked, man):
    offs = [p["wroteOffset"] for p in man["put"]]
    for lo, hi in ((offs[1], offs[2]), (offs[1] + 1, offs[3] + 1), (offs[274], offs[276]), (0, offs[0] + 1)):
        rows = jsonl(run("commitlog", unpacked, "--from-offset", lo, "--to-offset", hi, "-f", "jsonl").stdout)
        assert [d["phys_offset"] for d in rows if d["kind"] == "message"] == [o for o in offs if lo <= o < hi], (lo, hi)


def test_a_root_with_only_a_dledger_commitlog(copy, man):
    for name in os.listdir(copy):
        if name != "dledger-n0":
            p = copy / name
            shutil.rmtree(p) if p.is_dir() else p.unlink()
    st = Store.open(copy)
    assert st.dledger is not None and st.queues == {} and len(st.commitlog.files) == 2
    rows = jsonl(run("commitlog", copy, "-f", "jsonl").stdout)
    assert [d["phys_offset"] for d in rows if d["kind"] == "message"] == [p["wroteOffset"] for p in man["put"]]


def test_cq_verify_with_two_workers(unpacked):
    r = run("cq", "verify", "-s", unpacked, "-j", "2", "-f", "jsonl")
    assert r.exit_code == 0, r.output
    (summary,) = [d for d in jsonl(r.stdout) if d["kind"] == "summary"]
    assert (summary["units"], summary["messages"], summary["problems"]) == (N, N, 0)


def test_plain_commitlog_files_beside_a_dledger_one_are_named(copy):
    (copy / "commitlog").mkdir()
    shutil.copyfile(data_files(copy)[0], copy / "commitlog" / "00000000000000000000")
    rows = jsonl(run("info", "-s", copy, "-f", "jsonl", "--no-recovery").stdout)
    assert [(d["what"], d["path"]) for d in rows if d["kind"] == "unsupported"] == [("commitlog", str(copy / "commitlog"))]
    assert [d["entries"] for d in rows if d["kind"] == "dledger"] == [N]


def test_info_reports_a_damaged_entry_where_it_is(copy):
    f, p, e, _ = _entry(copy, 137)
    flip(f, p + 3)  # entry magic 1 -> 0
    r = run("info", "-s", copy, "-f", "jsonl", "--no-recovery")
    assert r.exit_code == 1
    got = [(d["code"], d["file_offset"], d["dledger_index"]) for d in jsonl(r.stdout) if d["kind"] == "problem"]
    assert got == [("dledger_bad_entry_magic", p, None), ("dledger_index_sequence", p + e.size, 138)]


def test_every_entry_header_and_index_unit_round_trips(unpacked):
    units = (unpacked / "dledger-n0" / "index" / "00000000000000000000").read_bytes()[: N * D.UNIT_SIZE]
    data = {f: f.read_bytes() for f in data_files(unpacked)}
    for f, p, e, _ in entries_by_construct(unpacked):
        assert DL.EntryHeader.build(e) == data[f][p : p + D.HEADER]
        raw = units[e.index * D.UNIT_SIZE : (e.index + 1) * D.UNIT_SIZE]
        u = DL.IndexUnit.parse(raw)
        assert DL.IndexUnit.build(u) == raw
        assert (u.magic, u.pos, u.size, u.index, u.term) == (DL.ENTRY_MAGIC, e.pos, e.size, e.index, e.term)


def test_sql_and_report_read_the_dledger_commitlog(unpacked, man, tmp_path):
    r = run("sql", "-s", unpacked, "-f", "jsonl", "SELECT topic, count(*) AS n, sum(total_size) AS b FROM messages GROUP BY topic ORDER BY topic")
    assert r.exit_code == 0, r.output
    want = {}
    for p in man["put"]:
        n, b = want.get(p["topic"], (0, 0))
        want[p["topic"]] = (n + 1, b + p["wroteBytes"])
    assert [(d["topic"], d["n"], d["b"]) for d in jsonl(r.stdout) if "topic" in d] == sorted((t, n, b) for t, (n, b) in want.items())
    r = run("report", "-s", unpacked, "-o", tmp_path / "r.html")
    assert r.exit_code == 0, r.output
    assert f"{N} messages; no problems" in r.output


def test_msgid_reads_the_message_an_offset_id_names(unpacked, man):
    for p in man["put"][::61]:
        rows = jsonl(run("msgid", "-s", unpacked, p["msgId"], "-f", "jsonl").stdout)
        (m,) = [d for d in rows if d["kind"] == "message"]
        assert (m["phys_offset"], m["msg_id"], m["uniq_key"], m["dledger_index"]) == (p["wroteOffset"], p["msgId"], p["uniqKey"], p["seq"])


def test_entries_past_the_index_files_end(copy):
    idx = copy / "dledger-n0" / "index" / "00000000000000000000"
    os.truncate(idx, 100 * D.UNIT_SIZE)
    r = run("info", "-s", copy, "-f", "jsonl", "--no-recovery")
    assert r.exit_code == 1
    probs = [d for d in jsonl(r.stdout) if d["kind"] == "problem"]
    assert {d["code"] for d in probs} == {"dledger_index_missing"}
    assert [(d["file_offset"], d["dledger_index"]) for d in probs] == [(i * D.UNIT_SIZE, i) for i in range(100, N)]


def test_state_file_that_is_not_key_value(copy):
    (copy / "dledger-n0" / "currterm").write_bytes(b"currTerm=0\nvoteLeader\n")
    rows = jsonl(run("info", "-s", copy, "-f", "jsonl", "--no-recovery").stdout)
    assert [(d["code"], d["file"]) for d in rows if d["kind"] == "problem"] == [("dledger_bad_state_file", str(copy / "dledger-n0" / "currterm"))]


def test_jsonl_lines_equal_the_message_objects(unpacked):
    """The output kernel's lines (with and without bodies) are Message.to_dict's, DLedger fields included."""
    cl = CommitLog.open(unpacked)
    want = [m.to_dict() for b in scanner.batches(cl) for m in b.messages()]
    for extra in ((), ("--body", "hex")):
        rows = [d for d in jsonl(run("commitlog", unpacked, "-f", "jsonl", *extra).stdout) if d["kind"] == "message"]
        for d, w in zip(rows, want, strict=True):
            body = {k: d.pop(k) for k in ("body", "body_encoding") if k in d}
            assert list(d) == list(w) and d == w
            assert not extra or bytes.fromhex(body["body"]) == scanner.record_at(cl, d["phys_offset"], with_body=True).body


def test_info_progress_counts_the_entry_walk(unpacked):
    from rmqdump.query.storeinfo import store_info, walk_bytes

    st = Store.open(unpacked)
    told = []
    store_info(st, with_recovery=False, on_bytes=told.append)
    assert sum(told) == walk_bytes(st, with_recovery=False) >= 2 * FILE_SIZE
