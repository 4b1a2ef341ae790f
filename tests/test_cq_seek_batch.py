"""`cq seek` on a Batch ConsumeQueue (rmq53-batchcq, written by the 5.3.3 broker): the answer is the model's, built from
the store's manifest and from the batch units parsed here with struct."""

from __future__ import annotations

import itertools
import struct

import pytest
from conftest import jsonl, manifest, run, store_root

NAME = "rmq53-batchcq"
BCQ_UNIT = struct.Struct(">qiqqqhii")  # commitLogOffset, size, tagsCode, storeTime, msgBaseOffset, batchSize, compactedOffset, reserved: 46 bytes


def _units_from_files(topic: str, queue_id: int) -> list[tuple[int, int, int, int, int]]:
    """(msgBaseOffset, batchSize, storeTime, commitLogOffset, size) of each valid unit, in file order."""
    d = store_root(NAME) / "batchconsumequeue" / topic / str(queue_id)
    out = []
    for f in sorted(d.iterdir(), key=lambda p: int(p.name)):
        raw = f.read_bytes()
        for pos in range(0, len(raw) - BCQ_UNIT.size + 1, BCQ_UNIT.size):
            off, size, _tags, store_time, base, batch, _c, _r = BCQ_UNIT.unpack_from(raw, pos)
            if off >= 0 and size > 0 and base >= 0 and batch > 0:  # BatchConsumeQueue.recover's test of a unit
                out.append((base, batch, store_time, off, size))
    return out


def _queues() -> list[tuple[str, int]]:
    return sorted({(m["topic"], m["queueId"]) for m in manifest(NAME) if m.get("kind") == "cq_unit" and m["cqType"] == "BatchCQ"})


def _expected(units, ts: int) -> dict:
    """The first unit stored at or after ts; else the queue's end (max offset), not found."""
    lo, hi = units[0][0], units[-1][0] + units[-1][1]
    for base, _batch, store_time, off, _size in units:
        if store_time >= ts:
            return {"queue_offset": base, "phys_offset": off, "store_timestamp": store_time, "found": True, "min_offset": lo, "max_offset": hi}
    return {"queue_offset": hi, "phys_offset": None, "store_timestamp": None, "found": False, "min_offset": lo, "max_offset": hi}


@pytest.mark.parametrize("queue", _queues())
def test_seek_on_a_batch_queue_answers_as_the_model(queue):
    topic, qid = queue
    units = _units_from_files(topic, qid)
    want_units = sorted(
        (m["queueOffset"], m["batchNum"], m["storeTime"], m["commitLogOffset"], m["size"])
        for m in manifest(NAME)
        if m.get("kind") == "cq_unit" and (m["topic"], m["queueId"]) == queue
    )
    assert units == want_units  # the struct parse is the broker's own account of its units
    times = sorted({u[2] for u in units})
    probes = [times[0] - 1, *times[:: max(1, len(times) // 12)], times[-1], *(t + 1 for t in times[1:: max(1, len(times) // 6)]), times[-1] + 1]
    for ts in probes:
        r = run("cq", "seek", "-s", store_root(NAME), "-t", topic, "-q", qid, "--time", ts, "-f", "jsonl")
        d = jsonl(r.stdout)[0]
        want = _expected(units, ts)
        assert {k: d[k] for k in want} == want, ts
        assert r.exit_code == (0 if want["found"] else 1)


def test_seek_on_a_batch_queue_with_equal_store_times_takes_the_first_unit():
    """Two units stored in the same millisecond: the first of them in queue order, as a consumer starting there sees both."""
    for topic, qid in _queues():
        units = _units_from_files(topic, qid)
        same = [(a, b) for a, b in itertools.pairwise(units) if a[2] == b[2]]
        if same:
            a, _ = same[0]
            r = run("cq", "seek", "-s", store_root(NAME), "-t", topic, "-q", qid, "--time", a[2])
            assert r.exit_code == 0 and f"queue offset {a[0]} " in r.stdout
            return
    pytest.fail("no Batch ConsumeQueue of the fixture has two units with one store time")
