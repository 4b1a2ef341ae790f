"""`rmqdump report -s A --diff B`: the divergence section against the broker's truth.json, and the page in headless Chromium.

fixtures/real/rmq53-ha-failover and rmq53-ha-lag (README.txt): master/store and slave/store written by RocketMQ
5.3.3's DefaultMessageStore + DefaultHAService; truth.json holds the identical prefix, the first differing byte,
every message only on each side (in CommitLog order) and per queue both max offsets and the divergent offsets.
The page's figures are read back out of its HTML and compared with truth.json; the runs of offsets are formatted
here by the rule the page states (a..b for a run, runs joined by ", ").
"""

from __future__ import annotations

import html
import json
import re

import pytest
from conftest import REAL, run
from test_report import browse, colored_share, plot_frames

PAIRS = ["rmq53-ha-failover", "rmq53-ha-lag"]
SAMPLES = 20  # the page lists the first 20 messages only on each side


def _truth(name: str) -> dict:
    return json.loads((REAL / name / "truth.json").read_text())


def _page(pair: str, tmp_path) -> tuple[str, int]:
    out = tmp_path / f"{pair}.html"
    res = run("report", "-s", REAL / pair / "master" / "store", "--diff", REAL / pair / "slave" / "store", "--out", out)
    return out.read_text(encoding="utf-8"), res.exit_code


def _by_id(page: str, ident: str) -> str:
    m = re.search(rf'id="{ident}">(.*?)</(?:dd|b|div)>', page, re.S)
    assert m, ident
    return m.group(1)


def _rows(page: str, ident: str) -> list[list[str]]:
    """The data rows of the table inside the element with this id, as text cells."""
    block = _by_id(page, ident)
    rows = re.findall(r"<tr>(.*?)</tr>", block, re.S)[1:]  # the first is the header
    return [[html.unescape(c) for c in re.findall(r"<td[^>]*>(.*?)</td>", r, re.S)] for r in rows]


def _runs(offsets: list[int], most: int = 6) -> str:
    runs: list[list[int]] = []
    for x in offsets:
        if runs and runs[-1][1] == x - 1:
            runs[-1][1] = x
        else:
            runs.append([x, x])
    text = ", ".join(str(a) if a == b else f"{a}..{b}" for a, b in runs[:most])
    return text + (f" (+{len(runs) - most} runs)" if len(runs) > most else "")


@pytest.mark.parametrize("pair", PAIRS)
def test_divergence_section_equals_truth(pair, tmp_path):
    t = _truth(pair)
    page, code = _page(pair, tmp_path)
    assert code == 1  # the stores differ
    assert int(_by_id(page, "div-identical-up-to")) == t["commitlog"]["identicalUpTo"]
    assert int(_by_id(page, "div-first-differing-byte")) == t["commitlog"]["firstDifferingByteOffset"]
    assert int(_by_id(page, "div-only-a")) == t["counts"]["onlyMaster"] == len(t["onlyOnMaster"])
    assert int(_by_id(page, "div-only-b")) == t["counts"]["onlySlave"] == len(t["onlyOnSlave"])
    want_div = sum(len(q["divergentOffsets"]) for q in t["queues"].values())
    assert _by_id(page, "div-offsets").startswith(f"{want_div} in ")
    for side, key in (("a", "onlyOnMaster"), ("b", "onlyOnSlave")):
        got = [(int(r[0]), r[1], int(r[2]), int(r[3]), r[4]) for r in _rows(page, f"div-only-{side}-samples")]
        want = [(m["wroteOffset"], m["topic"], m["queueId"], m["queueOffset"], m["uniqKey"]) for m in t[key][:SAMPLES]]
        assert got == want
    got_q = {(r[0], int(r[1])): r[2:] for r in _rows(page, "div-queues")}
    want_q = {}
    for name, q in t["queues"].items():
        topic, qid = name.rsplit("/", 1)
        row = [
            str(q["master"]["maxOffset"]),
            str(q["slave"]["maxOffset"]),
            str(len(q["divergentOffsets"])),
            _runs([d["queueOffset"] for d in q["divergentOffsets"]]),
            _runs(q["onlyMasterOffsets"]),
            _runs(q["onlySlaveOffsets"]),
        ]
        if row[2] != "0" or row[4] or row[5] or row[0] != row[1]:
            want_q[(topic, int(qid))] = row
    assert got_q == want_q


def test_same_store_twice_is_identical(tmp_path):
    store = REAL / "rmq53-ha-failover" / "slave" / "store"
    out = tmp_path / "same.html"
    run("report", "-s", store, "--diff", store, "--out", out)
    page = out.read_text(encoding="utf-8")
    assert "Identical: A (" in page and 'id="div-only-a"' not in page


def test_diff_store_without_commitlog_is_one_line(tmp_path):
    (tmp_path / "empty" / "commitlog").mkdir(parents=True)
    res = run("report", "-s", REAL / "rmq53-ha-lag" / "master" / "store", "--diff", tmp_path / "empty", "--out", tmp_path / "x.html")
    assert res.exit_code == 2 and "no_commitlog" in res.stderr and "Traceback" not in res.stderr


@pytest.mark.slow
def test_divergence_page_draws_in_headless_chromium_offline(tmp_path):
    """The page with the divergence section opens offline without console errors or requests, every plot frame holds
    drawn marks, and the timeline (the first plot: the section comes second, the summary has none) its bars: with
    the bars drawn at zero height only its legend is coloured, 0.0006 of the frame against 0.04."""
    text, _ = _page("rmq53-ha-failover", tmp_path)
    assert "Messages past the common prefix" in text
    img, console, dom, requests = browse(tmp_path / "rmq53-ha-failover.html", tmp_path)
    assert console == [] and requests == []
    assert dom.count("<svg") == text.count("<svg")
    frames = plot_frames(img)
    assert len(frames) == text.count('<div class="plot">')
    assert all(colored_share(img, b) > 0.0005 for b in frames)
    assert colored_share(img, frames[0]) > 0.01
