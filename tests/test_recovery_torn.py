"""A crash that tore the newest CommitLog records: what the broker's recovery drops, and what the preview says.

The damaged stores are copies of rmq4-crash (a real halted 4.9.7 broker) whose newest records are
partly zeroed, as when the OS never wrote a record's later pages. The expected recovery is derived in
this file from the broker's own rules (CommitLog.checkMessageAndReturnSize as called by
recoverAbnormally, 4.9.7): the magic must be a message magic (BLANK: next file; anything else: stop);
with checkCRCOnRecover (default true) the body's CRC32 must equal bodyCRC when bodyLength > 0; the
lengths read from the record must add up to totalSize (calMsgLength); an exception while reading
(a length running past the buffer) fails the record too. The first record that fails is where the
CommitLog ends after the restart: it and every record after it are lost.
"""

from __future__ import annotations

import struct
import zlib

import pytest
from conftest import SETTINGS, copy_store, jsonl, manifest, patch, run, store_root

from rmqdump.checks.recovery import preview
from rmqdump.readers.store import Store

MAGIC_V1, MAGIC_BLANK = 0xDAA320A7, 0xCBD43194
BORNHOST_V6, STOREHOST_V6 = 1 << 4, 1 << 5
SIZE = SETTINGS["rmq4-crash"]["commitlog"]
M = manifest("rmq4-crash")
LAST, SECOND_LAST = M[-1], M[-2]
DATA_END = max(x["wroteOffset"] + x["wroteBytes"] for x in M)
# calMsgLength's fixed part before the body (IPv4 hosts, sysFlag 0 on every rmq4-crash message)
HEADER = 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + 8 + 8 + 8 + 4 + 8 + 4


def _cal_msg_length(sys_flag: int, body_len: int, topic_len: int, props_len: int) -> int:
    born = 20 if sys_flag & BORNHOST_V6 else 8
    store = 20 if sys_flag & STOREHOST_V6 else 8
    return 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + born + 8 + store + 4 + 8 + 4 + max(body_len, 0) + 1 + topic_len + 2 + max(props_len, 0)


def broker_check(data: bytes, p: int, check_crc: bool) -> int | None:
    """checkMessageAndReturnSize on a V1-only (4.9.7) broker: the record's size, 0 for BLANK, None when it fails."""
    try:
        total, magic = struct.unpack_from(">iI", data, p)
        if magic == MAGIC_BLANK:
            return 0
        if magic != MAGIC_V1 or total < 0:  # new byte[totalSize] throws on a negative size
            return None
        body_crc, _queue_id, _flag, _qoff, _phys, sys_flag = struct.unpack_from(">iiiqqi", data, p + 8)
        q = p + 40 + 8 + (20 if sys_flag & BORNHOST_V6 else 8) + 8 + (20 if sys_flag & STOREHOST_V6 else 8) + 4 + 8
        (body_len,) = struct.unpack_from(">i", data, q)
        q += 4
        if body_len > 0:
            body = data[q : q + body_len]
            if len(body) < body_len or body_len > total:
                return None  # BufferUnderflow / IndexOutOfBounds
            if check_crc and zlib.crc32(body) & 0x7FFFFFFF != body_crc:
                return None
            q += body_len
        (topic_len,) = struct.unpack_from(">b", data, q)  # a Java byte
        if topic_len < 0 or q + 1 + topic_len > len(data):
            return None
        q += 1 + topic_len
        (props_len,) = struct.unpack_from(">h", data, q)
        if props_len > total or q + 2 + max(props_len, 0) > len(data):
            return None
        return total if _cal_msg_length(sys_flag, body_len, topic_len, props_len) == total else None
    except struct.error:
        return None


def broker_end(path, base: int, check_crc: bool) -> int:
    """recoverAbnormally over one file (the earlier ones are untouched): where the CommitLog ends."""
    data = path.read_bytes()
    p = 0
    while True:
        size = broker_check(data, p, check_crc)
        if not size:  # fails, or BLANK (the last file has none)
            return base + p
        p += size


def _file_of(rec: dict, root):
    base = rec["wroteOffset"] // SIZE * SIZE
    return root / "commitlog" / f"{base:020d}", base


def zero(root, rec: dict, start: int, end: int | None = None) -> None:
    """Zero bytes [start, end) of a record (end: the record's end), as unwritten pages leave it."""
    path, base = _file_of(rec, root)
    end = rec["wroteBytes"] if end is None else end
    patch(path, rec["wroteOffset"] - base + start, bytes(end - start))


def lost(rec: dict, *, header: bool, topic: bool = False, props: bool = False) -> dict:
    """The `dropped` entry the manifest predicts for a record, with the parts that survive the tear."""
    return {
        "phys_offset": rec["wroteOffset"],
        "total_size": rec["wroteBytes"],
        "topic": rec["topic"] if topic else None,
        "queue_id": rec["queueId"] if header else None,
        "queue_offset": rec["logicsOffset"] if header else None,
        "store_timestamp": rec["storeTimestamp"] if header else None,
        "keys": rec["keys"] if props else None,
        "uniq_key": rec["uniqKey"] if props else None,
    }


def dropped(r) -> list[dict]:
    return [{k: v for k, v in d.to_dict().items() if k not in ("file", "file_offset", "state")} for d in r.dropped]


def test_a_last_record_tail_zeroed(tmp_path):
    """(a) header and half the body written, the rest zeros: the body CRC fails; without the CRC check the
    zero topic and properties lengths make the lengths disagree with totalSize: lost either way."""
    root = copy_store("rmq4-crash", tmp_path)
    zero(root, LAST, HEADER + LAST["body_len"] // 2)
    path, base = _file_of(LAST, root)
    for check_crc in (True, False):
        assert broker_end(path, base, check_crc) == LAST["wroteOffset"]
        r = preview(Store.open(root), check_crc=check_crc)
        assert r.valid_end == LAST["wroteOffset"]
        assert r.records_walked == len(M) - 1
        # the broker had appended the whole declared record; the zero tail after it is not data
        assert r.truncated_bytes == LAST["wroteBytes"] and r.truncated_messages == 1
        assert dropped(r) == [lost(LAST, header=True)]
        assert [(d.file, d.file_offset, d.state) for d in r.dropped] == [(str(path), LAST["wroteOffset"] - base, "torn")]
    assert r.commitlog_files_dropped == ["00000000000002097152"]  # the preallocated empty file, as on the undamaged store

    res = run("info", "-s", root, "-f", "jsonl")
    assert res.exit_code == 1
    rec = next(x for x in jsonl(res.stdout) if x["kind"] == "recovery")
    assert (rec["valid_end"], rec["truncated_bytes"], rec["truncated_messages"]) == (LAST["wroteOffset"], LAST["wroteBytes"], 1)
    assert [{k: v for k, v in d.items() if k in lost(LAST, header=True)} for d in rec["dropped"]] == [lost(LAST, header=True)]
    screen = run("info", "-s", root).stdout
    assert f"dropped on restart: {LAST['wroteBytes']} bytes, 1 messages after {LAST['wroteOffset']}" in screen
    assert f"torn record at {LAST['wroteOffset']} ({LAST['wroteBytes']} bytes): topic ?, queue {LAST['queueId']}, queue offset {LAST['logicsOffset']}" in screen


def test_b_last_record_header_zeroed_after_8_bytes(tmp_path):
    """(b) only totalSize and magic written: bodyLength, topic and properties lengths read 0, so the lengths
    add up to the bare header (calMsgLength(0, 0, 0, 0)), not totalSize: lost; nothing else of it decodes."""
    root = copy_store("rmq4-crash", tmp_path)
    zero(root, LAST, 8)
    path, base = _file_of(LAST, root)
    assert broker_end(path, base, True) == LAST["wroteOffset"]
    assert _cal_msg_length(0, 0, 0, 0) != LAST["wroteBytes"]
    r = preview(Store.open(root))
    assert r.valid_end == LAST["wroteOffset"]
    assert r.truncated_bytes == LAST["wroteBytes"] and r.truncated_messages == 1
    assert dropped(r) == [lost(LAST, header=False)]


def test_c_two_torn_records(tmp_path):
    """(c) the second-last record's tail and the last record's header after its first 8 bytes are zeros: recovery
    stops at the second-last; both declared records (the second one found by the first one's totalSize) are lost."""
    root = copy_store("rmq4-crash", tmp_path)
    zero(root, SECOND_LAST, HEADER + 1)
    zero(root, LAST, 8)
    path, base = _file_of(LAST, root)
    assert broker_end(path, base, True) == SECOND_LAST["wroteOffset"]
    r = preview(Store.open(root))
    assert r.valid_end == SECOND_LAST["wroteOffset"]
    assert r.truncated_bytes == SECOND_LAST["wroteBytes"] + LAST["wroteBytes"] == DATA_END - SECOND_LAST["wroteOffset"]
    assert r.truncated_messages == 2
    assert dropped(r) == [lost(SECOND_LAST, header=True), lost(LAST, header=False)]


def test_no_header_left_counts_to_the_last_nonzero_byte(tmp_path):
    """The last record's first 8 bytes never written: the broker reads magic 0 and stops there; the bytes it
    had appended end at the last non-zero byte (no totalSize to go by), and no record can be counted."""
    root = copy_store("rmq4-crash", tmp_path)
    zero(root, LAST, 0, 8)
    path, base = _file_of(LAST, root)
    assert broker_end(path, base, True) == LAST["wroteOffset"]
    original = (store_root("rmq4-crash") / "commitlog" / path.name).read_bytes()
    last_nonzero = len(original.rstrip(b"\0")) + base  # in the broker's own file
    assert last_nonzero == DATA_END  # the record ends with its properties' last separator
    r = preview(Store.open(root))
    assert r.valid_end == LAST["wroteOffset"]
    assert r.truncated_bytes == DATA_END - LAST["wroteOffset"] and r.truncated_messages == 0 and r.dropped == []


def test_a_body_crc_failure_keeps_everything_readable(tmp_path):
    """One flipped body byte in the second-last record: the broker stops there; the dropped records decode
    completely (topic, keys, UNIQ_KEY) and the intact last record is lost with it."""
    root = copy_store("rmq4-crash", tmp_path)
    path, base = _file_of(SECOND_LAST, root)
    at = SECOND_LAST["wroteOffset"] - base + HEADER
    data = bytearray(path.read_bytes())
    patch(path, at, bytes([data[at] ^ 0x01]))
    assert broker_end(path, base, True) == SECOND_LAST["wroteOffset"] and broker_end(path, base, False) == DATA_END
    r = preview(Store.open(root))
    assert r.valid_end == SECOND_LAST["wroteOffset"] and r.truncated_messages == 2
    assert r.truncated_bytes == DATA_END - SECOND_LAST["wroteOffset"]
    assert dropped(r) == [lost(SECOND_LAST, header=True, topic=True, props=True), lost(LAST, header=True, topic=True, props=True)]
    assert [d.state for d in r.dropped] == ["body_crc_mismatch", "intact"]
    assert preview(Store.open(root), check_crc=False).truncated_messages == 0


def _tear_points() -> list[tuple[str, int]]:
    body, topic = LAST["body_len"], len(LAST["topic"].encode())
    props_at = HEADER + body + 1 + topic + 2
    return [
        ("after totalSize+magic", 8),
        ("after queueId", 16),
        ("after physicalOffset", 36),
        ("at the body", HEADER),
        ("mid-body", HEADER + body // 2),
        ("at the topic length", HEADER + body),
        ("mid-topic", HEADER + body + 1 + topic // 2),
        ("at the properties length", HEADER + body + 1 + topic),
        ("mid-properties", props_at + LAST["propertiesStringUtf8Len"] // 2),
        ("last byte", LAST["wroteBytes"] - 1),
        ("nothing", LAST["wroteBytes"]),
    ]


@pytest.mark.parametrize(("where", "tear"), _tear_points(), ids=[w for w, _ in _tear_points()])
@pytest.mark.parametrize("check_crc", [True, False], ids=["crc", "no-crc"])
def test_tear_anywhere_in_the_last_record(tmp_path, where, tear, check_crc):
    """Zeros from any point of the last record on: the preview keeps or drops it exactly as the broker would.

    A tear inside the properties keeps the record (the lengths still add up and the body is whole), so the
    broker restarts with it; a tear anywhere before drops it, with the fields written before the tear."""
    root = copy_store("rmq4-crash", tmp_path)
    path, base = _file_of(LAST, root)
    before = path.read_bytes()[LAST["wroteOffset"] - base + tear - 1]
    assert before != 0  # so "written before the tear" is visible in the bytes: the expectations below are exact
    zero(root, LAST, tear)
    want_end = broker_end(path, base, check_crc)
    r = preview(Store.open(root), check_crc=check_crc)
    assert r.valid_end == want_end
    if want_end == DATA_END:
        assert where in ("mid-properties", "last byte", "nothing")
        assert (r.truncated_bytes, r.truncated_messages, r.dropped) == (0, 0, [])
    else:
        body_end = HEADER + LAST["body_len"]
        topic_end = body_end + 1 + len(LAST["topic"].encode())
        assert want_end == LAST["wroteOffset"]
        assert (r.truncated_bytes, r.truncated_messages) == (LAST["wroteBytes"], 1)
        assert dropped(r) == [lost(LAST, header=tear >= HEADER, topic=tear >= topic_end)]


@pytest.mark.parametrize("listed", [None, 7])
def test_every_record_after_an_early_crc_failure_is_dropped_and_described(tmp_path, monkeypatch, listed):
    """A CRC failure in the middle of the CommitLog: every later record (across files and BLANK markers) is lost;
    each is described from its bytes exactly as the manifest has it, up to the listing cap, and all are counted."""
    from rmqdump.checks import recovery

    if listed is not None:
        monkeypatch.setattr(recovery, "DROPPED_LISTED", listed)
    root = copy_store("rmq4-crash", tmp_path)
    by_offset = sorted(M, key=lambda x: x["wroteOffset"])
    victim = by_offset[1200]
    path, base = _file_of(victim, root)
    at = victim["wroteOffset"] - base + HEADER + 3
    patch(path, at, bytes([path.read_bytes()[at] ^ 0x20]))
    r = preview(Store.open(root))
    after = by_offset[1200:]
    assert r.valid_end == victim["wroteOffset"] and r.records_walked == 1200
    assert r.truncated_messages == len(after) and r.truncated_bytes == DATA_END - victim["wroteOffset"]
    shown = after if listed is None else after[:listed]
    assert dropped(r) == [lost(x, header=True, topic=True, props=True) for x in shown]
    assert [d.state for d in r.dropped] == ["body_crc_mismatch"] + ["intact"] * (len(shown) - 1)
    assert [d.file for d in r.dropped] == [str(_file_of(x, root)[0]) for x in shown]
    if listed is None:
        screen = run("info", "-s", root).stdout.splitlines()
        lines = [x.strip() for x in screen if x.startswith("    ")]
        assert lines[0].startswith(f"bad record (body_crc_mismatch) at {victim['wroteOffset']} ({victim['wroteBytes']} bytes): topic {victim['topic']}")
        assert len(lines) == 21 and lines[-1].startswith(f"... {len(after) - 20} more")
