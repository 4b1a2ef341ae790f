"""The scan kernel compiled ahead of time: an extension module a later run imports without numba.

Importing numba and setting up its compiler takes most of a short command's
time (about 0.8 s of a 1 s `info` on a small store), even when every
function comes from numba's cache. So, once per install, the kernel's entry
points are compiled by numba's ahead-of-time compiler into an ordinary
extension module in the user's cache (rmqdump.scan.native decides when, and
loads it); it is the same source as the JIT kernel, typed with the signatures
below, which are the only ones the scan path calls (tests compare the two
on every fixture store).

`load_kernel()` is how every scan gets the kernel: this module when built,
else the JIT one, starting the build (`RMQDUMP_AOT=off`: the JIT one only).
Run as `python -m rmqdump.scan.aot DIR`: builds into a temporary directory
beside DIR and renames it into place, so a reader never sees half a module.
A build that fails (no C compiler on the machine, say) leaves DIR.failed with
the reason, and no later run tries again until that file is removed.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import importlib.machinery
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time

from rmqdump.scan.native import COMPILE_NOTICES, cache_dir, configure, crc_library

MODULE = "rmqdump_scan_kernel"


def signatures() -> dict:
    """Each exported entry point and its one signature: store bytes read-only, columns int64, C order."""
    from numba import types as T

    data = T.Array(T.uint8, 1, "C", readonly=True)
    i1, i2, i32, u8, b1 = T.int64[::1], T.int64[:, ::1], T.int32[::1], T.uint8[::1], T.boolean[::1]
    props = T.Tuple((i32, i32, u8, i32, u8, i32, u8, u8, i32, u8, u8, i32, i32, u8, T.int64))
    return {
        "scan": T.Tuple((T.int64, T.int64, T.int64, T.int64, i1))(data, T.int64, T.int64, T.int64, T.boolean, i2, i2, T.int64, T.int64),
        "index_put": T.int64(i32, i32, T.int64, i32),
        "join_offsets": b1(i1, i1, i1),
        "properties_columns": props(data, i1, i1),
        "pack_bytes": T.Tuple((i32, u8))(data, i1, i1),
        "holds_zero": b1(data, i1, i1),
    }


def build(target: str) -> None:
    """Compile the kernel's entry points into `target`/MODULE*.so (the directory appears whole or not at all)."""
    from numba.pycc import CC

    configure()
    from rmqdump.scan import kernel

    parent = os.path.dirname(target)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".aot-", dir=parent)
    try:
        import llvmlite.binding

        cc = CC(MODULE)
        cc.output_dir = tmp
        cc.verbose = False
        cc.target_cpu = llvmlite.binding.get_host_cpu_name()  # as the JIT compiles: this machine's instructions, not a generic CPU's
        for name, sig in signatures().items():
            cc.export(name, sig)(getattr(kernel, name).py_func)
        cc.compile()
        os.rename(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


AOT_LOCK_STALE = 15 * 60  # a build lock older than this was left by a build that died


def aot_dir(kind: str | None = None) -> str:
    """Where the ahead-of-time kernel of this source, layout, CRC library, Python and numba is kept."""
    kind = kind or crc_library()[0]
    h = hashlib.sha1()
    here = os.path.dirname(os.path.abspath(__file__))
    for name in ("kernel.py", "layout.py", "aot.py"):
        with open(os.path.join(here, name), "rb") as f:  # OSError where the package is not files (a zip on Spark executors)
            h.update(f.read())
    spec = importlib.util.find_spec("numba")  # its version file, not the package: importing numba is what this avoids
    if spec and spec.origin:
        try:
            with open(os.path.join(os.path.dirname(spec.origin), "_version.py"), "rb") as f:
                h.update(f.read())
        except OSError:
            pass
    import numpy

    h.update(repr((sys.implementation.cache_tag, numpy.__version__, importlib.machinery.EXTENSION_SUFFIXES[0], _cpu())).encode())
    return os.path.join(cache_dir(kind), f"aot-{h.hexdigest()[:16]}")


def _cpu() -> str:
    """This machine's processor and its instruction sets (the module is built for them; a cache directory shared by
    other machines keeps one module per kind of processor)."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            lines = [ln for ln in f if ln.startswith(("model name", "flags", "Features", "CPU part"))]
        return "".join(dict.fromkeys(lines))
    except OSError:
        import platform

        return platform.machine() + platform.processor()


def _load_aot(kind: str, lib: str | None):
    """The ahead-of-time kernel module, or None when this install has not built it (or it does not load)."""
    path = os.path.join(aot_dir(kind), MODULE + importlib.machinery.EXTENSION_SUFFIXES[0])
    if not os.path.exists(path):
        return None
    try:
        if lib:  # the module calls the CRC library's function by name: make it visible first
            ctypes.CDLL(lib, mode=ctypes.RTLD_GLOBAL)
        spec = importlib.util.spec_from_file_location(MODULE, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    except (ImportError, OSError):
        return None


def _start_aot_build(kind: str, jit_cache: str) -> None:
    """Build the ahead-of-time kernel in a detached, lowest-priority process, once: a lock keeps runs side by side
    from building it twice. Said on stderr when the JIT kernel is already cached (else the compile notice says it)."""
    target = aot_dir(kind)
    lock = target + ".lock"
    if os.path.exists(target + ".failed"):  # tried once on this install and could not build: the JIT kernel serves
        return
    try:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if os.path.exists(lock) and time.time() - os.path.getmtime(lock) > AOT_LOCK_STALE:
            os.unlink(lock)
        fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except OSError:  # being built, or a cache directory this user cannot write: the JIT kernel serves
        return
    os.close(fd)
    jit_cached = os.path.isdir(jit_cache) and any(n.startswith("kernel.scan-") for n in os.listdir(jit_cache))
    try:
        subprocess.Popen(
            [sys.executable, "-m", "rmqdump.scan.aot", target, lock],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True, close_fds=True,
        )
    except OSError:
        os.unlink(lock)
        return
    if jit_cached:
        for notice in COMPILE_NOTICES:
            notice("a start-up copy of the scan kernel in the background", target)


_THREADS = False  # set once threads share the kernel's work in this process (see threads_share_the_kernel)


def threads_share_the_kernel() -> None:
    """Called by the local engine before it runs ranges on several threads: from then on the kernel's calls go to the
    JIT kernel, whose entry points release Python's lock (numba's ahead-of-time functions hold it, which would run
    the threads one after another). A store worth threads is big enough that numba's start-up does not count."""
    global _THREADS
    _THREADS = True


class _Kernels:
    """The ahead-of-time module's entry points while one thread scans; the JIT module's once threads share the work."""

    def __init__(self, module):
        self._aot = module

    @property
    def __name__(self) -> str:
        return _jit().__name__ if _THREADS else self._aot.__name__

    def __getattr__(self, name: str):
        return getattr(_jit() if _THREADS else self._aot, name)


@functools.cache
def _jit():
    """The JIT kernel module, numba set up first (its cache directory, the CRC library, the compile notice)."""
    configure()
    from rmqdump.scan import kernel

    return kernel


@functools.cache
def load_kernel():
    """The scan kernel's entry points (scan, index_put, join_offsets, properties_columns, pack_bytes, holds_zero):
    the ahead-of-time module when built (the JIT one when threads share the work), else the JIT module, starting
    the build."""
    kind, lib = crc_library()
    # the package as files on disk: shipped to Spark executors as a zip, it is read and built by the JIT only
    aot = os.environ.get("RMQDUMP_AOT", "on") != "off" and os.path.isfile(__file__)
    if aot:
        try:
            module = _load_aot(kind, lib)
        except OSError:
            module, aot = None, False
        if module is not None:
            return _Kernels(module)
    kernel = _jit()
    if aot:
        with contextlib.suppress(OSError):
            _start_aot_build(kind, configure())
    return kernel


def main(argv: list[str]) -> int:
    """The background build: lowest priority, its lock removed whatever happens."""
    target, lock = argv[0], argv[1] if len(argv) > 1 else None
    with contextlib.suppress(OSError):
        os.nice(19)
    try:
        build(target)
        return 0
    except Exception as e:  # no C compiler, say: the JIT kernel stays in use, and no later run tries again
        with contextlib.suppress(OSError), open(target + ".failed", "w", encoding="utf-8") as f:
            f.write(f"{type(e).__name__}: {e}\n")
        return 1
    finally:
        if lock:
            with contextlib.suppress(OSError):
                os.unlink(lock)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
