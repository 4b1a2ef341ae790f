"""Output for every command: JSON Lines, CSV, rich tables, progress, errors.

Commands compute results with the library and hand them here; nothing below
the CLI prints.
"""

from __future__ import annotations

import base64
import csv
import json
import os
import sys
from collections.abc import Iterable
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

_width = None if sys.stdout.isatty() else int(os.environ.get("COLUMNS", "220"))
out = Console(highlight=False, soft_wrap=True, width=_width)
err = Console(stderr=True, highlight=False, soft_wrap=True)


_ENCODE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode  # built once, not per line


def jsonl(obj: dict[str, Any]) -> None:
    sys.stdout.write(_ENCODE(obj) + "\n")


def encode_body(body: bytes, how: str) -> str:
    if how == "hex":
        return body.hex()
    if how == "base64":
        return base64.b64encode(body).decode()
    return body.decode("utf-8", errors="replace")


class CsvOut:
    def __init__(self, columns: list[str]):
        self.columns = columns
        self.w = csv.DictWriter(sys.stdout, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
        self.w.writeheader()

    def row(self, d: dict[str, Any]) -> None:
        self.w.writerow({k: (json.dumps(v, ensure_ascii=False) if isinstance(v, (dict, list)) else v) for k, v in d.items()})


@contextmanager
def progress(total: int, label: str, enabled: bool | None = None):
    """A byte progress bar on stderr when it is a terminal; a no-op callback otherwise."""
    show = err.is_terminal if enabled is None else enabled
    if not show:
        yield lambda n: None
        return
    with Progress(TextColumn(label), BarColumn(), DownloadColumn(), TransferSpeedColumn(), TimeRemainingColumn(), console=err, transient=True) as p:
        task = p.add_task(label, total=total)
        yield lambda n: p.update(task, advance=n)


def problem_line(p) -> None:
    err.print(f"[red]{p.line()}[/red]", markup=True, highlight=False) if err.is_terminal else err.print(p.line(), markup=False)


def fail(line: str, code: int = 2):
    """One-line error on stderr and the exit code; never a traceback."""
    err.print(f"rmqdump: {line}", markup=False, highlight=False)
    raise SystemExit(code)


def emit_rows(rows: Iterable[dict], fmt: str, columns: list[str]) -> None:
    if fmt == "jsonl":
        for r in rows:
            jsonl(r)
    elif fmt == "csv":
        w = CsvOut(columns)
        for r in rows:
            w.row(r)
    else:
        from rich.table import Table

        t = Table(*columns, show_lines=False)
        for r in rows:
            t.add_row(*("" if r.get(c) is None else str(r.get(c)) for c in columns))
        out.print(t)
