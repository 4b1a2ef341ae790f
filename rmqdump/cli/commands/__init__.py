"""One module per command (group); each exposes `register(app, guarded)`."""

from __future__ import annotations

import importlib

MODULES = ["commitlog", "export", "info", "cq", "compaction", "offsets", "index", "msgid", "diff", "rebuild", "repair", "report", "salvage", "sql", "timer", "journey", "retry", "tx", "pop", "delay"]


def register(app, guarded) -> None:
    for name in MODULES:
        importlib.import_module(f"rmqdump.cli.commands.{name}").register(app, guarded)
