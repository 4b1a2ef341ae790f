"""`report` over a fleet: one page, a summary row per broker linked to its section and the totals, each number the
store's truth (manifests, crash.json, the broker's recovery and consumerOffset.json); fleet plots drawn in headless
Chromium like the one-store page."""

from __future__ import annotations

import collections
import html
import json
import re

import pytest
from conftest import REAL, manifest, run, store_root
from test_report import _offset_table, browse, colored_share, plot_frames

BROKERS = ["rmq4-basic", "rmq4-crash", "rmq4-flags", "rmq53-damaged-bodycrc"]


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    root = tmp_path_factory.mktemp("fleet")
    for name in BROKERS:
        (root / name).mkdir()
        (root / name / "store").symlink_to(store_root(name))
    out = root / "fleet.html"
    r = run("report", "-s", str(root / "*" / "store"), "--out", str(out))
    assert r.exit_code == 1, r.stderr  # the crash and the damaged store have problems
    return out


def records(name: str) -> list[dict]:
    return [m for m in manifest(name) if m.get("kind") in (None, "put") and "wroteOffset" in m]


def queued(m: dict) -> bool:
    return m["sysFlag"] & 0xC in (0, 0x8)


def truth(name: str) -> dict:
    """The summary row's numbers from the store's own truth files."""
    ms = records(name)
    root = store_root(name)
    out = {"state": "abort: unclean" if (root / "abort").exists() else "clean", "messages": len(ms)}
    crash = REAL / name / "crash.json"
    if crash.exists():  # dispatch stopped: the others have no unit, each one problem (cq_missing_unit)
        c = json.loads(crash.read_text())
        out["units"], out["problems"] = c["dispatchedCount"], c["messagesPut"] - c["dispatchedCount"]
    elif name != "rmq53-damaged-bodycrc":
        out["units"], out["problems"] = sum(map(queued, ms)), 0
    rec = REAL / name / "broker-recovery.json"
    if rec.exists():
        end = json.loads(rec.read_text())["afterRecovery"]["maxPhyOffset"]
        out["restart drops"] = sum(1 for m in ms if m["wroteOffset"] >= end)
    elif out["state"] == "clean":
        out["restart drops"] = 0
    offsets = root / "config" / "consumerOffset.json"
    if offsets.exists() and name != "rmq53-damaged-bodycrc":
        per_queue = collections.Counter((m["topic"], m["queueId"]) for m in ms if queued(m))
        out["consumer lag"] = sum(max(0, per_queue[(t, q)] - off) for (_g, t, q), off in _offset_table(offsets).items())
    return out


def summary(text: str) -> tuple[dict[str, dict], dict, dict[str, str]]:
    """(rows by broker, the totals row, broker -> its link's target) from the page's first table."""
    table = text[text.index("<h2>Fleet</h2>") :].split("</table>", 1)[0]
    head = [html.unescape(h) for h in re.findall(r"<th>(.*?)</th>", table.split("</tr>", 1)[0])]
    rows, links, total = {}, {}, None
    for tr in re.findall(r"<tr[^>]*>(.*?)</tr>", table)[1:]:
        cells = [html.unescape(re.sub(r"<[^>]+>", "", c)) for c in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", tr)]
        row = dict(zip(head, cells, strict=True))
        link = re.search(r'href="#([^"]+)"', tr)
        if link:
            rows[row["broker"]], links[row["broker"]] = row, link.group(1)
        else:
            total = row
    return rows, total, links


def test_a_row_per_broker_with_each_stores_truth_and_the_totals(page):
    rows, total, _ = summary(page.read_text(encoding="utf-8"))
    assert sorted(rows) == sorted(BROKERS)
    for name in BROKERS:
        want = truth(name)
        got = {k: rows[name][k] if k == "state" else int(rows[name][k]) for k in want}
        assert got == want, name
    for col in ("messages", "units", "problems"):
        assert int(total[col]) == sum(int(rows[n][col]) for n in BROKERS), col
    assert int(total["messages"]) == sum(len(records(n)) for n in BROKERS)
    assert total["state"] == f"{sum(truth(n)['state'] != 'clean' for n in BROKERS)} unclean"


def test_each_row_links_to_its_brokers_section(page):
    text = page.read_text(encoding="utf-8")
    _, _, links = summary(text)
    for name, target in links.items():
        section = text[text.index(f'<section id="{target}">') :].split("</section>", 1)[0]
        assert section.startswith(f'<section id="{target}"><h2>Broker {html.escape(name)}</h2>')
        assert f"/{name}/store</dd>" in section  # the broker's own summary names its store
        assert section.count("<h3>") == 7 + ("<h3>Message lifecycle</h3>" in section)  # every section of the one-store page (the lifecycle one where the store has those queues)
    assert text.count("<!DOCTYPE html>") == 1 and "<script" not in text


@pytest.mark.slow
def test_fleet_page_draws_in_headless_chromium_offline(page, tmp_path):
    """Every plot frame (the fleet's three and each broker's own) holds drawn marks; no console line, no request."""
    text = page.read_text(encoding="utf-8")
    img, console, dom, requests = browse(page, tmp_path, height=40000)
    assert console == [] and requests == []
    expected = text.count('<div class="plot">')
    assert dom.count("<svg") == text.count("<svg") and expected >= 3 + 2 * len(BROKERS)
    frames = plot_frames(img)
    assert len(frames) == expected, (frames, expected)
    for box in frames:
        assert box[3] - box[2] > 600 and colored_share(img, box) > 0.0005, box
