"""Native code the scan uses: where numba keeps compiled code, and which CRC-32 library the kernel calls.

numba is imported only when a scan first runs (`configure()`), so commands that
scan nothing start without it. Compiled code is cached in a user cache
directory (`$NUMBA_CACHE_DIR`, `$RMQDUMP_CACHE_DIR`, else `$XDG_CACHE_HOME/rmqdump`
or `~/.cache/rmqdump`), never in the install directory, and keyed by the
layout's fingerprint and the CRC backend. The backend is chosen once per process
(`crc_library()`): libdeflate, else the system's zlib, else the kernel's table
code (`RMQDUMP_KERNEL_CRC=zlib|table` chooses a slower one).

The scan kernel itself is loaded by rmqdump.scan.aot.load(SCAN): the
copy compiled ahead of time when this install has built it, else the JIT one.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import zlib
from collections.abc import Callable, Iterator

# Helpers both kernel sets inline from files of their own, as the package names them: numba's cache checks only the file
# of the function it compiled, so their bytes key the cache directory (code_fingerprint) and the built modules
# (rmqdump.scan.aot.KernelSet.sources).
SHARED_HELPERS = ("scan/unsigned.py", "scan/bytecopy.py", "scan/words.py")


def _helper(name: str, folder: str | None) -> bytes:
    """A shared helper's source: through the import system (a folder, or the zip Spark ships the package in to its
    executors), or from `folder` (the package's root)."""
    if folder is None:
        import pkgutil  # here, as hashlib below: only a JIT run asks (the CLI imports this module at start)

        return pkgutil.get_data("rmqdump", name) or b""
    with open(os.path.join(folder, name), "rb") as f:
        return f.read()


def code_fingerprint(folder: str | None = None) -> str:
    """What JIT-compiled code depends on besides its own file: the layout's constants and the shared helpers' bytes
    (a changed helper would otherwise run stale)."""
    import hashlib

    from rmqdump.scan.layout import fingerprint  # here: the CLI imports this module at start, before it knows whether it scans

    h = hashlib.sha1(fingerprint().encode())
    for name in SHARED_HELPERS:
        h.update(_helper(name, folder))
    return h.hexdigest()[:16]


def cache_dir(crc: str = "table") -> str:
    """Where compiled code is kept: a directory the user can write, whatever the install directory."""
    from rmqdump.common.cachedir import cache_root

    return os.path.join(cache_root(), f"numba-{code_fingerprint()}-{crc}")


def _sonames(soname: str, name: str) -> Iterator[str]:
    """`soname`, then the library the system's search finds for `name`: asked only when the usual soname fails, as
    ctypes.util.find_library runs ldconfig in a subprocess (a tenth of a small store's scan)."""
    yield soname
    found = ctypes.util.find_library(name)
    if found:
        yield found


def find_zlib() -> str | None:
    """A zlib whose crc32 gives zlib.crc32's answer (it is 2-3x faster than table code)."""
    if os.environ.get("RMQDUMP_KERNEL_CRC") == "table":
        return None
    for name in _sonames("libz.so.1", "z"):
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
    for name in _sonames("libdeflate.so.0", "deflate"):
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


COMPILE_NOTICES: list[Callable[[str, str], None]] = []

# What each compiled module is called in the notice.
_KERNELS = {"rmqdump.scan.kernel": "the scan kernel", "rmqdump.text.kernel": "the text kernels"}


def on_first_compile(notice: Callable[[str, str], None]) -> None:
    """Call notice(what, cache directory) when this process starts compiling code the cache does not hold (the CLI
    prints one line: the first run after an install compiles for some seconds). Called once per kernel module."""
    COMPILE_NOTICES.append(notice)


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
            for notice in COMPILE_NOTICES:
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
    if COMPILE_NOTICES:
        from numba.core import event

        event.register("numba:compile", _compile_listener(d))
    if lib:
        import llvmlite.binding

        llvmlite.binding.load_library_permanently(lib)
    return d

