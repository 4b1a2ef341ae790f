"""stdout's pipe widened to the largest buffer an unprivileged process may give it, once at start-up.

A Linux pipe holds 64 KiB: a listing that writes hundreds of megabytes into
`| gzip`, `| jq` or `| cat` wakes its reader and sleeps again every 64 KiB
(29,000 context switches for a million JSON lines, 6,000 at 1 MiB; the
whole command 0.94x, bench/RESULTS.md). Only a pipe is changed (a file or a
terminal has no such buffer); where the kernel refuses (another system, a
user over its pipe quota), the pipe stays as it was.
"""

from __future__ import annotations

import os
import stat

WIDE = 1 << 20  # /proc/sys/fs/pipe-max-size's default: the most an unprivileged process may ask for
MAX_SIZE = "/proc/sys/fs/pipe-max-size"


def widen(fd: int, size: int = WIDE) -> int | None:
    """Pipe `fd`'s buffer raised to `size` bytes (or to the system's lower limit); its new size, or None when `fd` is
    not a pipe or the kernel keeps it as it was."""
    try:
        import fcntl

        setsz = fcntl.F_SETPIPE_SZ
    except (ImportError, AttributeError):  # not Linux
        return None
    try:
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            return None
        try:
            return fcntl.fcntl(fd, setsz, size)
        except PermissionError:  # above this system's pipe-max-size
            with open(MAX_SIZE, "rb") as f:
                limit = int(f.read())
            return fcntl.fcntl(fd, setsz, min(size, limit)) if 0 < limit < size else None
    except (OSError, ValueError):  # the pipe kept as it was (a quota reached, no /proc)
        return None
