"""PySpark's daemon, with pyspark read from its installed files rather than from Spark's zip of its sources.

Spark puts pyspark.zip and py4j's source zip first on its Python workers' path. A zip holds no compiled bytecode,
so the daemon compiled pyspark's 1,300 source files on every start: importing it took 1.3-1.4 s against 0.2-0.3 s
from the installed package, paid by the first Python job of every command. pip's pyspark carries these zips inside
itself, so where the zips are the installed package's own (and py4j's zip is the installed py4j's version),
leaving them off the path changes no code, only where it is read from; anywhere else the path is left alone.

`session` names this module as spark.python.daemon.module only on a local master running the driver's own Python,
whose workers inherit the driver's environment and so import rmqdump as it does. It imports nothing of pyspark before the path is set; the workers the daemon forks inherit it, and
import rmqdump afresh.
"""

from __future__ import annotations

import os
import re
import sys
from importlib import metadata

_PY4J_ZIP = re.compile(r"py4j-(?P<version>[^-]+)-src\.zip")


def installed_first(path: list[str]) -> list[str]:
    """`path` without Spark's pyspark and py4j zips when the installed packages on it are the same code."""
    zips = [p for p in path if os.path.basename(p) == "pyspark.zip"]
    if len(zips) != 1:
        return path
    package = os.path.dirname(os.path.dirname(os.path.dirname(zips[0])))  # <site>/pyspark/python/lib/pyspark.zip
    if os.path.basename(package) != "pyspark" or not os.path.isfile(os.path.join(package, "__init__.py")):
        return path
    if os.path.dirname(package) not in [os.path.abspath(p) for p in path if p]:
        return path
    drop = set(zips)
    for p in path:
        m = _PY4J_ZIP.fullmatch(os.path.basename(p))
        if m:
            try:
                if metadata.version("py4j") != m.group("version"):
                    return path
            except metadata.PackageNotFoundError:
                return path
            drop.add(p)
    return [p for p in path if p not in drop]


if __name__ == "__main__":
    sys.path[:] = installed_first(sys.path)
    for name in [m for m in sys.modules if m == "rmqdump" or m.startswith("rmqdump.")]:
        del sys.modules[name]  # the workers import rmqdump as their tasks find it (a shipped zip comes first then)
    from pyspark import daemon

    daemon.manager()
