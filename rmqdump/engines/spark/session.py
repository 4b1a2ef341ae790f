"""A SparkSession for rmqdump jobs, which Python its executors run, and how the package reaches them.

Defaults: master `local[*]`, driver memory 4g (the driver only plans byte
ranges and collects counts; raise it with `--driver-memory` or
`--spark-conf spark.driver.memory=8g` only for very many stores).

The executors' Python: PySpark started from a plain Python process takes it
from PYSPARK_PYTHON, else the `python3` on PATH, which is not the venv that
runs `/path/to/venv/bin/rmqdump` unless that venv is activated. So: the
user's `spark.pyspark.python` or PYSPARK_PYTHON if set; else, for local
masters and standalone masters on this host, the driver's own interpreter;
with `ship="venv"`, the driver's environment packed (venv-pack, or
conda-pack under conda) and unpacked by Spark on each executor
(spark.archives, PySpark's documented way).

rmqdump itself: by default the driver zips the rmqdump, schemas and
construct packages it runs from and adds the zip with addPyFile (what
`spark-submit --py-files` does); `ship="none"` is for clusters where
rmqdump is installed on every node. Before any job, one task per executor
core imports what the jobs need, so a missing module is one line naming the
module, the executor's Python and the fix, not a worker traceback.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import importlib.util
import ipaddress
import os
import re
import shutil
import socket
import sys
import tempfile
import warnings
import zipfile
from collections.abc import Callable
from contextlib import contextmanager, suppress
from functools import cache

from rmqdump.common.problems import InputError
from rmqdump.engines.spark import classarchive

DEFAULT_MASTER = "local[*]"
DEFAULT_DRIVER_MEMORY = "4g"
# The driver's JVM of a command whose Spark work is plain Python tasks only schedules them (and, under a local master,
# ferries their pickled results): its optimising compiler's threads then only compete with the Python workers for
# the cores. Measured on gen-1m, local[2]: `export` and `report` 2 s faster whole (session start and first job);
# `cq verify`, whose joins run in the JVM, 10% slower with it, so only such commands ask for it.
SCHEDULER_JVM_OPTIONS = "-XX:TieredStopAtLevel=1"
# The JVM's own log lines (the class archive's warnings as it is written or found unusable) go to its standard output
# by default, which is the command's: they go to its standard error, which is the driver's log (_start_quietly).
JVM_LOG_OPTIONS = "-Xlog:all=off:stdout -Xlog:all=warning:stderr"
SHIP_MODES = ("auto", "zip", "venv", "none")
SHIPPED_PACKAGES = ("rmqdump", "rmqdump.schemas", "construct")  # rmqdump.schemas named: a checkout's build maps it from schemas/
ENV_ALIAS = "rmqdump_env"  # the directory spark.archives unpacks the driver's environment into
# Left out of the packed environment: every Spark installation puts its own pyspark and py4j on the
# workers' PYTHONPATH (and they must match the cluster's Spark, not the driver's pip install).
PACK_EXCLUDES = ("lib/*/site-packages/pyspark/*", "lib/*/site-packages/py4j/*", "lib/*/site-packages/pyspark-*", "lib/*/site-packages/py4j-*")
DAEMON_MODULE = "rmqdump.engines.spark.pydaemon"  # PySpark's daemon, pyspark imported from its installed files, for
# a local master running this very Python, whose workers inherit this process's environment and so import rmqdump as
# it does (a standalone worker's environment is its own); PySpark's own everywhere else
# What rmqdump's tasks import on an executor (pandas: PySpark's Arrow path); numba only if the driver has it.
EXECUTOR_MODULES = ("numpy", "pyarrow", "pandas", "rmqdump.export.arrowbatch")
OPTIONAL_EXECUTOR_MODULES = ("numba",)

BAD_SPARK_CONF = "bad_spark_conf"
NO_PYSPARK = "pyspark_missing"
NO_PACKER = "env_packer_missing"
PACK_FAILED = "env_pack_failed"
EXECUTOR_MODULE_MISSING = "executor_module_missing"
EXECUTOR_PYTHON_FAILED = "executor_python_failed"
SPARK_START_FAILED = "spark_start_failed"
EXECUTOR_FIX = "point --spark-conf spark.pyspark.python (or PYSPARK_PYTHON) at a Python that has rmqdump's dependencies, or pass --ship venv"

_shipped: set[int] = set()


def parse_conf(items: list[str] | dict | None) -> dict[str, str]:
    """`k=v` strings (as given to --spark-conf) into a dict."""
    if not items:
        return {}
    if isinstance(items, dict):
        return {str(k): str(v) for k, v in items.items()}
    out = {}
    for it in items:
        k, sep, v = str(it).partition("=")
        if not sep or not k.strip():
            raise InputError(BAD_SPARK_CONF, str(it), "expected KEY=VALUE, e.g. spark.executor.memory=4g")
        out[k.strip()] = v
    return out


def is_local(master: str) -> bool:
    return master == "local" or master.startswith("local[")


@cache
def package_zip() -> str:
    """A zip of the packages executors need, built from the ones this driver imports.

    Each package is stored under its dotted name wherever its folder is (a subpackage may be mapped from elsewhere,
    as rmqdump.schemas is in a checkout); a file already stored under that name (an installed rmqdump holds its
    schemas) is stored once.
    """
    fd, path = tempfile.mkstemp(prefix="rmqdump-pyfiles-", suffix=".zip")
    os.close(fd)
    atexit.register(_remove, path)  # Spark has copied it to each executor by then: nothing of a run stays in /tmp
    stored: set[str] = set()
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name in SHIPPED_PACKAGES:
            mod = importlib.import_module(name)
            root = os.path.dirname(os.path.abspath(mod.__file__))
            for d, dirs, files in os.walk(root, followlinks=True):
                dirs[:] = [x for x in dirs if x != "__pycache__"]
                for f in files:
                    full = os.path.join(d, f)
                    arc = "/".join([*name.split("."), *os.path.relpath(full, root).split(os.sep)])
                    if f.endswith(".py") and arc not in stored:
                        stored.add(arc)
                        z.write(full, arc)
    return path


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):
        os.remove(path)


def _this_host_addresses() -> set[str]:
    names = {socket.gethostname(), socket.getfqdn()}
    out: set[str] = set()
    for n in names:
        with suppress(OSError):
            out.update(ai[4][0] for ai in socket.getaddrinfo(n, None))
    return out


def on_this_host(master: str) -> bool:
    """local[...] masters, and standalone masters (spark://h:p[,h2:p2]) whose every host is this machine."""
    if is_local(master):
        return True
    if not master.startswith("spark://"):
        return False
    mine = None
    for hp in master[len("spark://") :].split(","):
        host = hp.rsplit(":", 1)[0].strip("[]")
        try:
            addrs = {ai[4][0] for ai in socket.getaddrinfo(host, None)}
        except OSError:
            return False
        if not addrs:
            return False
        for a in addrs:
            if ipaddress.ip_address(a.split("%")[0]).is_loopback:
                continue
            mine = _this_host_addresses() if mine is None else mine
            if a not in mine:
                return False
    return True


def _in_conda() -> bool:
    return os.path.isdir(os.path.join(sys.prefix, "conda-meta"))


_packed: dict[str, str] = {}


def pack_environment() -> str:
    """The driver's environment as a .tar.gz for spark.archives (made once per process, removed at exit)."""
    if sys.prefix in _packed:
        return _packed[sys.prefix]
    conda = _in_conda()
    if not conda and sys.prefix == sys.base_prefix:
        raise InputError(
            PACK_FAILED, sys.prefix, "--ship venv packs the driver's virtualenv, but rmqdump is not running in one (install it in a venv, or use --ship zip)"
        )
    tool = "conda_pack" if conda else "venv_pack"
    try:
        packer = importlib.import_module(tool)
    except ImportError:
        pkg = tool.replace("_", "-")
        raise InputError(NO_PACKER, sys.prefix, f"--ship venv needs {pkg} in the driver's environment: pip install {pkg}") from None
    tmp = tempfile.mkdtemp(prefix="rmqdump-env-")
    atexit.register(shutil.rmtree, tmp, True)
    out = os.path.join(tmp, f"{ENV_ALIAS}.tar.gz")
    own = {"ignore_editable_packages": True} if conda else {}  # conda-pack's own option
    try:
        packer.pack(prefix=sys.prefix, output=out, compress_level=1, filters=[("exclude", x) for x in PACK_EXCLUDES], **own)
    except Exception as e:  # the packers' own errors (editable installs, missing files) as one line
        raise InputError(
            PACK_FAILED, sys.prefix, f"{tool.replace('_', '-')}: {str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__}"
        ) from None
    _packed[sys.prefix] = out
    return out


def executor_python(master: str, settings: dict[str, str], ship: str) -> str | None:
    """The interpreter the executors should run; None leaves PySpark's own choice (PYSPARK_PYTHON or python3)."""
    if settings.get("spark.pyspark.python"):
        return settings["spark.pyspark.python"]
    if os.environ.get("PYSPARK_PYTHON"):
        return os.environ["PYSPARK_PYTHON"]
    if ship == "venv" and not is_local(master):
        return f"./{ENV_ALIAS}/bin/python"
    if on_this_host(master):
        return sys.executable
    return None


def executor_modules() -> tuple[str, ...]:
    return EXECUTOR_MODULES + tuple(m for m in OPTIONAL_EXECUTOR_MODULES if importlib.util.find_spec(m) is not None)


# The probe is compiled here rather than defined in this module so that cloudpickle sends it by value:
# an executor must be able to run it before (and without) importing rmqdump.
_PROBE_SOURCE = """
def probe(_rows):
    import importlib, socket, sys
    missing = []
    for name in MODULES:
        try:
            importlib.import_module(name)
        except Exception as e:
            text = (str(e).strip().splitlines() or [type(e).__name__])[0]
            missing.append((name, type(e).__name__ + ": " + text))
    yield (socket.gethostname(), sys.executable, sys.version.split()[0], tuple(missing))
"""


def _probe_function(modules: tuple[str, ...]):
    ns: dict = {"__name__": "rmqdump_executor_probe", "MODULES": modules}
    exec(compile(_PROBE_SOURCE, "<rmqdump executor probe>", "exec"), ns)
    return ns["probe"]


_SPARK_ERROR = re.compile(r"((?:Cannot run program|\w+(?:Error|Exception)): [^\n]{1,300})")


def job_failure(e: BaseException) -> InputError | None:
    """A Spark job that failed because the executors could not run their Python (a local master's too, where no probe
    runs first) as the one-line executor_python_failed naming that Python; None for any other failure."""
    program = re.search(r'Cannot run program "([^"\n]+)"(: [^\n]{0,200})?', str(e))
    if program is None:
        return None
    return InputError(EXECUTOR_PYTHON_FAILED, program.group(1), f"the executors' Python could not run a task: {program.group(0)}; fix: {EXECUTOR_FIX}")


def spark_error_line(text: str) -> str:
    """The most telling line of a failed Spark job's message (a Java error about the Python program, or Python's last error)."""
    lines = _SPARK_ERROR.findall(text)
    for line in lines:
        if "Cannot run program" in line or "different version" in line:
            return line.strip()
    py = [x for x in lines if not x.startswith(("org.", "java.", "py4j", "Py4J"))]
    return (py[-1] if py else (lines[0] if lines else text.strip().splitlines()[0] if text.strip() else "failed")).strip()


def check_executors(spark, python: str | None) -> None:
    """One task per executor core imports what rmqdump's tasks need; any failure is one InputError line."""
    sc = spark.sparkContext
    modules = executor_modules()
    n = max(1, int(sc.defaultParallelism))
    shown = python or sc.pythonExec
    fix = EXECUTOR_FIX
    try:
        seen = set(sc.parallelize(range(n), n).mapPartitions(_probe_function(modules)).collect())
    except Exception as e:
        raise InputError(EXECUTOR_PYTHON_FAILED, shown, f"the executors' Python could not run a task: {spark_error_line(str(e))}; fix: {fix}") from None
    driver_version = sys.version.split()[0]
    for host, exe, version, missing in sorted(seen):
        if missing:
            name, why = missing[0]
            if name.startswith("rmqdump"):
                how = "use --ship zip or --ship venv, or install rmqdump on every node"
            else:
                how = f"pip install {name.split('.')[0]} in that Python, or {fix}"
            more = f" (also missing: {', '.join(m[0] for m in missing[1:])})" if len(missing) > 1 else ""
            raise InputError(EXECUTOR_MODULE_MISSING, name, f"executor Python {exe} (Python {version}) on {host} cannot import it ({why}){more}; fix: {how}")
        if version.rsplit(".", 1)[0] != driver_version.rsplit(".", 1)[0]:
            raise InputError(EXECUTOR_PYTHON_FAILED, exe, f"executor Python {version} on {host} differs from the driver's {driver_version}; fix: {fix}")


def build_session(
    master: str = DEFAULT_MASTER,
    conf: list[str] | dict | None = None,
    *,
    driver_memory: str = DEFAULT_DRIVER_MEMORY,
    ship: str = "auto",
    app_name: str = "rmqdump",
    check: bool = True,
    python_tasks_only: bool = False,
    class_archive: bool = False,
):
    """Start (or join) a SparkSession, choose the executors' Python, ship the package, check the executors.

    python_tasks_only: the command's jobs are Python tasks only (no Spark SQL in the JVM): the driver's JVM
    starts with SCHEDULER_JVM_OPTIONS unless spark.driver.extraJavaOptions is given. class_archive: a JVM this call
    starts maps the class archive, or writes it at exit when there is none yet (rmqdump.engines.spark.classarchive);
    only `session`, which waits for that exit, asks for it."""
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise InputError(NO_PYSPARK, "pyspark", "--engine spark needs PySpark: pip install 'rmqdump[spark]'") from None
    if ship not in SHIP_MODES:
        raise InputError(BAD_SPARK_CONF, ship, f"--ship must be one of {', '.join(SHIP_MODES)}")
    settings = {
        "spark.driver.memory": driver_memory,
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
    }
    if is_local(master):
        settings["spark.ui.enabled"] = "false"
    user = parse_conf(conf)
    owned = SparkSession.getActiveSession() is None
    jsa = None
    if "spark.driver.extraJavaOptions" not in user:
        jsa = classarchive.plan({**settings, **user}) if class_archive and owned and _no_jvm_yet() else None
        options = [JVM_LOG_OPTIONS] + ([SCHEDULER_JVM_OPTIONS] if python_tasks_only else []) + ([jsa.option] if jsa else [])
        settings["spark.driver.extraJavaOptions"] = " ".join(options)
    settings.update(user)
    if ship == "venv" and not is_local(master):
        packed = f"{pack_environment()}#{ENV_ALIAS}"
        settings["spark.archives"] = f"{settings['spark.archives']},{packed}" if settings.get("spark.archives") else packed
    python = executor_python(master, settings, ship)
    if python:
        settings["spark.pyspark.python"] = python
    if "spark.python.daemon.module" not in user:  # said each time: a JVM keeps a first session's settings for the next
        settings["spark.python.daemon.module"] = DAEMON_MODULE if is_local(master) and python == sys.executable else "pyspark.daemon"
    if not owned:
        warnings.warn("a SparkSession is already running in this process: it is reused, --master and --spark-conf are not applied", stacklevel=2)
    if owned:
        _start_quietly(master, app_name, settings)
        _archives[id(_gateway())] = jsa
    b = SparkSession.builder.master(master).appName(app_name)
    for k, v in settings.items():
        b = b.config(k, v)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    try:
        if python and owned:
            # PySpark started from a plain Python reads PYSPARK_PYTHON once, at SparkContext start, and
            # ignores spark.pyspark.python; every Python function it sends carries this field.
            spark.sparkContext.pythonExec = python
        if (ship in ("zip", "venv") or (ship == "auto" and not is_local(master))) and id(spark.sparkContext) not in _shipped:
            spark.sparkContext.addPyFile(package_zip())
            _shipped.add(id(spark.sparkContext))
        # A local master's executors run this very interpreter, which has every module a task imports: nothing to
        # check (and the check's Python workers would cost a second or more of a small job's start).
        if check and not (owned and is_local(master) and python == sys.executable):
            check_executors(spark, python if owned else None)
    except BaseException:
        if owned:
            spark.stop()
            _end_jvm(None, keep=False)
        raise
    return spark


def _no_jvm_yet() -> bool:
    from pyspark import SparkContext

    return SparkContext._active_spark_context is None and SparkContext._gateway is None


def _gateway():
    from pyspark import SparkContext

    return SparkContext._gateway


_archives: dict[int, classarchive.ClassArchive | None] = {}  # the class archive each started JVM writes at exit, by gateway


def _end_jvm(notice: Callable[[str], None] | None, keep: bool = True) -> None:
    """After this command's session stopped: when its JVM writes the class archive, end it now and wait (once, said
    through `notice`), so the archive is whole when it is put in place; the next session starts a JVM of its own.
    keep=False (the command failed or was interrupted): the JVM is killed, nothing is written, nobody waits."""
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    archive = _archives.pop(id(gateway), None)
    if gateway is None or archive is None or not archive.making:
        return
    proc = getattr(gateway, "proc", None)
    if not keep and proc is not None:
        proc.kill()
    elif notice:
        notice(os.path.dirname(archive.path))
    with suppress(Exception):
        gateway.shutdown()
    SparkContext._gateway = SparkContext._jvm = None
    classarchive.finish(archive, proc)


def _start_quietly(master: str, app_name: str, settings: dict[str, str]) -> None:
    """Start the driver's JVM with its stderr in a log file, not the terminal (when no JVM runs in this process yet).

    The JVM's start-up lines (log4j's profile, the loopback-address and native-hadoop
    WARNs, the JDK's incubator notice) come before any log level can be set, and
    every later driver log line would follow them: none of it is rmqdump's
    output. Job failures still reach the command as Py4J errors; a JVM that does
    not start is one line, taken from that log, which is then kept. Otherwise the log
    is removed at exit, unless RMQDUMP_SPARK_LOG names where to keep it.
    """
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._active_spark_context is not None or SparkContext._gateway is not None:
        return
    path = os.environ.get("RMQDUMP_SPARK_LOG")
    kept = bool(path)
    if not path:
        fd, path = tempfile.mkstemp(prefix="rmqdump-spark-", suffix=".log")
        os.close(fd)
    conf = SparkConf().setMaster(master).setAppName(app_name).setAll(list(settings.items()))
    with open(path, "ab") as log:
        try:
            gateway = launch_gateway(conf, popen_kwargs={"stderr": log})
        except Exception as e:  # the log stays: the message names it
            raise InputError(SPARK_START_FAILED, path, f"the Spark driver's JVM did not start: {_last_log_line(path) or e}") from None
    if not kept:
        atexit.register(_remove, path)
    SparkContext(conf=conf, gateway=gateway)


def _last_log_line(path: str) -> str:
    """The log's last line that says something (an error, else the last one)."""
    with suppress(OSError), open(path, errors="replace") as f:
        lines = [x.strip() for x in f if x.strip()]
        errors = [x for x in lines if "Error" in x or "error" in x or "ERROR" in x]
        return (errors or lines or [""])[-1]
    return ""


@contextmanager
def session(master: str = DEFAULT_MASTER, conf=None, notice: Callable[[str], None] | None = None, **kw):
    """A session for one command: stopped at the end unless it was already running (a notebook, a test).

    notice(directory): called once, when this session's JVM is writing the class archive into that directory
    (rmqdump.engines.spark.classarchive) and the command waits for it."""
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise InputError(NO_PYSPARK, "pyspark", "--engine spark needs PySpark: pip install 'rmqdump[spark]'") from None
    owned = SparkSession.getActiveSession() is None
    spark = build_session(master, conf, class_archive=True, **kw)
    done = False
    try:
        yield spark
        done = True
    finally:
        if owned:
            spark.stop()
            _end_jvm(notice, keep=done)
