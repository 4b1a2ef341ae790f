"""Output for every command: JSON Lines, CSV, rich tables, progress, errors.

Commands compute results with the library and hand them here; nothing below
the CLI prints.
"""

from __future__ import annotations

import base64
import os
import re
import sys
from contextlib import contextmanager
from typing import Any

from rmqdump.common.jsontext import encode as _ENCODE  # one spelling for every row

_EMOJI = re.compile(r":\S*?:")  # what rich could read as an emoji code (:name:), markup on or off


def _plain(text: str, kw: dict) -> bool:
    """Whether rich would print `text` as it is: one line of printable characters, nothing it could read as markup
    ([...]) or an emoji code, no highlighting, no style, no wrapping (the consoles below soft-wrap)."""
    if not kw.keys() <= {"highlight", "markup", "soft_wrap"} or kw.get("highlight") or kw.get("soft_wrap") is False:
        return False
    if not text.isprintable() or _EMOJI.search(text):
        return False
    return kw.get("markup") is False or "[" not in text


def _reader_gone() -> None:
    """What a rich console does when the reader of its stream went away (`rmqdump journey ID | head -1`): raise, so
    the command ends as it does for any closed pipe (cli.app: exit 0, as for plain lines). rich's own answer was to
    exit 1, which says "problems found"."""
    raise BrokenPipeError


class _Console:
    """`out` or `err`: a plain line (a summary, a count) is written as it is, as rich would write it; anything else
    (tables, markup, styles) goes to a rich console made on first use, so a command that prints only plain lines never
    imports rich (a tenth of a small store's `cq verify`)."""

    def __init__(self, stderr: bool):
        self._stderr = stderr
        self.made = None

    @property
    def rich(self):
        """The rich console, made on first use."""
        if self.made is None:
            from rich.console import Console

            if self._stderr:
                self.made = Console(stderr=True, highlight=False, soft_wrap=True)
            else:
                width = None if sys.stdout.isatty() else int(os.environ.get("COLUMNS", "220"))
                self.made = Console(highlight=False, soft_wrap=True, width=width)
            self.made.on_broken_pipe = _reader_gone
        return self.made

    def print(self, *objects, **kw) -> None:
        # once made (a table, a progress bar that may be live), rich writes everything, as it orders its own output
        if self.made is None and len(objects) == 1 and isinstance(objects[0], str) and _plain(objects[0], kw):
            f = sys.stderr if self._stderr else sys.stdout
            f.write(objects[0] + "\n")
            f.flush()
            return
        self.rich.print(*objects, **kw)

    def __getattr__(self, name: str):
        return getattr(self.rich, name)


out = _Console(stderr=False)
err = _Console(stderr=True)


def cell(value) -> str:
    """A table cell: a value as text, nothing for a value that is absent (None)."""
    return "" if value is None else str(value)


def table(*columns, **kw):
    """A rich Table in the one style of every listing: no box, a bold header (`kw`: rich's other Table options)."""
    from rich.table import Table

    return Table(*columns, box=None, header_style="bold", **kw)


def tables(columns, rows, every: int | None = 500, **kw) -> None:
    """Rows of cells printed as they come, as tables of `every` rows (one table: None), so that a listing of a million
    findings is never held; nothing for no rows (`kw`: table's)."""
    from itertools import islice

    rows = iter(rows)
    while chunk := list(islice(rows, every)):
        t = table(*columns, **kw)
        for cells in chunk:
            t.add_row(*cells)
        out.print(t)


def message_cells(m) -> list[str]:
    """A message's cells in the columns every table of messages starts with (`commitlog`'s, the index lookup's):
    offset, size, topic, q, qoffset, stored (UTC), tags, keys, uniq_key."""
    from rmqdump.common.timeutil import iso

    return [
        str(m.phys_offset), str(m.total_size), m.topic, str(m.queue_id), str(m.queue_offset), iso(m.store_timestamp), m.tags or "",
        " ".join(m.keys), m.uniq_key or "",
    ]  # fmt: skip


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
    made = err.made if isinstance(err, _Console) else err  # a console made (or set) already decides; else stderr's own answer, without loading rich
    show = (made.is_terminal if made is not None else sys.stderr.isatty()) if enabled is None else enabled
    if not show:
        yield lambda n: None
        return
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

    console = err.rich if isinstance(err, _Console) else err
    with Progress(TextColumn(label), BarColumn(), DownloadColumn(), TransferSpeedColumn(), TimeRemainingColumn(), console=console, transient=True) as p:
        task = p.add_task(label, total=total)
        yield lambda n: p.update(task, advance=n)


@contextmanager
def interruptible(out):
    """A command writing `out` stops on SIGTERM as on Ctrl-C: the library removes its temporary directory, and the
    command says in one line that nothing was written (exit 2)."""
    import signal

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    except KeyboardInterrupt:
        fail(f"interrupted: {out}: nothing was written (the temporary directory was removed)", 2)
    finally:
        signal.signal(signal.SIGTERM, old)


def fail(line: str, code: int = 2):
    """One-line error on stderr and the exit code; never a traceback."""
    sys.stdout.flush()
    sys.stderr.write(f"rmqdump: {line}\n")
    raise SystemExit(code)
