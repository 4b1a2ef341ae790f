"""Bad invocations and bad input end in one line on stderr and exit 2, for every command, never a traceback."""

from __future__ import annotations

import pytest
from conftest import run_proc, store_root

STORE = str(store_root("rmq4-basic"))

CASES = [
    ["commitlog"],
    ["nosuch"],
    ["commitlog", STORE, "--format", "xml"],
    ["cq", "verify", "-s", STORE, "--engine", "foo"],
    ["cq", "verify", "-s", "/nonexistent"],
    ["cq", "seek", "-s", STORE, "--topic", "orders", "--queue", "0", "--time", "yesterday"],
    ["info", "-s", "/tmp"],
    ["offsets", "-s", "/nonexistent"],
    ["index", "lookup", "k", "-s", "/tmp"],
    ["index", "dump", STORE + "/checkpoint"],
    ["msgid", "XYZ"],
    ["rebuild", STORE, "--out", STORE + "/out"],
    ["export", "-s", "/nonexistent", "-o", "/tmp/never-written"],
    ["info", "-s", STORE, "--broker-version", "6.0"],
    ["salvage", STORE, "--out", "/tmp/never-written", "--broker-version", "latest"],
]


@pytest.mark.parametrize("args", CASES, ids=[" ".join(a[:2]) + f"#{i}" for i, a in enumerate(CASES)])
def test_one_line_exit_2(args):
    r = run_proc(*args)
    assert r.returncode == 2, (args, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rmqdump: "), r.stderr
    assert "Traceback" not in r.stderr + r.stdout


def test_a_listing_into_a_full_disk_is_one_line_and_exit_2():
    """Standard output on a full file system (/dev/full fails every write with ENOSPC): output_no_space, one line."""
    import subprocess
    import sys

    seg = store_root("rmq4-basic") / "commitlog" / f"{0:020d}"
    with open("/dev/full", "w") as full:
        r = subprocess.run([sys.executable, "-m", "rmqdump", "commitlog", str(seg), "-f", "jsonl"], stdout=full, stderr=subprocess.PIPE, text=True)
    assert r.returncode == 2
    assert r.stderr == "rmqdump: output_no_space: standard output or a temporary file: No space left on device\n"
