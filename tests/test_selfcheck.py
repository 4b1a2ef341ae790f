"""rebuild's self-check: the quick proof (written files equal the scan's columns) and the analyses it stands in for.

The quick proof must give the very result of the `cq verify` / `index
verify` analyses on a clean rebuild of the real stores, and must refuse
(handing over to those analyses, which then report the damage) when a unit,
an index entry, a slot or a chain link on disk is wrong.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from conftest import SETTINGS, manifest, store_root

import rmqdump.builders.rebuild as R
from rmqdump.builders.rebuild import RebuildOptions, rebuild
from rmqdump.builders.selfcheck import ScanColumns
from rmqdump.builders.settings import resolve
from rmqdump.engines.local import LocalMap
from rmqdump.readers.consumequeue import UNIT_DTYPE
from rmqdump.readers.fastpath import numpy_dtype
from rmqdump.readers.indexfile import ENTRY_DTYPE, HEADER_SIZE, SLOT_DTYPE
from rmqdump.schemas import IndexHeader

HEADER = numpy_dtype(IndexHeader)


def _settings(name: str):
    s = SETTINGS[name]
    return resolve(str(store_root(name)), cq_units=s["cq_units"], hash_slots=s["hash_slots"], index_entries=s["index_entries"])


def _spy(monkeypatch) -> dict:
    """Record what each quick proof returned."""
    seen: dict = {}
    for name in ("quick_cq", "quick_index"):
        orig = getattr(ScanColumns, name)

        def wrapped(self, *a, _orig=orig, _name=name):
            seen[_name] = _orig(self, *a)
            return seen[_name]

        monkeypatch.setattr(ScanColumns, name, wrapped)
    return seen


@pytest.mark.parametrize("name,workers", [("rmq4-basic", 1), ("rmq4-basic", 2), ("rmq4-flags", 1), ("rmq5-basic", 2)])
def test_quick_proof_gives_the_analyses_result_on_clean_rebuilds(tmp_path, monkeypatch, name, workers):
    st = _settings(name)
    opts = RebuildOptions(mapper=LocalMap(workers), sync=False)
    seen = _spy(monkeypatch)
    quick = rebuild(str(store_root(name)), str(tmp_path / "quick"), st, opts).verify
    assert seen["quick_cq"] is not None and seen["quick_index"] is not None  # the proof was taken
    assert quick["ok"] is True
    monkeypatch.setattr(R, "_quick_checks", lambda *a: {})
    full = rebuild(str(store_root(name)), str(tmp_path / "full"), st, opts).verify
    assert quick == full
    # and both count what the broker put: a unit per queued message, an entry per UNIQ_KEY and KEYS token (not for a rollback)
    ms = manifest(name)
    assert quick["consumequeue"]["units"] == sum(1 for m in ms if m["sysFlag"] & 0xC in (0, 8))
    assert quick["index"]["entries"] == sum(bool(m["uniqKey"]) + sum(1 for k in m["keys"] if k) for m in ms if m["sysFlag"] & 0xC != 0xC)


def _first_index_file(tmp: str) -> str:
    d = os.path.join(tmp, "index")
    return os.path.join(d, sorted(os.listdir(d))[0])


def _bad_unit(tmp: str, st) -> None:
    """The third unit of the first queue points one byte further."""
    base = os.path.join(tmp, "consumequeue")
    topic = sorted(os.listdir(base))[0]
    qdir = os.path.join(base, topic, sorted(os.listdir(os.path.join(base, topic)))[0])
    path = os.path.join(qdir, sorted(os.listdir(qdir))[0])
    u = np.fromfile(path, dtype=UNIT_DTYPE)
    assert u["size"][2] > 0
    u["commit_log_offset"][2] += 1
    u.tofile(path)


def _entries(path: str, st) -> tuple[np.ndarray, int]:
    h = np.fromfile(path, dtype=HEADER, count=1)[0]
    at = HEADER_SIZE + st.hash_slots * SLOT_DTYPE.itemsize
    return np.fromfile(path, dtype=ENTRY_DTYPE, count=int(h["index_count"]), offset=at), at


def _bad_entry(tmp: str, st) -> None:
    """Entry 5's CommitLog offset moves by one byte."""
    path = _first_index_file(tmp)
    e, at = _entries(path, st)
    e["phys_offset"][5] += 1
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(e.tobytes())


def _bad_slot(tmp: str, st) -> None:
    """A used slot points one entry back (to an older entry of its chain, or another slot's)."""
    path = _first_index_file(tmp)
    s = np.fromfile(path, dtype=SLOT_DTYPE, count=st.hash_slots, offset=HEADER_SIZE)
    used = np.flatnonzero(s["entry"] > 1)
    s["entry"][used[0]] -= 1
    with open(path, "r+b") as f:
        f.seek(HEADER_SIZE)
        f.write(s.tobytes())


def _bad_chain(tmp: str, st) -> None:
    """An entry that follows another of its slot links to nothing: the older entries drop out of the chain."""
    path = _first_index_file(tmp)
    e, at = _entries(path, st)
    linked = np.flatnonzero(e["prev_index"] > 0)
    e["prev_index"][linked[0]] = 0
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(e.tobytes())


def _twice_linked(tmp: str, st) -> None:
    """Entry b, which followed entry a, links to a's own previous entry instead: that one is now the previous of two."""
    path = _first_index_file(tmp)
    e, at = _entries(path, st)
    prev = e["prev_index"].astype(np.int64)
    b = next(i for i in range(1, len(e)) if prev[i] > 0 and prev[prev[i]] > 0)
    e["prev_index"][b] = prev[prev[b]]
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(e.tobytes())


# What each damage breaks, and nothing more:
DAMAGES = [
    # the unit points inside its record (not at a record start), and that record is left without a unit
    (_bad_unit, "consumequeue", {"cq_not_message_start": 1, "cq_missing_unit": 1}),
    # the entry points at no record, and that record's key is left without an entry
    (_bad_entry, "index", {"index_entry_not_record": 1, "index_missing_entry": 1}),
    # the slot's head is an entry of another hash, and its real head is reached by nothing
    (_bad_slot, "index", {"index_slot_wrong_hash": 1, "index_entry_unreachable": 1}),
    # the first entry with a previous one loses its link: that previous entry (itself linked to none) drops out
    (_bad_chain, "index", {"index_entry_unreachable": 1}),
    # b skips its previous entry, which nothing else links to: it drops out
    (_twice_linked, "index", {"index_entry_unreachable": 1}),
]


@pytest.mark.parametrize("damage,part,codes", DAMAGES, ids=[d[0].__name__ for d in DAMAGES])
def test_damage_on_disk_fails_the_quick_proof_and_the_analysis_names_it(tmp_path, monkeypatch, damage, part, codes):
    name = "rmq4-basic"
    st = _settings(name)
    seen = _spy(monkeypatch)
    orig = R.verify_output

    def damaged(tmp, *a, **kw):
        damage(tmp, st)
        return orig(tmp, *a, **kw)

    monkeypatch.setattr(R, "verify_output", damaged)
    v = rebuild(str(store_root(name)), str(tmp_path / "out"), st, RebuildOptions(mapper=LocalMap(1), sync=False)).verify
    key = "quick_cq" if part == "consumequeue" else "quick_index"
    assert seen[key] is None
    other = "quick_index" if part == "consumequeue" else "quick_cq"
    assert seen[other] is not None
    assert v["ok"] is False and v[part]["ok"] is False
    assert v[part]["codes"] == codes and v[part]["problems"] == sum(codes.values())


def _repair(tmp_path, name: str):
    from rmqdump.builders.repair import RepairOptions, repair

    store = store_root(name)
    return repair(str(store), str(tmp_path / "out"), resolve(str(store)), RepairOptions(mapper=LocalMap(2), sync=False))


def test_a_repairs_queue_with_a_hole_is_analysed_alone_with_the_full_analysis_result(tmp_path, monkeypatch):
    """Repair leaves a hole where it destroyed a message (rmq53-damaged-bodycrc: orders/1, the damaged record's
    queue): the proof takes every other queue, the analysis that one only, and together they give the full analysis."""
    name = "rmq53-damaged-bodycrc"
    (hit,) = json.loads((store_root(name).parent / "damage.json").read_text())["recordsHit"]
    seen, calls = {}, []
    orig = ScanColumns.quick_cq

    def spied(self, root, units, analyzed=frozenset()):
        calls.append(set(analyzed))
        seen["quick_cq"] = orig(self, root, units, analyzed)
        return seen["quick_cq"]

    monkeypatch.setattr(ScanColumns, "quick_cq", spied)
    scoped = _repair(tmp_path / "a", name).rebuild.verify
    assert calls == [{(hit["topic"], hit["queueId"])}] and seen["quick_cq"] is not None  # the hole's queue only left out
    monkeypatch.setattr(R, "_quick_checks", lambda *a: {})
    full = _repair(tmp_path / "b", name).rebuild.verify
    assert scoped == full
    # the broker's units, less the one destroyed, and the filler at its queue offset seen as such
    units = sum(1 for m in manifest(name) if m["sysFlag"] & 0xC in (0, 8))
    assert scoped["consumequeue"]["ok"] is True and scoped["consumequeue"]["codes"] == {}
    assert scoped["consumequeue"]["units"] == units and scoped["consumequeue"]["at_filler_units"]


@pytest.mark.parametrize("which", ["hole_queue", "other_queue"])
def test_a_wrong_unit_beside_a_repairs_hole_is_found_in_either_queue(tmp_path, monkeypatch, which):
    """With the hole's queue analysed alone, a unit moved by one byte is still named: in that queue by its analysis,
    in another by the proof failing over to the full analysis."""
    name = "rmq53-damaged-bodycrc"
    (hit,) = json.loads((store_root(name).parent / "damage.json").read_text())["recordsHit"]
    orig = R.verify_output

    def damaged(tmp, *a, **kw):
        base = os.path.join(tmp, "consumequeue")
        queues = [(t, q) for t in sorted(os.listdir(base)) for q in sorted(os.listdir(os.path.join(base, t)))]
        hole = (hit["topic"], str(hit["queueId"]))
        t, q = hole if which == "hole_queue" else next(x for x in queues if x != hole)
        qdir = os.path.join(base, t, q)
        path = os.path.join(qdir, sorted(os.listdir(qdir))[0])
        u = np.fromfile(path, dtype=UNIT_DTYPE)
        assert u["size"][2] > 0 and u["size"][2] != 0x7FFFFFFF  # a real unit, not the filler
        u["commit_log_offset"][2] += 1
        u.tofile(path)
        return orig(tmp, *a, **kw)

    monkeypatch.setattr(R, "verify_output", damaged)  # repair's self-check (rebuild.self_check), over its copy
    v = _repair(tmp_path, name).rebuild.verify
    assert v["ok"] is False and v["consumequeue"]["ok"] is False
    assert v["consumequeue"]["codes"] == {"cq_not_message_start": 1, "cq_missing_unit": 1}


def test_a_rebuild_of_two_topics_counts_the_queues_and_units_of_both(tmp_path):
    """Each --topic is analysed in its own pass; the self-check's counts are those of every topic rebuilt (the broker's)."""
    name = "rmq4-basic"
    topics = ["TopicTest", "orders"]
    opts = RebuildOptions(mapper=LocalMap(2), sync=False, topics=frozenset(topics), only=("consumequeue",))
    v = rebuild(str(store_root(name)), str(tmp_path / "out"), _settings(name), opts).verify["consumequeue"]
    queued = [m for m in manifest(name) if m["topic"] in topics and m["sysFlag"] & 0xC in (0, 8)]
    assert v["ok"] is True
    assert v["queues"] == len({(m["topic"], m["queueId"]) for m in queued})
    assert v["units"] == len(queued)


DAMAGED = ["rmq53-damaged-midfile-magic", "rmq53-damaged-size-field", "rmq53-damaged-zeroed-page", "rmq53-damaged-unscanned-magic"]


@pytest.mark.parametrize("name", DAMAGED)
def test_on_a_damaged_commitlog_the_quick_proof_gives_the_analyses_result(tmp_path, monkeypatch, name):
    """The CommitLog's own damage does not stop the proof (it is about the files written): where it is taken, its
    result is the analyses', the damage counted as they count it. Settings: each store's README.txt."""
    st = resolve(str(store_root(name)), cq_units=300, hash_slots=500, index_entries=2000)  # mappedFileSizeConsumeQueue=6000, maxHashSlotNum, maxIndexNum
    hit = {(r["topic"], r["queueId"]) for r in json.loads((store_root(name).parent / "damage.json").read_text())["recordsHit"]}
    opts = RebuildOptions(mapper=LocalMap(2), sync=False)
    seen = _spy(monkeypatch)
    quick = rebuild(str(store_root(name)), str(tmp_path / "quick"), st, opts)
    assert quick.damaged  # the scan met the damage
    assert seen["quick_index"] is not None  # the index proof is taken whatever the damage
    # the queues proof too, when the destroyed records left holes in a few queues (they are analysed alone)
    assert (seen["quick_cq"] is not None) == (len(hit) <= R.SCOPED_QUEUES), (hit, seen["quick_cq"])
    monkeypatch.setattr(R, "_quick_checks", lambda *a: {})
    full = rebuild(str(store_root(name)), str(tmp_path / "full"), st, opts)
    assert quick.verify == full.verify
    assert quick.verify["ok"] is True and quick.verify["index"]["problems"] >= 1


def test_several_queues_analysed_alone_count_the_commitlogs_damage_once(tmp_path, monkeypatch):
    """rmq53-damaged-zeroed-page: the zeroed page destroyed records of several queues; each is analysed alone (the
    limit raised to take them all), and together with the proof they give the full analysis' result."""
    name = "rmq53-damaged-zeroed-page"
    st = resolve(str(store_root(name)), cq_units=300, hash_slots=500, index_entries=2000)
    hit = {(r["topic"], r["queueId"]) for r in json.loads((store_root(name).parent / "damage.json").read_text())["recordsHit"]}
    assert len(hit) > 1
    monkeypatch.setattr(R, "SCOPED_QUEUES", len(hit))
    seen = _spy(monkeypatch)
    opts = RebuildOptions(mapper=LocalMap(2), sync=False)
    quick = rebuild(str(store_root(name)), str(tmp_path / "quick"), st, opts).verify
    assert seen["quick_cq"] is not None
    monkeypatch.setattr(R, "_quick_checks", lambda *a: {})
    assert quick == rebuild(str(store_root(name)), str(tmp_path / "full"), st, opts).verify
