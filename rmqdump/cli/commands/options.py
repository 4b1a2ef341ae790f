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


class Engine(str, Enum):
    local = "local"
    spark = "spark"


def engine_option(what: str) -> Engine:
    return typer.Option(Engine.local, "--engine", help=f"local (this machine), or spark (PySpark: {what}).")


def master_option() -> str:
    return typer.Option("local[*]", "--master", help="spark engine: the Spark master URL (spark://host:7077, yarn, k8s://..., local[N]).")


def spark_conf_option() -> list[str]:
    return typer.Option([], "--spark-conf", help="spark engine: KEY=VALUE Spark setting; repeat it.")
