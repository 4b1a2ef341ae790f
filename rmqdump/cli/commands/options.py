"""Every option more than one command takes, spelled once, so each name means one thing everywhere.

| option | meaning |
|---|---|
| --store/-s DIR | a store root (repeatable where several stores make sense) |
| --topic/-t, --queue/-q | a topic, a queue id |
| --since/--until TIME | store-time window: epoch ms or ISO 8601 (UTC unless a zone is given) |
| --limit/-n N | cap on results |
| --format/-f | table, jsonl (and csv or parquet where offered) |
| --out/-o PATH | where results are written |
| --workers/-j N | processes working in parallel |
| --body MODE | bodies printed or exported |
| --force | replace an existing output |
| --no-crc / --crc | skip CRC checks done by default / ask for CRC checks not done by default |
| --temp-dir DIR | where temporary files may spill (never inside a store) |
| --broker-version X.Y.Z | the broker release that will restart the store: the recovery preview follows its rules |
| --engine local|spark (--master, --spark-conf, --ship) | who reads the CommitLog's byte ranges: this machine's threads, or Spark tasks |

Only typer and enums here: importing this module must stay cheap (`rmqdump --help`).
"""

from __future__ import annotations

from contextlib import contextmanager
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


class DatasetFormat(str, Enum):
    """What export and salvage write."""

    parquet = "parquet"
    jsonl = "jsonl"


class BodyMode(str, Enum):
    none = "none"
    text = "text"
    hex = "hex"
    base64 = "base64"


class Engine(str, Enum):
    local = "local"
    spark = "spark"


def store_option() -> Path:
    return typer.Option(Path("."), "--store", "-s", help="Store root directory (holds commitlog/, consumequeue/, index/).", show_default=True)


def storedir_argument() -> Path:
    return typer.Argument(None, metavar="STOREDIR", help="Store root (holds commitlog/); only read. Or give it as --store/-s.", show_default=False)


def storedir_option() -> Path:
    return typer.Option(None, "--store", "-s", metavar="STOREDIR", help="Store root, instead of STOREDIR.")


def one_store(command: str, store: Path | None, store_opt: Path | None) -> Path:
    """The store given as STOREDIR or --store/-s, exactly once (commands that write a new store from one)."""
    if (store is None) == (store_opt is None):
        from rmqdump.cli import render

        render.fail(f"usage: rmqdump {command}: give the store once, as STOREDIR or --store/-s (see 'rmqdump {command} --help')", 2)
    return store if store is not None else store_opt


def parsed(label: str | None, parse, text: str | None):
    """parse(text), None for None; a value it refuses (ValueError) is a one-line usage error naming `label`, when
    given (exit 2)."""
    if text is None:
        return None
    try:
        return parse(text)
    except ValueError as e:
        from rmqdump.cli import render

        render.fail(f"usage: {label}: {e}" if label else f"usage: {e}", 2)


def broker_version(command: str, text: str | None) -> tuple[int, ...] | None:
    """--broker-version as (major, minor, patch)."""
    from rmqdump.checks.recovery import parse_broker_version

    return parsed(f"rmqdump {command}: --broker-version", parse_broker_version, text)


def stores_option(help: str) -> list[str]:
    return typer.Option(None, "--store", "-s", help=help)


def topic_option(help: str = "Only this topic.", required: bool = False):
    return typer.Option(... if required else None, "--topic", "-t", help=help)


def queue_option(help: str = "Only this queue id.", required: bool = False):
    return typer.Option(... if required else None, "--queue", "-q", help=help)


def since_option() -> str:
    return typer.Option(None, "--since", help="Store time at or after this (epoch ms or ISO 8601, UTC unless a zone is given).")


def until_option() -> str:
    return typer.Option(None, "--until", help="Store time before this (epoch ms or ISO 8601).")


def limit_option(help: str) -> int:
    return typer.Option(None, "--limit", "-n", min=1, help=help)


def format_option(default: Enum, help: str):
    return typer.Option(default, "--format", "-f", help=help)


def out_option(help: str, required: bool = True, metavar: str | None = None):
    """--out/-o; metavar: the name the command's help gives the output (NEWDIR, OUTDIR, OUT), so usage and text agree."""
    return typer.Option(... if required else None, "--out", "-o", help=help, metavar=metavar)


def cq_units_option() -> int:
    return typer.Option(
        None,
        "--cq-units-per-file",
        min=1,
        help="Units per ConsumeQueue file (broker: mappedFileSizeConsumeQueue / 20). Default: from --broker-conf, else the store's own "
        "ConsumeQueue files (asked for when they disagree), else the broker's 300000 when the store has none.",
    )


def hash_slots_option(
    help: str = "Index hash slots (broker: maxHashSlotNum). Default: from --broker-conf, else the store's IndexFiles, else the broker's 5000000.",
) -> int:
    return typer.Option(None, "--hash-slots", min=1, help=help)


def index_entries_option(
    help: str = "Index entries per file (broker: maxIndexNum). Default: from --broker-conf, else the store's IndexFiles, else the broker's 20000000.",
    min: int = 2,
) -> int:
    """min: the fewest a file that is written may hold (2); 1 where an existing file is only read."""
    return typer.Option(None, "--index-entries", min=min, help=help)


WORKERS_HELP = "Threads reading byte ranges of the CommitLog in parallel (default: every usable core, as far as memory allows, for a CommitLog over 64 MiB; the output is the same for any N)."


def workers_option(help: str = WORKERS_HELP) -> int:
    return typer.Option(None, "--workers", "-j", min=1, help=help)


def body_option(help: str = "Print bodies as text, hex or base64.") -> BodyMode:
    return typer.Option(BodyMode.none, "--body", help=help)


def temp_dir_option(help: str) -> Path:
    return typer.Option(None, "--temp-dir", help=help, file_okay=False)


def force_option(help: str) -> bool:
    return typer.Option(False, "--force", help=help)


def broker_version_option() -> str | None:
    return typer.Option(
        None,
        "--broker-version",
        metavar="X.Y.Z",
        help="The broker release that will restart the store (e.g. 4.9.7, 5.1.4, 5.3.3): the recovery preview follows its rules "
        "(4.x stops at the first V2 record; before 5.3.2 a normal recovery starts at the third-last CommitLog file, from 5.3.2 at the "
        "file holding the ConsumeQueues' max offset). Default: inferred from the store (4.x rules when it shows no 5.x file, config "
        "field or V2 record; else the newest, 5.3.2 on); the output says which and why.",
    )


def no_sync_option() -> bool:
    return typer.Option(False, "--no-sync", help="Do not fsync the new files before renaming them into place (faster; a crash soon after may leave them empty).")


def no_crc_option(help: str = "Skip the body and property CRC checks (faster).") -> bool:
    return typer.Option(False, "--no-crc", help=help)


def crc_option(help: str) -> bool:
    return typer.Option(False, "--crc", help=help)


def engine_option(what: str) -> Engine:
    return typer.Option(Engine.local, "--engine", help=f"local (this machine), or spark (PySpark: {what}).")


def master_option() -> str:
    return typer.Option("local[*]", "--master", help="spark engine: the Spark master URL (spark://host:7077, yarn, k8s://..., local[N]).")


class Ship(str, Enum):
    auto = "auto"
    zip = "zip"
    venv = "venv"
    none = "none"


class SparkWriter(str, Enum):
    auto = "auto"
    spark = "spark"
    arrow = "arrow"


def ship_option() -> Ship:
    return typer.Option(
        Ship.auto,
        "--ship",
        help="spark engine: auto (zip rmqdump to executors unless local), zip, venv (also pack this environment for the executors: spark.archives), "
        "or none (installed on every node).",
    )


def spark_writer_option() -> SparkWriter:
    return typer.Option(
        SparkWriter.auto,
        "--spark-writer",
        help="spark engine: arrow (tasks write with pyarrow; a path every executor shares; faster), spark (Spark's Parquet writer, any output URI), "
        "or auto: arrow for a path when the master runs on this machine (local[N], a standalone master on this host), else spark.",
    )


def spark_conf_option() -> list[str]:
    return typer.Option([], "--spark-conf", help="spark engine: KEY=VALUE Spark setting; repeat it.")


@contextmanager
def range_mapper(engine: Engine, workers: int | None, total_bytes: int, master: str, conf: list[str], ship: Ship):
    """The mapper --engine names for a pass over `total_bytes` of CommitLog: the local engine's threads (-j), or
    Spark tasks for the ranges, in a session held for the command (the fold stays on this machine either way)."""
    if engine is Engine.local:
        from rmqdump.engines.local import local_map

        yield local_map(workers, total_bytes)
        return
    from rmqdump.engines.spark.rangemap import SparkMap

    with spark_session(master, conf, ship=ship.value, python_tasks_only=True) as spark:
        yield SparkMap(spark)


@contextmanager
def spark_session(master: str, conf: list[str], **kw):
    """Every command's Spark session (rmqdump.engines.spark.session.session), saying on stderr when it waits for its
    JVM to write the class archive that makes later sessions start faster."""
    from rmqdump.engines.spark.session import session

    with session(master, conf, notice=_class_archive_notice, **kw) as spark:
        yield spark


def _class_archive_notice(directory: str) -> None:
    from rmqdump.cli import render

    render.err.print(
        f"rmqdump: keeping the Spark JVM's classes for faster starts, once (some seconds; in {directory})", markup=False, highlight=False, soft_wrap=True
    )
