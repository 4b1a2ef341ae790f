"""The text kernels count no array references: numba's counting (a call per array each helper takes, twice) was a
third of a JSON listing's CPU. Read from what numba compiles for every entry point, and from the module the
install built."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from rmqdump.text.batches import TEXT

ROOT = Path(__file__).resolve().parent.parent

# In a fresh process and a fresh numba cache (numba shows no code it took from its cache): each entry point's
# LLVM code, every helper it calls included, and how many reference-counting calls it holds.
PROBE = """
import json, re, sys
from rmqdump.scan.aot import _jit
from rmqdump.text.batches import TEXT
kernel = _jit(TEXT)
counts = {}
for name, sig in TEXT.signatures().items():
    fn = getattr(kernel, name)
    fn.compile(sig.args)
    ir = fn.inspect_llvm(sig.args)
    counts[name] = len(re.findall(r"call void @NRT_(?:incref|decref)", ir))
print(json.dumps(counts))
"""


def test_no_entry_point_counts_references(tmp_path):
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba"), "RMQDUMP_CACHE_DIR": str(tmp_path / "cache")}
    p = subprocess.run([sys.executable, "-c", PROBE], env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    counts = json.loads(p.stdout.strip().splitlines()[-1])
    assert counts == dict.fromkeys(TEXT.signatures(), 0)


def test_the_installed_module_holds_no_reference_counting():
    """The package's build compiles the set without numba's runtime (KernelSet.nrt): no counting function in it."""
    built = Path(TEXT.installed).read_bytes()
    assert not re.search(rb"NRT_(incref|decref|MemInfo)", built)
