"""The console script widens a stdout pipe (rmqdump.common.pipes): checked from the reader's side of a real pipe after
a real run, against what Linux allows (its pipe-max-size, or more for a privileged process); a file or a terminal is
left alone, and the listing read through the pipe is every record the broker wrote."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT, manifest, store_root

from rmqdump.common import pipes

if sys.platform == "linux" or os.environ.get("CI"):
    import fcntl
# CI: Linux, so it runs (elsewhere under CI it fails rather than skip)
pytestmark = pytest.mark.skipif(sys.platform != "linux" and not os.environ.get("CI"), reason="pipe sizes are Linux's (F_SETPIPE_SZ)")
DEFAULT = 1 << 16  # a Linux pipe's buffer before anyone changes it


def allowed(size: int) -> int:
    """The buffer Linux gives a pipe asked for `size` bytes: up to pipe-max-size, beyond it only with CAP_SYS_RESOURCE."""
    with open("/proc/sys/fs/pipe-max-size") as f:
        limit = int(f.read())
    return size if os.geteuid() == 0 or size <= limit else limit


def test_a_listing_into_a_pipe_widens_it_and_writes_every_record():
    r, w = os.pipe()
    assert fcntl.fcntl(r, fcntl.F_GETPIPE_SZ) == DEFAULT
    p = subprocess.Popen([sys.executable, "-m", "rmqdump", "commitlog", str(store_root("rmq4-basic")), "-f", "jsonl"], stdout=w, cwd=ROOT)
    os.close(w)
    chunks = []
    while chunk := os.read(r, 1 << 16):
        chunks.append(chunk)
    assert p.wait() == 0
    assert fcntl.fcntl(r, fcntl.F_GETPIPE_SZ) == allowed(pipes.WIDE)
    os.close(r)
    rows = [json.loads(line) for line in b"".join(chunks).decode().splitlines()]
    got = sorted((row["phys_offset"], row["topic"], row["queue_id"], row["body_crc"], row["uniq_key"]) for row in rows if row.get("kind") == "message")
    assert got == sorted((m["wroteOffset"], m["topic"], m["queueId"], m["bodyCRC"], m["uniqKey"]) for m in manifest("rmq4-basic"))


def test_only_a_pipe_is_widened(tmp_path):
    r, w = os.pipe()
    try:
        assert pipes.widen(w) == allowed(pipes.WIDE) == fcntl.fcntl(r, fcntl.F_GETPIPE_SZ)
        assert pipes.widen(w, 1 << 17) == 1 << 17  # a size asked for is the size given (a power of two of pages)
    finally:
        os.close(r)
        os.close(w)
    with open(tmp_path / "out", "wb") as f:
        assert pipes.widen(f.fileno()) is None
    assert pipes.widen(w) is None  # closed: the error is not the caller's
