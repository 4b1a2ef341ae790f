"""Native code the scan uses: where numba keeps compiled code, and which CRC-32 library the kernel calls.

numba is imported only when a scan first runs (`configure()`), so commands that
scan nothing start without it. Compiled code is cached in a user cache
directory (`$NUMBA_CACHE_DIR`, `$RMQDUMP_CACHE_DIR`, else `$XDG_CACHE_HOME/rmqdump`
or `~/.cache/rmqdump`), never in the install directory, and keyed by the
layout's fingerprint and the CRC backend. The backend is chosen once per process
(`crc_library()`): libdeflate, else the system's zlib, else the kernel's table
code (`RMQDUMP_KERNEL_CRC=zlib|table` chooses a slower one).

The scan kernel itself is loaded by `load_kernel()`: the ahead-of-time
compiled copy (rmqdump.scan.aot) when this install has built it, which
needs no numba at all; else the JIT kernel, while a background process builds
that copy once (`RMQDUMP_AOT=off` keeps to the JIT kernel).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import hashlib
import importlib.machinery
import importlib.util
import os
import subprocess
import sys
import time
import zlib
from collections.abc import Callable


def cache_dir(crc: str = "table") -> str:
    """Where compiled code is kept: a directory the user can write, whatever the install directory."""
    from rmqdump.scan.layout import fingerprint  # here: the CLI imports this module at start, before it knows whether it scans

    base = os.environ.get("RMQDUMP_CACHE_DIR")
    if not base:
        xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        base = os.path.join(xdg, "rmqdump")
    return os.path.join(base, f"numba-{fingerprint()}-{crc}")


def find_zlib() -> str | None:
    """A zlib whose crc32 gives zlib.crc32's answer (it is 2-3x faster than table code)."""
    if os.environ.get("RMQDUMP_KERNEL_CRC") == "table":
        return None
    for name in ("libz.so.1", ctypes.util.find_library("z")):
        if not name:
            continue
        try:
            fn = ctypes.CDLL(name).crc32
        except (OSError, AttributeError):
            continue
        fn.restype, fn.argtypes = ctypes.c_ulong, [ctypes.c_ulong, ctypes.c_char_p, ctypes.c_uint]
        if fn(0, b"123456789", 9) == zlib.crc32(b"123456789"):
            return name
    return None


def find_deflate() -> str | None:
    """A libdeflate whose libdeflate_crc32 gives zlib.crc32's answer (RMQDUMP_KERNEL_CRC=zlib or table: not looked for)."""
    if os.environ.get("RMQDUMP_KERNEL_CRC") in ("zlib", "table"):
        return None
    for name in ("libdeflate.so.0", ctypes.util.find_library("deflate")):
        if not name:
            continue
        try:
            fn = ctypes.CDLL(name).libdeflate_crc32
        except (OSError, AttributeError):
            continue
        fn.restype, fn.argtypes = ctypes.c_uint32, [ctypes.c_uint32, ctypes.c_char_p, ctypes.c_size_t]
        if fn(0, b"123456789", 9) == zlib.crc32(b"123456789"):
            return name
    return None


@functools.cache
def crc_library() -> tuple[str, str | None]:
    """("deflate", library), ("zlib", library) or ("table", None): the kernel's CRC-32, chosen once per process.

    libdeflate's CRC-32 folds with carry-less multiplies (~3x zlib's); zlib's is 2-3x the table code's.
    """
    deflate = find_deflate()
    if deflate:
        return "deflate", deflate
    lib = find_zlib()
    return ("zlib", lib) if lib else ("table", None)


_COMPILE_NOTICES: list[Callable[[str, str], None]] = []

# What each compiled module is called in the notice.
_KERNELS = {"rmqdump.scan.kernel": "the scan kernel", "rmqdump.text.kernel": "the text kernels"}


def on_first_compile(notice: Callable[[str, str], None]) -> None:
    """Call notice(what, cache directory) when this process starts compiling code the cache does not hold (the CLI
    prints one line: the first run after an install compiles for some seconds). Called once per kernel module."""
    _COMPILE_NOTICES.append(notice)


def _compile_listener(cache: str):
    """A numba listener on "numba:compile", an event numba raises only when no cached code fits (a cache miss,
    whatever the reason: nothing cached yet, a new specialization, a changed source), never on a cached load."""
    from numba.core import event

    told: set[str] = set()

    class Listener(event.Listener):
        def on_start(self, ev):
            module = getattr(getattr(ev.data.get("dispatcher"), "py_func", None), "__module__", None)
            what = _KERNELS.get(module)
            if what is None or what in told:
                return
            told.add(what)
            for notice in _COMPILE_NOTICES:
                notice(what, cache)

        def on_end(self, ev):
            pass

    return Listener()


@functools.cache
def configure() -> str:
    """Import numba with its cache directory set and the CRC library loaded (once); returns the cache directory.

    The directory is set in numba's config only, not in the environment, so child processes choose their own.
    """
    kind, lib = crc_library()
    d = os.environ.get("NUMBA_CACHE_DIR") or cache_dir(kind)
    import numba

    numba.config.CACHE_DIR = d  # also when numba was imported before us
    if _COMPILE_NOTICES:
        from numba.core import event

        event.register("numba:compile", _compile_listener(d))
    if lib:
        import llvmlite.binding

        llvmlite.binding.load_library_permanently(lib)
    return d


AOT_LOCK_STALE = 15 * 60  # a build lock older than this was left by a build that died


def aot_dir(kind: str | None = None) -> str:
    """Where the ahead-of-time kernel of this source, layout, CRC library, Python and numba is kept."""
    kind = kind or crc_library()[0]
    h = hashlib.sha1()
    here = os.path.dirname(os.path.abspath(__file__))
    for name in ("kernel.py", "layout.py", "aot.py"):
        with open(os.path.join(here, name), "rb") as f:
            h.update(f.read())
    spec = importlib.util.find_spec("numba")  # its version file, not the package: importing numba is what this avoids
    if spec and spec.origin:
        try:
            with open(os.path.join(os.path.dirname(spec.origin), "_version.py"), "rb") as f:
                h.update(f.read())
        except OSError:
            pass
    import numpy

    h.update(repr((sys.implementation.cache_tag, numpy.__version__, importlib.machinery.EXTENSION_SUFFIXES[0])).encode())
    return os.path.join(cache_dir(kind), f"aot-{h.hexdigest()[:16]}")


def _load_aot(kind: str, lib: str | None):
    """The ahead-of-time kernel module, or None when this install has not built it (or it does not load)."""
    from rmqdump.scan.aot import MODULE

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
        for notice in _COMPILE_NOTICES:
            notice("a start-up copy of the scan kernel in the background", target)


@functools.cache
def load_kernel():
    """The scan kernel's entry points (scan, index_put, join_offsets, properties_columns, pack_bytes, holds_zero):
    the ahead-of-time module when built, else the JIT module (numba set up first), starting the build."""
    kind, lib = crc_library()
    aot = os.environ.get("RMQDUMP_AOT", "on") != "off"
    if aot:
        module = _load_aot(kind, lib)
        if module is not None:
            return module
    jit_cache = configure()
    from rmqdump.scan import kernel

    if aot:
        _start_aot_build(kind, jit_cache)
    return kernel
