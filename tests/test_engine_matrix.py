"""Every command that reads the whole CommitLog, on the real stores, gives the same answer with `-j1`, `-j2` and
`--engine spark`: the same exit code and the same JSON Lines (sorted where the command does not promise an order).

The three runs differ only in the mapper that reads the CommitLog's ranges, so any difference is a range lost, read
twice or folded out of order. The Spark runs share this module's one local[2] session (a command joins a running
session and leaves it running). The found messages are also held against the stores' manifests.
"""

from __future__ import annotations

import json
import re

import pytest
from conftest import REAL, jsonl, manifest, need_pyspark, run, unpack_store

need_pyspark()

ENGINES = {"j1": ("-j", "1"), "j2": ("-j", "2"), "spark": ("--engine", "spark", "--master", "local[2]")}
_HEX_ID = re.compile(r"^[0-9A-F]{32}$")

# The small stores of every kind, and one damaged store (damage.json): the whole file stays within its time budget.
MATRIX_STORES = [
    "rmq4-flags",  # 4.x, flags and delays
    "rmq53-batchcq",
    "rmq53-compaction",
    "rmq53-damaged-midfile-magic",  # damage.json: a record's magic overwritten mid-file
    "rmq53-dledger",
    "rmq53-lifecycle-crash",  # transactions, POP, retries, DLQ, timers; unclean shutdown
    "rmq53-rocksdbcq",
]


def _probe(name: str) -> tuple[str, str | None, str] | None:
    """The last message put on its own that the manifest names with a hex UNIQ_KEY: (UNIQ_KEY, one of its KEYS or None,
    its topic)."""
    found = None
    for r in manifest(name):
        if r.get("kind") not in (None, "put", "send"):
            continue
        props = r.get("properties") or {}
        u = r.get("uniqKey") or props.get("UNIQ_KEY")
        if u and _HEX_ID.match(u):
            keys = r.get("keys") or props.get("KEYS")
            keys = keys.split() if isinstance(keys, str) else keys
            found = (u, keys[0] if keys else None, r["topic"])
    return found


def _root(name: str, tmp_path_factory) -> str:
    d = REAL / name
    if (d / "store.tar.gz").exists():
        return str(unpack_store(name, tmp_path_factory.mktemp(name)))
    return str(d / "store")


def _commands(name: str) -> list[tuple[str, list[str], bool]]:
    """(label, arguments without the store, whether the output's order is promised)."""
    cmds = [
        ("info", ["info", "-f", "jsonl"], True),
        ("tx", ["tx", "-f", "jsonl"], True),
        ("pop", ["pop", "-f", "jsonl"], True),
        ("delay", ["delay", "-f", "jsonl"], True),
        ("retry", ["retry", "-f", "jsonl"], True),
        ("journey", ["journey", "--all", "-f", "jsonl"], True),
        ("cq-verify", ["cq", "verify", "-f", "jsonl"], True),
        ("index-verify", ["index", "verify", "-f", "jsonl"], True),
    ]
    probe = _probe(name)
    if probe is not None:
        uniq, key, topic = probe
        cmds.append(("msgid", ["msgid", uniq, "-t", topic, "-f", "jsonl"], True))
        cmds.append(("index-lookup", ["index", "lookup", *([key] if key else ["--id", uniq]), "-t", topic, "-f", "jsonl"], True))
    return cmds


CASES = [(name, label) for name in MATRIX_STORES for label, _, _ in _commands(name)]


@pytest.fixture(scope="module")
def roots(tmp_path_factory) -> dict[str, str]:
    return {name: _root(name, tmp_path_factory) for name in MATRIX_STORES}


def _lines(stdout: str, ordered: bool) -> list[str]:
    """The rows, each as sorted-key JSON; msgid's decoded id is left out (its age is counted from the run's clock)."""
    rows = [json.dumps(r, sort_keys=True) for r in jsonl(stdout) if r.get("kind") != "msgid"]
    return rows if ordered else sorted(rows)


@pytest.mark.parametrize(("name", "label"), CASES, ids=[f"{n}-{c}" for n, c in CASES])
def test_same_output_with_one_thread_two_and_spark(spark, roots, name, label):
    args, ordered = next((a, o) for lb, a, o in _commands(name) if lb == label)
    got = {}
    for engine, opts in ENGINES.items():
        r = run(*args, "-s", roots[name], *opts)
        assert r.exit_code in (0, 1), f"{engine}: exit {r.exit_code}: {r.stderr[-2000:]}"
        got[engine] = (r.exit_code, _lines(r.stdout, ordered))
    assert got["j1"][1], f"{label} printed nothing"
    assert got["j2"] == got["j1"], f"{label} -j2 differs from -j1"
    assert got["spark"] == got["j1"], f"{label} --engine spark differs from -j1"
    if label in ("msgid", "index-lookup"):
        uniq, _, _ = _probe(name)
        found = {r.get("uniq_key") for r in map(json.loads, got["j1"][1]) if r.get("kind") == "message"}
        assert uniq in found, f"{label} did not find the manifest's message {uniq}"
