"""The C allocator's arena limit for the whole process, set once at start-up, before any thread exists.

glibc gives each thread that allocates its own arena (up to 8 per core), and
an arena keeps the buffers its thread freed for reuse instead of returning
them: the scan workers' batch arrays stay resident after a pass, beside the
next pass's (a 16M-message rebuild peaked at ~500 MB, ~425 MB with two
arenas, at the same speed; bench/RESULTS.md). Two arenas keep the workers
from contending while bounding what freed memory is held. Elsewhere than
glibc, or when MALLOC_ARENA_MAX is set by the user, nothing is changed.
"""

from __future__ import annotations

import ctypes
import os

M_ARENA_MAX = -8  # glibc's mallopt parameter number
ARENAS = 2


def limit_arenas(arenas: int = ARENAS) -> bool:
    """Cap the process's malloc arenas at `arenas`; whether it was done."""
    if "MALLOC_ARENA_MAX" in os.environ:
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the process's own symbols, libc's among them: no library search (ldconfig) at start-up
        mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
        return bool(mallopt(M_ARENA_MAX, arenas))
    except (OSError, AttributeError):  # not glibc: its own policy stays
        return False
