"""The compiled unit check (scanner.unit_pointers) against a model written here, unit by unit, on random queues.

cq verify's pointer checks are one compiled pass over a queue's units; the model below spells the same rules out
in Python: a unit's offset at or past the data's end is dangling; outside every CommitLog file, out of range; where
no record starts, not a message start; else each of size, topic, queue, queue offset and (when asked) tagsCode that
differs from the record's is its own finding. The rows the units joined are compared too. Units step back now and
then (the join starts over there) and repeat offsets (two units naming one record).
"""

from __future__ import annotations

import numpy as np
import pytest

from rmqdump.checks.cqunits import RecordTable
from rmqdump.readers.consumequeue import QueueUnits
from rmqdump.scan import layout as L
from rmqdump.scan import scanner


def _model(u: QueueUnits, vpos, rec: RecordTable, starts, ends, data_end, tid, qid, check_tags):
    flags, rows = [], []
    where = {int(p): i for i, p in enumerate(rec.phys)}
    for j in vpos:
        x = int(u.offset[j])
        if x >= data_end:
            flags.append(L.UNIT_DANGLING), rows.append(-1)
            continue
        if not any(s <= x < e for s, e in zip(starts, ends, strict=True)):
            flags.append(L.UNIT_OUTSIDE), rows.append(-1)
            continue
        r = where.get(x)
        if r is None:
            flags.append(L.UNIT_NOT_START), rows.append(-1)
            continue
        b = 0
        b |= L.UNIT_SIZE if u.size[j] != rec.size[r] else 0
        b |= L.UNIT_TOPIC if rec.topic_id[r] != tid else 0
        b |= L.UNIT_QUEUE if rec.queue_id[r] != qid else 0
        b |= L.UNIT_QUEUE_OFFSET if rec.queue_offset[r] != u.index[j] else 0
        b |= L.UNIT_TAGS if check_tags and u.tags_code[j] != rec.tags_code[r] else 0
        flags.append(b), rows.append(r)
    return flags, rows


def _case(seed: int):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 300))
    sizes = rng.integers(20, 200, n)
    phys = np.cumsum(np.concatenate([[int(rng.integers(0, 50))], sizes[:-1]])).astype(np.int64) if n else np.zeros(0, np.int64)
    rec = RecordTable(
        phys=phys,
        size=sizes.astype(np.int32),
        topic_id=rng.integers(0, 3, n).astype(np.int32),
        queue_id=rng.integers(0, 3, n).astype(np.int32),
        queue_offset=rng.integers(0, 4, n).astype(np.int64),
        tags_code=rng.integers(0, 3, n).astype(np.int64),
        store_timestamp=np.zeros(n, np.int64),
        queued=np.ones(n, bool),
        topics=["a", "b", "c"],
    )
    end = int(phys[-1] + sizes[-1]) if n else 0
    file = 4096
    nfiles = end // file + 2
    starts = np.array([i * file for i in range(nfiles) if i != 1], dtype=np.int64)  # file 1 missing: a gap
    ends = starts + file
    m = int(rng.integers(0, 400))
    pick = rng.integers(0, max(n, 1), m)
    offs = np.where(rng.random(m) < 0.7, phys[pick] if n else 0, rng.integers(0, end + 2 * file + 1, m)).astype(np.int64)
    back = rng.random(m) < 0.05  # a step back: the join starts over
    offs = np.where(back, rng.integers(0, end + 1, m), offs)
    order = np.sort(offs) if rng.random() < 0.5 else offs
    u = QueueUnits(
        index=np.arange(m, dtype=np.int64) + int(rng.integers(0, 2)),
        offset=order,
        size=np.where(rng.random(m) < 0.9, sizes[pick] if n else 0, 7).astype(np.int32),
        tags_code=rng.integers(0, 3, m).astype(np.int64),
    )
    vpos = np.flatnonzero(rng.random(m) < 0.9).astype(np.int64)
    data_end = end - int(rng.integers(0, 100)) if rng.random() < 0.3 else end
    return u, vpos, rec, starts, ends, data_end, int(rng.integers(0, 3)), int(rng.integers(0, 3)), bool(rng.random() < 0.5)


@pytest.mark.parametrize("seed", range(300))
def test_unit_pointers_equal_the_model(seed):
    u, vpos, rec, starts, ends, data_end, tid, qid, check_tags = _case(seed)
    flags, rows = scanner.unit_pointers(u, vpos, rec, starts, ends, data_end, tid, qid, check_tags)
    want_flags, want_rows = _model(u, vpos, rec, starts, ends, data_end, tid, qid, check_tags)
    assert flags.tolist() == want_flags
    assert rows.tolist() == want_rows


def test_a_window_without_an_end_flags_nothing_dangling():
    """A window that is not the last has no data end (1 << 63, past int64): a unit far out is out of range, not dangling."""
    u, _, rec, starts, ends, _, tid, qid, check_tags = _case(7)
    far = QueueUnits(u.index[:1], np.array([(1 << 62)], np.int64), u.size[:1], u.tags_code[:1])
    flags, rows = scanner.unit_pointers(far, np.zeros(1, np.int64), rec, starts, ends, 1 << 63, tid, qid, check_tags)
    assert flags.tolist() == [L.UNIT_OUTSIDE] and rows.tolist() == [-1]
