"""The 5.x layouts in schemas/ against the real bytes, and the readers under random damage.

The numpy views the readers use (readers.batchcq, readers.cqext) are derived
from the construct schemas; here they must agree with construct's own parse
on every real unit, and construct must rebuild each unit byte for byte.
"""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

from conftest import jsonl, manifest, run, store_root
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmqdump.readers.batchcq import BCQ_UNIT_SIZE, find_batch_queues
from rmqdump.readers.cqext import find_ext_queues
from rmqdump.schemas import BatchConsumeQueueUnit, ConsumeQueueExtHeader, ConsumeQueueExtUnit
from rmqdump.schemas import constants as C


def test_batch_unit_schema_parses_and_rebuilds_every_real_unit():
    queues, probs = find_batch_queues(str(store_root("rmq53-batchcq")))
    assert probs == [] and len(queues) == 2
    assert BatchConsumeQueueUnit.sizeof() == BCQ_UNIT_SIZE == C.BCQ_UNIT_SIZE
    n = 0
    for q in queues:
        for u in q.chunks():
            raw = Path(u.file.path).read_bytes()
            for k in range(len(u)):
                b = raw[int(u.pos[k]) : int(u.pos[k]) + BCQ_UNIT_SIZE]
                c = BatchConsumeQueueUnit.parse(b)
                assert BatchConsumeQueueUnit.build(c) == b
                assert (c.commit_log_offset, c.size, c.tags_code, c.store_time, c.msg_base_offset, c.batch_size, c.compacted_offset, c.reserved) == (
                    int(u.offset[k]),
                    int(u.size[k]),
                    int(u.tags_code[k]),
                    int(u.store_time[k]),
                    int(u.base_offset[k]),
                    int(u.batch_size[k]),
                    int(u.compacted_offset[k]),
                    int(u.reserved[k]),
                )
                n += bool(u.valid_mask()[k])
    assert n == sum(1 for x in manifest("rmq53-batchcq") if x["kind"] == "cq_unit" and x["cqType"] == "BatchCQ")  # the broker's batch units


def test_ext_unit_schema_parses_and_rebuilds_every_real_unit():
    queues = find_ext_queues(str(store_root("rmq53-cqext")))
    assert len(queues) == 4
    assert ConsumeQueueExtHeader.sizeof() == C.EXT_MIN_UNIT_SIZE
    n = 0
    for q in queues.values():
        u = q.units()
        assert q.problems == []
        for k in range(len(u)):
            raw = Path(q.files[int(u.file_index[k])].path).read_bytes()
            b = raw[int(u.pos[k]) : int(u.pos[k]) + int(u.size[k])]
            c = ConsumeQueueExtUnit.parse(b)
            assert ConsumeQueueExtUnit.build(c) == b
            assert (c.size, c.tags_code, c.msg_store_time, c.bitmap_size) == (int(u.size[k]), int(u.tags_code[k]), int(u.store_time[k]), int(u.bitmap_size[k]))
            assert c.filter_bitmap == q.bitmap(k)
            assert int(u.address[k]) == C.EXT_ADDRESS_BASE + q.files[int(u.file_index[k])].base + int(u.pos[k])
            n += 1
    assert n == sum(1 for x in manifest("rmq53-cqext") if x["kind"] == "cq_unit" and x["raw"]["isExtAddr"])  # every ext unit the manifest read back


TARGETS = {
    "rmq53-batchcq": ["batchconsumequeue/BatchTopicBCQ/0/00000000000000000000", "batchconsumequeue/BatchTopicBCQ/1/00000000000000000000"],
    "rmq53-cqext": ["consumequeue_ext/ExtTopicA/0/00000000000000000000", "consumequeue/ExtTopicB/1/00000000000000000000"],
    "rmq53-lmq": ["consumequeue/%LMQ%order_2/0/00000000000000000000", "consumequeue/%LMQ%order_3/0/00000000000000002400"],
}


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    name=st.sampled_from(sorted(TARGETS)),
    damages=st.lists(
        st.tuples(st.integers(0, 1), st.integers(0, 4095), st.integers(1, 120), st.sampled_from(["zero", "flip", "random", "ones"])), min_size=1, max_size=3
    ),
    seed=st.integers(0, 2**32 - 1),
)
def test_random_damage_is_reported_never_a_crash(tmp_path_factory, name, damages, seed):
    """Whatever is damaged in these files, cq verify answers with findings (exit 1) or none (exit 0), each naming its file."""
    tmp = tmp_path_factory.mktemp("fuzz5")
    root = tmp / "s"
    shutil.copytree(store_root(name), root)
    rnd = random.Random(seed)
    originals = {rel: (root / rel).read_bytes() for rel in TARGETS[name]}
    for which, off, length, how in damages:
        path = root / TARGETS[name][which]
        os.chmod(path, 0o644)
        data = bytearray(path.read_bytes())
        off = off % len(data)
        end = min(len(data), off + length)
        if how == "zero":
            data[off:end] = bytes(end - off)
        elif how == "ones":
            data[off:end] = b"\xff" * (end - off)
        elif how == "random":
            data[off:end] = rnd.randbytes(end - off)
        else:
            data[off] ^= 1 << rnd.randrange(8)
        path.write_bytes(bytes(data))
    changed = any((root / rel).read_bytes() != raw for rel, raw in originals.items())  # damage can undo itself
    r = run("cq", "verify", "-s", root, "-f", "jsonl", "--no-crc")
    assert r.exit_code in (0, 1), r.stderr
    rows = jsonl(r.stdout)
    assert rows[-1]["kind"] == "summary"
    for p in rows[:-1]:
        assert p["code"] and p["file"] and p["detail"]
    if changed and name != "rmq53-cqext":
        # every byte of a Batch ConsumeQueue or LMQ file is checked (fields against the record, the tail must stay zero);
        # in an ext file the filter bitmaps cannot be judged, so only there may a change go unseen
        assert r.exit_code == 1


def test_find_all_finds_a_needle_across_chunk_ends(tmp_path, monkeypatch):
    import re

    from rmqdump.readers import recordprops

    data = bytes(random.Random(3).choice(b"AB") for _ in range(5000))
    (tmp_path / "f").write_bytes(data)
    want = [m.start() for m in re.finditer(b"(?=ABBA)", data)]
    for chunk in (5, 7, 64, 1 << 20):
        monkeypatch.setattr(recordprops, "FIND_CHUNK", chunk)
        assert recordprops.find_all(str(tmp_path / "f"), b"ABBA", 0, len(data)) == want
        assert recordprops.find_all(str(tmp_path / "f"), b"ABBA", 100, 4000) == [p for p in want if 100 <= p < 4000]


def test_ext_files_roll_over_as_the_broker_does(tmp_path):
    """A unit that would reach into a file's last 4 bytes goes to the next file after a short -1; the walk reads it back."""
    import numpy as np

    from rmqdump.builders.cqextbuild import ConsumeQueueExtBuilder
    from rmqdump.readers.cqext import ConsumeQueueExt

    b = ConsumeQueueExtBuilder(str(tmp_path), 1000, 112, sync=False)  # 34-byte units: 29 fit before the last 4 bytes
    n = 100
    addr = b.put("T", 0, np.arange(n, dtype=np.int64) * 7, np.arange(n, dtype=np.int64) + 1_795_454_436_898)
    b.close()
    files = sorted((tmp_path / "T" / "0").iterdir())
    assert [f.name for f in files] == [f"{i * 1000:020d}" for i in range(4)]
    for f in files[:3]:
        raw = f.read_bytes()
        assert raw[29 * 34 : 29 * 34 + 2] == b"\xff\xff" and raw[29 * 34 + 2 :] == bytes(1000 - 29 * 34 - 2)
    assert addr[29] == C.EXT_ADDRESS_BASE + 1000 and addr[0] == C.EXT_ADDRESS_BASE
    q = ConsumeQueueExt.open(str(tmp_path / "T" / "0"), "T", 0)
    u = q.units()
    assert q.problems == [] and np.array_equal(u.address, addr) and np.array_equal(u.tags_code, np.arange(n) * 7)
    assert (q.lookup(addr) == np.arange(n)).all() and (q.lookup(addr + 1) == -1).all()


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["INNER_NUM", "INNER_BASE", "KEYS", "XINNER_NUM", "INNER_MULTI_DISPATCH", ""]), st.text("ab1\x01%,", max_size=6)), max_size=6
    )
)
def test_pick_splits_properties_as_the_full_decode_does(items):
    from rmqdump.readers.message import decode_properties
    from rmqdump.readers.recordprops import WANTED, pick

    raw = "\x02".join(f"{n}\x01{v}" if n else v for n, v in items).encode()
    full = decode_properties(raw)[0]
    assert pick(raw) == {k: v for k, v in full.items() if k in WANTED}
