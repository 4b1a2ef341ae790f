"""Every command that reads the whole CommitLog, on the real stores, gives the same answer with `-j1`, `-j2` and
`--engine spark`: the same exit code and the same JSON Lines (sorted where the command does not promise an order).

The three runs differ only in the mapper that reads the CommitLog's ranges, so any difference is a range lost, read
twice or folded out of order. Every store in fixtures/real is run, each side of an HA pair on its own. The Spark runs share this module's one local[2] session (a command joins a running
session and leaves it running). The found messages are also held against the stores' manifests.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import REAL, jsonl, manifest, need_pyspark, run, unpack_store

need_pyspark()

ENGINES = {"j1": ("-j", "1"), "j2": ("-j", "2"), "spark": ("--engine", "spark", "--master", "local[2]")}
_HEX_ID = re.compile(r"^[0-9A-F]{32}$")

# Every store in fixtures/real, each side of an HA pair on its own ("PAIR/master", "PAIR/slave").
MATRIX_STORES = sorted(
    [p.name for p in REAL.iterdir() if (p / "store").is_dir() or (p / "store.tar.gz").exists()]
    + [f"{p.parent.name}/{p.name}" for p in REAL.glob("*/*") if (p / "store").is_dir() and p.parent.name.startswith("rmq53-ha-")]
)


def _probe(name: str) -> tuple[str, str | None, str] | None:
    """The last message put on its own that the manifest names with a hex UNIQ_KEY and the store holds (an HA side
    holds the ones its `presentOn` names): (UNIQ_KEY, one of its KEYS or None, its topic)."""
    pair, _, side = name.partition("/")
    found = None
    for r in manifest(pair):
        if r.get("kind") not in (None, "put", "send") or (side and side not in r.get("presentOn", [side])):
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
    if name == "rmq53-compaction":  # the compaction topic's own commands read their originals from the CommitLog
        cmds += [
            ("compaction-verify", ["compaction", "verify", "-f", "jsonl"], True),
            ("compaction-view", ["compaction", "view", "-t", "CompactKV", "-f", "jsonl"], True),
            ("compaction-log", ["compaction", "log", "-t", "CompactKV", "-f", "jsonl"], True),
        ]
    probe = _probe(name)
    if probe is not None:
        uniq, key, topic = probe
        cmds.append(("msgid", ["msgid", uniq, "-t", topic, "-f", "jsonl"], True))
        cmds.append(("index-lookup", ["index", "lookup", *([key] if key else ["--id", uniq]), "-t", topic, "-f", "jsonl"], True))
    return cmds


CASES = [(name, label) for name in MATRIX_STORES for label, _, _ in _commands(name)]
assert len(MATRIX_STORES) >= 24, MATRIX_STORES  # every store of fixtures/real: one left out would go untested


@pytest.fixture(scope="module")
def roots(tmp_path_factory) -> dict[str, str]:
    return {name: _root(name, tmp_path_factory) for name in MATRIX_STORES}


def _lines(stdout: str, ordered: bool) -> list[str]:
    """The JSON rows, each as sorted-key JSON (a writing command's table summary is not compared: the files are);
    msgid's decoded id is left out (its age is counted from the run's clock)."""
    rows = [json.dumps(r, sort_keys=True) for r in jsonl("\n".join(x for x in stdout.splitlines() if x.startswith("{"))) if r.get("kind") != "msgid"]
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


# Commands that write files: the same files with the same contents (rows of part files compared as one sorted set,
# since Spark names and cuts its part files its own way), on every store. rebuild, salvage and repair take one store;
# export, sql and report take the whole set at once, as a fleet (one job per engine, every store a broker).
STORE_WRITERS = ["rebuild", "salvage", "repair"]
FLEET_WRITERS = ["export", "sql", "report"]


def _index_settings(name: str) -> list[str]:
    """The index settings the store's README gives (its broker's maxHashSlotNum and maxIndexNum): a store with one
    index file whose size alone does not give them is rebuilt with what its broker used."""
    text = (REAL / name.partition("/")[0] / "README.txt").read_text()
    slots, entries = (re.search(rf"{k}\s*[=:]?\s*(\d+)", text) for k in ("maxHashSlotNum", "maxIndexNum"))
    return ["--hash-slots", slots[1], "--index-entries", entries[1]] if slots and entries else []


def _store_writer(label: str, name: str, root: str, out: str) -> list[str]:
    return {
        "rebuild": ["rebuild", root, "-o", f"{out}/rebuilt", "-f", "jsonl", *_index_settings(name)],
        "salvage": ["salvage", root, "-o", f"{out}/salvage", "-f", "jsonl"],
        "repair": ["repair", root, "-o", f"{out}/repaired", "-f", "jsonl", *_index_settings(name)],
    }[label]


def _fleet_writer(label: str, roots: dict[str, str], out: str) -> list[str]:
    stores = [a for name in MATRIX_STORES for a in ("-s", f"{name.replace('/', '-')}={roots[name]}")]
    return {
        "export": ["export", *stores, "-o", f"{out}/export", "-f", "jsonl"],
        "sql": ["sql", *stores, "select broker, topic, queue_id, count(*) n, sum(body_length) b from messages group by 1, 2, 3 order by 1, 2, 3", "-f", "jsonl"],
        "report": ["report", *stores, "-o", f"{out}/page.html"],
    }[label]


_VOLATILE = re.compile(r"(^|_)(seconds|per_second|workers|engine|partitions|master|timings)$")


def _clean(v, out: Path):
    """A JSON value with what differs by engine and run by design removed: timings, worker counts, the output's path."""
    if isinstance(v, dict):
        return {k: _clean(x, out) for k, x in v.items() if not _VOLATILE.search(k)}
    if isinstance(v, list):
        return [_clean(x, out) for x in v]
    return v.replace(str(out), "OUT") if isinstance(v, str) else v


def _steady(rows: list[str], out: Path) -> list[str]:
    return sorted(json.dumps(_clean(json.loads(r), out), sort_keys=True) for r in rows)


def _contents(out: Path) -> dict[str, object]:
    """Every file under `out` by kind: bytes (by digest) for store files, sorted rows for JSON Lines and Parquet parts
    (one set per directory: how Spark cuts its parts is its own), the report's page without its timings."""
    import hashlib

    import pyarrow.parquet as pq

    rows: dict[str, list[str]] = {}
    found: dict[str, object] = {}
    for p in sorted(out.rglob("*")):
        if not p.is_file() or p.name.startswith((".", "_")) or p.suffix == ".crc":
            continue
        rel = p.relative_to(out)
        if p.suffix == ".parquet":
            t = pq.read_table(p)
            rows.setdefault(str(rel.parent), []).extend(json.dumps(r, sort_keys=True, default=str) for r in t.to_pylist())
        elif p.suffix in (".jsonl", ".json") and "part" in p.name:
            rows.setdefault(str(rel.parent), []).extend(p.read_text().splitlines())
        elif p.parent.name != "config" and p.suffix == ".json":  # a command's own account (salvage's manifest, repair's report)
            found[str(rel)] = _clean(json.loads(p.read_text()), out)
        elif p.suffix == ".html":
            found[str(rel)] = re.sub(r"\d+(\.\d+)? ?(ms|s)\b", "T", p.read_text())
        else:
            found[str(rel)] = hashlib.sha256(p.read_bytes()).hexdigest()
    found.update({f"{d}/*": sorted(v) for d, v in rows.items()})
    return found


# What a command refuses by design, on every engine alike: (store, command) -> the one-line error's code.
REFUSED = {("rmq53-dledger", "repair"): "repair_dledger_unsupported"}


def _same_writes(tmp_path: Path, label: str, args_for, refused: str | None = None) -> None:
    """The command run by each engine into its own directory: the same exit, the same rows, the same files (or, where
    it refuses the store, the same one-line refusal and nothing written)."""
    got = {}
    for engine, opts in ENGINES.items():
        out = tmp_path / engine
        out.mkdir()
        r = run(*args_for(str(out)), *opts)
        if refused:
            assert r.exit_code == 2 and r.stderr.startswith(f"rmqdump: {refused}: ") and r.stderr.count("\n") == 1, f"{engine}: {r.stderr[-2000:]}"
            assert not any(out.iterdir()), f"{engine}: wrote files although it refused"
            continue
        assert r.exit_code in (0, 1), f"{engine}: exit {r.exit_code}: {r.stderr[-2000:]}"
        got[engine] = (r.exit_code, _steady(_lines(r.stdout, False), out), _contents(out))
    if refused:
        return
    assert got["j1"][1] or got["j1"][2], f"{label} wrote nothing"
    assert got["j2"] == got["j1"], f"{label} -j2 differs from -j1"
    assert got["spark"] == got["j1"], f"{label} --engine spark differs from -j1"


@pytest.mark.parametrize("label", STORE_WRITERS)
@pytest.mark.parametrize("name", MATRIX_STORES)
def test_writing_commands_write_the_same_with_one_thread_two_and_spark(spark, roots, tmp_path, name, label):
    _same_writes(tmp_path, label, lambda out: _store_writer(label, name, roots[name], out), REFUSED.get((name, label)))


@pytest.mark.parametrize("label", FLEET_WRITERS)
def test_fleet_writers_write_the_same_with_one_thread_two_and_spark(spark, roots, tmp_path, label):
    """export, sql and report over every store at once: each store a broker of one fleet."""
    _same_writes(tmp_path, label, lambda out: _fleet_writer(label, roots, out))


def test_diff_of_an_ha_pair_is_the_same_with_one_thread_two_and_spark(spark, tmp_path):
    """diff of the master and the slave that lagged (truth.json): the same rows and the same spilled messages."""
    pair = REAL / "rmq53-ha-lag"
    got = {}
    for engine, opts in ENGINES.items():
        out = tmp_path / engine
        r = run("diff", pair / "master" / "store", pair / "slave" / "store", "-f", "jsonl", "-o", out, *opts)
        assert r.exit_code in (0, 1), f"{engine}: exit {r.exit_code}: {r.stderr[-2000:]}"
        got[engine] = (r.exit_code, _steady(_lines(r.stdout, False), out), _contents(out))
    assert got["j1"][1], "diff printed nothing"
    assert got["j2"] == got["j1"], "diff -j2 differs from -j1"
    assert got["spark"] == got["j1"], "diff --engine spark differs from -j1"


# `commitlog`: its listing byte for byte (table, JSON Lines, CSV), the whole store and a topic cut by --limit inside
# a later range; each held against the manifest: every record the damage left alone, in CommitLog order, nothing else.
LISTED = "rmq53-damaged-midfile-magic"  # 8 files (8 ranges), a record's magic overwritten in the second
LISTINGS = {
    "all": [],
    "topic-limit": ["-t", "orders", "-n", "500"],  # the 500th `orders` message is in the fourth file
}


def _listed_offsets(fmt: str, stdout: str) -> list[tuple[str, int]]:
    """(kind, phys_offset) of every row, in the order printed: messages, end-of-file markers and problems."""
    import csv
    import io

    if fmt == "jsonl":
        return [(r["kind"], r.get("phys_offset")) for r in jsonl(stdout) if r["kind"] != "summary"]
    if fmt == "csv":
        return [(r["kind"], int(r["phys_offset"]) if r["phys_offset"] else None) for r in csv.DictReader(io.StringIO(stdout))]
    rows = []
    for line in stdout.splitlines():
        cells = line.split()
        if not cells or cells[0] == "offset":
            continue
        kind = "blank" if "<end of file: " in line else "problem" if not cells[1].isdigit() else "message"
        rows.append((kind, int(cells[0])))
    return rows


@pytest.mark.parametrize("fmt", ["table", "jsonl", "csv"])
@pytest.mark.parametrize("listing", list(LISTINGS))
def test_commitlog_listing_is_the_same_with_one_thread_two_and_spark(spark, roots, fmt, listing):
    args = ["commitlog", "-s", roots[LISTED], "-f", fmt, *LISTINGS[listing]]
    got = {}
    for engine, opts in ENGINES.items():
        r = run(*args, *opts)
        assert r.exit_code == 1, f"{engine}: exit {r.exit_code} (the damage is a problem): {r.stderr[-2000:]}"
        got[engine] = (r.stdout, r.stderr)
    assert got["j2"] == got["j1"], f"commitlog -f {fmt} -j2 differs from -j1"
    assert got["spark"] == got["j1"], f"commitlog -f {fmt} --engine spark differs from -j1"
    damage = json.loads((REAL / LISTED / "damage.json").read_text())
    hit = {h["physicalOffset"] for h in damage["recordsHit"]}
    want = [m["wroteOffset"] for m in sorted(manifest(LISTED), key=lambda m: m["wroteOffset"]) if m["wroteOffset"] not in hit]
    if listing == "topic-limit":
        topic = {m["wroteOffset"]: m["topic"] for m in manifest(LISTED)}
        want = [o for o in want if topic[o] == "orders"][:500]
    rows = _listed_offsets(fmt, got["j1"][0])
    assert [o for k, o in rows if k == "message"] == want
    offsets = [o for _, o in rows if o is not None]
    assert offsets == sorted(offsets), "rows out of CommitLog order"
    if listing == "all":  # the damage is reported where it is: after the record before it, before the one after it
        assert [o for k, o in rows if k == "problem"] == sorted(hit)


def _written(name: str) -> tuple[set[int], bool]:
    """The physical offsets of the records the broker wrote into this store, from its manifest, and whether the
    listing must hold exactly those (else at least those: a damaged store's records the damage left alone)."""
    pair, _, side = name.partition("/")
    man = manifest(pair)
    kinds = {m.get("kind") for m in man}
    if (REAL / pair / "damage.json").exists():
        hit = {h["physicalOffset"] for h in json.loads((REAL / pair / "damage.json").read_text())["recordsHit"]}
        return {m["wroteOffset"] for m in man} - hit, False
    if side:  # the messages this side holds (truth's presentOn)
        return {m["wroteOffset"] for m in man if m.get("kind") in (None, "put") and side in m.get("presentOn", [side])}, True
    if "commitlog_msg" in kinds:  # every record of the CommitLog, system topics included
        return {m["physicalOffset"] for m in man if m.get("kind") == "commitlog_msg"}, True
    if "store_msg" in kinds:  # the lifecycle stores: every copy the broker stored
        return {m["commitLogOffset"] for m in man if m.get("kind") == "store_msg"}, True
    return {m["wroteOffset"] for m in man if m.get("kind") in (None, "put")}, True


@pytest.mark.parametrize("name", MATRIX_STORES)
def test_commitlog_listing_of_every_store_is_the_same_with_one_thread_two_and_spark(spark, roots, name):
    """Every store's whole listing as JSON Lines, byte for byte, in CommitLog order on every engine; its messages
    are the records the manifest says the broker wrote there (each once)."""
    got = {}
    for engine, opts in ENGINES.items():
        r = run("commitlog", "-s", roots[name], "-f", "jsonl", *opts)
        assert r.exit_code in (0, 1), f"{engine}: exit {r.exit_code}: {r.stderr[-2000:]}"
        got[engine] = (r.exit_code, r.stdout, r.stderr)
    rows = jsonl(got["j1"][1])
    assert any(x["kind"] == "message" for x in rows), "the listing found no message"
    offsets = [(x["file"], x["phys_offset"]) for x in rows if x["kind"] == "message"]
    assert [o for _, o in offsets] == sorted(o for _, o in offsets), "rows out of CommitLog order"
    listed = [o for _, o in offsets]
    want, exact = _written(name)
    assert len(listed) == len(set(listed)), "a record listed twice"
    assert (set(listed) == want) if exact else (want <= set(listed)), f"listed {len(listed)}, the manifest has {len(want)}"
    assert got["j2"] == got["j1"], "commitlog -j2 differs from -j1"
    assert got["spark"] == got["j1"], "commitlog --engine spark differs from -j1"
