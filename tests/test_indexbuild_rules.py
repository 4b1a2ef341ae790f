"""The vectorized IndexBuilder against a one-key-at-a-time transcription of IndexService.buildIndex/IndexFile.putKey.

The real stores prove the builder on what brokers wrote; this covers the corners
they do not reach, on random input: files that fill exactly at a message's last
key (an empty successor made by the next message, keyed or not), a message whose
keys straddle two files, tiny slot counts (long chains), timeDiff clamping, and
batches cut anywhere.
"""

from __future__ import annotations

import itertools
import os

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from rmqdump.builders.indexbuild import IndexBuilder, index_file_name
from rmqdump.common.javahash import index_hash
from rmqdump.readers.fastpath import numpy_dtype
from rmqdump.schemas import IndexEntry, IndexHeader

HEADER = numpy_dtype(IndexHeader)
ENTRY = numpy_dtype(IndexEntry)
INT_MAX = (1 << 31) - 1


def oracle(messages, slots: int, entries: int) -> list[tuple[str, bytes]]:
    """IndexService.buildIndex for each message in order, IndexFile.putKey for each key."""
    files = []  # [name_ms, header dict, slot list, entry rows]
    last_ms = -1

    def new_file(ts, prev):
        nonlocal last_ms
        ms = max(ts, last_ms + 1)
        last_ms = ms
        h = {"begin_timestamp": 0, "end_timestamp": 0, "begin_phy_offset": 0, "end_phy_offset": 0, "hash_slot_count": 0, "index_count": 1}
        if prev is not None:
            if prev[1]["end_phy_offset"] > 0:
                h["begin_phy_offset"] = h["end_phy_offset"] = prev[1]["end_phy_offset"]
            if prev[1]["end_timestamp"] > 0:
                h["begin_timestamp"] = h["end_timestamp"] = prev[1]["end_timestamp"]
        files.append([ms, h, [0] * slots, {}])
        return files[-1]

    def current(ts):
        if not files or files[-1][1]["index_count"] >= entries:
            return new_file(ts, files[-1] if files else None)
        return files[-1]

    def put(f, key_hash, phys, ts) -> bool:
        h = f[1]
        if h["index_count"] >= entries:
            return False
        kh = index_hash(key_hash)
        slot = kh % slots
        value = f[2][slot]
        if value <= 0 or value > h["index_count"]:
            value = 0
        diff = int((ts - h["begin_timestamp"]) / 1000)
        if h["begin_timestamp"] <= 0:
            diff = 0
        diff = max(0, min(diff, INT_MAX))
        f[3][h["index_count"]] = (kh, phys, diff, value)
        f[2][slot] = h["index_count"]
        if h["index_count"] <= 1:
            h["begin_phy_offset"], h["begin_timestamp"] = phys, ts
        if value == 0:
            h["hash_slot_count"] += 1
        h["index_count"] += 1
        h["end_phy_offset"], h["end_timestamp"] = phys, ts
        return True

    for phys, ts, keys in messages:
        f = current(ts)
        if phys < f[1]["end_phy_offset"]:
            continue
        for k in keys:
            if not put(f, k, phys, ts):
                f = current(ts)
                put(f, k, phys, ts)
    out = []
    for ms, h, slot_list, rows in files:
        raw = bytearray(HEADER.itemsize + 4 * slots + ENTRY.itemsize * entries)
        hdr = np.zeros(1, dtype=HEADER)
        for k, v in h.items():
            hdr[k] = v
        raw[: HEADER.itemsize] = hdr.tobytes()
        raw[HEADER.itemsize : HEADER.itemsize + 4 * slots] = np.array(slot_list, dtype=">i4").tobytes()
        at = HEADER.itemsize + 4 * slots
        for i, row in rows.items():
            e = np.zeros(1, dtype=ENTRY)
            e["key_hash"], e["phys_offset"], e["time_diff"], e["prev_index"] = row
            raw[at + i * ENTRY.itemsize : at + (i + 1) * ENTRY.itemsize] = e.tobytes()
        out.append((index_file_name(ms), bytes(raw)))
    return out


message = st.tuples(
    st.integers(0, 4000),  # store time step (ms), so timeDiff crosses seconds
    st.lists(st.integers(-(1 << 31), (1 << 31) - 1), max_size=4),
)


@settings(max_examples=120, deadline=None)
@given(
    msgs=st.lists(message, max_size=40),
    slots=st.integers(1, 7),
    entries=st.integers(2, 7),
    cuts=st.lists(st.integers(1, 40), max_size=6),
    start_ts=st.sampled_from([1_795_305_352_289, 0, 5]),
)
def test_builder_equals_the_broker_rules(tmp_path_factory, msgs, slots, entries, cuts, start_ts):
    phys, ts, keys = [], [], []
    p, t = 0, start_ts
    for step, ks in msgs:
        t += step
        phys.append(p)
        ts.append(t)
        keys.append(ks)
        p += 100 + 7 * len(ks)
    want = oracle(list(zip(phys, ts, keys, strict=True)), slots, entries)
    out = tmp_path_factory.mktemp("ix")
    b = IndexBuilder(str(out), slots, entries, sync=False)
    bounds = sorted({0, len(msgs), *[c for c in cuts if c < len(msgs)]})
    for lo, hi in itertools.pairwise(bounds):
        rec = [i - lo for i in range(lo, hi) for _ in keys[i]]
        kh = [k for i in range(lo, hi) for k in keys[i]]
        b.add(np.array(phys[lo:hi], dtype=np.int64), np.array(ts[lo:hi], dtype=np.int64), np.array(rec, dtype=np.int64), np.array(kh, dtype=np.int32))
    b.finish()
    got = [(n, (out / n).read_bytes()) for n in sorted(os.listdir(out))]
    assert [n for n, _ in got] == [n for n, _ in want]
    for (name, a), (_, w) in zip(got, want, strict=True):
        assert a == w, name
