"""Peak memory of salvage, repair and diff, run as an operator runs them: a process of their own on the biggest
fixture store, its peak resident set read by the kernel (getrusage RUSAGE_CHILDREN of a parent that ran nothing else)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REAL, SETTINGS

LIMIT = 500 << 20  # bytes: the bound the README promises for every command
_PEAK = """
import resource, subprocess, sys
rc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
print(rc.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024, repr(rc.stderr[-500:]))
"""


def biggest_store() -> Path:
    """The fixture store with the most CommitLog data (bytes on disk: preallocated files are sparse), of those shipped
    as directories."""
    roots = [p.parent for p in REAL.glob("**/commitlog") if p.is_dir()]
    return max(roots, key=lambda r: sum(f.stat().st_blocks for f in (r / "commitlog").iterdir()))


def peak(*args) -> tuple[int, int]:
    """(exit code, peak RSS in bytes) of `rmqdump ARGS` in a process of its own."""
    p = subprocess.run([sys.executable, "-c", _PEAK, sys.executable, "-m", "rmqdump", *map(str, args)], capture_output=True, text=True, timeout=600)
    code, rss, err = p.stdout.split(" ", 2)
    assert int(code) in (0, 1), err
    return int(code), int(rss)


@pytest.fixture(scope="module")
def store() -> Path:
    return biggest_store()


@pytest.mark.parametrize("command", ["salvage", "repair", "diff"])
def test_peak_rss_under_500_mb(command, store, tmp_path):
    if command == "diff":
        other = tmp_path / "copy"
        shutil.copytree(store, other)
        args = ["diff", store, other, "--out", tmp_path / "out"]
    else:
        args = [command, store, "--out", tmp_path / "out"]
        s = SETTINGS.get(store.parent.name)
        if command == "repair" and s:  # the index sizes it was written with (its README.txt)
            args += ["--hash-slots", s["hash_slots"], "--index-entries", s["index_entries"]]
    _, rss = peak(*args)
    print(f"{command}: peak RSS {rss >> 20} MiB on {store}")
    assert (tmp_path / "out").exists()
    assert 0 < rss < LIMIT, (command, str(store), rss)
    if command == "salvage":
        assert json.loads((tmp_path / "out" / "manifest.json").read_text())["records_scanned"] > 0  # it read the store
