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


LIFECYCLE_ID = "7F0000010F5B5FFD2B278C70581C0000"  # rmq53-lifecycle: a message put and delivered (truth.json)
GONE_CASES = [
    ["journey", LIFECYCLE_ID, "-s", str(store_root("rmq53-lifecycle"))],  # a rich table
    ["index", "lookup", "k1_0", "-s", STORE],  # a rich table
    ["commitlog", STORE, "-n", "50"],  # a table
    ["commitlog", STORE, "-f", "jsonl"],  # plain lines
]


@pytest.mark.parametrize("args", GONE_CASES, ids=[" ".join(a[:2]) for a in GONE_CASES])
def test_a_reader_that_goes_away_ends_the_command_quietly_with_exit_0(args, warm_kernels):
    """`rmqdump ... | head -1`: the reader closes the pipe; the command stops writing and exits 0, with nothing on
    stderr, whether rich or a plain write met the closed pipe (rich's own default exits 1: "problems found")."""
    import subprocess
    import sys

    p = subprocess.Popen([sys.executable, "-m", "rmqdump", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.close()  # gone before the first write: every write meets the closed pipe
    err = p.stderr.read().decode()
    assert p.wait(timeout=300) == 0, err
    assert err == ""
