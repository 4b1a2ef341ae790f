"""Every command on damaged input speaks the operator's words: no Python `None` on screen, no exception class names.

A value rmqdump does not know is written as `-`, `?` or `unknown` on screen and as JSON's null in jsonl; a failure is a
problem code, never the name of the Python exception behind it (StreamError, PermissionError ...). The inputs: a
CommitLog file of random bytes, the damaged real stores, and a copy of a real store with a random checkpoint, index
file and ConsumeQueue file, broken config files and a record whose totalSize its fields overrun.
"""

from __future__ import annotations

import os
import random
import re
import shutil
from pathlib import Path

import pytest
from conftest import SETTINGS, copy_store, manifest, patch, run, store_root

NONE = re.compile(r"\bNone\b")
EXCEPTION = re.compile(r"\b[A-Z][A-Za-z0-9]*(?:Error|Exception|Warning)\b|Traceback")


def _random_bytes(n: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(n)


@pytest.fixture(scope="module")
def damaged(tmp_path_factory) -> dict[str, Path]:
    """The stores to run every command on, by name."""
    tmp = tmp_path_factory.mktemp("words")
    rand = tmp / "random" / "store"
    (rand / "commitlog").mkdir(parents=True)
    (rand / "commitlog" / f"{0:020d}").write_bytes(_random_bytes(1 << 20, 6))
    garbled = copy_store("rmq4-flags", tmp / "garbled")
    (garbled / "checkpoint").write_bytes(_random_bytes(4096, 7))
    (garbled / "config" / "delayOffset.json").write_bytes(_random_bytes(300, 8))
    (garbled / "config" / "consumerOffset.json").write_text('{"offsetTable":{"FlagTopic@g":{0:"x"}}')
    first_index = sorted((garbled / "index").iterdir())[0]
    first_index.write_bytes(_random_bytes(first_index.stat().st_size, 9))
    first_cq = sorted((garbled / "consumequeue" / "FlagTopic" / "0").iterdir())[0]
    first_cq.write_bytes(_random_bytes(first_cq.stat().st_size, 10))
    (garbled / "abort").write_bytes(b"")
    size = SETTINGS["rmq4-flags"]["commitlog"]
    m = sorted(manifest("rmq4-flags"), key=lambda x: x["wroteOffset"])[len(manifest("rmq4-flags")) // 2]
    shorter = (m["wroteBytes"] - 60).to_bytes(4, "big")  # a totalSize its fields overrun
    patch(garbled / "commitlog" / f"{m['wroteOffset'] // size * size:020d}", m["wroteOffset"] % size, shorter)
    return {
        "random": rand,
        "garbled": garbled,
        "size-field": store_root("rmq53-damaged-size-field"),
        "lifecycle-crash": store_root("rmq53-lifecycle-crash"),
    }


def _commands(s: Path, out: Path) -> list[list[str]]:
    """Every command and subcommand, each given the store (and what it needs besides)."""
    newest = sorted((s / "commitlog").iterdir())[-1]
    topic = sorted(os.listdir(s / "consumequeue"))[0] if (s / "consumequeue").is_dir() and os.listdir(s / "consumequeue") else "TopicTest"
    index = sorted((s / "index").iterdir()) if (s / "index").is_dir() else []
    cmds = [
        ["commitlog", newest],
        ["info", "-s", s],
        ["cq", "verify", "-s", s],
        ["cq", "dump", "-s", s, "-t", topic, "-q", "0"],
        ["cq", "seek", "-s", s, "-t", topic, "-q", "0", "--time", "0"],
        ["offsets", "-s", s],
        ["index", "verify", "-s", s],
        ["index", "lookup", "order-089308", "-s", s],
        ["msgid", "7F00000114C23B8C0C2200001FAC9448", "-s", s],
        ["compaction", "verify", "-s", s],
        ["compaction", "view", "-s", s, "-t", topic],
        ["compaction", "log", "-s", s, "-t", topic],
        ["compaction", "units", "-s", s, "-t", topic],
        ["timer", "list", "-s", s],
        ["timer", "verify", "-s", s],
        ["timer", "dump-wheel", "-s", s],
        ["journey", "--all", "-s", s],
        ["rebuild", s, "--out", out / "rebuilt"],
        ["repair", s, "--out", out / "repaired"],
        ["salvage", s, "--out", out / "salvaged"],
        ["diff", s, s],
        ["sql", "-s", s, "SELECT topic, count(*) AS n, min(store_timestamp) AS t FROM messages GROUP BY topic"],
        ["sql", "-s", s, "SELECT * FROM problems LIMIT 20"],
        ["export", "-s", s, "--out", out / "exported", "-f", "jsonl"],
        ["report", "-s", s, "--out", out / "report.html"],
    ]
    if index:
        cmds.append(["index", "dump", index[0], "-n", "5"])
    return cmds


TABLE_ONLY = {"export", "report", "salvage"}  # their own formats: files, not a jsonl screen


@pytest.mark.parametrize("name", ["random", "garbled", "size-field", "lifecycle-crash"])
def test_every_command_speaks_without_none_or_exception_names(damaged, name, tmp_path):
    s = damaged[name]
    bad = []
    for fmt in ("table", "jsonl"):
        for cmd in _commands(s, tmp_path / fmt):
            if fmt == "jsonl" and cmd[0] in TABLE_ONLY:
                continue
            args = [str(a) for a in cmd] + (["-f", "jsonl"] if fmt == "jsonl" and "-f" not in cmd else [])
            r = run(*args)
            text = r.stdout + r.stderr
            page = tmp_path / fmt / "report.html"
            if cmd[0] == "report" and page.exists():
                text += page.read_text(encoding="utf-8")
            assert r.exit_code in (0, 1, 2), (args, r.exit_code)
            if r.exit_code == 2:
                assert len(r.stderr.strip().splitlines()) == 1, (args, r.stderr)  # one line: the file and the code
            words = EXCEPTION.findall(text) + (NONE.findall(text) if fmt == "table" else [])
            if words:
                m = (EXCEPTION.search(text) or NONE.search(text)).start()
                bad.append((" ".join(args[:3]), fmt, text[max(0, m - 120) : m + 40]))
            shutil.rmtree(tmp_path / fmt / "rebuilt", ignore_errors=True)
    assert not bad, bad


def test_an_internal_error_is_one_line_without_the_exception_class(monkeypatch):
    """A failure nothing foresaw (here construct's StreamError from deep in a reader) is still one line, exit 2, in
    words; RMQDUMP_TRACEBACK=1 is how a developer sees the class and where."""
    from construct import StreamError

    import rmqdump.query.storeinfo as storeinfo

    def broken(*a, **kw):
        raise StreamError("stream read less than specified amount, expected 8, found 3")

    monkeypatch.setattr(storeinfo, "store_info", broken)
    monkeypatch.delenv("RMQDUMP_TRACEBACK", raising=False)
    r = run("info", "-s", store_root("rmq4-flags"), "--no-recovery")
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1
    assert "internal_error: stream read less than specified amount" in r.stderr and not EXCEPTION.search(r.stderr)
