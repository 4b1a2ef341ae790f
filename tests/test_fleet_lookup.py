"""`index lookup` and `msgid` over a fleet of stores: every broker searched, each hit named by its broker, exactly
the messages the manifests put there under that key."""

from __future__ import annotations

import random
import shutil

import pytest
from conftest import HEALTHY, jsonl, manifest, run, store_root


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    root = tmp_path_factory.mktemp("fleet")
    for name in HEALTHY:
        (root / name).mkdir()
        (root / name / "store").symlink_to(store_root(name))
    return root


def expected(key: str, topic: str | None) -> set[tuple[str, int]]:
    """(broker, physical offset) of every put whose UNIQ_KEY or a KEYS token is `key` (in `topic`), by the manifests."""
    out = set()
    for name in HEALTHY:
        for m in manifest(name):
            if "wroteOffset" not in m or m.get("kind") not in (None, "put", "commitlog_msg"):
                continue
            if (topic is None or m["topic"] == topic) and (m.get("uniqKey") == key or key in (m.get("keys") or [])):
                out.add((name, m["wroteOffset"]))
    return out


def sample_keys(n: int = 6) -> list[tuple[str, str]]:
    rng = random.Random(7)
    picks = []
    for name in HEALTHY:
        ms = [m for m in manifest(name) if m.get("uniqKey") and m.get("kind") in (None, "put")]
        for m in rng.sample(ms, 2):
            picks.append((m["uniqKey"], m["topic"]))
            if m.get("keys"):
                picks.append((m["keys"][0], m["topic"]))
    return picks[: n * len(HEALTHY)]


@pytest.mark.parametrize(("key", "topic"), sample_keys())
def test_lookup_finds_every_broker_that_holds_the_key(fleet, key, topic):
    r = run("index", "lookup", key, "-s", str(fleet / "*" / "store"), "-t", topic, "-f", "jsonl")
    lines = jsonl(r.stdout)
    got = {(d["broker"], d["phys_offset"]) for d in lines if d["kind"] == "message"}
    assert got == expected(key, topic)
    assert r.exit_code == (0 if got else 1)
    summaries = [d for d in lines if d["kind"] == "summary"]
    assert sorted(d["broker"] for d in summaries) == sorted(HEALTHY)  # every store was searched
    for d in summaries:
        assert d["found"] == sum(1 for b, _ in got if b == d["broker"])


def test_msgid_over_the_fleet_names_the_broker(fleet):
    m = next(m for m in manifest("rmq53-v2") if m.get("uniqKey"))
    r = run("msgid", m["uniqKey"], "-s", str(fleet / "*" / "store"), "-f", "jsonl")
    assert r.exit_code == 0, r.stderr
    got = {(d["broker"], d["phys_offset"]) for d in jsonl(r.stdout) if d["kind"] == "message"}
    assert got == expected(m["uniqKey"], None)


def test_a_store_without_index_is_a_problem_line_and_the_others_still_answer(fleet, tmp_path):
    broken = tmp_path / "fleet"
    shutil.copytree(fleet, broken, symlinks=True)
    bad = broken / "noindex" / "store"
    bad.mkdir(parents=True)
    (bad / "commitlog").mkdir()
    m = next(m for m in manifest("rmq4-basic") if m.get("uniqKey"))
    r = run("index", "lookup", m["uniqKey"], "-s", str(broken / "*" / "store"), "-t", m["topic"], "-f", "jsonl")
    lines = jsonl(r.stdout)
    assert [(d["broker"], d["code"]) for d in lines if d["kind"] == "problem"] == [("noindex", "index_no_files")]
    assert {(d["broker"], d["phys_offset"]) for d in lines if d["kind"] == "message"} == expected(m["uniqKey"], m["topic"])
    assert r.exit_code == 0


def test_table_has_a_broker_column(fleet):
    m = next(m for m in manifest("rmq5-basic") if m.get("keys"))
    r = run("index", "lookup", m["keys"][0], "-s", str(fleet / "*" / "store"), "-t", m["topic"])
    rows = [line.split() for line in r.stdout.splitlines()[1:] if line.strip()]
    assert r.stdout.split()[0] == "broker"
    assert {(row[0], int(row[1])) for row in rows} == expected(m["keys"][0], m["topic"])
