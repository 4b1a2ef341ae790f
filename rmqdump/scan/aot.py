"""Kernels compiled ahead of time: extension modules a run imports without numba.

Importing numba and setting up its compiler takes most of a short command's
time (about 0.8 s of a 1 s `info` on a small store), and compiling a kernel
set the first time takes 10-20 s. So each kernel set (the scan kernel here,
the text kernels in rmqdump.text.batches) is also compiled by numba's
ahead-of-time compiler into an ordinary extension module: the same source
as the JIT functions, typed with the signatures its `KernelSet` declares,
which are the only ones the commands call (tests compare the two on every
fixture store). `load(kernels)` is how a command gets a set, from the first
of these that fits this source, processor and CRC library:

1. installed: built by the package's own build (setup.py), beside the JIT
   module, so the first run after an install compiles nothing;
2. cached: built once in the background, in the user's cache, by an earlier
   run that found no installed one (a wheel built on another machine, say);
3. the JIT functions, starting that background build.

`RMQDUMP_AOT=off` keeps to the JIT functions, `RMQDUMP_AOT=cache` skips the
installed module. The modules' entry points release Python's lock while they
run, as the JIT functions do, so threads sharing a scan use them too. Run as
`python -m rmqdump.scan.aot DIR LOCK MODULE:SET` for the background build:
it builds into a temporary directory beside DIR and renames it into place,
so a reader never sees half a module; a build that fails (no C compiler, say)
leaves DIR.failed with the reason, and no later run tries again.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import importlib
import importlib.machinery
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

from rmqdump.scan.native import COMPILE_NOTICES, SHARED_HELPERS, cache_dir, configure, crc_library

PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the rmqdump package's directory
SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]
AOT_LOCK_STALE = 15 * 60  # a build lock older than this was left by a build that died


@dataclass(frozen=True)
class KernelSet:
    """One set of kernels compiled together: the extension module's name, the package files whose bytes it depends
    on (the JIT module's own first), whether it calls the CRC library, its entry points' signatures, the JIT
    module it is compiled from (imported by `jit()`), where it is declared ("module:attribute", for a build in
    another process), and whether its kernels count references to arrays (numba's runtime: only a set that
    allocates needs it, and its counting costs a call per array a helper takes)."""

    module: str
    sources: tuple[str, ...]
    crc: bool
    signatures: Callable[[], dict]
    jit: Callable[[], ModuleType]
    home: str
    nrt: bool = True

    @property
    def installed(self) -> str:
        """Where the package's build puts the module: beside the JIT module, under the module's own name."""
        return os.path.join(PACKAGE, os.path.dirname(self.sources[0]), self.module + SUFFIX)


def _scan_signatures() -> dict:
    """Each scan entry point and its one signature: store bytes read-only, columns int64, C order."""
    from numba import types as T

    data = T.Array(T.uint8, 1, "C", readonly=True)
    i1, i2, i32, u8, b1 = T.int64[::1], T.int64[:, ::1], T.int32[::1], T.uint8[::1], T.boolean[::1]
    props = T.Tuple((i32, i32, u8, i32, u8, i32, u8, u8, i32, u8, u8, i32, i32, u8, T.int64))
    return {
        "scan": T.Tuple((T.int64, T.int64, T.int64, T.int64, i1))(data, T.int64, T.int64, T.int64, T.boolean, T.boolean, i2, i2, T.int64, T.int64),
        "index_put": T.int64(i32, i32, T.int64, i32),
        "join_offsets": b1(i1, i1, i1),
        "unit_pointers": u8(i1, i32, i1, i1, i1, i1, i32, i32, i32, i1, i1, i1, i1, T.int64, T.int64, T.int64, T.boolean, i1),
        "properties_columns": props(data, i1, i1),
        "pack_bytes": T.Tuple((i32, u8))(data, i1, i1),
        "holds_zero": b1(data, i1, i1),
        "distinct_codes": T.Tuple((T.uint64[::1], i32))(T.uint64[::1]),
        "word_codes": T.Tuple((T.uint64[::1], i32))(data, i1),
        "spell_rows": T.Tuple((i32, u8))(T.Array(T.uint8, 1, "C", readonly=True), i1, i32, T.Array(T.uint8, 2, "C", readonly=True), T.Array(T.uint16, 1, "C", readonly=True)),
    }


def _scan_jit() -> ModuleType:
    from rmqdump.scan import kernel

    return kernel


SCAN = KernelSet("rmqdump_scan_kernel", ("scan/kernel.py", "scan/layout.py", *SHARED_HELPERS, "scan/aot.py"), True, _scan_signatures, _scan_jit, "rmqdump.scan.aot:SCAN")
MODULE = SCAN.module  # the scan kernel's module name, as the tests and load(SCAN).__name__ know it


def key(kernels: KernelSet) -> int:
    """What a built module must have been built from to serve here: its sources, this processor (the module uses its
    instructions), this Python, and the CRC library when it calls one. Compiled into the module as `build_key()`."""
    h = hashlib.sha1()
    for name in kernels.sources:
        with open(os.path.join(PACKAGE, name), "rb") as f:  # OSError where the package is not files (a zip on Spark executors)
            h.update(f.read())
    h.update(repr((sys.implementation.cache_tag, SUFFIX, _cpu(), crc_library()[0] if kernels.crc else None)).encode())
    return int(h.hexdigest()[:15], 16)


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


def aot_dir(kernels: KernelSet = SCAN) -> str:
    """Where the background build of a kernel set keeps it in the user's cache (numpy's version too: the module is
    built against this numpy; not numba's, which the built module does not use)."""
    import numpy

    h = hashlib.sha1(repr((key(kernels), numpy.__version__)).encode()).hexdigest()[:16]
    return os.path.join(cache_dir(crc_library()[0]), f"aot-{kernels.module}-{h}")


def compile_to(kernels: KernelSet, path: str) -> None:
    """Compile a kernel set into the extension module `path`, with its `build_key()`; the file appears whole or not
    at all. The package's build (setup.py) and the background build both come here."""
    from numba.pycc import CC

    configure()
    jit = kernels.jit()
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".aot-", dir=parent)
    try:
        import llvmlite.binding

        cc = CC(kernels.module)
        cc.output_dir = tmp
        cc.verbose = False
        cc.use_nrt = kernels.nrt
        cc.target_cpu = llvmlite.binding.get_host_cpu_name()  # as the JIT compiles: this machine's instructions, not a generic CPU's
        for name, sig in kernels.signatures().items():
            cc.export(name, sig)(getattr(jit, name).py_func)
        built = key(kernels)
        cc.export("build_key", "int64()")(lambda: built)
        with _releasing_the_lock():
            cc.compile()
        os.replace(os.path.join(tmp, cc.output_file), path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def _releasing_the_lock():
    """Entry points that release Python's lock while they run, as the JIT functions (nogil) do, so threads sharing a
    scan run side by side on them. numba's ahead-of-time compiler takes no such option: its compile flags are
    swapped, for this compile only, for flags that say so."""
    from numba.core.compiler import Flags
    from numba.pycc import compiler

    class Released(Flags):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.release_gil = True

    compiler.Flags = Released
    try:
        yield
    finally:
        compiler.Flags = Flags


def _import(kernels: KernelSet, path: str):
    """The module at `path` when it was built from what serves here, else None (absent, stale, or it does not load)."""
    if not os.path.exists(path):
        return None
    try:
        lib = crc_library()[1] if kernels.crc else None
        if lib:  # the module calls the CRC library's function by name: make it visible first
            ctypes.CDLL(lib, mode=ctypes.RTLD_GLOBAL)
        spec = importlib.util.spec_from_file_location(kernels.module, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module if module.build_key() == key(kernels) else None
    except (ImportError, OSError, AttributeError):
        return None


def _start_build(kernels: KernelSet, jit_cache: str) -> None:
    """Build a kernel set in the user's cache in a detached, lowest-priority process, once: a lock keeps runs side by
    side from building it twice. Said on stderr when the JIT functions were already cached (else the compile notice
    says it)."""
    target = aot_dir(kernels)
    lock = target + ".lock"
    jit_cached = _jit_cached(kernels, jit_cache)
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
    try:
        subprocess.Popen(
            [sys.executable, "-m", "rmqdump.scan.aot", target, lock, kernels.home],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True, close_fds=True,
        )
    except OSError:
        os.unlink(lock)
        return
    if jit_cached:
        for notice in COMPILE_NOTICES:
            notice(f"a start-up copy of {kernels.module} in the background", target)


def _jit_cached(kernels: KernelSet, jit_cache: str) -> bool:
    """Whether numba's cache holds the set's JIT functions (numba keeps a source file's functions in a directory named
    after the file's folder, as FOLDER_HASH/STEM.FUNCTION-LINE...)."""
    folder, stem = os.path.dirname(kernels.sources[0]) + "_", os.path.basename(kernels.sources[0]).removesuffix("py")
    with contextlib.suppress(OSError):
        for d in os.listdir(jit_cache):
            if d.startswith(folder) and any(n.startswith(stem) for n in os.listdir(os.path.join(jit_cache, d))):
                return True
    return False


def declared(home: str) -> KernelSet:
    """The kernel set declared at `home` ("module:attribute")."""
    where, name = home.split(":")
    return getattr(importlib.import_module(where), name)


@functools.cache
def _jit(kernels: KernelSet) -> ModuleType:
    """A set's JIT kernel module, numba set up first (its cache directory, the CRC library, the compile notice)."""
    configure()
    return kernels.jit()


@functools.cache
def load(kernels: KernelSet):
    """A kernel set's entry points: the installed module, else the one built in the user's cache, else the JIT
    module (starting the cache's build). See the module's docstring."""
    mode = os.environ.get("RMQDUMP_AOT", "on")
    # the package as files on disk: shipped to Spark executors as a zip, it is read and built by the JIT only
    aot = mode != "off" and os.path.isfile(__file__)
    if aot:
        try:
            module = (_import(kernels, kernels.installed) if mode != "cache" else None) or _import(kernels, os.path.join(aot_dir(kernels), kernels.module + SUFFIX))
        except OSError:
            module, aot = None, False
        if module is not None:
            return module
    jit = _jit(kernels)
    if aot:
        with contextlib.suppress(OSError):
            _start_build(kernels, configure())
    return jit


def main(argv: list[str]) -> int:
    """The background build: lowest priority, its lock removed whatever happens."""
    target, lock = argv[0], argv[1] if len(argv) > 1 else None
    with contextlib.suppress(OSError):
        os.nice(19)
    try:
        kernels = declared(argv[2])
        tmp = tempfile.mkdtemp(prefix=".aot-", dir=os.path.dirname(target))
        try:
            compile_to(kernels, os.path.join(tmp, kernels.module + SUFFIX))
            os.rename(tmp, target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
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
