"""Which Python the Spark executors run when rmqdump is started by absolute path from a venv that is
not activated (the `python3` on PATH lacks numpy and pyarrow), and the one-line error when the
executors' Python cannot import what rmqdump needs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REAL, manifest, need_pyspark, observe_output
from test_export import check_against_manifest, read_dataset

from rmqdump.engines.spark import session as S

need_pyspark()

RMQDUMP = Path(sys.executable).parent / "rmqdump"  # the console script of the venv running the tests
STORE = REAL / "rmq4-flags" / "store"


def bare_env(tmp: Path) -> tuple[dict, str]:
    """An environment as a new user's shell has it: no venv activated, and a python3 first on PATH that
    has neither numpy nor pyarrow (a venv made without pip or packages)."""
    bare = tmp / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    py = str(bare / "bin" / "python3")
    probe = subprocess.run([py, "-c", "import pyarrow"], capture_output=True, text=True)
    assert probe.returncode != 0 and "pyarrow" in probe.stderr
    venv_bin = str(Path(sys.executable).parent)
    path = [str(bare / "bin")] + [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p != venv_bin]
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYTHONPATH")}
    env["PATH"] = os.pathsep.join(path)
    assert subprocess.run(["python3", "-c", "import sys; print(sys.prefix)"], env=env, capture_output=True, text=True).stdout.strip() == str(bare)
    return env, py


@pytest.fixture(scope="module")
def bare(tmp_path_factory):
    return bare_env(tmp_path_factory.mktemp("bare"))


def test_masters_on_this_host():
    assert S.on_this_host("local[2]") and S.on_this_host("local")
    assert S.on_this_host("spark://127.0.0.1:7077")
    assert S.on_this_host("spark://localhost:7077,127.0.0.1:7078")
    assert not S.on_this_host("spark://192.0.2.1:7077")  # TEST-NET-1: never this machine
    assert not S.on_this_host("spark://127.0.0.1:7077,192.0.2.1:7077")
    assert not S.on_this_host("yarn") and not S.on_this_host("k8s://https://127.0.0.1:6443")


def test_the_users_python_wins(monkeypatch):
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    assert S.executor_python("local[2]", {}, "auto") == sys.executable
    assert S.executor_python("spark://127.0.0.1:7077", {}, "auto") == sys.executable
    assert S.executor_python("yarn", {}, "auto") is None
    assert S.executor_python("yarn", {}, "venv") == f"./{S.ENV_ALIAS}/bin/python"
    assert S.executor_python("local[2]", {"spark.pyspark.python": "/opt/py/bin/python"}, "venv") == "/opt/py/bin/python"
    monkeypatch.setenv("PYSPARK_PYTHON", "/opt/other/python")
    assert S.executor_python("local[2]", {}, "auto") == "/opt/other/python"
    assert S.executor_python("yarn", {}, "venv") == "/opt/other/python"


def test_executor_modules_follow_the_driver():
    import importlib.util

    mods = S.executor_modules()
    assert {"numpy", "pyarrow"} <= set(mods)
    assert ("numba" in mods) == (importlib.util.find_spec("numba") is not None)


def test_cli_by_absolute_path_on_local_master(bare, tmp_path):
    """python3 on PATH lacks pyarrow; the executors still run the driver's interpreter and the export is exact."""
    env, _ = bare
    out = tmp_path / "out"
    r = subprocess.run(
        [str(RMQDUMP), "export", "-s", str(STORE), "-o", str(out), "--engine", "spark", "--master", "local[2]", "--driver-memory", "1g", "--range-bytes", "16K"],
        capture_output=True,
        text=True,
        env=env,
        cwd=str(tmp_path),
        timeout=600,
    )
    observe_output(r.stdout, r.stderr)  # for the problem codes guard
    assert r.returncode == 0, r.stderr[-3000:]
    # quiet: the JVM's start-up lines and log go to a log file, not the terminal; the one line a first session says
    # while its JVM writes the class archive (once per cache) is rmqdump's own
    assert [x for x in r.stderr.splitlines() if not x.startswith("rmqdump: keeping the Spark JVM's classes for faster starts, once")] == []
    summary = json.loads(r.stdout.strip().splitlines()[-1])
    assert summary["engine"] == "spark" and summary["messages"] == len(manifest("rmq4-flags"))
    check_against_manifest("rmq4-flags", read_dataset(out))


def test_missing_module_is_one_line(bare, tmp_path):
    """PYSPARK_PYTHON, when set, is respected; an executor Python without pyarrow fails before the job, in one line."""
    env, py = bare
    env = dict(env, PYSPARK_PYTHON=py)
    out = tmp_path / "out"
    r = subprocess.run(
        [str(RMQDUMP), "export", "-s", str(STORE), "-o", str(out), "--engine", "spark", "--master", "local[1]", "--driver-memory", "1g"],
        capture_output=True,
        text=True,
        env=env,
        cwd=str(tmp_path),
        timeout=600,
    )
    observe_output(r.stdout, r.stderr)  # for the problem codes guard
    assert r.returncode == 2, r.stderr[-3000:]
    assert "Traceback" not in r.stderr and "ModuleNotFoundError" not in r.stderr.replace("(ModuleNotFoundError: No module named", "")
    ours = r.stderr.splitlines()  # nothing but rmqdump's line: the JVM's start-up chatter goes to its log
    assert len(ours) == 1 and ours[0].startswith("rmqdump: "), r.stderr[-3000:]
    line = ours[0].removeprefix("rmqdump: ")
    assert line.startswith(f"{S.EXECUTOR_MODULE_MISSING}: numpy: executor Python {py} "), line
    assert "also missing: pyarrow" in line and "fix: pip install numpy in that Python" in line and "--ship venv" in line
    assert not out.exists()


def test_ship_venv_outside_a_venv_is_one_error(monkeypatch):
    from rmqdump.common.problems import InputError

    monkeypatch.setattr(S, "_packed", {})
    monkeypatch.setattr(S.sys, "base_prefix", S.sys.prefix)
    monkeypatch.setattr(S, "_in_conda", lambda: False)
    with pytest.raises(InputError) as e:
        S.pack_environment()
    assert e.value.code == S.PACK_FAILED and "--ship zip" in e.value.detail


def test_ship_venv_without_venv_pack_names_it(monkeypatch):
    from rmqdump.common.problems import InputError

    real = S.importlib.import_module
    monkeypatch.setattr(S, "_packed", {})
    monkeypatch.setattr(S, "_in_conda", lambda: False)
    monkeypatch.setattr(S.sys, "base_prefix", "/not-this-venv")
    monkeypatch.setattr(S.importlib, "import_module", lambda n: (_ for _ in ()).throw(ImportError(n)) if n == "venv_pack" else real(n))
    with pytest.raises(InputError) as e:
        S.pack_environment()
    assert e.value.code == S.NO_PACKER and e.value.detail.endswith("pip install venv-pack")


def test_executor_python_that_does_not_exist(bare, tmp_path):
    env, _ = bare
    missing = str(tmp_path / "no" / "python3")
    r = subprocess.run(
        [str(RMQDUMP), "cq", "verify", "-s", str(STORE), "--engine", "spark", "--master", "local[1]", "--spark-conf", f"spark.pyspark.python={missing}"],
        capture_output=True,
        text=True,
        env=env,
        cwd=str(tmp_path),
        timeout=600,
    )
    observe_output(r.stdout, r.stderr)  # for the problem codes guard
    assert r.returncode == 2, r.stderr[-3000:]
    ours = [x for x in r.stderr.splitlines() if x.startswith("rmqdump: ")]
    assert len(ours) == 1 and ours[0].startswith(f"rmqdump: {S.EXECUTOR_PYTHON_FAILED}: {missing}: the executors' Python could not run a task: "), r.stderr[
        -3000:
    ]
    assert "Traceback" not in r.stderr and "fix: " in ours[0]


def test_a_jvm_that_does_not_start_is_one_line(tmp_path):
    """A Java that exits at once: one line naming the kept log, with the JVM's own error, exit 2 (no traceback, no stack of Java lines)."""
    java = tmp_path / "jdk" / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text("#!/bin/sh\necho 'starting the JVM' >&2\necho 'Error: could not reserve enough space for object heap' >&2\nexit 1\n")
    java.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_GATEWAY_PORT", "RMQDUMP_SPARK_LOG")}
    env["JAVA_HOME"] = str(java.parent.parent)
    r = subprocess.run([str(RMQDUMP), "cq", "verify", "-s", str(STORE), "--engine", "spark", "--master", "local[1]"], capture_output=True, text=True, env=env, cwd=str(tmp_path), timeout=600)
    observe_output(r.stdout, r.stderr)  # for the problem codes guard
    assert r.returncode == 2 and r.stdout == "", r.stderr[-3000:]
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr[-3000:]
    code, log, why = lines[0].removeprefix("rmqdump: ").split(": ", 2)
    assert code == S.SPARK_START_FAILED and why == "the Spark driver's JVM did not start: Error: could not reserve enough space for object heap"
    assert "could not reserve enough space" in Path(log).read_text()  # the log is kept, as the line says
    Path(log).unlink()


_JVM_ARGS = """
import json, sys
from rmqdump.engines.spark.session import build_session
spark = build_session("local[1]", sys.argv[2:], driver_memory="512m", python_tasks_only=sys.argv[1] == "1")
print(json.dumps(list(spark.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments())))
spark.stop()
"""


def test_a_command_of_python_tasks_starts_a_scheduler_jvm():
    """python_tasks_only starts the driver's JVM with SCHEDULER_JVM_OPTIONS; other commands (their Spark SQL runs in
    that JVM) and a user's own spark.driver.extraJavaOptions keep the JVM's defaults. Read back from the JVM itself."""
    cases = {
        "tasks": ["1"],
        "sql": ["0"],
        "user": ["1", "spark.driver.extraJavaOptions=-Drmqdump.test=1"],
    }
    procs = {k: subprocess.Popen([sys.executable, "-c", _JVM_ARGS, *a], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for k, a in cases.items()}
    args = {}
    for k, p in procs.items():
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-2000:]
        args[k] = json.loads(out.strip().splitlines()[-1])
    assert S.SCHEDULER_JVM_OPTIONS in args["tasks"]
    assert S.SCHEDULER_JVM_OPTIONS not in args["sql"] and not any(a.startswith("-XX:TieredStopAtLevel") for a in args["sql"])
    assert "-Drmqdump.test=1" in args["user"] and S.SCHEDULER_JVM_OPTIONS not in args["user"]


_ARCHIVE_RUN = """
import json, os
from rmqdump.engines.spark.rangemap import SparkMap
from rmqdump.engines.spark.session import session
told = []
with session("local[1]", driver_memory="512m", notice=told.append) as spark:
    args = list(spark.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments())
    pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
    n = sum(SparkMap(spark)(len, [[1, 2], [3]]))
print(json.dumps({"args": args, "told": told, "n": n, "pid": pid}))
"""


def test_the_class_archive_is_written_once_then_mapped(tmp_path):
    """The first session's JVM writes the class archive as it exits (the command waits, and says so once); the next
    session's JVM maps it: Spark's classes are loaded from it (the JVM's own class-load log says so), nothing of the
    JVM's log reaches standard output."""
    from rmqdump.engines.spark import classarchive as A

    cache = tmp_path / "cache"
    env = {**os.environ, "RMQDUMP_CACHE_DIR": str(cache), "JAVA_TOOL_OPTIONS": f"-Xlog:class+load=info:file={tmp_path}/load-%p.log"}
    runs = []
    for _ in range(2):
        p = subprocess.run([sys.executable, "-c", _ARCHIVE_RUN], env=env, capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, p.stderr[-2000:]
        assert len(p.stdout.strip().splitlines()) == 1  # the JVM's warnings (the archive's among them) never on stdout
        runs.append(json.loads(p.stdout))
    archives = sorted(cache.iterdir())
    named = re.fullmatch(re.escape(A.PREFIX) + "([0-9a-f]{20})-([0-9]+)" + re.escape(A.SUFFIX), archives[0].name) if len(archives) == 1 else None
    assert named and archives[0].stat().st_size == int(named.group(2)) > 1 << 20  # its size in its name
    first, second = runs
    assert first["n"] == second["n"] == 3
    assert first["told"] == [str(cache)] and second["told"] == []
    making = [a for a in first["args"] if a.startswith("-XX:ArchiveClassesAtExit=")]
    assert making and making[0].startswith(f"-XX:ArchiveClassesAtExit={cache / A.PREFIX}{named.group(1)}{A.SUFFIX}.") and making[0].endswith(".tmp")
    assert f"-XX:SharedArchiveFile={archives[0]}" in second["args"]
    source = {run["pid"]: re.search(r"org\.apache\.spark\.SparkContext source: (.*)", (tmp_path / f"load-{run['pid']}.log").read_text()).group(1) for run in runs}
    assert source[first["pid"]].endswith(".jar") and source[second["pid"]] == "shared objects file (top)"


def test_class_archive_plan(tmp_path, monkeypatch):
    """Which archive a session maps or writes: the one of its key; none while another command writes it (a fresh
    half-written file); a half-written file older than MAKING_FOR is a dead command's, removed."""
    from rmqdump.engines.spark import classarchive as A

    monkeypatch.setenv("RMQDUMP_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv(A.OFF, raising=False)
    settings = {"spark.driver.memory": "512m"}
    key = A.archive_key(settings)
    path = tmp_path / f"{A.PREFIX}{key}{A.SUFFIX}"
    assert key and A.archive_key({"spark.driver.memory": "4g"}) == key != A.archive_key({"spark.driver.memory": "64g"})  # compressed pointers or not
    assert A.archive_key({**settings, "spark.jars": "/x/extra.jar"}) != key
    made = A.plan(settings)
    assert (made.path, made.making, made.tmp) == (str(path), True, f"{path}.{os.getpid()}.tmp")
    assert made.option == f"-XX:ArchiveClassesAtExit={made.tmp}"
    other = tmp_path / f"{path.name}.1.tmp"
    other.write_bytes(b"x")
    assert A.plan(settings) is None  # being written by another command now
    os.utime(other, (0, 0))
    assert A.plan(settings).making and not other.exists()  # a dead command's, cleared
    whole = tmp_path / f"{A.PREFIX}{key}-1{A.SUFFIX}"
    whole.write_bytes(b"x")
    used = A.plan(settings)
    assert (used.path, used.making, used.option) == (str(whole), False, f"-XX:SharedArchiveFile={whole}")
    # a shortened archive (a JVM that maps it dies of SIGBUS) is removed, and a new one planned
    whole.rename(tmp_path / f"{A.PREFIX}{key}-5{A.SUFFIX}")
    again = A.plan(settings)
    assert again.making and again.path == str(path) and not (tmp_path / f"{A.PREFIX}{key}-5{A.SUFFIX}").exists()
    monkeypatch.setenv(A.OFF, "0")
    assert A.plan(settings) is None


def test_work_on_the_driver_runs_on_its_cores():
    """What stays on the driver under Spark (salvage's row groups, rebuild's self-check) runs on every usable core of
    the driver as memory allows, as the local engine's would: the threads seen, against a model of that bound."""
    import threading

    from conftest import shared_spark

    from rmqdump.engines.spark.rangemap import SparkMap

    cores = len(os.sched_getaffinity(0))
    with open("/proc/meminfo", encoding="ascii") as f:
        avail = next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
    want = min(cores, max(1, avail // 4 // (160 << 20)))
    seen, gate = set(), threading.Barrier(want, timeout=10)

    def job(x):
        seen.add(threading.get_ident())
        gate.wait()  # every worker holds an item at once: as many threads as workers, no fewer
        return x * x

    drv = SparkMap(shared_spark()).on_driver
    assert list(drv(job, range(4 * want))) == [x * x for x in range(4 * want)]
    assert len(seen) == want


def test_a_failed_job_is_one_line(tmp_path, capsys, monkeypatch):
    """A Spark job that fails is one line from the CLI's guard, never the JVM's stack trace: executors that cannot run
    their Python (here a local master, where no probe runs first) give executor_python_failed naming it; a task's own
    error gives internal_error with that error's line. Both jobs really run and fail on the shared session."""
    import typer
    from conftest import shared_spark

    from rmqdump.cli.app import guarded
    from rmqdump.engines.spark.rangemap import SparkMap

    monkeypatch.delenv("RMQDUMP_TRACEBACK", raising=False)
    sc = shared_spark().sparkContext
    failed = {}
    python = tmp_path / "python-not-runnable"
    python.write_text("#!/bin/sh\n")
    python.chmod(0o644)
    saved = sc.pythonExec
    sc.pythonExec = str(python)
    try:
        with pytest.raises(Exception) as e:
            list(SparkMap(shared_spark())(len, [[1]]))
        failed["exec"] = e.value
    finally:
        sc.pythonExec = saved
    def boom(_item):  # nested: sent by value, the executors need not import this module
        raise ValueError("boom in a task")

    with pytest.raises(Exception) as e:
        list(SparkMap(shared_spark())(boom, [1]))
    failed["task"] = e.value
    lines = {}
    for kind, err in failed.items():
        assert len(str(err).splitlines()) > 10  # what a user saw before: the JVM's stack trace

        def raising(err=err):
            raise err

        with pytest.raises(SystemExit) as ex:
            guarded(raising)()
        assert ex.value.code == 2 and not isinstance(ex.value, typer.Exit)
        lines[kind] = capsys.readouterr().err.splitlines()
    assert lines["exec"] == [
        f'rmqdump: {S.EXECUTOR_PYTHON_FAILED}: {python}: the executors\' Python could not run a task: Cannot run program "{python}": error=13, Permission denied; fix: {S.EXECUTOR_FIX}'
    ]
    assert lines["task"] == ["rmqdump: internal_error: ValueError: boom in a task (RMQDUMP_TRACEBACK=1 shows where and what)"]


def _layout(root: Path, spark_home: str, py4j: str) -> tuple[str, str, str]:
    """Spark's zips as a layout has them (their contents do not matter here): (site dir, pyspark.zip, py4j zip)."""
    site = root / "site"
    (site / "pyspark").mkdir(parents=True)
    (site / "pyspark" / "__init__.py").write_text("")
    lib = (site / "pyspark" if spark_home == "pip" else root / "spark") / "python" / "lib"
    lib.mkdir(parents=True)
    zips = lib / "pyspark.zip", lib / f"py4j-{py4j}-src.zip"
    for z in zips:
        z.write_bytes(b"")
    return str(site), str(zips[0]), str(zips[1])


def test_the_daemon_reads_pyspark_from_its_installed_files_only_where_they_are_the_zips_own(tmp_path):
    """pip's layout (the zips inside the installed pyspark, py4j's zip the installed py4j's version): the zips leave
    the path. A Spark of its own (SPARK_HOME apart), another py4j, or the package's directory not on the path: the
    path is left as it is."""
    from importlib import metadata

    from rmqdump.engines.spark.pydaemon import installed_first

    py4j = metadata.version("py4j")
    site, pz, jz = _layout(tmp_path / "pip", "pip", py4j)
    path = [pz, jz, "/opt/app.jar", site, "/usr/lib/python3.11"]
    assert installed_first(path) == ["/opt/app.jar", site, "/usr/lib/python3.11"]
    site, pz, jz = _layout(tmp_path / "home", "home", py4j)
    assert installed_first([pz, jz, site]) == [pz, jz, site]
    site, pz, jz = _layout(tmp_path / "other", "pip", py4j + ".1")
    assert installed_first([pz, jz, site]) == [pz, jz, site]
    site, pz, jz = _layout(tmp_path / "off", "pip", py4j)
    assert installed_first([pz, jz]) == [pz, jz]


_WORKER_PYSPARK = """
import json, sys
from rmqdump.engines.spark.rangemap import SparkMap
from rmqdump.engines.spark.session import build_session
spark = build_session("local[1]", sys.argv[1:], driver_memory="512m")
def where(_):
    import pyspark, sys
    return [pyspark.__file__, [p for p in sys.path if p.endswith(".zip")]]
print(json.dumps(list(SparkMap(spark)(where, [0]))[0]))
spark.stop()
"""


def test_python_workers_import_pyspark_from_its_installed_files():
    """On a local master the executors run this Python, and its daemon (DAEMON_MODULE) imports the installed pyspark:
    from the zip, its 1,300 source files were compiled at every start. A user's own daemon module is kept."""
    import pyspark

    installed = str(Path(pyspark.__file__).parent)
    p = subprocess.run([sys.executable, "-c", _WORKER_PYSPARK], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    file, zips = json.loads(p.stdout.strip().splitlines()[-1])
    assert file == os.path.join(installed, "__init__.py")
    assert not [z for z in zips if os.path.basename(z) == "pyspark.zip" or os.path.basename(z).startswith("py4j-")]
    p = subprocess.run([sys.executable, "-c", _WORKER_PYSPARK, "spark.python.daemon.module=pyspark.daemon"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    file, _ = json.loads(p.stdout.strip().splitlines()[-1])
    assert file == os.path.join(installed, "python", "lib", "pyspark.zip", "pyspark", "__init__.py")
