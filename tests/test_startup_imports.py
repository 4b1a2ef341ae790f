"""A command starts with what it uses and nothing more: start-up time is what a small store's run is made of.

Each case runs the console script's main() as a process and, at its exit, lists which of the heavy packages were
loaded. Scanning commands load numpy and numba (the kernel), never the Parquet, SQL, plotting or Spark stacks;
commands that scan no records never load numba; the version and help load neither numpy nor the kernel.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import jsonl, manifest, store_root

HEAVY = ("numba", "numpy", "pyarrow", "pandas", "duckdb", "matplotlib", "pyspark", "pydantic", "rocksdict", "lz4", "zstandard")

# run main() (what `rmqdump` runs) and list, at exit, the heavy packages it loaded
_PROBE = """
import atexit, sys
heavy = sys.argv[1].split(",")
atexit.register(lambda: sys.stderr.write("loaded: %s\\n" % " ".join(m for m in heavy if m in sys.modules)))
sys.argv = ["rmqdump", *sys.argv[2:]]
from rmqdump.cli.app import main
main()
"""


def loaded(*args: str) -> tuple[subprocess.CompletedProcess, set[str]]:
    r = subprocess.run([sys.executable, "-c", _PROBE, ",".join(HEAVY), *map(str, args)], capture_output=True, text=True, timeout=300)
    last = [line for line in r.stderr.splitlines() if line.startswith("loaded:")]
    assert last, r.stderr
    return r, set(last[-1].split()[1:])


STORE = store_root("rmq4-basic")
FIRST = STORE / "commitlog" / "00000000000000000000"


def scan_modules() -> set[str]:
    """numpy, and numba only while this install has not built its ahead-of-time kernel (rmqdump.scan.aot)."""
    import importlib.machinery
    import os

    from rmqdump.scan.aot import MODULE, aot_dir

    built = os.path.exists(os.path.join(aot_dir(), MODULE + importlib.machinery.EXTENSION_SUFFIXES[0]))
    return {"numpy"} if built and os.environ.get("RMQDUMP_AOT") != "off" else {"numpy", "numba"}


def test_info_loads_the_kernel_and_nothing_heavier():
    want = scan_modules()
    r, mods = loaded("info", "-s", STORE, "-f", "jsonl")
    assert r.returncode == 0
    clog = next(row for row in jsonl(r.stdout) if row["kind"] == "commitlog")
    assert clog["data_end"] == max(m["wroteOffset"] + m["wroteBytes"] for m in manifest("rmq4-basic"))  # found by the scan
    assert mods == want


def test_cq_verify_loads_the_kernel_and_nothing_heavier():
    want = scan_modules()
    r, mods = loaded("cq", "verify", "-s", STORE)
    assert r.returncode == 0
    assert mods == want


def test_index_lookup_loads_the_kernel_and_nothing_heavier():
    put = next(m for m in manifest("rmq4-basic") if m["keys"])
    want = scan_modules()
    r, mods = loaded("index", "lookup", put["keys"][0], "-s", STORE, "-f", "jsonl")
    assert r.returncode == 0
    assert put["uniqKey"] in {row.get("uniq_key") for row in jsonl(r.stdout)}
    assert mods == want


def test_commitlog_listing_loads_the_kernels_and_nothing_heavier():
    r, mods = loaded("commitlog", FIRST, "-n", "5", "-f", "jsonl")
    assert r.returncode == 0
    rows = [row for row in jsonl(r.stdout) if row["kind"] == "message"]
    assert [row["phys_offset"] for row in rows] == [m["wroteOffset"] for m in sorted(manifest("rmq4-basic"), key=lambda m: m["wroteOffset"])[:5]]
    assert mods == {"numpy", "numba"}  # the text kernels are compiled by numba at run time


def test_offsets_scans_nothing_so_loads_no_kernel():
    r, mods = loaded("offsets", "-s", STORE)
    assert r.returncode in (0, 1)
    assert "numba" not in mods and not mods & {"pyarrow", "pandas", "duckdb", "matplotlib", "pyspark"}


@pytest.mark.parametrize("args", [["--version"], ["--help"], ["info", "--help"]])
def test_version_and_help_load_nothing_heavy(args):
    r, mods = loaded(*args)
    assert r.returncode == 0 and r.stdout
    assert mods == set()
