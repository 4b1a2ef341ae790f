"""Offset msgIds and UNIQ_KEYs: decoded against the manifests, and resolved to their messages."""

from __future__ import annotations

import calendar

import pytest
from conftest import HEALTHY, STORES, jsonl, manifest, run, store_root
from hypothesis import given, settings
from hypothesis import strategies as st

from rmqdump.readers.msgid import LONG_HEX, SHORT_HEX, MsgIdError, OffsetMsgId, UniqKey


@pytest.mark.parametrize("store", STORES)
def test_offset_msgid_decodes_to_store_host_and_offset(store):
    for m in manifest(store):
        oid = OffsetMsgId.decode(m["msgId"])
        assert oid.phys_offset == m["wroteOffset"]
        assert oid.store_host == m["storeHost"]
        assert len(m["msgId"]) == (LONG_HEX if m["storeHost"].startswith("[") else SHORT_HEX)


@pytest.mark.parametrize("store", STORES)
def test_uniq_key_fields_and_time(store):
    with_uniq = [m for m in manifest(store) if m.get("uniqKey")]
    assert with_uniq
    keys = [UniqKey.decode(m["uniqKey"]) for m in with_uniq]
    # One producer process per store: one IP, pid and class loader; the counter counts up per id made.
    assert len({(k.ip, k.pid, k.class_loader_hash) for k in keys}) == 1
    # Copies (a commit of a prepared message, a delivered delayed message) repeat their id; new ids count up
    # (by one per id the producer made, some of which went into messages the manifest does not key).
    counters = [k.counter for k in {k.text: k for k in keys}.values()]
    assert counters == sorted(set(counters))
    for m, k in zip(with_uniq, keys, strict=True):
        t = k.time_near(m["bornTimestamp"])
        # The id is made when the message is created: between its bornTimestamp and the store's put.
        assert m["bornTimestamp"] - 1000 <= t["time"] <= m["storeTimestamp"] + 1000, m["seq"]
        assert t["utc_offset_minutes"] == 0  # the fixtures' JVM ran in UTC
        assert len(m["uniqKey"]) == (LONG_HEX if ":" in k.ip else SHORT_HEX)


def _uniq(ip: bytes, pid: int, clh: int, millis: int, counter: int) -> str:
    return (ip + pid.to_bytes(2, "big") + clh.to_bytes(4, "big", signed=True) + millis.to_bytes(4, "big") + counter.to_bytes(2, "big")).hex().upper()


def test_month_millis_is_unsigned_and_anchored_in_the_producers_zone():
    # 30 days into a month the millisecond count no longer fits a signed int: Java's (int) cast wraps it.
    month = calendar.timegm((2026, 10, 1, 0, 0, 0)) * 1000
    millis = 30 * 86_400_000 + 1234
    assert millis > 2**31
    k = UniqKey.decode(_uniq(bytes([10, 1, 2, 3]), 4242, -7, millis, 9))
    assert (k.ip, k.pid, k.class_loader_hash, k.month_millis, k.counter) == ("10.1.2.3", 4242, -7, millis, 9)
    t = k.time_near(month + millis + 3)
    assert t["time"] == month + millis and t["month_start"] == month and t["utc_offset_minutes"] == 0
    # A producer at UTC+8 starts its month 8 hours before the UTC month.
    east = month - 8 * 3600 * 1000
    t = UniqKey.decode(_uniq(bytes(16), 1, 1, 5000, 0)).time_near(east + 5000 + 20)
    assert t["month_start"] == east and t["utc_offset_minutes"] == 480 and t["time"] == east + 5000
    # Without a record, the UTC month of "now", or the one before if that lies ahead (getNearlyTimeFromID).
    t = k.time_assumed_utc(month + 5 * 86_400_000)
    assert t["month_start"] == calendar.timegm((2026, 9, 1, 0, 0, 0)) * 1000


@pytest.mark.parametrize("bad", ["", "zz", "0A00000500002A9F000000000000045", "G" * 32, "0" * 40])
def test_bad_ids_are_refused(bad):
    with pytest.raises(MsgIdError):
        OffsetMsgId.decode(bad)
    r = run("msgid", bad or " ", "--store", store_root("rmq4-basic"))
    assert r.exit_code == 2 and "msgid_bad" in r.stderr


@pytest.mark.parametrize("store", HEALTHY)
def test_msgid_command_reads_offset_ids_and_finds_uniq_keys(store):
    ms = manifest(store)
    picks = [ms[0], ms[len(ms) // 2], ms[-1]]
    for m in picks:
        r = run("msgid", m["msgId"], "--store", store_root(store), "-f", "jsonl")
        assert r.exit_code == 0, r.stderr
        out = jsonl(r.stdout)
        assert out[0]["kind"] == "msgid" and out[0]["type"] == "offset" and out[0]["phys_offset"] == m["wroteOffset"]
        assert [o["phys_offset"] for o in out if o["kind"] == "message"] == [m["wroteOffset"]]
    for m in [x for x in ms if x.get("uniqKey") and (x["sysFlag"] & 0xC) != 0xC][:3]:
        r = run("msgid", m["uniqKey"].lower(), "--store", store_root(store), "-f", "jsonl")
        assert r.exit_code == 0, r.stderr
        out = jsonl(r.stdout)
        head = out[0]
        assert head["type"] == "uniq_key" and head["time_anchor"] == "born_timestamp"
        want = {x["wroteOffset"] for x in ms if x.get("uniqKey") == m["uniqKey"] and (x["sysFlag"] & 0xC) != 0xC}
        assert {o["phys_offset"] for o in out if o["kind"] == "message"} == want
        r = run("index", "lookup", "--id", m["uniqKey"], "--store", store_root(store), "-f", "jsonl")
        assert r.exit_code == 0 and {o["phys_offset"] for o in jsonl(r.stdout) if o["kind"] == "message"} == want


def test_unknown_id_is_not_found_but_decoded():
    text = _uniq(bytes([192, 0, 2, 99]), 1, 2, 3, 4)
    r = run("msgid", text, "--store", store_root("rmq4-basic"), "-f", "jsonl")
    assert r.exit_code == 1
    head = jsonl(r.stdout)[0]
    assert head["type"] == "uniq_key" and head["ip"] == "192.0.2.99" and head["found"] == 0 and head["time_anchor"] == "now_utc"


@settings(max_examples=200, deadline=None)
@given(
    st.binary(min_size=4, max_size=4) | st.binary(min_size=16, max_size=16),
    st.integers(0, 65535),
    st.integers(-(2**31), 2**31 - 1),
    st.integers(0, 2**32 - 1),
    st.integers(0, 65535),
)
def test_uniq_key_fields_round_trip(ip, pid, clh, millis, counter):
    k = UniqKey.decode(_uniq(ip, pid, clh, millis, counter))
    assert (k.pid, k.class_loader_hash, k.month_millis, k.counter) == (pid, clh, millis, counter)
    assert len(k.text) == (SHORT_HEX if len(ip) == 4 else LONG_HEX)
    o = OffsetMsgId.decode(k.text)  # the same bytes read as an offset id: IP, port, offset
    assert o.phys_offset == int.from_bytes(bytes.fromhex(k.text)[-8:], "big", signed=True)
