"""rmqdump export, local engine: the dataset read back with pyarrow equals each store's manifest."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from conftest import REAL, STORES, copy_store, manifest, run, store_root
from hypothesis import given, settings
from hypothesis import strategies as st

from rmqdump.engines.local import LocalMap
from rmqdump.export import arrowbatch
from rmqdump.export.dataset import export_ranges
from rmqdump.readers.commitlog import CommitLog
from rmqdump.scan import scanner
from rmqdump.scan.splits import StoreRef, default_name, plan, resolve_stores

CRC_PROP = "__CRC32#"


def topic_partitioning() -> ds.Partitioning:
    """The hive-style topic directories, as Spark and pyarrow read them."""
    return ds.partitioning(pa.schema([("topic", pa.string())]), flavor="hive")


def read_dataset(path) -> list[dict]:
    """Rows of an exported Parquet dataset (either engine), in (broker, offset) order."""
    t = ds.dataset(str(path), format="parquet", partitioning=topic_partitioning()).to_table()
    rows = t.to_pylist()
    for r in rows:
        r["properties"] = dict(r["properties"])
    return sorted(rows, key=lambda r: (r["broker"], r["phys_offset"]))


def read_jsonl(path) -> list[dict]:
    rows = []
    for f in sorted(Path(path).rglob("part-*")):
        rows += [json.loads(line) for line in f.read_text(encoding="utf-8").splitlines() if line]
    return sorted(rows, key=lambda r: (r["broker"], r["phys_offset"]))


def check_against_manifest(name: str, rows: list[dict], want: list[dict] | None = None, broker: bool = True) -> None:
    """Row by row, every field the manifest recorded for the put that wrote it (`want`: those puts; default all)."""
    want = sorted(manifest(name) if want is None else want, key=lambda m: m["wroteOffset"])
    assert len(rows) == len(want), name
    for r, m in zip(rows, want, strict=True):
        assert not broker or r["broker"] == name
        assert r["phys_offset"] == m["wroteOffset"]
        assert r["total_size"] == m["wroteBytes"]
        assert r["topic"] == m["topic"]
        assert r["queue_id"] == m["queueId"]
        assert r["queue_offset"] == m["logicsOffset"]
        assert r["sys_flag"] == m["sysFlag"]
        assert r["flag"] == m["flag"]
        assert r["born_timestamp"] == m["bornTimestamp"]
        assert r["store_timestamp"] == m["storeTimestamp"]
        assert r["born_host"] == m["bornHost"]
        assert r["store_host"] == m["storeHost"]
        assert r["reconsume_times"] == m["reconsumeTimes"]
        assert r["prepared_transaction_offset"] == m["preparedTransactionOffset"]
        assert r["body_crc"] == m["bodyCRC"]
        assert r["crc_ok"] is True
        assert r["msg_id"] == m["msgId"]
        assert r["tags"] == m["tags"]
        assert r["keys"] == m["keys"]
        assert r["uniq_key"] == m["uniqKey"]
        assert r["body_length"] == m["body_len"]
        props = dict(r["properties"])
        if "storedPropCRC32" in m:
            assert props.pop(CRC_PROP) == m["storedPropCRC32"]
            assert r["prop_crc_ok"] is True
        else:
            assert r["prop_crc_ok"] is None
        assert props == m["properties"]
        if "messageVersion" in m:
            assert r["magic_version"] == (2 if m["messageVersion"] == "MESSAGE_VERSION_V2" else 1)
        if "body" in r:
            assert hashlib.sha256(r["body"]).hexdigest() == m["body_sha256"]


def check_intact(name: str, rows: list[dict], damaged: list[tuple[int, int]], broker: bool = True) -> list[dict]:
    """Rows read from a damaged copy of a real store against its manifest.

    Every record the manifest says the broker wrote whose bytes [wroteOffset,
    wroteOffset + wroteBytes) no damaged CommitLog range [a, b) touches is there,
    field for field; every other row is a record the damage touched (nothing
    else). Returns those other rows.
    """

    def touched(off: int, size: int) -> bool:
        return any(a < off + size and off < b for a, b in damaged)

    intact = [m for m in manifest(name) if not touched(m["wroteOffset"], m["wroteBytes"])]
    assert len(intact) < len(manifest(name)), "the damage touches no record"
    by_offset = {r["phys_offset"]: r for r in rows}
    assert len(by_offset) == len(rows), "a record listed twice"
    missing = [m["wroteOffset"] for m in intact if m["wroteOffset"] not in by_offset]
    assert not missing, f"intact records not read: {missing[:10]}"
    check_against_manifest(name, [by_offset[m["wroteOffset"]] for m in sorted(intact, key=lambda m: m["wroteOffset"])], intact, broker)
    keep = {m["wroteOffset"] for m in intact}
    others = [r for r in rows if r["phys_offset"] not in keep]
    assert all(touched(r["phys_offset"], r["total_size"]) for r in others), [r["phys_offset"] for r in others]
    return others


def reader_rows(name: str, root: Path | None = None, with_body: bool = False) -> list[dict]:
    """What the CommitLog reader's Message.to_dict() says, plus broker: the JSON Lines meaning."""
    cl = CommitLog.open(str((root or store_root(name)) / "commitlog"))
    rows = []
    for b in scanner.batches(cl):
        for i in range(len(b)):
            m = b.message(i, with_body=with_body)
            d = m.to_dict()
            d.setdefault("dledger_index", None)  # export's nullable DLedger columns: null for a plain CommitLog
            d.setdefault("dledger_term", None)
            d["broker"] = name
            d["compaction_part"] = d["compaction_log_offset"] = None  # no compaction topic in these stores (tests/test_compaction_export.py)
            if with_body:
                d["body"] = m.body
            rows.append(d)
    return sorted(rows, key=lambda r: r["phys_offset"])


def test_columns_are_the_message_fields():
    for b in scanner.batches(CommitLog.open(str(store_root("rmq4-basic") / "commitlog"))):
        # a DLedger record's to_dict has the two (tests/test_dledger.py); the compaction columns: tests/test_compaction_export.py
        keys = [*b.message(0).to_dict(), "dledger_index", "dledger_term", "broker", "compaction_part", "compaction_log_offset"]
        break
    assert arrowbatch.schema().names == keys
    assert arrowbatch.schema(with_body=True).names == [*keys, "body"]


@pytest.mark.parametrize("name", STORES)
def test_parquet_equals_manifest(name, tmp_path):
    out = tmp_path / "out"
    res = export_ranges([StoreRef(name, str(store_root(name)))], str(out), with_body=True)
    assert res.problem_count == 0 and res.messages == len(manifest(name))
    rows = read_dataset(out)
    check_against_manifest(name, rows)
    assert rows == reader_rows(name, with_body=True)


def test_fleet_tiny_splits_two_workers_same_rows(tmp_path):
    """One dataset for all stores; ranges of 4 KiB cut records everywhere, two processes: same rows, once each."""
    stores = resolve_stores([str(REAL / "rmq[45]-*" / "store"), str(REAL / "rmq53-v2" / "store")])
    assert [s.name for s in stores] == sorted(STORES)
    splits, _ = plan(stores, 4096)
    assert len(splits) > 1000
    whole = export_ranges(stores, str(tmp_path / "whole"))
    tiny = export_ranges(stores, str(tmp_path / "tiny"), mapper=LocalMap(2), range_bytes=4096)
    assert tiny.messages == whole.messages == sum(len(manifest(s)) for s in STORES)
    a, b = read_dataset(tmp_path / "whole"), read_dataset(tmp_path / "tiny")
    assert a == b
    assert len({(r["broker"], r["phys_offset"]) for r in b}) == len(b)
    for s in STORES:
        check_against_manifest(s, [r for r in b if r["broker"] == s])


def test_partitioned_by_topic(tmp_path):
    out = tmp_path / "out"
    export_ranges([StoreRef("rmq4-flags", str(store_root("rmq4-flags")))], str(out))
    topics = {m["topic"] for m in manifest("rmq4-flags")}
    dirs = {p.name for p in out.iterdir() if p.is_dir()}
    assert len(dirs) == len(topics)
    for t in topics:
        files = list(ds.dataset(str(out), format="parquet", partitioning=topic_partitioning()).to_table().filter(ds.field("topic") == t).column("topic"))
        assert len(files) == sum(1 for m in manifest("rmq4-flags") if m["topic"] == t)


def test_cli_jsonl_with_body(tmp_path):
    out = tmp_path / "j"
    r = run("export", "--store", f"v2={store_root('rmq53-v2')}", "--out", out, "--format", "jsonl", "--body", "raw", "--range-bytes", "32K", "--workers", "2")
    assert r.exit_code == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["messages"] == len(manifest("rmq53-v2")) and summary["problems"] == 0
    assert summary["record_bytes"] == sum(m["wroteBytes"] for m in manifest("rmq53-v2"))  # the records, not the files' zero tails
    assert summary["bytes"] == sum(p.stat().st_size for p in (store_root("rmq53-v2") / "commitlog").iterdir())
    rows = read_jsonl(out)
    for row in rows:
        assert row.pop("body_encoding") == "base64"
        row["body"] = base64.b64decode(row["body"])
        row["broker"] = "rmq53-v2"
    check_against_manifest("rmq53-v2", rows)
    assert rows == reader_rows("rmq53-v2", with_body=True)


def test_refuses_to_overwrite_and_to_write_into_the_store(tmp_path):
    out = tmp_path / "o"
    assert run("export", "-s", store_root("rmq4-flags"), "-o", out).exit_code == 0
    before = sorted(p.name for p in out.rglob("*"))
    r = run("export", "-s", store_root("rmq4-flags"), "-o", out)
    assert r.exit_code == 2 and "output_exists" in r.stderr and str(out) in r.stderr
    assert sorted(p.name for p in out.rglob("*")) == before
    r = run("export", "-s", store_root("rmq4-flags"), "-o", out, "--force", "--format", "jsonl")
    assert r.exit_code == 0
    assert len(read_jsonl(out)) == len(manifest("rmq4-flags"))
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
    copy = copy_store("rmq4-flags", tmp_path)
    r = run("export", "-s", copy, "-o", copy / "export")
    assert r.exit_code == 2 and "output_inside_store" in r.stderr and not (copy / "export").exists()


def test_bad_stores_are_one_line_errors(tmp_path):
    r = run("export", "-s", tmp_path / "nope", "-o", tmp_path / "o")
    assert r.exit_code == 2 and "not_found" in r.stderr and "Traceback" not in r.stderr
    r = run("export", "-s", tmp_path, "-o", tmp_path / "o")
    assert r.exit_code == 2 and "not_a_store" in r.stderr
    a = copy_store("rmq4-flags", tmp_path / "a")
    b = copy_store("rmq4-flags", tmp_path / "b")
    r = run("export", "-s", a, "-s", b, "-o", tmp_path / "o")
    assert r.exit_code == 2 and "duplicate_broker" in r.stderr
    r = run("export", "-s", f"x={a}", "-s", f"y={b}", "-o", tmp_path / "o")
    assert r.exit_code == 0
    assert {r["broker"] for r in read_dataset(tmp_path / "o")} == {"x", "y"}
    assert default_name(str(store_root("rmq4-basic"))) == "rmq4-basic"


def test_damaged_store_exports_what_survives(tmp_path):
    """Bad magic inside a file and a flipped body byte: rows equal the reader's, problems reported, exit 1."""
    root = copy_store("rmq4-basic", tmp_path)
    rows = sorted(manifest("rmq4-basic"), key=lambda m: m["wroteOffset"])
    seg_size = 131072
    victim = next(m for m in rows if m["wroteOffset"] % seg_size > 20000 and m["body_len"] > 100)
    other = next(m for m in rows if m["wroteOffset"] // seg_size == victim["wroteOffset"] // seg_size + 2 and m["body_len"] > 100)
    f = root / "commitlog" / f"{victim['wroteOffset'] // seg_size * seg_size:020d}"
    with open(f, "r+b") as fh:
        fh.seek(victim["wroteOffset"] % seg_size + 4)
        fh.write(b"\x00\x00\x00\x00")
    g = root / "commitlog" / f"{other['wroteOffset'] // seg_size * seg_size:020d}"
    with open(g, "r+b") as fh:
        pos = other["wroteOffset"] % seg_size + other["wroteBytes"] - 1 - len(other["propertiesString"].encode()) - 2 - 2 - len(other["topic"]) - 2
        fh.seek(pos)
        byte = fh.read(1)
        fh.seek(pos)
        fh.write(bytes([byte[0] ^ 0xFF]))
    damaged = [(victim["wroteOffset"] + 4, victim["wroteOffset"] + 8), (int(g.name) + pos, int(g.name) + pos + 1)]
    found = []
    for split in ("256M", "4K"):
        out = tmp_path / f"out-{split}"
        r = run("export", "-s", f"rmq4-basic={root}", "-o", out, "--range-bytes", split, "--workers", "2")
        assert r.exit_code == 1
        assert "bad_magic" in r.stderr and f.name in r.stderr
        got = read_dataset(out)
        assert got == reader_rows("rmq4-basic", root)
        touched = check_intact("rmq4-basic", got, damaged)  # every other record of the manifest, exactly
        assert victim["wroteOffset"] not in {x["phys_offset"] for x in got}
        assert [(x["phys_offset"], x["crc_ok"]) for x in touched] == [(other["wroteOffset"], False)]
        assert json.loads(r.stdout)["problems"] >= 2
        found.append(sorted(r.stderr.splitlines()))
    assert found[0] == found[1]  # a range boundary neither hides nor repeats a problem


def _props_both(raws: list[bytes]):
    import numpy as np

    buf = b"".join(raws)
    length = np.array([len(r) for r in raws], dtype=np.int64)
    pos = np.concatenate([[0], np.cumsum(length)[:-1]]).astype(np.int64)
    fast = [a.to_pylist() for a in arrowbatch._properties(memoryview(buf), pos, length)]
    slow = [a.to_pylist() for a in arrowbatch._properties_py(memoryview(buf), pos, length)]
    return fast, slow


@pytest.mark.parametrize(
    "raws",
    [
        [b"KEYS\x01a  b \x02TAGS\x01t\x02", b"", b"\x02\x02noseparator\x02\x01empty name\x02UNIQ_KEY\x01u\x01with\x01ones\x02"],
        [b"TAGS\x01first\x02TAGS\x01last\x02KEYS\x01k\x02", b"KEYS\x01x"],  # a name twice: the last value wins
        ["TAGS\x01订单\x02".encode() + b"\xff\xfe\x02KEYS\x01k\x02", b"A\x01b"],  # not UTF-8
        [b"TAGS\x01\xff\xfeok\x02KEYS\x01k\xc3\x02", b"UNIQ_KEY\x01\xe4\xb8\x02\xffN\x01v\x02A\x01b"],  # not UTF-8 inside names and values
        [b"TAGS\x01\x02KEYS\x01   \x02UNIQ_KEY\x01\x02", b"\x02", b"KEYS\x01 a\x01b  c \x02A\x01\x01"],  # empty values, separators in values
        ["KEYS\x01订单 ключ\x02TAGS\x01标签".encode(), b"", b"TAGS\x01t"],  # UTF-8 beyond ASCII; no trailing separator

        # more items and KEYS tokens than the first room holds (4 and 2 a record): the buffers grow mid-batch
        [b"A\x01b", b"KEYS\x01" + b" ".join(b"k%d" % i for i in range(40)) + b"\x02" + b"".join(b"N%d\x01v%d\x02" % (i, i) for i in range(30)), b"T\x01u"],
        [b"KEYS\x01a b c"] * 40,  # three KEYS tokens a record: the tokens' room grows alone
    ],
)
def test_vectorized_properties_decode_like_decode_properties(raws):
    from rmqdump.readers.message import decode_properties, split_keys

    fast, slow = _props_both(raws)
    assert fast == slow
    for i, raw in enumerate(raws):
        props, _ = decode_properties(raw)
        assert dict(slow[0][i]) == props
        assert slow[1][i] == props.get("TAGS") and slow[3][i] == props.get("UNIQ_KEY") and slow[2][i] == split_keys(props.get("KEYS"))
        # and against the broker's rule written here: UTF-8 (bad bytes replaced), items split on \x02, name and value
        # on the first \x01, items without one dropped, the last value of a name kept; KEYS split on spaces
        model: dict[str, str] = {}
        for item in raw.decode("utf-8", errors="replace").split("\x02"):
            name, sep, value = item.partition("\x01")
            if sep:
                model[name] = value
        keys = [k for k in model.get("KEYS", "").split(" ") if k]
        assert (dict(fast[0][i]), fast[1][i], fast[2][i], fast[3][i]) == (model, model.get("TAGS"), keys, model.get("UNIQ_KEY"))


def test_vectorized_properties_on_every_real_record():
    for name in STORES:
        for b in scanner.batches(CommitLog.open(str(store_root(name) / "commitlog"))):
            if len(b):
                c = b.cols
                fast = [a.to_pylist() for a in arrowbatch._properties(b.mf.view, c["properties_pos"], c["properties_length"])]
                slow = [a.to_pylist() for a in arrowbatch._properties_py(b.mf.view, c["properties_pos"], c["properties_length"])]
                assert fast == slow


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 5000), max_size=60),
    max_bytes=st.integers(1, 12000),
    max_rows=st.one_of(st.none(), st.integers(1, 20)),
)
def test_chunks_bound_bytes_and_rows_greedily(sizes, max_bytes, max_rows):
    """Arrow batches of records in order: each as long as it can be under both bounds, a record over max_bytes alone."""
    import numpy as np

    want, cur, cur_bytes = [], [], 0
    for i, s in enumerate(sizes):
        if cur and (cur_bytes + s > max_bytes or (max_rows is not None and len(cur) == max_rows)):
            want.append((cur[0], cur[-1] + 1))
            cur, cur_bytes = [], 0
        cur.append(i)
        cur_bytes += s
    if cur:
        want.append((cur[0], cur[-1] + 1))
    assert scanner.runs(np.array(sizes, dtype=np.int32), max_bytes, max_rows) == want


def summarized_as_promised(path: Path) -> int:
    """Every row group's column chunks carry min/max statistics exactly where a reader can prune by them: on each flat
    column but body and raw_without_body, equal to the row group's own values' min and max (pyarrow.compute, over the
    values read back); none on nested columns (properties, keys, flag names) or on the bytes. Returns the chunks checked."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    f = pq.ParquetFile(path)
    nested = {n for n in f.schema_arrow.names if pa.types.is_nested(f.schema_arrow.field(n).type)}
    checked = 0
    for g in range(f.metadata.num_row_groups):
        meta, table = f.metadata.row_group(g), f.read_row_group(g)
        for i in range(meta.num_columns):
            chunk = meta.column(i)
            top = chunk.path_in_schema.split(".")[0]
            if top in nested or top in ("body", "raw_without_body"):
                assert not chunk.is_stats_set, (path, g, chunk.path_in_schema)
            else:
                assert chunk.is_stats_set, (path, g, chunk.path_in_schema)
                want = pc.min_max(table.column(top)).as_py()
                s = chunk.statistics
                assert s.null_count == table.column(top).null_count, (path, g, top)
                if want["min"] is not None:
                    assert s.has_min_max and (s.min, s.max) == (want["min"], want["max"]), (path, g, top, s, want)
            checked += 1
    return checked


def test_row_groups_are_summarized_where_a_reader_can_prune(tmp_path):
    """export and salvage write statistics the same way (rmqdump.export.dataset.parquet_options)."""
    export_ranges([StoreRef("rmq4-basic", str(store_root("rmq4-basic")))], str(tmp_path / "export"), with_body=True)
    parts = sorted((tmp_path / "export").rglob("*.parquet"))
    assert parts and all(summarized_as_promised(p) for p in parts)
    res = run("salvage", str(store_root("rmq53-damaged-midfile-magic")), "--out", str(tmp_path / "salvage"))
    assert res.exit_code == 1, res.stdout + res.stderr
    assert summarized_as_promised(tmp_path / "salvage" / "messages.parquet") > 0

