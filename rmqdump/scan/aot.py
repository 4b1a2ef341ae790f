"""The scan kernel compiled ahead of time: an extension module a later run imports without numba.

Importing numba and setting up its compiler takes most of a short command's
time (about 0.8 s of a 1 s `info` on a small store), even when every
function comes from numba's cache. So, once per install, the kernel's entry
points are compiled by numba's ahead-of-time compiler into an ordinary
extension module in the user's cache (rmqdump.scan.native decides when, and
loads it); it is the same source as the JIT kernel, typed with the signatures
below, which are the only ones the scan path calls (tests compare the two
on every fixture store).

Run as `python -m rmqdump.scan.aot DIR`: builds into a temporary directory
beside DIR and renames it into place, so a reader never sees half a module.
A build that fails (no C compiler on the machine, say) leaves DIR.failed with
the reason, and no later run tries again until that file is removed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile

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

    from rmqdump.scan.native import configure

    configure()
    from rmqdump.scan import kernel

    parent = os.path.dirname(target)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".aot-", dir=parent)
    try:
        cc = CC(MODULE)
        cc.output_dir = tmp
        cc.verbose = False
        for name, sig in signatures().items():
            cc.export(name, sig)(getattr(kernel, name).py_func)
        cc.compile()
        os.rename(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


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
