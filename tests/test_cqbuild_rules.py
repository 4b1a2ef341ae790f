"""ConsumeQueueBuilder on random queue-offset sequences: the real stores cover the healthy case; here holes,
repeats, queues that start late and batch cuts, against a plain description of the files it promises.

Promise (rmqdump.builders.cqbuild): a unit goes to index = queueOffset, the first message of an offset keeps it, an
offset not above the last one written is skipped; a file exists iff it holds a unit; in it, offsets before the
queue's first unit are fillPreBlank fillers (first unit's file only), offsets between the first and last unit
without a message are fillers, offsets after the last unit stay zero.
"""

from __future__ import annotations

import itertools
import os

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from rmqdump.builders.cqbuild import UNIT, ConsumeQueueBuilder
from rmqdump.schemas import constants as C


def expected(events, units_per_file: int) -> tuple[dict[str, bytes], int]:
    queues: dict[tuple[str, int], dict[int, tuple[int, int, int]]] = {}
    last: dict[tuple[str, int], int] = {}
    for topic, qid, off, phys, size, tags in events:
        k = (topic, qid)
        if off > last.get(k, -1):
            queues.setdefault(k, {})[off] = (phys, size, tags)
            last[k] = off
    out = {}
    for (topic, qid), units in queues.items():
        first, lastu = min(units), max(units)
        for f in sorted({o // units_per_file for o in units}):
            rows = np.zeros(units_per_file, dtype=UNIT)
            for j in range(units_per_file):
                o = f * units_per_file + j
                if o in units:
                    rows[j] = units[o]
                elif (o < first and f == first // units_per_file) or first < o < lastu:
                    rows[j] = (0, C.CQ_FILLER_SIZE, 0)
            out[os.path.join(topic, str(qid), f"{f * units_per_file * C.CQ_UNIT_SIZE:020d}")] = rows.tobytes()
    return out, sum(len(u) for u in queues.values())


event = st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 2), st.integers(0, 25))


@settings(max_examples=150, deadline=None)
@given(evs=st.lists(event, max_size=60), units_per_file=st.integers(1, 6), cuts=st.lists(st.integers(1, 60), max_size=5))
def test_builder_keeps_its_promise(tmp_path_factory, evs, units_per_file, cuts):
    events = [(t, q, o, 1000 + 10 * i, 100 + i, i * 7 - 3) for i, (t, q, o) in enumerate(evs)]
    out = tmp_path_factory.mktemp("cq")
    b = ConsumeQueueBuilder(str(out), units_per_file, sync=False)
    topics = ["a", "b"]
    bounds = sorted({0, len(events), *[c for c in cuts if c < len(events)]})
    for lo, hi in itertools.pairwise(bounds):
        part = events[lo:hi]
        b.add(
            topics,
            np.array([topics.index(e[0]) for e in part], dtype=np.int32),
            np.array([e[1] for e in part], dtype=np.int32),
            np.array([e[2] for e in part], dtype=np.int64),
            np.array([e[3] for e in part], dtype=np.int64),
            np.array([e[4] for e in part], dtype=np.int32),
            np.array([e[5] for e in part], dtype=np.int64),
        )
    queues = b.finish()
    got = {str(p.relative_to(out)): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    files, kept = expected(events, units_per_file)
    assert got == files
    assert sum(q.units for q in queues) == kept
    assert sum(q.duplicates for q in queues) == len(events) - kept
