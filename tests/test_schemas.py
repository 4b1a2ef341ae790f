"""The construct schemas parse and rebuild every real byte of every store symmetrically."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import STORES, manifest, store_root

from rmqdump.schemas import Checkpoint, ConsumeQueueUnit, IndexEntry, IndexHeader, MessageRecord, message_header
from rmqdump.schemas import constants as C


def _records(name: str):
    for m in manifest(name):
        off, size = m["wroteOffset"], m["wroteBytes"]
        files = sorted(os.listdir(store_root(name) / "commitlog"))
        for fn in files:
            base = int(fn)
            path = store_root(name) / "commitlog" / fn
            if base <= off < base + os.path.getsize(path):
                with open(path, "rb") as f:
                    f.seek(off - base)
                    yield m, f.read(size)
                break


@pytest.mark.parametrize("name", STORES)
def test_message_record_roundtrip(name):
    n = 0
    for m, raw in _records(name):
        rec = MessageRecord.parse(raw)
        assert rec.total_size == len(raw) == m["wroteBytes"]
        assert rec.phys_offset == m["wroteOffset"]
        assert MessageRecord.build(rec) == raw
        n += 1
    assert n == len(manifest(name))


def test_record_versions_and_hosts_seen():
    """The real stores exercise V2 topic lengths and every IPv6 host combination."""
    seen = set()
    for name in STORES:
        for _, raw in _records(name):
            rec = MessageRecord.parse(raw)
            seen.add((rec.magic, bool(rec.sys_flag & C.FLAG_BORNHOST_V6), bool(rec.sys_flag & C.FLAG_STOREHOST_V6)))
    assert (C.MAGIC_V2, False, False) in seen
    assert {(C.MAGIC_V1, b, s) for b in (False, True) for s in (False, True)} <= seen


def test_header_variants_sizes():
    assert message_header().sizeof() == 88
    assert message_header(True, False).sizeof() == 100
    assert message_header(True, True).sizeof() == 112


@pytest.mark.parametrize("name", STORES)
def test_consumequeue_and_index_roundtrip(name):
    root = store_root(name)
    for dirpath, _, files in os.walk(root / "consumequeue"):
        for fn in files:
            data = Path(dirpath, fn).read_bytes()
            assert len(data) % C.CQ_UNIT_SIZE == 0
            for i in range(0, len(data), C.CQ_UNIT_SIZE):
                u = data[i : i + C.CQ_UNIT_SIZE]
                assert ConsumeQueueUnit.build(ConsumeQueueUnit.parse(u)) == u
    for fn in os.listdir(root / "index"):
        data = (root / "index" / fn).read_bytes()
        h = IndexHeader.parse(data)
        assert IndexHeader.build(h) == data[: C.INDEX_HEADER_SIZE]
        assert h.index_count >= 1
        tail = data[-C.INDEX_ENTRY_SIZE * 50 :]
        for i in range(0, len(tail), C.INDEX_ENTRY_SIZE):
            e = tail[i : i + C.INDEX_ENTRY_SIZE]
            assert IndexEntry.build(IndexEntry.parse(e)) == e
    cp = (root / "checkpoint").read_bytes()
    assert Checkpoint.build(Checkpoint.parse(cp)) == cp


def test_sizes_in_constants_are_the_declarations_sizes():
    """The sizes the broker's Java names (ConsumeQueue.CQ_STORE_UNIT_SIZE, BatchConsumeQueue.CQ_STORE_UNIT_SIZE,
    CqExtUnit.MIN_EXT_UNIT_SIZE, IndexHeader.INDEX_HEADER_SIZE, IndexFile.hashSlotSize / indexSize) come out of
    the construct declarations, not a second typing."""
    from rmqdump.schemas import BatchConsumeQueueUnit, ConsumeQueueExtHeader, ConsumeQueueUnit, IndexEntry, IndexSlot

    assert (C.CQ_UNIT_SIZE, C.BCQ_UNIT_SIZE, C.EXT_MIN_UNIT_SIZE) == (20, 46, 20)
    assert (C.INDEX_HEADER_SIZE, C.INDEX_SLOT_SIZE, C.INDEX_ENTRY_SIZE) == (40, 4, 20)
    assert ConsumeQueueUnit.sizeof() == C.CQ_UNIT_SIZE and BatchConsumeQueueUnit.sizeof() == C.BCQ_UNIT_SIZE
    assert ConsumeQueueExtHeader.sizeof() == C.EXT_MIN_UNIT_SIZE
    assert (IndexHeader.sizeof(), IndexSlot.sizeof(), IndexEntry.sizeof()) == (C.INDEX_HEADER_SIZE, C.INDEX_SLOT_SIZE, C.INDEX_ENTRY_SIZE)
