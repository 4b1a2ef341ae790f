"""Shared test helpers: the real stores in fixtures/real, their manifests, CLI runners."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path

import codes
import pytest
from codes import OBSERVED, observe_output
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parent.parent

if os.environ.get("PYTEST_XDIST_WORKER"):  # xdist gives its workers an 80x24 terminal: the CLI runs here assume none (a pipe)
    for _var in ("COLUMNS", "LINES"):
        os.environ.pop(_var, None)
REAL = ROOT / "fixtures" / "real"
STORES = ["rmq4-basic", "rmq4-flags", "rmq5-basic", "rmq53-v2", "rmq4-crash"]
HEALTHY = ["rmq4-basic", "rmq4-flags", "rmq5-basic", "rmq53-v2"]

# The settings each store was written with (its README.txt).
SETTINGS = {
    "rmq4-basic": {"commitlog": 131072, "cq_units": 120, "hash_slots": 500, "index_entries": 2000},
    "rmq4-flags": {"commitlog": 65536, "cq_units": 100, "hash_slots": 64, "index_entries": 256},
    "rmq5-basic": {"commitlog": 131072, "cq_units": 120, "hash_slots": 500, "index_entries": 2000},
    "rmq53-v2": {"commitlog": 131072, "cq_units": 120, "hash_slots": 500, "index_entries": 2000},
    "rmq4-crash": {"commitlog": 131072, "cq_units": 120, "hash_slots": 500, "index_entries": 2000},
}


def store_root(name: str) -> Path:
    return REAL / name / "store"


@cache
def manifest(name: str) -> tuple[dict, ...]:
    with open(REAL / name / "manifest.jsonl", encoding="utf-8") as f:
        return tuple(json.loads(line) for line in f)


def copy_store(name: str, dest: Path) -> Path:
    """A writable copy of a real store's root, for damage tests."""
    out = dest / name
    shutil.copytree(store_root(name), out)
    return out


ORACLE = ROOT.parent / "shared" / "broker-oracle" / "recover"  # Apache RocketMQ 5.3.3's own recovery, beside the checkout


def need_oracle() -> None:
    """Fail under CI, skip elsewhere, when the broker oracle is not beside the checkout."""
    if not ORACLE.exists():
        if os.environ.get("CI"):
            pytest.fail(f"the broker oracle is missing at {ORACLE} (CI has ../shared beside the clone)")
        pytest.skip(f"the broker oracle is not at {ORACLE}")


def need_pyspark():
    """pyspark, for the Spark tests: fail under CI (where a missing pyspark means the Spark tests never ran), skip
    elsewhere; the one place that decides, as need_oracle does for the broker oracle."""
    try:
        import pyspark
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("pyspark is not installed: CI runs the Spark tests (pip install -e '.[test,spark]')", pytrace=False)
        pytest.skip("pyspark is not installed", allow_module_level=True)
    return pyspark


def broker_recovery(store: Path, out: Path) -> dict:
    """What the broker's own recovery does to a copy of `store`: the oracle's JSON (its README describes each field)."""
    need_oracle()
    env = {**os.environ, "PYTHON": sys.executable}  # a python with pyspark: its jars give the oracle netty and the rest
    p = subprocess.run([str(ORACLE), str(store), str(out)], capture_output=True, text=True, env=env, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(out.read_text(encoding="utf-8"))


def unpack_store(name: str, dest: Path) -> Path:
    """A writable copy of a real store shipped as NAME/store.tar.gz (DLedger, timer), unpacked into dest; its root."""
    import tarfile

    with tarfile.open(REAL / name / "store.tar.gz") as t:
        t.extractall(dest, filter="data")
    return dest / "store"


_SPARK: list = []  # the run's local[2] session, once started


def shared_spark():
    """The run's one real SparkSession on local[2]: started on first use (again if something stopped it), stopped when
    the run ends. Starting one costs seconds, and every module of Spark tests wants the same; an `--engine spark`
    command run in-process joins it, as a command joins any running session."""
    if not _SPARK or _SPARK[0].sparkContext._jsc is None or _SPARK[0].sparkContext._jsc.sc().isStopped():
        from rmqdump.engines.spark.session import build_session

        _SPARK[:] = [build_session("local[2]", ["spark.sql.shuffle.partitions=4"], driver_memory="1g")]
    return _SPARK[0]


@pytest.fixture(scope="module")
def spark():
    """The run's local[2] SparkSession (shared_spark)."""
    return shared_spark()


def stop_shared_spark() -> None:
    """Stop the run's local session (a process has one SparkContext: tests on a cluster need theirs)."""
    if _SPARK:
        _SPARK.pop().stop()


def patch(path: Path, pos: int, data: bytes) -> None:
    """Overwrite bytes of a (copied) store file in place."""
    with open(path, "r+b") as f:
        f.seek(pos)
        f.write(data)


def flip(path: Path, pos: int, mask: int = 0x01) -> None:
    """Flip the bits of `mask` in one byte of a (copied) store file."""
    with open(path, "r+b") as f:
        f.seek(pos)
        b = f.read(1)[0]
        f.seek(pos)
        f.write(bytes([b ^ mask]))


# --- problem codes observed during the run (tests/codes.py judges them when the run ends) ---


def pytest_configure(config) -> None:
    """Record the code of every Problem and InputError made in this process, whatever made it."""
    from rmqdump.common import problems

    init_p, init_e = problems.Problem.__init__, problems.InputError.__init__

    def problem_init(self, code, *a, **kw):
        OBSERVED.add(code)
        init_p(self, code, *a, **kw)

    def error_init(self, code, *a, **kw):
        OBSERVED.add(code)
        init_e(self, code, *a, **kw)

    problems.Problem.__init__ = problem_init
    problems.InputError.__init__ = error_init


def pytest_collection_finish(session) -> None:
    """Whether this run is the whole suite (every test file has a selected test), known after -k and -m deselect."""
    files = {Path(i.fspath).name for i in session.items}
    session.config._rmqdump_whole_suite = {p.name for p in Path(__file__).parent.glob("test_*.py")} <= files


_RUN = codes.Run()  # the codes of every process that ran tests: this one, or each xdist worker as it finishes


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    """An xdist worker is done: its codes join the run's."""
    _RUN.add(getattr(node, "workeroutput", {}).get("rmqdump_codes"))


def pytest_sessionfinish(session, exitstatus) -> None:
    """Stop the shared Spark session; then a worker hands its codes to the controller, and the process that saw the
    whole run (the controller, or the only process) judges them: a passing whole run fails if a code went unmade."""
    stop_shared_spark()
    whole = getattr(session.config, "_rmqdump_whole_suite", None)
    worker = getattr(session.config, "workeroutput", None)
    if worker is not None:
        worker["rmqdump_codes"] = codes.this_process(bool(whole))
        return
    if whole is not None:  # this process collected and ran the tests itself
        _RUN.add(codes.this_process(whole))
    failures = _RUN.failures() if _RUN.processes else ["no test process handed over the codes it observed"]
    if exitstatus == pytest.ExitCode.OK and session.testscollected and failures:
        tr = session.config.pluginmanager.get_plugin("terminalreporter")
        if tr is not None:
            tr.write("\n")
            tr.write_sep("=", f"problem codes guard: {len(failures)} failures over {_RUN.processes} test processes", red=True)
            for line in failures:
                tr.write_line(line)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def run(*args: str):
    """Run the CLI in-process; returns click's Result (exit_code, stdout, stderr)."""
    from rmqdump.cli.app import app

    r = CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=False)
    observe_output(r.stdout, r.stderr)
    return r


def run_proc(*args: str, **kw) -> subprocess.CompletedProcess:
    """Run the CLI as a separate process, as an operator would."""
    r = subprocess.run([sys.executable, "-m", "rmqdump", *map(str, args)], capture_output=True, text=True, **kw)
    observe_output(r.stdout, r.stderr)
    return r


@pytest.fixture(scope="session")
def warm_kernels() -> None:
    """The user cache holds the compiled kernels (a process that compiles says so on stderr): for tests that want a
    process's stderr silent, whatever ran before them."""
    first = store_root("rmq4-basic") / "commitlog" / "00000000000000000000"
    for args in (["info", "-s", store_root("rmq4-basic")], ["commitlog", first, "-n", "1", "-f", "jsonl"]):
        run_proc(*args)


def jsonl(text: str) -> list[dict]:
    """JSON Lines split on newlines only: str.splitlines would also split at U+2028 or U+0085 inside a body."""
    return [json.loads(line) for line in text.split("\n") if line.strip()]


@pytest.fixture(params=STORES)
def any_store(request) -> str:
    return request.param


@pytest.fixture(params=HEALTHY)
def healthy_store(request) -> str:
    return request.param


def text_calls(monkeypatch, module) -> list[list[int]]:
    """Each call `module` makes of its json_text (rmqdump.text.lines): the sizes of the records it was given."""
    calls: list[list[int]] = []
    real = module.json_text

    def spy(b, rows, *a, **k):
        calls.append([int(s) for s in b.cols["total_size"][rows]])
        return real(b, rows, *a, **k)

    monkeypatch.setattr(module, "json_text", spy)
    return calls
