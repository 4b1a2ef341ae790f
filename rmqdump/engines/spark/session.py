"""A SparkSession for rmqdump jobs, and how the package reaches the executors.

Defaults: master `local[*]`, driver memory 4g (the driver only plans byte
ranges and collects counts; raise it with `--driver-memory` or
`--spark-conf spark.driver.memory=8g` only for very many stores). Executors
need numpy and pyarrow (any PySpark cluster with Arrow has them) and
rmqdump itself: by default the driver zips the rmqdump, schemas and
construct packages it runs from and adds the zip with addPyFile (what
`spark-submit --py-files` does); `ship="none"` is for clusters where
rmqdump is installed on every node (a wheel, or a venv via spark.archives).
"""

from __future__ import annotations

import importlib
import os
import sys
import tempfile
import warnings
import zipfile
from contextlib import contextmanager
from functools import cache

from rmqdump.common.problems import InputError

DEFAULT_MASTER = "local[*]"
DEFAULT_DRIVER_MEMORY = "4g"
SHIP_MODES = ("auto", "zip", "none")
SHIPPED_PACKAGES = ("rmqdump", "schemas", "construct")

BAD_SPARK_CONF = "bad_spark_conf"
NO_PYSPARK = "pyspark_missing"

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
    """A zip of the packages executors need, built from the ones this driver imports."""
    fd, path = tempfile.mkstemp(prefix="rmqdump-pyfiles-", suffix=".zip")
    os.close(fd)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name in SHIPPED_PACKAGES:
            mod = importlib.import_module(name)
            root = os.path.dirname(os.path.abspath(mod.__file__))
            base = os.path.dirname(root)
            for d, dirs, files in os.walk(root):
                dirs[:] = [x for x in dirs if x != "__pycache__"]
                for f in files:
                    if f.endswith(".py"):
                        full = os.path.join(d, f)
                        z.write(full, os.path.relpath(full, base))
    return path


def build_session(
    master: str = DEFAULT_MASTER,
    conf: list[str] | dict | None = None,
    *,
    driver_memory: str = DEFAULT_DRIVER_MEMORY,
    ship: str = "auto",
    app_name: str = "rmqdump",
):
    """Start (or join) a SparkSession; ship the package unless told not to (or local, where it is importable)."""
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
        if not os.environ.get("PYSPARK_PYTHON"):
            settings["spark.pyspark.python"] = sys.executable  # local workers run this interpreter, not whatever python3 is
    settings.update(parse_conf(conf))
    if SparkSession.getActiveSession() is not None:
        warnings.warn("a SparkSession is already running in this process: it is reused, --master and --spark-conf are not applied", stacklevel=2)
    b = SparkSession.builder.master(master).appName(app_name)
    for k, v in settings.items():
        b = b.config(k, v)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    if (ship == "zip" or (ship == "auto" and not is_local(master))) and id(spark.sparkContext) not in _shipped:
        spark.sparkContext.addPyFile(package_zip())
        _shipped.add(id(spark.sparkContext))
    return spark


@contextmanager
def session(master: str = DEFAULT_MASTER, conf=None, **kw):
    """A session for one command: stopped at the end unless it was already running (a notebook, a test)."""
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise InputError(NO_PYSPARK, "pyspark", "--engine spark needs PySpark: pip install 'rmqdump[spark]'") from None
    owned = SparkSession.getActiveSession() is None
    spark = build_session(master, conf, **kw)
    try:
        yield spark
    finally:
        if owned:
            spark.stop()
