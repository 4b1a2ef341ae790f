"""One module per command (group); each exposes `register(app, guarded)`. The lifecycle views are one module,
rmqdump.cli.views, whose `register(app, guarded, name)` registers the view of that name."""

from __future__ import annotations

import importlib

MODULES = ["commitlog", "export", "info", "cq", "compaction", "offsets", "index", "msgid", "diff", "rebuild", "repair", "report", "salvage", "sql", "timer", "journey", "retry", "tx", "pop", "delay"]
VIEWS = ("retry", "tx", "pop", "delay")


def register(app, guarded, names: list[str] = MODULES) -> None:
    """Register the commands `names` (default: every one)."""
    for name in names:
        if name in VIEWS:
            importlib.import_module("rmqdump.cli.views").register(app, guarded, name)
        else:
            importlib.import_module(f"rmqdump.cli.commands.{name}").register(app, guarded)
