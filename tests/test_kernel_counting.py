"""The compiled kernels count no array references where they loop: numba's counting (two calls per array a function
takes, each an atomic add) was a third of a JSON listing's CPU and a tenth of an export's. Read from what numba
compiles for every entry point, and from the module the install built."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from rmqdump.scan.aot import SCAN
from rmqdump.text.batches import TEXT

ROOT = Path(__file__).resolve().parent.parent

# In a fresh process and a fresh numba cache (numba shows no code it took from its cache): for each entry point of
# a set, how many reference-counting calls each rmqdump function in its LLVM code holds (the helpers it calls too).
PROBE = """
import json, re, sys
from rmqdump.scan.aot import _jit, declared
kernels = declared(sys.argv[1])
module = _jit(kernels)
counts = {}
for name, sig in kernels.signatures().items():
    fn = getattr(module, name)
    fn.compile(sig.args)
    for body in re.split(r"^define ", fn.inspect_llvm(sig.args), flags=re.M)[1:]:
        symbol = re.match(r'[^@]*@"?([^"(]+)', body).group(1)
        found = re.match(r"_ZN7rmqdump\\d+\\w+?\\d+kernel(\\d+)", symbol)
        if found:  # rmqdump::<package>::kernel::<function>, numba's own wrappers left out
            size = int(found.group(1))
            function = symbol[found.end(): found.end() + size]
            calls = len(re.findall(r"call void @NRT_(?:incref|decref)", body))
            counts[f"{name}:{function}"] = max(calls, counts.get(f"{name}:{function}", 0))
print(json.dumps(counts))
"""


def _counts(kernels, tmp_path) -> dict[str, int]:
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba"), "RMQDUMP_CACHE_DIR": str(tmp_path / "cache")}
    p = subprocess.run([sys.executable, "-c", PROBE, kernels.home], env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_no_text_kernel_counts_references(tmp_path):
    counts = _counts(TEXT, tmp_path)
    assert {k.split(":")[0] for k in counts} == set(TEXT.signatures())  # every entry point was read
    assert {k: v for k, v in counts.items() if v} == {}


def test_scan_kernel_helpers_count_no_references(tmp_path):
    """The scan set allocates its columns, so its entry points count; the functions they call in their loops do not
    (`_room`, which grows an array, is the one that must)."""
    counts = _counts(SCAN, tmp_path)
    helpers = {k: v for k, v in counts.items() if k.split(":")[1] not in {*SCAN.signatures(), "_room"}}
    assert {k.split(":")[1] for k in helpers} >= {"_split_items", "_hash"}  # others (`_put` among them) LLVM took into their callers
    assert {k: v for k, v in helpers.items() if v} == {}


def test_the_installed_text_module_holds_no_reference_counting():
    """The package's build compiles the text set without numba's runtime (KernelSet.nrt): no counting function in it."""
    built = Path(TEXT.installed).read_bytes()
    assert not re.search(rb"NRT_(incref|decref|MemInfo)", built)


def test_every_scan_helper_but_room_is_built_without_counting():
    """Every function of the scan kernel that is not an entry point allocates nothing but `_room`, so each is built
    without numba's runtime. A helper numba inlines at its own level is counted in its caller instead, once per call:
    `_put_key`, inlined into `scan`, counted its two arrays on every index key (9% of the walk with keys)."""
    from numba.core.registry import CPUDispatcher

    import rmqdump.scan.kernel as kernel

    helpers = {
        name: fn.targetoptions
        for name, fn in vars(kernel).items()
        if isinstance(fn, CPUDispatcher) and fn.py_func.__module__ == kernel.__name__ and name not in SCAN.signatures()
    }
    assert {"_put_key", "_hash", "_split_items", "_room"} <= helpers.keys()
    counting = {name for name, opts in helpers.items() if opts.get("_nrt", True) or opts.get("inline") == "always"}
    assert counting == {"_room"}
