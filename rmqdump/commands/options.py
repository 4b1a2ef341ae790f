"""Options shared by several commands, so they are spelled the same everywhere."""

from __future__ import annotations

from enum import Enum
from pathlib import Path

import typer


class Format(str, Enum):
    table = "table"
    jsonl = "jsonl"
    csv = "csv"


class ListFormat(str, Enum):
    table = "table"
    jsonl = "jsonl"


class BodyMode(str, Enum):
    none = "none"
    text = "text"
    hex = "hex"
    base64 = "base64"


def store_option() -> Path:
    return typer.Option(Path("."), "--store", "-s", help="Store root directory (holds commitlog/, consumequeue/, index/).", show_default=True)
