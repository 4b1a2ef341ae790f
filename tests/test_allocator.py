"""The allocator policy set at start-up (rmqdump.common.allocator): a batch's big arrays reuse the pages the
batch before it freed, on the main thread and on a worker thread, instead of new pages faulted in and zeroed.

The model: a round of big arrays (12-20 MiB each, the size of a kernel call's columns and text), every page
touched, then freed; the same round again faults in (almost) nothing when the freed pages are reused. The same
probe with glibc's defaults faults in new pages every round, which shows the probe sees the difference. Each run
is a fresh process: the policy is set before any thread exists, as the console script does.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

PROBE = r"""
import json, resource, sys, threading
from rmqdump.common.allocator import tune
applied = tune() if sys.argv[1] == "tuned" else []
import numpy as np

MB = 1 << 20

def one_round(sizes):
    arrays = [np.empty(s, dtype=np.uint8) for s in sizes]
    for a in arrays:
        a[::4096] = 1  # every page touched, as a kernel writing its output
    del arrays

def faults(sizes):
    one_round(sizes)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    one_round(sizes)
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

out = {}
worker = threading.Thread(target=lambda: out.update(thread=faults([20 * MB, 12 * MB, 16 * MB])))
worker.start()
worker.join()
print(json.dumps({"applied": applied, "main": faults([20 * MB, 12 * MB, 30 * MB, 20 * MB]), "thread": out["thread"]}))
"""
NAMES = ["MALLOC_ARENA_MAX", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"]
STRAY = 16  # faults a round may take for the interpreter's own small allocations
FRESH = 200  # fewer than a round of new pages takes even with 2 MiB transparent huge pages (48-82 MiB a round)


def _probe(mode: str, **env) -> dict:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    r = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, env={**clean, **env}, check=True)
    import json

    return json.loads(r.stdout)


def _glibc() -> None:
    if not sys.platform.startswith("linux") or os.confstr("CS_GNU_LIBC_VERSION") is None:
        if os.environ.get("CI"):
            pytest.fail("CI runs on Linux with glibc: the allocator policy must be tested there")
        pytest.skip("the allocator policy is glibc's")


def test_big_arrays_reuse_freed_pages_on_every_thread():
    _glibc()
    tuned = _probe("tuned")
    assert tuned["applied"] == NAMES
    assert tuned["main"] <= STRAY and tuned["thread"] <= STRAY, tuned
    plain = _probe("plain")
    assert plain["applied"] == []
    assert plain["main"] > FRESH and plain["thread"] > FRESH, plain  # glibc's defaults: new pages every round


def test_a_setting_the_user_made_is_left_alone():
    _glibc()
    r = _probe("tuned", MALLOC_TRIM_THRESHOLD_="4096")
    assert r["applied"] == ["MALLOC_ARENA_MAX", "MALLOC_MMAP_THRESHOLD_"]
    assert r["main"] > FRESH, r  # the user's small trim threshold holds: freed tops go back to the kernel


MAIN = r"""
import sys, threading
from rmqdump.common import allocator
calls = []
allocator.tune = lambda: calls.append(threading.active_count()) or []
from rmqdump.cli import app
app._leave = lambda code: print(calls, code)
sys.argv = ["rmqdump", "--version"]
app.main()
"""


def test_the_console_script_sets_the_policy_first():
    r = subprocess.run([sys.executable, "-c", MAIN], capture_output=True, text=True, check=True)
    assert r.stdout.splitlines()[-1] == "[1] 0"  # called once, while the process has one thread
