"""Every record of every real store decodes to exactly what its manifest says."""

from __future__ import annotations

import base64
import hashlib

import pytest
from conftest import STORES, jsonl, manifest, run, store_root

from rmqdump.schemas import constants as C

FIELDS = {
    "topic": "topic",
    "queue_id": "queueId",
    "sys_flag": "sysFlag",
    "born_timestamp": "bornTimestamp",
    "store_timestamp": "storeTimestamp",
    "born_host": "bornHost",
    "store_host": "storeHost",
    "reconsume_times": "reconsumeTimes",
    "prepared_transaction_offset": "preparedTransactionOffset",
    "flag": "flag",
    "body_crc": "bodyCRC",
    "tags": "tags",
    "keys": "keys",
    "uniq_key": "uniqKey",
    "phys_offset": "wroteOffset",
    "total_size": "wroteBytes",
    "msg_id": "msgId",
    "queue_offset": "logicsOffset",
    "body_length": "body_len",
}


def _decode(name: str, *extra: str) -> list[dict]:
    r = run("commitlog", store_root(name) / "commitlog", "-f", "jsonl", *extra)
    assert r.exit_code == 0, r.stderr
    return jsonl(r.stdout)


@pytest.mark.parametrize("name", STORES)
def test_every_record_matches_manifest(name):
    rows = _decode(name, "--body", "base64")
    msgs = [r for r in rows if r["kind"] == "message"]
    assert [r["kind"] for r in rows if r["kind"] not in ("message", "blank")] == ["summary"]
    expected = sorted(manifest(name), key=lambda m: m["wroteOffset"])
    assert len(msgs) == len(expected)
    for got, want in zip(msgs, expected, strict=True):
        for ours, theirs in FIELDS.items():
            assert got[ours] == want[theirs], (name, want["seq"], ours)
        body = base64.b64decode(got["body"])
        assert hashlib.sha256(body).hexdigest() == want["body_sha256"]
        assert got["crc_ok"] is True
        assert got["transaction"] == C.TRANSACTION_NAMES[want["sysFlag"] & C.TRANSACTION_MASK]
        props = dict(got["properties"])
        crc_digits = props.pop(C.PROPERTY_CRC32, None)
        assert props == want["properties"]
        if "storedPropCRC32" in want:
            assert crc_digits == want["storedPropCRC32"]
            assert got["prop_crc_ok"] is True
        else:
            assert crc_digits is None and got["prop_crc_ok"] is None
        if "messageVersion" in want:
            assert got["magic_version"] == (2 if want["messageVersion"] == "MESSAGE_VERSION_V2" else 1)
        else:
            assert got["magic_version"] == 1


@pytest.mark.parametrize("name", ["rmq53-v2", "rmq4-flags"])
def test_compressed_bodies_decompress(name):
    rows = _decode(name, "--body", "base64", "--decompress")
    by_offset = {m["wroteOffset"]: m for m in manifest(name)}
    seen = 0
    for r in rows:
        if r["kind"] != "message":
            continue
        want = by_offset[r["phys_offset"]]
        if "uncompressed_body_sha256" in want:
            assert r.get("decompressed") is True
            assert hashlib.sha256(base64.b64decode(r["body"])).hexdigest() == want["uncompressed_body_sha256"]
            seen += 1
    assert seen == sum("uncompressed_body_sha256" in m for m in manifest(name)) > 0


def test_v2_records_and_long_topics():
    rows = [r for r in _decode("rmq53-v2") if r["kind"] == "message"]
    v2 = [r for r in rows if r["magic_version"] == 2]
    assert len(v2) == 377
    assert {len(r["topic"]) for r in v2} == {187}
    assert max(len(r["topic"]) for r in rows if r["magic_version"] == 1) == 100


def test_blank_markers_fill_each_file():
    rows = _decode("rmq4-basic")
    blanks = [r for r in rows if r["kind"] == "blank"]
    assert len(blanks) == 23
    for b in blanks:
        assert (b["phys_offset"] + b["length"]) % 131072 == 0
    assert blanks[-1]["marker"] == "zeros"
    assert all(b["marker"] == "blank" for b in blanks[:-1])


def test_transaction_types_and_ipv6_hosts():
    rows = [r for r in _decode("rmq4-flags") if r["kind"] == "message"]
    kinds = {r["transaction"] for r in rows}
    assert kinds == {"none", "prepared", "commit", "rollback"}
    v6 = [r for r in rows if r["store_host"].startswith("[")]
    assert v6 and all(len(r["msg_id"]) == 56 for r in v6)
    assert all(len(r["msg_id"]) == 32 for r in rows if not r["store_host"].startswith("["))
