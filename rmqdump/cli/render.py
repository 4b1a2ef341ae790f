"""Output for every command: JSON Lines, CSV, rich tables, progress, errors.

Commands compute results with the library and hand them here; nothing below
the CLI prints.
"""

from __future__ import annotations

import base64
import os
import sys
from contextlib import contextmanager
from typing import Any

from rmqdump.common.jsontext import encode as _ENCODE  # one spelling for every row


def __getattr__(name: str):
    """`out` and `err`, the rich consoles, made on first use: rich costs start-up time a plain `--help` need not pay."""
    if name not in ("out", "err"):
        raise AttributeError(name)
    from rich.console import Console

    g = globals()
    if "out" not in g:
        width = None if sys.stdout.isatty() else int(os.environ.get("COLUMNS", "220"))
        g["out"] = Console(highlight=False, soft_wrap=True, width=width)
        g["err"] = Console(stderr=True, highlight=False, soft_wrap=True)
    return g[name]




def jsonl(obj: dict[str, Any], out=None) -> None:
    """One JSON Lines object on stdout (or on the text file `out`)."""
    (out or sys.stdout).write(_ENCODE(obj) + "\n")


def text(chunk: str) -> None:
    """Lines already spelled as JSON Lines (by common.jsontext), written as they are."""
    sys.stdout.write(chunk)


def jsonl_streamed(obj: dict[str, Any], chunk: int = 4096) -> None:
    """One JSON line whose iterator values (lists too long to hold) are written as they are read, `chunk` items at a time."""
    from collections.abc import Iterator
    from itertools import islice

    w = sys.stdout.write
    w("{")
    for i, (k, v) in enumerate(obj.items()):
        w(("," if i else "") + _ENCODE(k) + ":")
        if not isinstance(v, Iterator):
            w(_ENCODE(v))
            continue
        w("[")
        first = True
        while part := list(islice(v, chunk)):
            w(("" if first else ",") + ",".join(map(_ENCODE, part)))
            first = False
        w("]")
    w("}\n")


def encode_body(body: bytes, how: str) -> str:
    if how == "hex":
        return body.hex()
    if how == "base64":
        return base64.b64encode(body).decode()
    return body.decode("utf-8", errors="replace")


@contextmanager
def progress(total: int, label: str, enabled: bool | None = None):
    """A byte progress bar on stderr when it is a terminal; a no-op callback otherwise."""
    made = globals().get("err")  # a console made (or set) already decides; else stderr's own answer, without loading rich
    show = (made.is_terminal if made is not None else sys.stderr.isatty()) if enabled is None else enabled
    if not show:
        yield lambda n: None
        return
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

    err = __getattr__("err")
    with Progress(TextColumn(label), BarColumn(), DownloadColumn(), TransferSpeedColumn(), TimeRemainingColumn(), console=err, transient=True) as p:
        task = p.add_task(label, total=total)
        yield lambda n: p.update(task, advance=n)


def fail(line: str, code: int = 2):
    """One-line error on stderr and the exit code; never a traceback."""
    sys.stdout.flush()
    sys.stderr.write(f"rmqdump: {line}\n")
    raise SystemExit(code)
