"""The C allocator's policy for the whole process, set once at start-up, before any thread exists.

Arenas. glibc gives each thread that allocates its own arena (up to 8 per
core), and an arena keeps the buffers its thread freed for reuse instead of
returning them: the scan workers' batch arrays stay resident after a pass,
beside the next pass's (a 16M-message rebuild peaked at ~500 MB, ~425 MB with
two arenas, at the same speed; bench/RESULTS.md). Two arenas keep the workers
from contending while bounding what freed memory is held.

Big buffers. The kernels write every batch's columns and text into fresh
arrays of a few to 30 MB. By default glibc maps each of them on its own and
unmaps it when freed, or trims the heap's free top back to the kernel past a
threshold it moves as it goes: either way the next batch's array is new pages,
each faulted in and zeroed by the kernel (a tenth of a JSON Lines listing's
CPU). Fixed thresholds keep arrays up to 32 MiB inside the arenas and up to
128 MiB of free top in each, so a batch reuses the pages the one before it
freed; the peak stays where the batches in flight put it (bench/RESULTS.md).

Elsewhere than glibc nothing is changed; a setting the user made with glibc's
own environment variable (MALLOC_ARENA_MAX, MALLOC_MMAP_THRESHOLD_,
MALLOC_TRIM_THRESHOLD_) is left as it is.
"""

from __future__ import annotations

import ctypes
import os

ARENAS = 2
MMAP_THRESHOLD = 32 << 20  # glibc's largest: an array above it is mapped on its own whatever is set
TRIM_THRESHOLD = 128 << 20
# glibc's mallopt parameter numbers, each with the environment variable that sets it instead
SETTINGS = (
    (-8, "MALLOC_ARENA_MAX", ARENAS),  # M_ARENA_MAX
    (-3, "MALLOC_MMAP_THRESHOLD_", MMAP_THRESHOLD),  # M_MMAP_THRESHOLD
    (-1, "MALLOC_TRIM_THRESHOLD_", TRIM_THRESHOLD),  # M_TRIM_THRESHOLD
)


def tune(settings=SETTINGS) -> list[str]:
    """Apply the settings the user did not make themselves; the names of those applied."""
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the process's own symbols, libc's among them: no library search (ldconfig) at start-up
    except (OSError, AttributeError):  # not glibc: its own policy stays
        return []
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    return [name for param, name, value in settings if name not in os.environ and mallopt(param, value)]
