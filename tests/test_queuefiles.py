"""The builders' open-file cap: with room for one open file, every queue file still gets every byte the broker wrote.

Each real store below has more queue files than the cap, written interleaved
(dispatch order), so files are closed to make room and reopened; the output
must still equal the broker's files byte for byte.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import test_cq5_rebuild as cq5
from conftest import SETTINGS, jsonl, run, store_root

from rmqdump.builders import queuefiles
from rmqdump.builders.queuefiles import QueueFiles

CASES = {
    # store: (extra rebuild flags, the queue file directories compared with the broker's)
    "rmq4-basic": (
        [
            "--cq-units-per-file",
            str(SETTINGS["rmq4-basic"]["cq_units"]),
            "--hash-slots",
            str(SETTINGS["rmq4-basic"]["hash_slots"]),
            "--index-entries",
            str(SETTINGS["rmq4-basic"]["index_entries"]),
        ],
        ["consumequeue"],
    ),
    "rmq53-batchcq": (["--hash-slots", "500", "--index-entries", "2000"], ["consumequeue", "batchconsumequeue"]),
    "rmq53-lmq": (["--hash-slots", "500", "--index-entries", "2000"], ["consumequeue"]),
}


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def opened(monkeypatch):
    """Cap the builders at one open file; collect every QueueFiles that was closed."""
    monkeypatch.setattr(queuefiles, "MAX_OPEN_FILES", 1)
    seen: list[QueueFiles] = []
    close = QueueFiles.close

    def spy(self):
        seen.append(self)
        close(self)

    monkeypatch.setattr(QueueFiles, "close", spy)
    return seen


@pytest.mark.parametrize("name", sorted(CASES))
def test_more_queue_files_than_the_cap_still_equal_the_brokers(tmp_path, opened, name):
    flags, parts = CASES[name]
    r = run("rebuild", store_root(name), "--out", tmp_path / "out", "-j", "1", "-f", "jsonl", *flags)
    assert r.exit_code == 0, r.stdout + r.stderr
    assert jsonl(r.stdout)[-1]["verify"]["ok"]
    for part in parts:
        ours, theirs = tree(tmp_path / "out" / part), tree(store_root(name) / part)
        assert len(theirs) > 1, part  # more files than the cap
        assert ours == theirs, part
    assert opened and all(f.cap == 1 for f in opened)
    assert sum(f.reopened for f in opened) > 0  # files were closed to make room and written again


def test_ext_files_over_the_cap_hold_the_same_units_as_the_brokers(tmp_path, opened):
    """The broker's ext bytes as far as test_cq5_rebuild proves them, with every file but one closed early."""
    cq5.test_ext_store_with_the_bitmap_length_rebuilds_the_queues_byte_identical_and_claims_no_filter_bits(tmp_path)
    assert len(list((store_root("rmq53-cqext") / "consumequeue_ext").glob("*/*/*"))) > 1
    assert opened and all(f.cap == 1 for f in opened)
    assert sum(f.evicted for f in opened) > 0
