"""`rmqdump report`: the page's numbers against the manifests and the broker's own files, and the page in a real browser.

The browser part loads the page in headless Chromium with the network off, takes a screenshot and checks every plot
frame holds drawn marks, the console logged nothing (no script error) and the page asked for no URL (Chromium's net log). Each check is first shown
to catch what it is for, on a page made to fail it.
"""

from __future__ import annotations

import collections
import itertools
import json
import math
import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from datetime import datetime
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest
from conftest import REAL, ROOT, SETTINGS, copy_store, jsonl, manifest, patch, run, store_root

from rmqdump.readers.store import Store
from rmqdump.report import collect as K
from rmqdump.report import plots, svg
from rmqdump.report.page import render

HEADER_V1_IPV4 = 88  # bytes before the body of a V1 record with IPv4 hosts (store-format.md: fixed fields + bodyLength)


def _collect(root) -> K.Report:
    return K.collect(Store.open(root))


@pytest.fixture(scope="module")
def crash() -> K.Report:
    return _collect(store_root("rmq4-crash"))


@pytest.fixture(scope="module")
def basic() -> K.Report:
    return _collect(store_root("rmq4-basic"))


def _put(name: str) -> list[dict]:
    return [m for m in manifest(name) if m["status"] == "PUT_OK"]


# --- the numbers ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["rmq4-crash", "rmq4-basic"])
def test_rate_bins_are_the_manifest_binned(name, crash, basic):
    rep = crash if name == "rmq4-crash" else basic
    r = rep.traffic.rate
    want = collections.Counter()
    for m in _put(name):
        want[(m["topic"], (m["storeTimestamp"] - r.t0) // r.width)] += 1
    got = collections.Counter()
    for t, row in zip(r.topic_names(), r.counts, strict=True):
        for b in np.flatnonzero(row):
            got[(t, int(b))] = int(row[b])
    assert got == want
    assert r.bins <= K.RATE_MAX_BINS and r.t0 % r.width == 0


def test_rate_bins_widen_exactly():
    """Counts re-binned as the span grows equal counts binned once at the final width."""
    rng = np.random.default_rng(7)
    ts = np.sort(rng.integers(1_700_000_000_000, 1_700_000_000_000 + 3 * 86_400_000, 50_000))
    topics = rng.integers(0, 3, len(ts))
    h = K.RateHistogram(max_bins=150)
    for a in range(0, len(ts), 997):  # growing span, batch by batch
        h.add(topics[a : a + 997], ["a", "b", "c"], ts[a : a + 997])
    assert h.bins <= 150 and h.width in K.BIN_LADDER_MS
    for i, t in enumerate(["a", "b", "c"]):
        want = np.bincount((ts[topics == i] - h.t0) // h.width, minlength=h.bins)
        assert np.array_equal(h.counts[h.topics[t]], want)


@pytest.mark.parametrize("name", ["rmq4-crash", "rmq4-basic"])
def test_latency_buckets_are_the_manifest_latencies(name, crash, basic):
    rep = crash if name == "rmq4-crash" else basic
    want: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for m in _put(name):
        lat = m["storeTimestamp"] - m["bornTimestamp"]
        want[m["topic"]][0 if lat < 0 else 1 if lat == 0 else 1 + lat.bit_length()] += 1
    got = {t: collections.Counter({i: int(c[i]) for i in np.flatnonzero(c)}) for t, c in rep.traffic.latency.items()}
    assert got == dict(want)


def test_damage_map_places_the_crash_lost_units(crash):
    """rmq4-crash: the 500 messages put after dispatch stopped are in the 'missing from their ConsumeQueue' row, bin by bin."""
    info = json.loads((REAL / "rmq4-crash" / "crash.json").read_text())
    dispatched = set(info["dispatchedSeqs"])
    lost = [m for m in _put("rmq4-crash") if m["seq"] not in dispatched]
    assert len(lost) == info["messagesPut"] - info["dispatchedCount"] == 500
    d = crash.damage
    want = np.zeros(d.bins, dtype=np.int64)
    for m in lost:
        want[min(d.bins - 1, int((m["wroteOffset"] - d.lo) / d.width))] += 1
    assert np.array_equal(d.counts[K.CQ_MISSING], want)
    for key in (K.TORN, K.BAD_RECORD, K.ZERO, K.CQ_HOLES, K.CQ_BAD, K.DROPPED):
        assert not d.counts[key].any(), key
    assert crash.problem_total == 500 and crash.problem_codes == {"cq_missing_unit": 500}
    assert crash.run_total == len(crash.runs) == 12  # a line per queue: the crash's dispatch stopped in every one


def test_recovery_and_unwritten_tail_match_the_broker(crash):
    """The broker's own recovery of rmq4-crash (recovered.json) kept everything up to maxPhyOffset: nothing dropped."""
    rec = json.loads((REAL / "rmq4-crash" / "recovered.json").read_text())
    r = crash.info.recovery
    assert r.valid_end == rec["afterLoad"]["maxPhyOffset"] and r.truncated_messages == 0 and crash.dropped == []
    cl = crash.info.commitlog
    assert crash.damage.span_bytes[K.UNWRITTEN] == cl.files_end - rec["afterLoad"]["maxPhyOffset"]


def test_index_stats_match_the_broker_headers(crash):
    rec = json.loads((REAL / "rmq4-crash" / "recovered.json").read_text())
    before = {f["file"]: f for f in rec["indexFilesBeforeLoad"]}
    assert [s.name for s in crash.index] == list(before)
    for s in crash.index:
        b = before[s.name]
        assert (s.keys, s.used_slots, s.size) == (b["entries"], b["hashSlotCount"], b["size"])
        assert s.hash_slots == SETTINGS["rmq4-crash"]["hash_slots"] and s.index_entries == SETTINGS["rmq4-crash"]["index_entries"]
        lengths = np.arange(len(s.chains))
        assert int(s.chains.sum()) == s.hash_slots  # every slot has one chain length
        assert int(s.chains[0]) == s.hash_slots - s.used_slots  # empty chains are the unused slots
        assert int((lengths * s.chains).sum()) == s.keys  # every entry is in exactly one chain


def test_index_keys_are_the_manifest_keys(basic):
    """A clean store indexes each message's UNIQ_KEY (92% have one) and each KEYS token: the files' keys add up to that."""
    want = sum(bool(m["uniqKey"]) + len([k for k in m["keys"] if k]) for m in _put("rmq4-basic"))
    assert sum(s.keys for s in basic.index) == want


def _offset_table(path: Path) -> dict[tuple[str, str, int], int]:
    """consumerOffset.json as the broker writes it (fastjson: unquoted integer keys)."""
    out = {}
    for topic, group, body in re.findall(r'"([^"@]+)@([^"]+)":\{([^}]*)\}', path.read_text()):
        for q, off in re.findall(r"(\d+):(\d+)", body):
            out[(group, topic, int(q))] = int(off)
    return out


def test_consumer_lag_against_the_committed_file_and_the_manifest(basic):
    committed = _offset_table(store_root("rmq4-basic") / "config" / "consumerOffset.json")
    per_queue = collections.Counter((m["topic"], m["queueId"]) for m in _put("rmq4-basic"))
    rows = {(r.group, r.topic, r.queue_id): r for r in basic.offsets.rows}
    assert set(rows) == set(committed) and committed
    for key, off in committed.items():
        r = rows[key]
        assert (r.committed, r.max_offset, r.lag) == (off, per_queue[key[1:]], per_queue[key[1:]] - off)
    assert {(q.topic, q.queue_id): q.max_offset for q in basic.info.queues} == dict(per_queue)


def test_a_restart_drops_the_messages_after_a_bad_body(tmp_path):
    """A body byte flipped in the newest file: the page lists exactly the manifest's messages from there on (the preview's descriptions)."""
    root = copy_store("rmq4-basic", tmp_path)
    put = _put("rmq4-basic")
    last_base = int(sorted(os.listdir(root / "commitlog"))[-1])
    victim = next(m for m in put if m["wroteOffset"] >= last_base and m["body_len"] > 0)
    name = f"{last_base:020d}"
    patch(root / "commitlog" / name, victim["wroteOffset"] - last_base + HEADER_V1_IPV4, b"\xff")
    rep = _collect(root)
    after = [m for m in put if m["wroteOffset"] >= victim["wroteOffset"]]
    r = rep.info.recovery
    assert r.valid_end == victim["wroteOffset"] and r.truncated_messages == len(after)
    assert [(d.phys_offset, d.topic, d.queue_id, d.queue_offset, d.uniq_key, d.state) for d in rep.dropped] == [
        (m["wroteOffset"], m["topic"], m["queueId"], m["logicsOffset"], m["uniqKey"], "body_crc_mismatch" if m is victim else "intact")
        for m in after[: K.MAX_DROPPED]
    ]
    d = rep.damage
    at = int((victim["wroteOffset"] - d.lo) / d.width)
    assert d.counts[K.BAD_RECORD][at] == 1 and d.counts[K.BAD_RECORD].sum() == 1
    assert d.span_bytes[K.DROPPED] == after[-1]["wroteOffset"] + after[-1]["wroteBytes"] - victim["wroteOffset"]
    page = render(rep)
    for m in after[: K.MAX_DROPPED]:
        assert f'<td class="n">{m["wroteOffset"]}</td>' in page
    # intact messages after the bad one (the manifest's): the page points to the commands that give them back
    assert len(after) > 1 and f"rmqdump salvage {root} --out DIR" in page and f"rmqdump repair {root} --out NEWDIR" in page
    clean = render(_collect(store_root("rmq4-basic")))
    assert "rmqdump salvage" not in clean


def test_zeroed_record_is_a_zero_range_and_its_unit_a_bad_unit(tmp_path):
    root = copy_store("rmq4-basic", tmp_path)
    put = _put("rmq4-basic")
    victim = put[len(put) // 3]
    size = SETTINGS["rmq4-basic"]["commitlog"]
    base = victim["wroteOffset"] // size * size
    assert victim["wroteOffset"] + victim["wroteBytes"] < base + size
    patch(root / "commitlog" / f"{base:020d}", victim["wroteOffset"] - base, bytes(victim["wroteBytes"]))
    rep = _collect(root)
    d = rep.damage
    assert d.span_bytes[K.ZERO] == victim["wroteBytes"]
    at = int((victim["wroteOffset"] - d.lo) / d.width)
    assert d.counts[K.ZERO][at] > 0
    assert d.counts[K.CQ_BAD][at] == 1 and d.counts[K.CQ_BAD].sum() == 1  # its unit points at no record now


def test_cq_hole_is_placed_at_the_unit_before_it(tmp_path):
    """A zeroed unit inside a queue: a hole drawn where the unit before it points, and its message missing a unit."""
    root = copy_store("rmq4-basic", tmp_path)
    queue = sorted((m for m in _put("rmq4-basic") if (m["topic"], m["queueId"]) == ("orders", 0)), key=lambda m: m["logicsOffset"])
    hole = queue[5]
    assert hole["logicsOffset"] == 5 and queue[4]["logicsOffset"] == 4
    patch(root / "consumequeue" / "orders" / "0" / f"{0:020d}", 5 * 20, bytes(20))
    d = _collect(root).damage
    assert d.counts[K.CQ_HOLES].sum() == 1 and d.counts[K.CQ_HOLES][int((queue[4]["wroteOffset"] - d.lo) / d.width)] == 1
    assert d.counts[K.CQ_MISSING].sum() == 1 and d.counts[K.CQ_MISSING][int((hole["wroteOffset"] - d.lo) / d.width)] == 1


def test_torn_last_record_is_in_the_torn_row(tmp_path):
    """The newest record's totalSize running past the end of its file (a write cut short): a torn record at its offset."""
    root = copy_store("rmq4-basic", tmp_path)
    last = _put("rmq4-basic")[-1]
    size = SETTINGS["rmq4-basic"]["commitlog"]
    base = last["wroteOffset"] // size * size
    patch(root / "commitlog" / f"{base:020d}", last["wroteOffset"] - base, (base + size - last["wroteOffset"] + 8).to_bytes(4, "big"))
    rep = _collect(root)
    d = rep.damage
    assert rep.problem_codes.get("record_past_end") == 1
    assert d.counts[K.TORN].sum() == 1 and d.counts[K.TORN][int((last["wroteOffset"] - d.lo) / d.width)] == 1
    assert rep.info.recovery.valid_end == last["wroteOffset"]


def test_a_record_is_named_alike_in_the_preview_and_the_damage_map(tmp_path):
    """One dropped record, one name on every part of the page: a changed size field (damage.json) is a bad record in
    the preview's list and in the damage map, never torn; a record whose later bytes are zeros is torn in both."""
    name = "rmq53-damaged-size-field"
    hit = json.loads((REAL / name / "damage.json").read_text())["recordsHit"][0]["physicalOffset"]
    rep = _collect(store_root(name))
    state = {d.phys_offset: d.state for d in rep.dropped}
    d = rep.damage
    assert state[hit] == "size_mismatch" and d.counts[K.TORN].sum() == 0 and d.counts[K.BAD_RECORD][int((hit - d.lo) / d.width)] >= 1

    root = copy_store("rmq4-crash", tmp_path)
    last = max(_put("rmq4-crash"), key=lambda m: m["wroteOffset"])
    size = SETTINGS["rmq4-crash"]["commitlog"]
    base = last["wroteOffset"] // size * size
    patch(root / "commitlog" / f"{base:020d}", last["wroteOffset"] - base + 8, bytes(last["wroteBytes"] - 8))  # only totalSize and magic written
    rep = _collect(root)
    d = rep.damage
    assert [(x.phys_offset, x.state) for x in rep.dropped] == [(last["wroteOffset"], "torn")]
    assert d.counts[K.BAD_RECORD].sum() == 0 and d.counts[K.TORN][int((last["wroteOffset"] - d.lo) / d.width)] == 1


# --- the command ---------------------------------------------------------------------------------------------


# --- the plots: their marks read back through the ticks they show ---------------------------------------------

_SVG = "{http://www.w3.org/2000/svg}"


def _labels(root, role: str) -> list[tuple[float, float, str]]:
    """(x, y, text) of the plot's labels of one role: xt, yt (a tick's: at its tick), key (a legend entry's)."""
    return [(float(t.get("x")), float(t.get("y")), t.text) for t in root.iter(_SVG + "text") if t.get("class") == role]


def _axis(ticks: list[tuple[float, float]]):
    """px -> data on a linear axis: the line through its first and last (value, px) tick; and the data per px."""
    (v0, p0), (v1, p1) = ticks[0], ticks[-1]
    per_px = (v1 - v0) / (p1 - p0)
    return (lambda px: v0 + (px - p0) * per_px), abs(per_px)


def _label_times(labels: list[str]) -> list[float]:
    """ms since the epoch of UTC time labels, each without a date on the day of the one before."""
    out, day = [], None
    for s in labels:
        if re.match(r"\d{4}-\d\d-\d\d", s):
            day, s = s[:10], s[11:]
        out.append(datetime.fromisoformat(f"{day}T{s or '00:00'}+00:00").timestamp() * 1000)
    return out


def _steps(d: str) -> tuple[list[float], list[float]]:
    """A step path (M x y, then H x and V y) as its x edges in px and the y each run holds."""
    xs, ys, y = [], [], None
    for cmd, a, b in re.findall(r"([MHV])([-\d.]+)(?: ([-\d.]+))?", d):
        if cmd == "M":
            xs, y = [float(a)], float(b)
        elif cmd == "H":
            xs.append(float(a))
            ys.append(y)
        else:
            y = float(a)
    return xs, ys


@pytest.mark.parametrize("name", ["rmq4-crash", "rmq4-basic"])
def test_rate_plot_lines_are_the_manifest_rates(name, crash, basic):
    """Each step line of the rate plot, read back through the plot's own ticks, holds per bin the manifest's messages
    of its topics (named in its legend entry, with their count) stored in that bin, per second; the bins as drawn are
    equal and start on whole multiples of their width."""
    root = ET.fromstring(plots.rate_plot((crash if name == "rmq4-crash" else basic).traffic))
    xt, yt = _labels(root, "xt"), _labels(root, "yt")
    to_ms, ms_px = _axis(list(zip(_label_times([s for *_, s in xt]), [x for x, _, _ in xt], strict=True)))
    to_rate, rate_px = _axis([(float(s.replace(",", "")), y) for _, y, s in yt])
    lines = [p.get("d") for p in root.iter(_SVG + "path")]
    keys = [s for *_, s in _labels(root, "key")]
    stored = collections.defaultdict(list)
    for m in _put(name):
        stored[m["topic"]].append(m["storeTimestamp"])
    assert len(lines) == len(keys) <= 9 and len(stored) > 1
    left = set(stored)
    for d, key in zip(lines, keys, strict=True):
        label, total = re.fullmatch(r"(.*) \((\d+)\)", key).groups()
        if re.fullmatch(r"\d+ other topics", label):
            topics = set(left)
        else:
            topics = {t for t in left if t == label or (label.endswith("…") and t.startswith(label[:-1]))}
        assert len(topics) == 1 or label.endswith("other topics"), (label, topics)
        left -= topics
        ts = np.array([t for topic in topics for t in stored[topic]], dtype=np.int64)
        xs, ys = _steps(d)
        edges = np.array([to_ms(x) for x in xs])
        width = round((edges[-1] - edges[0]) / (len(edges) - 1))
        t0 = round(edges[0] / width) * width
        assert np.abs(edges - (t0 + width * np.arange(len(edges)))).max() <= 0.2 * ms_px
        want = np.bincount((ts - t0) // width, minlength=len(ys)) * 1000 / width
        assert len(want) == len(ys) and int(total) == len(ts)
        assert np.abs(np.array([to_rate(y) for y in ys]) - want).max() <= 0.1 * rate_px, label
    assert not left  # every topic drawn


def test_queue_bars_are_the_manifest_queues(basic):
    """The queues plot, read back through its ticks: a bar per queue, named by its tick, as long as the manifest's
    messages put to that queue (units on disk, and the max offset of a queue written from offset 0)."""
    root = ET.fromstring(plots.queues_plot(basic.info))
    to_n, n_px = _axis([(float(s.replace(",", "")), x) for x, _, s in _labels(root, "xt")])
    names = {y: s for _, y, s in _labels(root, "yt")}
    want = collections.Counter(f"{m['topic']}/{m['queueId']}" for m in _put("rmq4-basic"))
    assert len(want) <= plots.TOP_BARS
    for color in ("#1f77b4", "#c6dbef"):  # units on disk, max offset
        got = {}
        for r in root.iter(_SVG + "rect"):
            if r.get("fill") == color and r.get("height") != "8":  # not the legend's swatch
                x, w, y, h = (float(r.get(k)) for k in ("x", "width", "y", "height"))
                at = min(names, key=lambda t: abs(t - (y + h / 2)))
                assert abs(at - (y + h / 2)) < 0.5
                assert abs(to_n(x)) <= 0.2 * n_px  # from 0
                got[names[at]] = to_n(x + w)
        named = {q: next(g for g in got if g == q or (g.split("…/")[0] in q and g.endswith(q[q.rindex("/") :]))) for q in want}
        assert len(got) == len(set(named.values())) == len(want)
        assert all(abs(got[named[q]] - want[q]) <= 0.2 * n_px for q in want), color


def _nice_model(lo: float, hi: float, most: int) -> list[Decimal]:
    """The ticks of the smallest step 1, 2 or 5 x 10^k whose multiples around [lo, hi] cut it into at most `most` parts."""
    a, b = Decimal(repr(lo)), Decimal(repr(hi))
    for s in sorted(Decimal(m).scaleb(k) for k in range(-8, 20) for m in (1, 2, 5)):
        first, last = math.floor(a / s), math.ceil(b / s)
        if last - first <= most:
            return [i * s for i in range(first, last + 1)]
    raise AssertionError


_TIME_STEPS_MODEL = [1, 2, 5, 10, 20, 50, 100, 200, 500] + [1000 * k for k in (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800)]
_TIME_STEPS_MODEL += [3_600_000 * k for k in (1, 2, 3, 6, 12)]


def test_tick_choosers_against_a_model():
    """Linear ticks: the model's (1/2/5 x 10^k, covering the range, the finest such step with at most `most` parts);
    log ticks: the decades around the range; time ticks: inside the range, on whole multiples of a step of the
    model's list (whole days past 12 h, at most `most` parts), each labelled with exactly its time."""
    rng = np.random.default_rng(11)
    cases = [(0, 100, 6), (0, 105, 6), (0, 1, 5), (0, 7, 6), (0, 2_147_483_648, 6), (0.3, 0.7, 4), (1_000, 1_001, 6), (-5, 5, 6)]
    cases += [(float(a), float(a + w), int(n)) for a, w, n in zip(rng.uniform(-1e3, 1e6, 300), 10 ** rng.uniform(-3, 9, 300), rng.integers(2, 10, 300), strict=True)]
    for lo, hi, most in cases:
        got, want = svg.linear_ticks(lo, hi, most), _nice_model(lo, hi, most)
        assert len(got) == len(want) and all(abs(Decimal(repr(g)) - w) <= abs(want[1] - want[0]) * Decimal("1e-9") for g, w in zip(got, want, strict=True)), (lo, hi, most, got)
        assert got[0] <= lo and got[-1] >= hi
    for lo, hi in [(1, 1), (1, 9), (3, 2_000), (0.5, 40), (7, 10)]:
        got = svg.log_ticks(lo, hi)
        assert got[0] <= lo < got[0] * 10 and hi <= got[-1] and (len(got) == 2 or got[-1] / 10 < hi)  # at least one decade
        assert all(math.log10(v) == round(math.log10(v)) for v in got) and all(b == a * 10 for a, b in itertools.pairwise(got))
    t, day = 1_795_305_352_106, 86_400_000
    for span in [1, 3, 999, 7_000, 61_000, 3_600_000, 5 * 3_600_000, day, 4 * day, 9 * day, 400 * day, *10 ** rng.uniform(0, 10, 100)]:
        lo, hi = float(t), float(t + span)
        step = next(s for s in _TIME_STEPS_MODEL + [day * k for k in (1, 2, 5, 10, 20, 50, 100, 200, 500)] if span / s <= 6)
        got = svg.time_ticks(lo, hi, 6)
        assert got == [float(v) for v in range(math.ceil(lo / step) * step, math.floor(hi / step) * step + 1, step)], (span, got)
        assert got and _label_times(svg.time_labels(got)) == got


def test_cli_writes_the_page_exit_codes_and_no_overwrite(tmp_path):
    out = tmp_path / "crash.html"
    r = run("report", "-s", store_root("rmq4-crash"), "--out", out)
    assert r.exit_code == 1 and out.is_file()  # problems found, page written
    assert "500 units missing in 12 queues: a restart dispatches these again: no loss" in r.stderr  # crash.json: 500 undispatched
    r = run("report", "-s", store_root("rmq4-crash"), "--out", out)
    assert r.exit_code == 2 and "output_exists" in r.stderr and "--force" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = run("report", "-s", root := copy_store("rmq4-flags", tmp_path / "copy"), "--out", root / "config" / "report.html")
    assert r.exit_code == 2 and "output_inside_store" in r.stderr and not (root / "config" / "report.html").exists()
    shutil.rmtree(tmp_path / "copy")
    r = run("report", "-s", store_root("rmq4-basic"), "--out", out, "--force")
    assert r.exit_code == 0 and "rmq4-basic" in out.read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["crash.html"]  # no temp file left beside it
    r = run("report", "-s", tmp_path / "nope", "--out", tmp_path / "x.html")
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1


def _commitlog_sizes(root) -> dict[int, int]:
    """The CommitLog files on disk: start offset (the file name) -> size."""
    d = root / "commitlog"
    return {int(n): os.path.getsize(d / n) for n in os.listdir(d)}


@pytest.mark.parametrize("name", ["rmq4-crash", "rmq4-basic"])
def test_collect_tells_every_walk(name):
    """The bytes told: info's walks (the newest file with data; the recovery preview from its start file), then verify's, which fills the traffic bins too."""
    root = store_root(name)
    told: list[int] = []
    rep = K.collect(Store.open(root), on_bytes=told.append)
    sizes = _commitlog_sizes(root)
    data_file = max(b for b in sizes if b < rep.info.commitlog.data_end)
    want = sizes[data_file] + sum(n for b, n in sizes.items() if b >= rep.info.recovery.scan_from) + sum(sizes.values())
    assert all(n > 0 for n in told) and sum(told) == want == K.collect_bytes(Store.open(root))


def test_progress_bar_on_a_terminal(tmp_path, monkeypatch):
    """On a terminal the CommitLog walks show one byte progress bar (rich, on stderr), run to its total; elsewhere none."""
    import io

    from rich.console import Console

    from rmqdump.cli import render as R

    root = store_root("rmq4-crash")
    buf = io.StringIO()
    monkeypatch.setattr(R, "err", Console(file=buf, force_terminal=True, width=120))
    assert run("report", "-s", root, "--out", tmp_path / "p.html").exit_code == 1
    shown = buf.getvalue()
    assert "report" in shown and "━" in shown and "MB" in shown  # label, bar, byte counts
    done, total = re.findall(r"(\d+\.\d)/(\d+\.\d) MB", shown)[-1]  # the last frame drawn
    sizes = _commitlog_sizes(root)
    # abnormal recovery walks from the first file; the data end's file is a whole one; verify (with the traffic bins) walks all
    assert done == total == f"{(2 * sum(sizes.values()) + SETTINGS['rmq4-crash']['commitlog']) / 1e6:.1f}"
    buf.seek(0)
    buf.truncate(0)
    monkeypatch.setattr(R, "err", Console(file=buf, force_terminal=False, width=120))
    assert run("report", "-s", root, "--out", tmp_path / "q.html").exit_code == 1
    assert "━" not in buf.getvalue()


def test_piped_report_says_one_line(tmp_path):
    """stderr a pipe, as in a script: the one summary line, no bar."""
    from conftest import run_proc

    r = run_proc("report", "-s", store_root("rmq4-basic"), "--out", tmp_path / "p.html")
    assert r.returncode == 0 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and r.stderr.startswith(f"wrote {tmp_path / 'p.html'}: ") and "━" not in r.stderr


# Anything that makes a browser fetch; the SVGs' own references (url(#id), xlink:href="#id") stay inside the page.
_LOADS = re.compile(r"""<script|<link|<iframe|<object|<embed|@import|url\((?!#)|(?:src|href)\s*=\s*(?!["']?#)""", re.I)


@pytest.mark.parametrize("name", ["rmq4-crash", "rmq4-basic"])
def test_page_is_self_contained_and_small(name, crash, basic):
    page = render(crash if name == "rmq4-crash" else basic)
    assert not _LOADS.search(page), _LOADS.search(page)
    assert page.count('<div class="plot">') == 6 - (name == "rmq4-crash")  # rate, latency, queues, lag, damage, index; rmq4-crash has no consumer offsets
    assert len(page.encode()) < 600_000


def test_page_escapes_store_text():
    p = K.IndexStats(name="<b>x</b>", size=1, error="<script>alert(1)</script>")
    rep = K.Report(
        info=K.store_info(Store.open(store_root("rmq4-flags")), with_recovery=False),
        traffic=K.Traffic(),
        damage=K.DamageMap(0, 1),
        runs=[],
        problem_total=0,
        problem_codes={},
        verify=K.VerifySummary(),
        dropped=[],
        offsets=None,
        offsets_note="none",
        index=[p],
        check_crc=True,
    )
    page = render(rep)
    assert "<script>" not in page and "&lt;script&gt;" in page and "&lt;b&gt;x&lt;/b&gt;" in page


# --- the browser ---------------------------------------------------------------------------------------------


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        p = shutil.which(name)
        if p:
            return p
    pytest.fail("headless Chromium is needed for the report's browser test: apt-get install -y chromium (.ci/run installs it)")


_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-extensions",
    "--no-first-run",
    "--host-resolver-rules=MAP * ~NOTFOUND",  # no name resolves: the network is off for the page
    "--force-color-profile=srgb",
    "--hide-scrollbars",
]


def browse(page: Path, tmp: Path, height: int = 8000) -> tuple[np.ndarray, list[str], str, list[str]]:
    """(screenshot as an RGB array, console lines, the DOM after load, URLs the page asked for) from headless Chromium."""
    from PIL import Image

    shot = tmp / (page.stem + ".png")
    env = {**os.environ, "HOME": str(tmp)}  # a profile of its own
    p = subprocess.run(
        [
            chromium(),
            *_FLAGS,
            f"--user-data-dir={tmp / 'profile'}",
            f"--window-size=1280,{height}",
            f"--screenshot={shot}",
            "--enable-logging=stderr",
            "--v=0",
            f"--log-net-log={tmp / (page.stem + '.netlog.json')}",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert p.returncode == 0 and shot.is_file(), p.stderr[-2000:]
    console = [line for line in p.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    d = subprocess.run(
        [chromium(), *_FLAGS, f"--user-data-dir={tmp / 'profile2'}", "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120, env=env
    )
    assert d.returncode == 0, d.stderr[-2000:]
    return np.asarray(Image.open(shot).convert("RGB")), console, d.stdout, page_requests(tmp / (page.stem + ".netlog.json"))


def page_requests(netlog: Path) -> list[str]:
    """URLs requested on behalf of the page (Chromium's net log: jobs keyed to the file:// page), not the browser's own."""
    log = json.loads(netlog.read_text(encoding="utf-8"))
    start = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    out = []
    for e in log["events"]:
        p = e.get("params") or {}
        if e["type"] == start and "file://" in str(p.get("network_isolation_key", "")) and not p.get("url", "").startswith(("file:", "data:")):
            out.append(p["url"])
    return out


def plot_frames(img: np.ndarray) -> list[tuple[int, int, int, int]]:
    """Rows x columns boxes of the plot frames: bands of rows with many pixels of the plot background colour."""
    bg = np.array([int(plots.PLOT_BG[i : i + 2], 16) for i in (1, 3, 5)])
    mask = (np.abs(img.astype(int) - bg) <= 2).all(axis=2)
    rows = mask.sum(axis=1) >= 40  # a frame's padding and right margin give every row of it more than that
    frames = []
    y = 0
    while y < len(rows):
        if rows[y]:
            y0 = y
            while y < len(rows) and rows[y]:
                y += 1
            if y - y0 >= 40:
                cols = np.flatnonzero(mask[y0:y].any(axis=0))
                frames.append((y0, y, int(cols.min()), int(cols.max()) + 1))
        y += 1
    return frames


def colored_share(img: np.ndarray, box) -> float:
    """Share of a frame's pixels that are saturated colour: drawn data (axes, ticks and text are grey or black)."""
    y0, y1, x0, x1 = box
    a = img[y0:y1, x0:x1].astype(int)
    return float(((a.max(axis=2) - a.min(axis=2)) > 60).mean())


def _check_page(page: Path, tmp: Path) -> None:
    html_text = page.read_text(encoding="utf-8")
    img, console, dom, requests = browse(page, tmp)
    assert console == [], console
    assert requests == [], requests
    expected = html_text.count('<div class="plot">')
    assert dom.count("<svg") == html_text.count("<svg") and expected
    frames = plot_frames(img)
    assert len(frames) == expected, (frames, expected)
    for box in frames:
        assert box[3] - box[2] > 600, box  # a frame as wide as the page's column
        assert colored_share(img, box) > 0.0005, (box, colored_share(img, box))  # the blank control has 0


@pytest.mark.slow
@pytest.mark.parametrize("name", ["rmq4-crash", "rmq4-basic", "rmq53-lifecycle"])
def test_page_draws_in_headless_chromium_offline(name, tmp_path):
    page = tmp_path / f"{name}.html"
    assert run("report", "-s", store_root(name), "--out", page).exit_code in (0, 1)
    _check_page(page, tmp_path)


@pytest.mark.slow
def test_the_browser_checks_catch_blank_plots_and_console_errors(tmp_path):
    """The checks above would fail on a page whose plots are empty, or that runs a failing script or loads from the net."""
    page = tmp_path / "good.html"
    assert run("report", "-s", store_root("rmq4-crash"), "--out", page).exit_code == 1
    text = page.read_text(encoding="utf-8")
    blank = tmp_path / "blank.html"
    blank.write_text(re.sub(r"<svg.*?</svg>", '<svg xmlns="http://www.w3.org/2000/svg" width="1056" height="260"></svg>', text, flags=re.S))
    img, console, _, _ = browse(blank, tmp_path)
    frames = plot_frames(img)
    assert len(frames) == text.count('<div class="plot">') and all(colored_share(img, b) == 0 for b in frames)
    noisy = tmp_path / "noisy.html"
    noisy.write_text(text.replace("</body>", '<img src="http://example.com/x.png"><script>throw new Error("boom")</script></body>'))
    _, console, _, requests = browse(noisy, tmp_path)
    assert any("boom" in line for line in console), console
    assert requests == ["http://example.com/x.png"], requests


def test_docs_show_the_screenshot_and_the_readme_completion():
    page = (ROOT / "docs" / "report.md").read_text(encoding="utf-8")
    shots = re.findall(r"!\[[^\]]*\]\(([^)]+\.png)\)", page)
    assert shots and all((ROOT / "docs" / s).is_file() for s in shots)
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "(docs/report.md)" in readme and "--install-completion" in readme


def test_shell_completion_offers_commands_and_options():
    """typer's completion (README: Shell completion): what bash gets for `rmqdump repo<TAB>` and `rmqdump report --fo<TAB>`."""
    import sys

    exe = str(Path(sys.executable).parent / "rmqdump")  # the console script: completion is keyed on the program's name
    env = {**os.environ, "_RMQDUMP_COMPLETE": "complete_bash"}
    for words, cword, want in (("rmqdump repo", "1", ["report"]), ("rmqdump rep", "1", ["repair", "report"]), ("rmqdump report --fo", "2", ["--force"])):
        r = subprocess.run([exe], env={**env, "COMP_WORDS": words, "COMP_CWORD": cword}, capture_output=True, text=True)
        assert r.returncode == 0 and r.stdout.split() == want, (words, r.stdout, r.stderr)
    r = subprocess.run([exe, "--show-completion", "bash"], capture_output=True, text=True)
    assert r.returncode == 0 and "_RMQDUMP_COMPLETE=complete_bash" in r.stdout


def test_problems_out_streams_every_finding(tmp_path):
    """A store whose ConsumeQueues are gone: every message of the manifest is a finding, one per line of
    --problems-out, while the page lists --limit of them."""
    root = copy_store("rmq4-basic", tmp_path)
    shutil.rmtree(root / "consumequeue")
    out, found = tmp_path / "p.html", tmp_path / "found.jsonl"
    r = run("report", "-s", root, "--out", out, "--limit", "5", "--problems-out", found)
    assert r.exit_code == 1
    rows = jsonl(found.read_text(encoding="utf-8"))
    want = sorted((m["wroteOffset"], m["topic"], m["queueId"], m["logicsOffset"]) for m in manifest("rmq4-basic"))
    assert sorted((p["phys_offset"], p["topic"], p["queue_id"], p["unit_index"]) for p in rows) == want
    assert {p["code"] for p in rows} == {"cq_missing_unit"} and all(p["kind"] == "problem" for p in rows)
    assert out.read_text(encoding="utf-8").count("has no ConsumeQueue unit") == 5
    r = run("report", "-s", root, "--out", tmp_path / "q.html", "--problems-out", found)
    assert r.exit_code == 2 and "exists" in r.output  # no overwrite without --force


def test_report_says_causes_and_what_a_restart_dispatches_again():
    """midfile-magic: a line per queue and fate, not 200 rows; the missing units below where the broker's recovery
    stops (broker-recovery.json) are dispatched again by the restart (its ConsumeQueues afterwards hold them), the
    rest are lost with their records; the verdict counts causes."""
    from test_cq_verify import missing_runs

    name = "rmq53-damaged-midfile-magic"
    broker = json.loads((REAL / name / "broker-recovery.json").read_text(encoding="utf-8"))
    stop = broker["afterRecovery"]["maxPhyOffset"]
    want = missing_runs(name, split_at=stop)
    after = {(k.split("/")[0], int(k.split("/")[1]), u[0]) for k, q in broker["consumeQueues"].items() for u in q["units"]}
    for t, q, a, b, *_r, late in want:  # the broker's truth: re-dispatched ones are in its queues after the restart, lost ones not
        assert all(((t, q, i) in after) != late for i in range(a, b + 1))
    rep = _collect(REAL / name / "store")
    got = [(r.topic, r.queue_id, r.first_index, r.last_index, r.count, r.first_phys, r.last_phys, r.note == K.TRUNCATED) for r in rep.runs if r.code == "cq_missing_unit"]
    assert sorted(got) == sorted(want)
    assert all(r.note in (K.REDISPATCHED, K.TRUNCATED) for r in rep.runs if r.code == "cq_missing_unit")
    assert rep.runs[0].code == "bad_magic" and rep.run_total == len(rep.runs) == len(want) + 1
    again = sum(r[4] for r in want if not r[7])
    lost = sum(r[4] for r in want if r[7])
    queues = len({(r[0], r[1]) for r in want})
    assert rep.causes == [
        "1 damaged record (bad_magic)",
        f"{again:,} units missing in {queues} queues: {K.REDISPATCHED}",
        f"{lost:,} units missing in {queues} queues: {K.TRUNCATED}",
    ]
    page = render(rep)
    assert "3500 problems" not in page and "; ".join(rep.causes) in page


@pytest.mark.parametrize("name", ["rmq53-lifecycle", "rmq53-lifecycle-crash"])
def test_lifecycle_section_is_what_the_broker_held_back(name, tmp_path):
    """The lifecycle section's lists against truth.json: delayed messages waiting (by due time), transactions left
    pending or discarded with their checks, the DLQ's size, popped messages never acked; the page shows them."""
    from test_journey import expected_state, truth

    from rmqdump.readers.store import Store
    from rmqdump.report.lifecyclesection import collect_lifecycle

    msgs = truth(name)["messages"]
    lc = collect_lifecycle(Store.open(store_root(name)))
    waiting = [m for m in msgs if expected_state(m) == "scheduled" and max(m["storeCopies"], key=lambda c: c["commitLogOffset"])["topic"] == "SCHEDULE_TOPIC_XXXX"]
    assert sorted(r["uniq_key"] for r in lc.delays) == sorted(m["uniqKey"] for m in waiting)
    assert [r["due_time"] for r in lc.delays] == sorted(r["due_time"] for r in lc.delays) == sorted(lc.due_times)
    hanging = {m["uniqKey"]: expected_state(m) for m in msgs if m["kind"] == "transaction" and expected_state(m) in ("tx_pending", "tx_discarded")}
    assert {r["uniq_key"]: r["state"] for r in lc.transactions} == hanging and lc.transactions_total == len(hanging)
    for r in lc.transactions:
        m = next(m for m in msgs if m["uniqKey"] == r["uniq_key"])
        assert r["checks"] == max(int(records_props(name, c["commitLogOffset"]).get("TRANSACTION_CHECK_TIMES", 0)) for c in m["storeCopies"])
    dlq = [m for m in msgs if m.get("inDLQ")]
    assert lc.dead_letters == [("GID_lc_push", len(dlq), len(dlq))]
    never = sorted(m["uniqKey"] for m in msgs if m["kind"] == "pop" and m.get("pops") and not m["popAcked"])
    assert sorted(r["uniq_key"] for r in lc.unacked) == never and lc.unacked_total == len(never)
    page = tmp_path / "p.html"
    assert run("report", "-s", store_root(name), "--out", page).exit_code in (0, 1)
    text = page.read_text(encoding="utf-8")
    assert "<h2>Message lifecycle</h2>" in text and f"{len(never)} popped messages never acked" in text
    other = tmp_path / "basic.html"
    assert run("report", "-s", store_root("rmq4-basic"), "--out", other).exit_code in (0, 1)
    assert "Message lifecycle" not in other.read_text(encoding="utf-8")


def records_props(name: str, offset: int) -> dict:
    from conftest import manifest

    return next(m["properties"] for m in manifest(name) if m.get("kind") == "store_msg" and m["commitLogOffset"] == offset)


def test_store_times_no_date_can_spell_stay_out_of_the_plots(tmp_path):
    """Two records whose store time had a bit flipped (the CRC covers only the body, so they scan as good records):
    the page is written, says how many records the rate plot leaves out, and the rate bins hold every other record of
    the manifest; the same with --diff, whose timeline axis stays inside the dates a date can spell."""
    from rmqdump.readers.fastpath import field_offset
    from rmqdump.schemas import message_header

    store = copy_store("rmq4-basic", tmp_path)
    m = manifest("rmq4-basic")
    per_file = os.path.getsize(next((store_root("rmq4-basic") / "commitlog").iterdir()))
    at = field_offset(message_header(), "store_timestamp")
    for seq, high in ((5, b"\x7f"), (9, b"\x80")):  # far past year 9999, far before 1970
        off = m[seq]["wroteOffset"]
        patch(store / "commitlog" / f"{off // per_file * per_file:020d}", off % per_file + at, high)
    rep = K.collect(Store.open(str(store)))
    r = rep.traffic.rate
    assert r.unplotted == 2
    want = collections.Counter((x["topic"], (x["storeTimestamp"] - r.t0) // r.width) for i, x in enumerate(_put("rmq4-basic")) if i not in (5, 9))
    got = collections.Counter({(t, int(b)): int(row[b]) for t, row in zip(r.topic_names(), r.counts, strict=True) for b in np.flatnonzero(row)})
    assert got == want
    for extra in ([], ["--diff", store_root("rmq4-basic")]):
        out = tmp_path / f"page{len(extra)}.html"
        res = run("report", "-s", store, "-o", out, *extra)
        assert res.exit_code in (0, 1), res.stderr
        assert "2 records with a store time outside 1970-01-01T00:00:00.000Z .. 9999-12-31T23:59:59.000Z" in out.read_text()


@pytest.mark.parametrize(
    ("name", "fates"),
    [
        ("rmq4-basic", {None, K.REDISPATCHED}),
        ("rmq4-crash", {K.REDISPATCHED}),
        ("rmq53-damaged-midfile-magic", {K.REDISPATCHED, K.TRUNCATED}),
    ],
)
def test_missing_units_as_columns_are_the_runs_and_fates_the_broker_gives(name, fates, tmp_path):
    """Queues 1 and 3 of every topic without their ConsumeQueues: each of their messages is a finding, folded as
    columns (a window at a time). The runs, their fates and the damage map's row are those of a model built from the
    manifest and the broker's own recovery of the same copy (the oracle, 5.3.3): a unit the restart writes back is
    dispatched again; past where it truncates, lost; else it stays missing (no note). On rmq4-basic (a normal
    shutdown) the restart writes back the records past the other queues' max offset, but not the one starting there."""
    from conftest import broker_recovery
    from test_cq_verify import cq_units_on_disk, queued

    root = copy_store(name, tmp_path)
    for qdir in (root / "consumequeue").glob("*/*"):
        if qdir.name in ("1", "3"):
            shutil.rmtree(qdir)
    have = cq_units_on_disk(root)
    broker = broker_recovery(root, tmp_path / "broker.json")
    after = {(k.rsplit("/", 1)[0], int(k.rsplit("/", 1)[1]), u[0]) for k, q in broker["consumeQueues"].items() for u in q["units"]}
    stop = broker["afterRecovery"]["maxPhyOffset"]
    damage = REAL / name / "damage.json"
    hit = {r["physicalOffset"] for r in json.loads(damage.read_text(encoding="utf-8"))["recordsHit"]} if damage.exists() else set()
    missing = sorted(
        (m["topic"], m["queueId"], m["logicsOffset"], m["wroteOffset"])
        for m in manifest(name)
        if m.get("status", "PUT_OK") == "PUT_OK"
        and m.get("kind", "put") == "put"
        and queued(m)
        and m["wroteOffset"] not in hit
        and (m["topic"], m["queueId"], m["logicsOffset"]) not in have
    )
    want: list[list] = []  # (topic, queue, first, last, count, first phys, last phys, note)
    for t, q, i, w in missing:
        note = K.REDISPATCHED if (t, q, i) in after else K.TRUNCATED if w >= stop else None
        r = want[-1] if want else None
        if r and (r[0], r[1], r[7]) == (t, q, note) and r[3] == i - 1:
            r[3], r[4], r[6] = i, r[4] + 1, w
        else:
            want.append([t, q, i, i, 1, w, w, note])
    assert {r[7] for r in want} == fates  # normal shutdown: the tail past the other queues; a crash: all; a bad record: split
    rep = K.collect(Store.open(root, (5, 3, 3)))  # the oracle's release (rmq4-basic is a 4.x store: else 4.x rules)
    got = [[r.topic, r.queue_id, r.first_index, r.last_index, r.count, r.first_phys, r.last_phys, r.note] for r in rep.runs if r.code == "cq_missing_unit"]
    assert sorted(got, key=str) == sorted(want, key=str)
    assert rep.verify.codes["cq_missing_unit"] == len(missing)
    d = rep.damage
    bins = np.bincount([min(d.bins - 1, int((w - d.lo) / d.width)) for *_, w in missing], minlength=d.bins)
    assert d.counts[K.CQ_MISSING].tolist() == bins.tolist() and not d.unplaced.get(K.CQ_MISSING)


def test_a_batch_queue_counts_in_what_a_restart_dispatches_again(tmp_path):
    """rmq53-batchcq (5.3.3, normal shutdown) without NormalTopicSimple/1's ConsumeQueue: the Batch ConsumeQueue's last
    unit is the store's last record and the broker counts its offset (not its end) in the queues' max, so its restart
    writes nothing back (the oracle on the same copy); the report says so of every missing message (the manifest's)."""
    from conftest import broker_recovery

    root = copy_store("rmq53-batchcq", tmp_path)
    shutil.rmtree(root / "consumequeue" / "NormalTopicSimple" / "1")
    broker = broker_recovery(root, tmp_path / "broker.json")
    written_back = {(k, u[0]) for k, q in broker["consumeQueues"].items() if k == "NormalTopicSimple/1" for u in q["units"]}
    rep = K.collect(Store.open(root))
    again = {("NormalTopicSimple/1", i) for r in rep.runs if r.note == K.REDISPATCHED for i in range(r.first_index, r.last_index + 1)}
    assert again == written_back
    lost = sum(m.get("msgNum", 1) for m in manifest("rmq53-batchcq") if (m.get("topic"), m.get("queueId"), m.get("status")) == ("NormalTopicSimple", 1, "PUT_OK"))
    assert sum(r.count for r in rep.runs if r.code == "cq_missing_unit" and r.note is None) == lost
    assert rep.info.recovery.redispatch_from == rep.info.recovery.valid_end == broker["dispatch"]["reputFromOffset"]


@pytest.mark.parametrize("range_bytes", [4096, 1000, 1 << 27])
@pytest.mark.parametrize("name", sorted(p.parent.name for p in REAL.glob("rmq53-damaged-*/broker-recovery.json")))
def test_the_walks_clean_chains_give_the_brokers_recovery(name, range_bytes, monkeypatch):
    """The report reads the CommitLog once: cq verify's ranges also find their clean chains, and the recovery preview
    steps over them without reading any range ahead itself. Where it starts, how many records it reads and where it
    stops are the broker's own walk's (broker-recovery.json), at range sizes that cut records anywhere."""
    from rmqdump.checks import recovery
    from rmqdump.engines.local import LocalMap

    monkeypatch.setattr(recovery, "chain_of", lambda *a, **k: pytest.fail("the preview read a range ahead itself"))
    broker = json.loads((REAL / name / "broker-recovery.json").read_text(encoding="utf-8"))
    named = [int(e["message"].rsplit("/", 1)[1]) for e in broker["log"]["infoDuringLoad"] if e["message"].startswith("recover from this mapped file")]
    rep = K.collect(Store.open(store_root(name)), mapper=LocalMap(2), range_bytes=range_bytes)
    r = rep.info.recovery
    first = named[0] if named else r.scan_from
    end = broker["afterRecovery"]["maxPhyOffset"]
    walked = sum(1 for m in broker["commitLogWalk"]["messages"] if first <= m["offset"] < end)
    assert (r.scan_from, r.valid_end, r.records_walked) == (first, end, walked)
