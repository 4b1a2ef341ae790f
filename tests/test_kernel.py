"""The compiled scan kernel agrees with construct's parse and a plain per-record dispatch, on every real record and under damage."""

from __future__ import annotations

import itertools
import os
import random
import shutil
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
from conftest import STORES, manifest, store_root
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmqdump.common.javahash import java_hash
from rmqdump.readers.commitlog import CommitLog
from rmqdump.readers.mapped import MappedFile
from rmqdump.readers.message import decode_properties, split_keys
from rmqdump.scan import scanner
from rmqdump.scan.dispatch import DelayLevels, dispatch_columns
from rmqdump.scan.native import code_fingerprint, configure
from rmqdump.schemas import MessageRecord
from rmqdump.schemas import constants as C

DELAYS = DelayLevels.parse()


def java_crc32(data) -> int:
    """The broker's body CRC: CRC32 with the sign bit cleared."""
    return zlib.crc32(data) & 0x7FFFFFFF


def parse_crc_digits(digits: bytes) -> int | None:
    """The __CRC32# value: decimal digits written least significant first."""
    if len(digits) != C.CRC_DIGITS or not digits.isdigit():
        return None
    return int(digits[::-1])


FIELDS = (
    "total_size", "magic", "body_crc", "queue_id", "flag", "queue_offset", "phys_offset", "sys_flag", "born_timestamp",
    "store_timestamp", "reconsume_times", "prepared_transaction_offset", "body_length", "topic_length", "properties_length",
)  # fmt: skip


def _reference(raw: bytes):
    """construct's parse of one record, and the dispatch values computed from it one plain step at a time."""
    rec = MessageRecord.parse(raw)
    props, _ = decode_properties(rec.properties)
    topic = rec.topic.decode("utf-8", errors="replace")
    tags = props.get(C.PROPERTY_TAGS)
    tags_code = java_hash(tags) if tags else 0
    if topic == C.SCHEDULE_TOPIC and C.PROPERTY_DELAY in props:
        try:
            level = int(props[C.PROPERTY_DELAY])
        except ValueError:
            level = 0
        if level > 0:
            tags_code = DELAYS.deliver_time(level, rec.store_timestamp)
    keys = []
    if rec.sys_flag & C.TRANSACTION_MASK != C.TRANSACTION_ROLLBACK:
        if C.PROPERTY_UNIQ_KEY in props:
            keys.append(props[C.PROPERTY_UNIQ_KEY])
        keys.extend(split_keys(props.get(C.PROPERTY_KEYS)))
    key_hashes = [java_hash(f"{topic}#{k}") for k in keys]
    crc_ok = java_crc32(rec.body) == rec.body_crc
    prop_crc = -1
    tail = raw[-C.CRC_PROPERTY_LENGTH :]
    if rec.properties_length >= C.CRC_PROPERTY_LENGTH and tail.startswith((C.PROPERTY_CRC32 + C.NAME_VALUE_SEPARATOR).encode()):
        want = parse_crc_digits(tail[len(C.PROPERTY_CRC32) + 1 : len(C.PROPERTY_CRC32) + 1 + C.CRC_DIGITS])
        prop_crc = int(want is not None and java_crc32(raw[: -C.CRC_PROPERTY_LENGTH]) == want)
    return rec, topic, tags_code, key_hashes, crc_ok, prop_crc


def _check_batches(batches, seen: list | None = None, *, keys: bool = True) -> int:
    """Every record of the batches field by field against construct; how many were checked (their (file, offset) go to `seen`).

    keys=False: batches walked without index keys, which must hold no key columns and everything else the same."""
    checked = 0
    for b in batches:
        if not keys:
            assert not any(k.startswith("key_") for k in b.found)
        d = dispatch_columns(b, DELAYS, keys=keys)
        keys_of: dict[int, list[int]] = {}
        for r, h in zip(d.key_rec.tolist(), d.key_hash.tolist(), strict=True):
            keys_of.setdefault(r, []).append(h)
        for i in range(len(b)):
            pos, end = int(b.cols["_pos"][i]), int(b.cols["_end"][i])
            raw = bytes(b.mf.view[pos:end])
            rec, topic, tags_code, key_hashes, crc_ok, prop_crc = _reference(raw)
            for f in FIELDS:
                assert int(b.cols[f][i]) == rec[f], (pos, f)
            assert b.body(i) == rec.body
            assert b.topic(i) == topic == d.topics[d.topic_id[i]]
            assert b.properties_bytes(i) == rec.properties
            for host in ("born_host", "store_host"):
                assert b._host_at(int(b.cols[host + "_pos"][i]), bool(b.cols[host + "_then"][i]))[:2] == (rec[host].address, rec[host].port)
            assert bool(b.crc_ok[i]) == crc_ok, pos
            assert int(b.prop_crc[i]) == prop_crc, pos
            assert int(d.tags_code[i]) == tags_code, pos
            assert keys_of.get(i, []) == (key_hashes if keys else []), pos
            if seen is not None:
                seen.append((b.mf.path, pos))
            checked += 1
    return checked


@pytest.mark.parametrize("name", STORES)
def test_kernel_equals_construct_on_every_real_record(name):
    cl = CommitLog.open(store_root(name) / "commitlog")
    assert _check_batches(scanner.batches(cl, check_crc=True, keys=True)) > 0


@pytest.mark.parametrize("name", STORES)
def test_kernel_without_keys_equals_construct_on_every_real_record(name):
    """The walk of a pass that wants no index keys (cq verify, export, listings) hashes none and takes every other value the same."""
    from rmqdump.scan.ranges import range_batches
    from rmqdump.scan.splits import commitlog_splits

    cl = CommitLog.open(store_root(name) / "commitlog")
    seen: list = []
    assert _check_batches((b for sp in commitlog_splits(cl, 1 << 14, check_crc=True) for b in range_batches(sp, keys=False)), seen, keys=False) > 0
    assert len(seen) == len(set(seen))


def test_real_stores_hold_non_ascii_keys_and_scheduled_records():
    """The kernel's UTF-8 -> UTF-16 hashing and the DELAY path are exercised by the real records above."""
    non_ascii = sched = 0
    for name in STORES:
        for b in scanner.batches(CommitLog.open(store_root(name) / "commitlog"), check_crc=False, keys=True):
            non_ascii += int((b.found["key_units"] != b.found["key_len"]).sum())
            non_ascii += sum(1 for i in range(len(b)) if not b.properties_bytes(i).isascii())
            sched += sum(1 for i in range(len(b)) if b.topic(i) == C.SCHEDULE_TOPIC)
    assert non_ascii > 0
    assert sched > 0


def _first_record(cl: CommitLog) -> bytes:
    with MappedFile(cl.files[0].path) as mf:
        total = int.from_bytes(mf.view[:4], "big")
        return bytes(mf.view[:total])


def _record(topic: bytes, props: bytes, phys: int, template) -> bytes:
    rec = dict(template)
    body = b"body"
    rec.update(body=body, body_length=len(body), body_crc=java_crc32(body), topic=topic, topic_length=len(topic), properties=props)
    rec.update(properties_length=len(props), phys_offset=phys, total_size=0)
    rec["total_size"] = len(MessageRecord.build(rec))
    return MessageRecord.build(rec)


@pytest.mark.parametrize(
    "topic,props",
    [
        (b"T", b"TAGS\x01\xff\xfeab\x02KEYS\x01a\xc3 b\xf0\x9f\x98\x80 \xed\xa0\x80\x02UNIQ_KEY\x01\xe0\x80\x02"),  # invalid UTF-8, an emoji, a UTF-8 surrogate
        (b"T", b"TAGS\x01\xe8\xae\xa2\xe5\x8d\x95\x02KEYS\x01  x  \x02KEYS\x01y z\x02XTAGS\x01no\x02TAGS\x01\x02"),  # repeated names: the last wins
        (C.SCHEDULE_TOPIC.encode(), b"DELAY\x01 3\x02TAGS\x01t\x02"),  # DELAY int() accepts, the kernel leaves to Python
        (C.SCHEDULE_TOPIC.encode(), b"DELAY\x01\xd9\xa3\x02"),  # a non-ASCII digit
        (C.SCHEDULE_TOPIC.encode(), b"DELAY\x0199\x02"),  # past the highest level: capped
        (C.SCHEDULE_TOPIC.encode(), b"DELAY\x01x\x02"),  # not a number: no delay
        ("主题".encode(), b"UNIQ_KEY\x01\x02KEYS\x01\xe4\xb8\xad"),  # non-ASCII topic, empty UNIQ_KEY, no final separator
    ],
)
def test_kernel_equals_reference_on_crafted_properties(tmp_path, topic, props):
    src = CommitLog.open(store_root("rmq4-basic") / "commitlog")
    template = MessageRecord.parse(_first_record(src))
    one = _record(topic, props, 0, template)
    two = _record(topic, props, len(one), template)
    (tmp_path / "commitlog").mkdir()
    (tmp_path / "commitlog" / "00000000000000000000").write_bytes(one + two + bytes(64))
    assert _check_batches(scanner.batches(CommitLog.open(tmp_path / "commitlog"), check_crc=True, keys=True)) == 2


def _ranged(cl_dir: Path, step: int, records: int):
    cl = CommitLog.open(cl_dir)
    out = []
    for seg in cl.files:
        with MappedFile(seg.path, limit=cl.file_size) as mf:
            for start in range(0, seg.size, step):
                for b in scanner.file_batches_from(seg, mf, start=start, end=min(start + step, seg.size), batch_records=records, keys=True):
                    d = dispatch_columns(b, DELAYS)
                    topics = [d.topics[t] for t in d.topic_id.tolist()]
                    keys = list(zip((d.phys[d.key_rec]).tolist(), d.key_hash.tolist(), strict=True))
                    out.append((d.phys.tolist(), topics, d.tags_code.tolist(), keys, b.crc_ok.tolist(), [e.to_dict() for e in b.events]))
    return [tuple(itertools.chain.from_iterable(x[k] for x in out)) for k in range(6)]


@pytest.mark.parametrize("name", ["rmq4-basic", "rmq53-v2"])
@pytest.mark.parametrize("step,records", [(1 << 40, 32768), (997, 3), (64, 1)])
def test_any_byte_range_split_gives_the_same_columns(name, step, records):
    cl_dir = store_root(name) / "commitlog"
    assert _ranged(cl_dir, step, records) == _ranged(cl_dir, 1 << 40, 32768)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(flips=st.lists(st.tuples(st.integers(0, 130_000), st.integers(0, 7)), min_size=1, max_size=12), seed=st.integers(0, 1000))
def test_kernel_equals_construct_under_damage(tmp_path_factory, flips, seed):
    """Whatever bits are flipped, every record the scan gives still has construct's fields and the plain dispatch values."""
    tmp = tmp_path_factory.mktemp("dmg")
    shutil.copytree(store_root("rmq4-basic") / "commitlog", tmp / "commitlog")
    files = sorted((tmp / "commitlog").iterdir())
    rnd = random.Random(seed)
    hit: list[int] = []  # CommitLog offsets of the flipped bytes
    for pos, bit in flips:
        f = rnd.choice(files)
        data = bytearray(f.read_bytes())
        data[pos % len(data)] ^= 1 << bit
        f.write_bytes(bytes(data))
        hit.append(int(f.name) + pos % len(data))
    seen: list = []
    n = _check_batches(scanner.batches(CommitLog.open(tmp / "commitlog"), check_crc=True, keys=True), seen)
    # every record the manifest says the broker wrote whose bytes no flip touched is among those checked
    intact = [m for m in manifest("rmq4-basic") if not any(m["wroteOffset"] <= h < m["wroteOffset"] + m["wroteBytes"] for h in hit)]
    assert n == len(seen) and {m["wroteOffset"] for m in intact} <= {int(os.path.basename(p)) + pos for p, pos in seen}


@settings(max_examples=200, deadline=None)
@given(
    phys=st.lists(st.integers(0, 1 << 40), max_size=60, unique=True),
    offsets=st.lists(st.integers(-5, (1 << 40) + 5), min_size=1, max_size=60),
    ascending=st.booleans(),
    reuse=st.integers(0, 60),
)
def test_join_offsets_is_searchsorted(phys, offsets, ascending, reuse):
    """The compiled unit join answers as np.searchsorted does, for ascending offsets (a queue's) and any order."""
    ph = np.array(sorted(phys), dtype=np.int64)
    offs = offsets + ph[:reuse].tolist()  # offsets that hit records too
    o = np.array(sorted(offs) if ascending else offs, dtype=np.int64)
    rows = np.empty(len(o), dtype=np.int64)
    hit = scanner.join_offsets(ph, o, rows)
    want = np.searchsorted(ph, o)
    assert rows.tolist() == want.tolist()
    assert hit.tolist() == [bool(r < len(ph) and ph[r] == x) for r, x in zip(want.tolist(), o.tolist(), strict=True)]


@settings(max_examples=100, deadline=None)
@given(size=st.integers(1, 400), spans=st.lists(st.tuples(st.floats(0, 1), st.integers(-3, 60)), max_size=40), past=st.integers(1, 5))
def test_pack_bytes_is_slices_end_to_end(size, spans, past):
    """pack_bytes (Arrow's offsets and values of byte ranges, copied by one memcpy each) against Python's slices: a
    negative length packs nothing, and a range past the data is refused, never read."""
    data = bytes((i * 7 + 3) % 256 for i in range(size))  # no two neighbours alike: a shifted copy shows
    buf = np.frombuffer(data, dtype=np.uint8)
    spans = [(int(f * size), n) for f, n in spans]
    spans = [(p, min(n, size - p)) for p, n in spans]  # every range inside the data
    pos = np.array([p for p, _ in spans], dtype=np.int64)
    length = np.array([n for _, n in spans], dtype=np.int64)
    parts = [data[p : p + max(n, 0)] for p, n in spans]
    offs, values = scanner.pack_bytes(buf, pos, length)
    assert offs.dtype == np.int32 and offs.tolist() == list(itertools.accumulate((len(x) for x in parts), initial=0))
    assert values.tobytes() == b"".join(parts)
    with pytest.raises(IndexError):  # one range ends `past` bytes after the data
        scanner.pack_bytes(buf, np.append(pos, size - 1), np.append(length, 1 + past))


@settings(max_examples=50, deadline=None)
@given(data=st.binary(max_size=300), lo=st.integers(0, 20))
def test_crc32_is_zlibs(data, lo):
    """Both CRC paths of the kernel: its table code, and the library it calls when it finds one (libdeflate, else zlib)."""
    configure()
    from rmqdump.scan import kernel as jit  # the JIT module: its CRC helpers are not entry points of the ahead-of-time one
    buf = np.frombuffer(bytes(7) + data, dtype=np.uint8)
    start = min(lo, len(buf))
    assert jit.crc32(buf, start, len(buf) - start) == jit._crc(buf, start, len(buf) - start) == zlib.crc32(bytes(buf[start:]))


@pytest.mark.parametrize(
    ("crc", "library"),
    [
        ("table", "native.crc_library()[0] == 'table'"),
        ("zlib", "native.crc_library()[0] == 'zlib'"),
        ("", "native.crc_library()[0] == 'deflate'"),
    ],
    ids=["table", "zlib", "libdeflate"],
)
def test_kernel_crc_paths_give_the_same_batches(tmp_path, crc, library):
    """Each CRC-32 build of the kernel (table code; zlib's crc32; libdeflate's, which .ci/run installs) agrees with construct on every record of a 5.3 store (body and property CRCs)."""
    if not crc:
        import ctypes

        try:
            ctypes.CDLL("libdeflate.so.0")
        except OSError:
            pytest.fail("libdeflate is not installed (apt-get install libdeflate0, as .ci/run does): the kernel's libdeflate CRC-32 path is untested")
    code = (
        "import sys; sys.path.insert(0, 'tests'); from test_kernel import _check_batches;"
        "from rmqdump.scan import native; from rmqdump.readers.commitlog import CommitLog;"
        "from rmqdump.scan import scanner; from conftest import store_root;"
        "n = _check_batches(scanner.batches(CommitLog.open(store_root('rmq53-v2') / 'commitlog'), check_crc=True, keys=True));"
        f"assert {library} and n > 0; print(n)"
    )
    env = dict(os.environ, RMQDUMP_KERNEL_CRC=crc, RMQDUMP_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("NUMBA_CACHE_DIR", None)
    root = Path(__file__).resolve().parent.parent
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=root, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert int(out.stdout) == len(manifest("rmq53-v2"))  # every record the broker wrote


def test_dispatch_columns_hash_the_manifests_keys():
    """The columns' tagsCode, and their "topic#key" hashes (arithmetic on the kernel's key hashes, no strings built),
    equal Java's hashCode of the manifest's TAGS and of the key text at the kernel's key offsets, which is the manifest's."""
    by_offset = {m["wroteOffset"]: m for m in manifest("rmq4-flags")}
    n = sched = 0
    for b in scanner.batches(CommitLog.open(store_root("rmq4-flags") / "commitlog"), check_crc=False, keys=True):
        d = dispatch_columns(b, DELAYS)
        man = [by_offset[p] for p in d.phys.tolist()]
        for i, m in enumerate(man):
            level = int(m["properties"].get(C.PROPERTY_DELAY, 0)) if m["topic"] == C.SCHEDULE_TOPIC else 0
            want_code = DELAYS.deliver_time(level, m["storeTimestamp"]) if level > 0 else java_hash(m["tags"]) if m["tags"] else 0
            assert int(d.tags_code[i]) == want_code, m["seq"]
            sched += level > 0
        f, view = b.found, b.mf.view
        texts: dict[int, list[str]] = {}
        for r, a, k, u in zip(f["key_rec"].tolist(), f["key_pos"].tolist(), f["key_len"].tolist(), f["key_uniq"].tolist(), strict=True):
            t = bytes(view[a : a + k]).decode("utf-8", errors="replace")
            texts.setdefault(r, []).insert(0 if u else len(texts.get(r, [])), t)  # UNIQ_KEY first, as the broker puts it
        want: list[tuple[int, str]] = []
        for i, m in enumerate(man):
            if m["sysFlag"] & C.TRANSACTION_MASK == C.TRANSACTION_ROLLBACK:
                continue
            from_manifest = ([m["uniqKey"]] if m.get("uniqKey") is not None else []) + [k for k in m.get("keys") or [] if k]
            assert texts.get(i, []) == from_manifest, m["seq"]
            want += [(i, f"{m['topic']}#{k}") for k in from_manifest]
        assert d.key_rec.tolist() == [i for i, _ in want]
        assert d.key_hash.tolist() == [java_hash(k) for _, k in want]
        n += len(want)
    assert n > 0 and sched > 0


def test_cache_dir_is_the_users_and_numba_waits_for_a_scan(tmp_path):
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "xdg"), RMQDUMP_AOT="off")  # numba's own functions: its cache
    env.pop("NUMBA_CACHE_DIR", None)
    env.pop("RMQDUMP_CACHE_DIR", None)
    code = (
        "import sys, rmqdump.cli.app, rmqdump.readers.commitlog, rmqdump.scan.dispatch;"
        "assert 'numba' not in sys.modules, 'numba imported before a scan';"
        "from rmqdump.scan._walk import kernel; kernel(); import numba;"
        "print(numba.config.CACHE_DIR)"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout.strip()
    assert out.startswith(str(tmp_path / "xdg" / "rmqdump" / f"numba-{code_fingerprint()}-"))


def test_a_changed_shared_helper_moves_the_compile_cache(tmp_path):
    """numba's cache checks only the file of the function it compiled; the helpers both kernel sets inline from files
    of their own (rmqdump.scan.words, bytecopy, unsigned) key the cache directory instead, byte for byte."""
    from rmqdump.scan import native

    package = Path(native.__file__).parent.parent
    for name in native.SHARED_HELPERS:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(package / name, tmp_path / name)
    assert native.code_fingerprint(str(tmp_path)) == native.code_fingerprint()  # the import system's bytes (a zip on Spark's executors) are the files'
    shipped = tmp_path / "pkg.zip"  # the package as Spark ships it: read through zipimport, not open()
    shutil.make_archive(str(shipped.with_suffix("")), "zip", package.parent, "rmqdump")
    code = f"import sys; sys.path.insert(0, {str(shipped)!r}); from rmqdump.scan import native; assert '.zip' in native.__file__; print(native.code_fingerprint())"
    env = {**os.environ, "PYTHONPATH": ""}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert out.returncode == 0 and out.stdout.strip() == native.code_fingerprint(), out.stderr
    for name in native.SHARED_HELPERS:
        before = (tmp_path / name).read_bytes()
        (tmp_path / name).write_bytes(before + b"\n")
        assert native.code_fingerprint(str(tmp_path)) != native.code_fingerprint(), name
        (tmp_path / name).write_bytes(before)
    from rmqdump.scan.aot import SCAN
    from rmqdump.text.batches import TEXT

    for kernels in (SCAN, TEXT):  # the built modules' keys read the same helpers
        assert set(native.SHARED_HELPERS) <= set(kernels.sources), kernels.module
