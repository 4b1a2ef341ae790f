"""rmqdump.scan.hosts (the hosts and offset msgIds of every column built from a batch) against models written here:
how the broker's Java prints a stored host, and the msgId as the host's bytes then the big-endian physical offset in
uppercase hex; on real records against the manifests."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import HEALTHY, manifest, store_root
from hypothesis import example, given, settings
from hypothesis import strategies as st

from rmqdump.readers.commitlog import CommitLog
from rmqdump.scan import hosts, scanner
from rmqdump.schemas import HostV4, HostV6, OffsetMsgIdV4, OffsetMsgIdV6


def host_model(raw: bytes) -> str:
    """A stored host (an address, then a big-endian i32 port) as the manifests spell bornHost: dotted IPv4, or IPv6 as
    eight hex groups without leading zeros, in brackets."""
    port = str(int.from_bytes(raw[-4:], "big", signed=True))
    if len(raw) == 8:
        return ".".join(str(b) for b in raw[:4]) + ":" + port
    return "[" + ":".join(format(int.from_bytes(raw[i : i + 2], "big"), "x") for i in range(0, 16, 2)) + "]:" + port


def msg_id_model(raw: bytes, phys: int) -> str:
    return (raw + phys.to_bytes(8, "big", signed=True)).hex().upper()


def laid_out(picked: list[tuple[bool, bytes]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The hosts one after another in one byte array, with a byte between them (positions are not multiples of 8)."""
    data = np.frombuffer(b"".join(b"\x7f" + raw for _, raw in picked) + b"\x7f" * 8, dtype=np.uint8)
    pos = np.cumsum([1] + [len(raw) + 1 for _, raw in picked[:-1]]).astype(np.int64) if picked else np.zeros(0, np.int64)
    return data, pos, np.array([v6 for v6, _ in picked], dtype=bool)


HOSTS = st.lists(st.tuples(st.booleans(), st.binary(min_size=20, max_size=20)), min_size=1, max_size=40)


@settings(max_examples=80, deadline=None)
@given(HOSTS, st.lists(st.integers(0, 39), max_size=300), st.booleans(), st.lists(st.integers(0, (1 << 63) - 1), min_size=300, max_size=300))
@example(hosts_=[(False, bytes(20))], rows=[0, 0, 0], spread=False, phys=[0] * 300)  # one host: no distinct search
@example(hosts_=[(False, bytes(20)), (True, bytes(20))], rows=[0, 1, 0, 1], spread=True, phys=[5] * 300)  # the same bytes, both families
@example(hosts_=[(False, bytes(20))], rows=[], spread=True, phys=[0] * 300)  # no records
def test_hosts_and_msg_ids_equal_the_models(hosts_, rows, spread, phys):
    """One host, a few, IPv4 and IPv6 mixed, none; each call twice (the second finds the texts cached)."""
    table = [(v6, raw if v6 else raw[:8]) for v6, raw in hosts_]
    picked = [table[r % len(table)] for r in rows] if spread else [table[0]] * len(rows)
    data, pos, v6 = laid_out(picked)
    for _ in range(2):
        distinct, code = hosts.distinct_hosts(data, pos, v6)
        assert len(set(distinct)) == len(distinct)
        assert [distinct[k] for k in code.tolist()] == [raw for _, raw in picked]
        assert [hosts.host_text(distinct[k]) for k in code.tolist()] == [host_model(raw) for _, raw in picked]
        offsets, text = hosts.msg_id_text(distinct, code, np.array(phys[: len(picked)], dtype=np.int64))
        assert offsets.dtype == np.int32 and offsets[0] == 0
        spelled = text.tobytes().decode("ascii")
        got = [spelled[a:b] for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist(), strict=True)]
        assert got == [msg_id_model(raw, p) for (_, raw), p in zip(picked, phys, strict=False)]
        assert offsets[-1] == len(spelled)


def test_an_ipv4_host_is_the_one_word_the_kernel_reads():
    """scan.kernel.word_codes reads an IPv4 host as one 8-byte word: the schemas' HostV4 must be that size."""
    assert HostV4.sizeof() == 8 == hosts._V4


def test_more_hosts_than_the_text_cache_keeps(monkeypatch):
    """The cache starts again when full; every text stays the model's."""
    monkeypatch.setattr(hosts, "TEXT_MAX", 100)
    raw = np.random.default_rng(7).integers(0, 256, (350, 8), dtype=np.uint8)
    picked = [(False, r.tobytes()) for r in raw] + [(False, r.tobytes()) for r in raw[:50]]
    data, pos, v6 = laid_out(picked)
    for lo, hi in ((0, 120), (120, 400), (0, 400)):
        distinct, code = hosts.distinct_hosts(data, pos[lo:hi], v6[lo:hi])
        assert [hosts.host_text(distinct[k]) for k in code.tolist()] == [host_model(r) for _, r in picked[lo:hi]]
        assert len(hosts._TEXT) <= 100


@pytest.mark.parametrize("name", HEALTHY)
def test_batch_msg_ids_and_hosts_are_the_manifests(name):
    """On real records: each batch's msgIds and born and store hosts, by record, against what the broker returned."""
    want = {m["wroteOffset"]: m for m in manifest(name)}
    seen = 0
    for b in scanner.batches(CommitLog.open(str(store_root(name) / "commitlog"))):
        rows = np.arange(len(b))
        ids = b.msg_ids(rows)
        born, born_code = b.hosts(rows, "born")
        store, store_code = b.hosts(rows, "store")
        for i, phys in enumerate(b.phys.tolist()):
            m = want.get(phys)
            if m is None:
                continue
            seen += 1
            assert ids[i] == m["msgId"], (name, phys)
            assert hosts.host_text(born[born_code[i]]) == m["bornHost"], (name, phys)
            assert hosts.host_text(store[store_code[i]]) == m["storeHost"], (name, phys)
    assert seen == len(want)


@pytest.mark.parametrize(("msgid", "host"), [(OffsetMsgIdV4, HostV4), (OffsetMsgIdV6, HostV6)])
def test_a_msg_id_is_its_store_host_as_stored_then_the_offset(msgid, host):
    """What msg_id_text spells a msgId from, checked against the schemas it is declared in (schemas/msgid.py,
    schemas/commitlog.py): the host's bytes as a record stores them, then the big-endian physical offset."""
    address = bytes(range(1, 1 + host.subcons[0].sizeof()))  # the address field, 4 or 16 bytes
    for port, phys in ((10911, 0), (-1, 1), (65535, (1 << 63) - 1)):
        stored = host.build({"address": address, "port": port})
        assert msgid.build({"address": address, "port": port, "phys_offset": phys}) == stored + phys.to_bytes(8, "big", signed=True)
        offsets, text = hosts.msg_id_text([stored], np.zeros(1, np.intp), np.array([phys], np.int64))
        assert offsets.tolist() == [0, 2 * len(stored) + 16]
        assert text.tobytes().decode() == msgid.build({"address": address, "port": port, "phys_offset": phys}).hex().upper()
