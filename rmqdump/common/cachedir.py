"""rmqdump's user cache directory: compiled kernels and the Spark driver JVM's class archive, never the install directory."""

from __future__ import annotations

import os


def cache_root() -> str:
    """`$RMQDUMP_CACHE_DIR`, else `$XDG_CACHE_HOME/rmqdump`, else `~/.cache/rmqdump` (not created here)."""
    base = os.environ.get("RMQDUMP_CACHE_DIR")
    if base:
        return base
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(xdg, "rmqdump")
