"""A command starts with what it uses and nothing more: start-up time is what a small store's run is made of.

Each case runs the console script's main() as a process and, at its exit, lists which of the heavy packages were
loaded. Scanning commands load numpy and numba (the kernel), never the Parquet, SQL, plotting or Spark stacks;
commands that scan no records never load numba; the version and help load neither numpy nor the kernel. Nor does a
command load what this store does not call for (rich for a command that prints plain lines, the journeys for `info`
on a store without lifecycle queues, the compaction checks without compaction/), and only the command named on the
line is imported and built.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import REAL, jsonl, manifest, store_root

# numpy.ma: numpy imports it on the first np.unique (or union1d, isin) and pyarrow on the first pa.array of a numpy array
HEAVY = ("numba", "numpy", "numpy.ma", "pyarrow", "pandas", "duckdb", "pyspark", "pydantic", "rocksdict", "lz4", "zstandard", "multiprocessing")
# what a scanning command on a store without compaction topics or lifecycle queues does not use
RARE = (
    "rich",
    "rmqdump.cli.commands.compaction",
    "rmqdump.cli.commands.report",
    "rmqdump.checks.compactionverify",
    "rmqdump.query.compaction",
    "rmqdump.query.lifecyclesummary",
    "rmqdump.query.storejourneys",
    "rmqdump.query.journeys",
    "rmqdump.query.delays",
    "rmqdump.query.pops",
    "rmqdump.checks.journey",
    "pyarrow.compute",
)
# the store model and the queue readers only it uses: a CommitLog listing reads no queue (rmqdump.readers.readable)
STORE_MODEL = ("rmqdump.readers.store", "rmqdump.readers.rocksdbcq", "rmqdump.readers.batchcq", "rmqdump.readers.cqext", "rmqdump.readers.checkpoint")

# run main() (what `rmqdump` runs) and say, at exit, the watched modules it loaded, the commands typer was given,
# the programs it started, its threads, and the garbage collector's state and collections
_PROBE = """
import atexit, gc, json, os, sys
watched = sys.argv[1].split(",")
collections = []
gc.callbacks.append(lambda phase, info: collections.append(info["generation"]) if phase == "start" else None)
spawned = []
sys.addaudithook(lambda event, args: spawned.append([str(a) for a in args[1]]) if event == "subprocess.Popen" else None)
def said():
    from rmqdump.cli.app import app
    built = [c.name for c in app.registered_commands] + [g.name for g in app.registered_groups]
    loaded = [m for m in watched if m in sys.modules]
    threads = len(os.listdir("/proc/self/task")) if os.path.isdir("/proc/self/task") else None
    sys.stderr.write("probe: " + json.dumps({"built": built, "loaded": loaded, "spawned": spawned, "threads": threads, "gc": [gc.isenabled(), gc.get_freeze_count(), collections]}) + "\\n")
atexit.register(said)
sys.argv = ["rmqdump", *sys.argv[2:]]
from rmqdump.cli.entry import main
main()
"""


def probe(*args: str, env: dict | None = None) -> tuple[subprocess.CompletedProcess, set[str], set[str], list[list[str]]]:
    """(the process, the watched modules it loaded, the commands typer built, the programs it started)."""
    r = subprocess.run([sys.executable, "-c", _PROBE, ",".join(HEAVY + RARE + STORE_MODEL), *map(str, args)], capture_output=True, text=True, timeout=300, env=env)
    last = r.stderr.splitlines()[-1] if r.stderr else ""
    assert last.startswith("probe: "), r.stderr
    said = json.loads(last[len("probe: ") :])
    probe.threads, probe.gc = said["threads"], said["gc"]
    return r, set(said["loaded"]), set(said["built"]), said["spawned"]


def loaded(*args: str) -> tuple[subprocess.CompletedProcess, set[str]]:
    r, mods, _, _ = probe(*args)
    return r, mods & set(HEAVY)


STORE = store_root("rmq4-basic")
FIRST = STORE / "commitlog" / "00000000000000000000"


def scan_modules() -> set[str]:
    """numpy, and numba only where neither the install nor the user's cache holds the ahead-of-time kernel
    (rmqdump.scan.aot)."""
    import os

    from rmqdump.scan.aot import SCAN, SUFFIX, aot_dir

    built = os.path.exists(SCAN.installed) or os.path.exists(os.path.join(aot_dir(), SCAN.module + SUFFIX))
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
    assert mods == scan_modules()  # the text kernels come with the scan kernel: compiled at install, else by numba


@pytest.mark.parametrize("where", [STORE, FIRST])
def test_a_commitlog_listing_loads_no_queue_reader(where):
    """Given a store root, the listing proves its queue and index files readable, and reads none of them."""
    r, mods, _, _ = probe("commitlog", where, "-n", "3", "-f", "jsonl")
    assert r.returncode == 0
    rows = [row for row in jsonl(r.stdout) if row["kind"] == "message"]
    assert [row["msg_id"] for row in rows] == [m["msgId"] for m in sorted(manifest("rmq4-basic"), key=lambda m: m["wroteOffset"])[:3]]
    assert not mods & set(STORE_MODEL), mods & set(STORE_MODEL)


def test_offsets_scans_nothing_so_loads_no_kernel():
    r, mods = loaded("offsets", "-s", STORE)
    assert r.returncode in (0, 1)
    assert "numba" not in mods and not mods & {"pyarrow", "pandas", "duckdb", "pyspark"}


@pytest.mark.parametrize("args", [["--version"], ["--help"], ["info", "--help"]])
def test_version_and_help_load_nothing_heavy(args):
    r, mods = loaded(*args)
    assert r.returncode == 0 and r.stdout
    assert mods == set()


def test_info_on_a_store_without_lifecycle_queues_loads_no_journeys_nor_compaction_view():
    r, mods, built, _ = probe("info", "-s", STORE, "-f", "jsonl")
    assert r.returncode == 0
    rows = jsonl(r.stdout)
    assert [q["units"] for q in rows if q["kind"] == "queue"] and sum(q["units"] for q in rows if q["kind"] == "queue") == len(manifest("rmq4-basic"))
    assert not any(row["kind"] == "lifecycle" for row in rows)
    assert not mods & set(RARE[1:])  # rich is not loaded by JSON Lines either
    assert built == {"info"}


def test_info_on_a_lifecycle_store_still_loads_and_counts_them():
    # the control: the modules left out above are loaded where the store calls for them, and answer as the broker wrote
    msgs = json.loads((REAL / "rmq53-lifecycle" / "truth.json").read_text())["messages"]
    r, mods, _, _ = probe("info", "-s", store_root("rmq53-lifecycle"), "-f", "jsonl")
    life = next(row for row in jsonl(r.stdout) if row["kind"] == "lifecycle")
    assert life["dead_letter_messages"] == sum(m.get("inDLQ", False) for m in msgs)
    assert {"rmqdump.query.lifecyclesummary", "rmqdump.query.storejourneys"} <= mods


def test_cq_verify_prints_its_summary_without_rich_nor_the_compaction_checks():
    r, mods, built, _ = probe("cq", "verify", "-s", STORE)
    assert r.returncode == 0
    n = len(manifest("rmq4-basic"))
    assert r.stderr.splitlines()[0] == f"12 queues, {n} units, {n} messages: 0 problems"
    assert not mods & set(RARE)
    assert built == {"cq"}


@pytest.mark.parametrize("args", [["cq", "verify"], ["info", "-f", "jsonl"], ["index", "lookup", "k1_0"]])
def test_a_scan_starts_no_program_but_the_kernel_build(args):
    """Finding the CRC library asks ldconfig (a subprocess) only when its usual soname does not load."""
    r, _, _, spawned = probe(*args, "-s", STORE)
    assert r.returncode == 0
    assert all(cmd[1:3] == ["-m", "rmqdump.scan.aot"] for cmd in spawned), spawned  # the one-off ahead-of-time build, if not built yet


@pytest.mark.skipif(not os.path.isdir("/proc/self/task") and not os.environ.get("CI"), reason="threads counted in /proc")  # CI: Linux, so it runs
def test_a_serial_scan_runs_in_one_thread():
    """A small store is scanned by the main thread alone: numpy's BLAS starts no pool (rmqdump does no linear algebra),
    unless the user set its thread count."""
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")}
    r, mods, _, _ = probe("cq", "verify", "-s", STORE, env=env)
    assert r.returncode == 0 and "numpy" in mods
    assert probe.threads == 1
    r, _, _, _ = probe("cq", "verify", "-s", STORE, env={**env, "OPENBLAS_NUM_THREADS": "2"})
    assert r.returncode == 0 and probe.threads == 2  # the user's setting kept: the pool's second thread


def test_cq_verify_on_a_compaction_store_still_checks_its_compaction_topics():
    r, mods, _, _ = probe("cq", "verify", "-s", store_root("rmq53-compaction"), "-f", "jsonl")
    assert r.returncode in (0, 1)
    assert "rmqdump.checks.compactionverify" in mods


def test_a_word_that_is_no_command_keeps_every_command():
    from rmqdump.cli.commands import MODULES

    r, _, built, _ = probe("cqx")
    assert r.returncode == 2 and "Did you mean 'cq'?" in r.stderr
    assert built == set(MODULES)  # each command module registers the command of its name
    r, _, built, _ = probe("--help")
    assert r.returncode == 0 and all(f"  {m}" in r.stdout for m in MODULES)
    assert built == set(MODULES)


LINES = [
    "12 queues, 3000 units, 3000 messages: 0 problems",
    "  TopicTest/3: 12 units point past the data (cq_dangling)",
    "[bold]Lifecycle[/bold] 0 delayed",
    "a [link] that is no tag, and \\[escaped]",
    "an emoji code :smile: and :not_one: and a time 10:20:30",
    "tab\tand bell\a",
    "wide 中文 and é, " + "long " * 80,
    "",
]


@pytest.mark.parametrize("markup", [None, False, True])
@pytest.mark.parametrize("stderr", [False, True])
def test_a_plain_line_is_written_as_rich_writes_it(capsys, monkeypatch, markup, stderr):
    """render's consoles write a plain line themselves (rich not imported): byte for byte what rich's console writes."""
    import io

    from rich.console import Console

    from rmqdump.cli import render

    monkeypatch.setenv("COLUMNS", "80")
    kw = {} if markup is None else {"markup": markup}
    for line in LINES:
        mine = render._Console(stderr=stderr)
        mine.print(line, highlight=False, **kw)
        got = capsys.readouterr()
        buf = io.StringIO()
        Console(file=buf, highlight=False, soft_wrap=True, width=80).print(line, highlight=False, **kw)
        assert (got.err if stderr else got.out) == buf.getvalue(), line
        if line.isprintable() and ":" not in line and (markup is False or "[" not in line):
            assert mine.made is None, line  # written without making a rich console


@pytest.mark.parametrize("args", [["cq", "verify"], ["info"]])
def test_the_command_line_loads_with_the_collector_off_and_runs_with_it_on(args):
    """Importing the command line makes tens of thousands of objects that live as long as the process: the console
    script loads it with the garbage collector off (no full collection walks them, 20-25 ms of a small store's
    command), then turns it on with those objects frozen, for whatever the run itself makes."""
    r, _, _, _ = probe(*args, "-s", STORE)
    assert r.returncode == 0
    enabled, frozen, generations = probe.gc
    assert enabled and frozen > 10_000
    assert 2 not in generations, generations  # no full collection: what was loaded is never walked again


def test_export_and_salvage_build_their_columns_without_pyarrow_compute(tmp_path):
    """Importing pyarrow.compute is 60 ms of a small export: the columns spelled from a few values (hosts, topics,
    flag names, transactions, salvage's reasons) are copied by compiled code instead. What they write is checked
    against the manifests by tests/test_export.py and tests/test_salvage.py."""
    r, mods, _, _ = probe("export", "-s", STORE, "-o", tmp_path / "exported")
    assert r.returncode == 0 and "pyarrow" in mods and "pyarrow.compute" not in mods
    assert "numpy.ma" not in mods  # no pa.array over a numpy array, no np.unique: either imports it (10-20 ms)
    import pyarrow.dataset as ds

    table = ds.dataset(tmp_path / "exported", format="parquet", partitioning="hive").to_table()
    want = manifest("rmq4-basic")
    assert table.num_rows == len(want)
    by_offset = {m["wroteOffset"]: m for m in want}
    rows = table.select(["phys_offset", "topic", "born_host", "store_host", "sys_flag_names", "transaction"]).to_pylist()
    assert sorted(r["phys_offset"] for r in rows) == sorted(by_offset)
    for row in rows:
        m = by_offset[row["phys_offset"]]
        assert (row["topic"], row["born_host"], row["store_host"]) == (m["topic"], m["bornHost"], m["storeHost"])
        assert m["sysFlag"] == 0 and (row["sys_flag_names"], row["transaction"]) == ([], "none")  # rmq4-basic: plain messages
    r, mods, _, _ = probe("salvage", store_root("rmq53-damaged-midfile-magic"), "--out", tmp_path / "salvaged")
    assert r.returncode == 1 and "pyarrow" in mods and "pyarrow.compute" not in mods  # 1: messages to re-send
    assert "numpy.ma" not in mods
