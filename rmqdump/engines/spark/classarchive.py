"""The Spark driver JVM's class archive: its classes mapped from one file instead of read and checked from Spark's jars.

A session's start is mostly the driver's JVM loading some ten thousand classes. The JDK's dynamic class archive
(AppCDS, JDK 13 on) keeps them, already parsed and verified, in one file the next JVM maps: on a two-core machine a
session started in 3.1 s instead of 7.4-8.1 s. The first command's JVM writes it as it exits
(`-XX:ArchiveClassesAtExit`), which that command waits for once (some seconds; the CLI says so on stderr); later
commands map it (`-XX:SharedArchiveFile`).

The archive sits in rmqdump's user cache directory (rmqdump.common.cachedir), named by a key over everything it
depends on: the java binary and its base archive, Spark's jars, the settings and environment that change the
classpath, and whether the heap is small enough for compressed pointers. A new key's archive replaces the old one. A JVM
that cannot use an archive runs without it. RMQDUMP_SPARK_CLASS_ARCHIVE=0 turns it off; a user's own
spark.driver.extraJavaOptions leaves it out (rmqdump.engines.spark.session).
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass

from rmqdump.common.cachedir import cache_root

PREFIX = "spark-jvm-"
SUFFIX = ".jsa"
OFF = "RMQDUMP_SPARK_CLASS_ARCHIVE"
MAKING_FOR = 600  # seconds a half-written archive of another command is left alone (it is being written)
EXIT_WAIT = 300  # seconds the first command waits for its JVM to write the archive
CLASSPATH_SETTINGS = ("spark.jars", "spark.jars.packages", "spark.driver.extraClassPath", "spark.driver.userClassPathFirst")
CLASSPATH_ENV = ("SPARK_HOME", "SPARK_CONF_DIR", "HADOOP_CONF_DIR", "YARN_CONF_DIR", "SPARK_DIST_CLASSPATH", "JAVA_HOME")


@dataclass(frozen=True)
class ClassArchive:
    """The archive a session maps (`making` False), or the one its JVM writes at exit into `tmp` (`making` True), put
    in place by finish() as `path` with its size before the suffix."""

    path: str
    making: bool
    tmp: str = ""

    @property
    def option(self) -> str:
        return f"-XX:ArchiveClassesAtExit={self.tmp}" if self.making else f"-XX:SharedArchiveFile={self.path}"


def java_binary() -> str | None:
    """The java spark-submit runs: $JAVA_HOME/bin/java, else the first on PATH (resolved through its links)."""
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    return os.path.realpath(java) if java and os.path.isfile(java) else None


def spark_jars() -> str | None:
    """Spark's jars directory: $SPARK_HOME/jars, else the one inside the pyspark package."""
    home = os.environ.get("SPARK_HOME")
    if not home:
        spec = importlib.util.find_spec("pyspark")
        home = next(iter(spec.submodule_search_locations or []), None) if spec else None
    jars = os.path.join(home, "jars") if home else None
    return jars if jars and os.path.isdir(jars) else None


def _stamp(path: str) -> tuple:
    with contextlib.suppress(OSError):
        st = os.stat(path)
        return (path, st.st_size, st.st_mtime_ns)
    return (path,)


def archive_key(settings: dict[str, str]) -> str | None:
    """A digest of what the archive depends on; None where there is no java or no Spark jars to key it by."""
    java, jars = java_binary(), spark_jars()
    if not java or not jars:
        return None
    jdk = os.path.dirname(os.path.dirname(java))
    parts = [_stamp(java), *(_stamp(p) for p in sorted(glob.glob(os.path.join(jdk, "lib", "server", "*.jsa"))))]
    parts += sorted(_stamp(os.path.join(jars, n)) for n in os.listdir(jars))
    parts += [(k, settings.get(k)) for k in CLASSPATH_SETTINGS] + [(k, os.environ.get(k)) for k in CLASSPATH_ENV]
    parts.append(("compressed oops", compressed_oops(settings.get("spark.driver.memory", ""))))
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:20]


_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def compressed_oops(memory: str) -> bool | str:
    """Whether a driver heap of `memory` (Spark's spelling: 512m, 4g) runs with compressed pointers, which an archive
    must match: below about 32 GiB. The raw text where it cannot be read (the key then follows it exactly)."""
    m = re.fullmatch(r"\s*(\d+)\s*([bkmgt]?)b?\s*", memory.lower())
    return int(m.group(1)) * _UNITS[m.group(2)] < 32 << 30 if m else memory


def plan(settings: dict[str, str]) -> ClassArchive | None:
    """The archive this session maps (named KEY-SIZE, whole), else the one its JVM should write (a shortened one is
    removed first); None when off, unkeyed, or another command is writing it now, or the cache directory cannot be
    written."""
    if os.environ.get(OFF, "1").strip().lower() in ("0", "false", "no", "off"):
        return None
    key = archive_key(settings)
    if key is None:
        return None
    root = cache_root()
    stem = os.path.join(root, f"{PREFIX}{key}")
    for found in glob.glob(f"{stem}-*{SUFFIX}"):
        if _whole(found):
            return ClassArchive(found, making=False)
        with contextlib.suppress(OSError):  # cut short: a JVM that maps it dies of SIGBUS
            os.remove(found)
    path = f"{stem}{SUFFIX}"
    now = time.time()
    for other in glob.glob(f"{path}.*.tmp"):
        with contextlib.suppress(OSError):
            if now - os.stat(other).st_mtime < MAKING_FOR:
                return None
            os.remove(other)
    try:
        os.makedirs(root, exist_ok=True)
    except OSError:
        return None
    if not os.access(root, os.W_OK):
        return None
    return ClassArchive(path, making=True, tmp=f"{path}.{os.getpid()}.tmp")


def _whole(path: str) -> bool:
    """Whether an archive holds the byte count its name records (a JVM that maps a shortened one crashes, SIGBUS)."""
    size = path[: -len(SUFFIX)].rsplit("-", 1)[-1]
    with contextlib.suppress(OSError):
        return size.isdigit() and os.path.getsize(path) == int(size)
    return False


def _maps(tmp: str) -> bool:
    """Whether a JVM starts with the archive just written (one whose writing failed, e.g. a full disk, is not kept)."""
    java = java_binary()
    try:
        return bool(java) and subprocess.run([java, "-Xshare:auto", f"-XX:SharedArchiveFile={tmp}", "-version"], capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def finish(archive: ClassArchive, proc: subprocess.Popen | None) -> bool:
    """After the session's stop: end its JVM (its stdin closed, as at the driver's exit), wait while it writes the
    archive, and put the archive in place, the older keys' archives removed. True when it is in place."""
    if proc is None:
        return False
    with contextlib.suppress(OSError, ValueError):
        proc.stdin.close()
    try:
        rc = proc.wait(EXIT_WAIT)
    except subprocess.TimeoutExpired:
        rc = None
    try:
        size = os.path.getsize(archive.tmp) if rc == 0 else 0
        if size > 0 and _maps(archive.tmp):
            final = f"{archive.path[: -len(SUFFIX)]}-{size}{SUFFIX}"  # the size in the name: a shortened file is seen
            os.replace(archive.tmp, final)
            for old in glob.glob(os.path.join(os.path.dirname(archive.path), f"{PREFIX}*{SUFFIX}")):
                if old != final:
                    os.remove(old)
            return True
    except OSError:
        pass
    with contextlib.suppress(OSError):
        os.remove(archive.tmp)
    return False
