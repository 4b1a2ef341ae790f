"""The `rmqdump` command line: parse options, call the library, render.

Exit codes: 0 clean, 1 problems found (or nothing found by a lookup),
2 usage error or unreadable input. Errors are one line on stderr; set
RMQDUMP_TRACEBACK=1 to see the Python traceback of an internal error.
"""

from __future__ import annotations

import functools
import gc
import os
import sys

import typer

from rmqdump import __version__
from rmqdump.cli.helptext import WholeSentenceGroup
from rmqdump.cli.render import fail
from rmqdump.common.problems import InputError
from rmqdump.common.publish import NO_ROOM, OUTPUT_NO_SPACE

_app = typer.Typer(
    name="rmqdump",
    help="Offline forensics for Apache RocketMQ broker stores: decode, verify, look up, rebuild. The store is only read.",
    no_args_is_help=True,
    add_completion=True,  # --install-completion / --show-completion (README: Shell completion)
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain click help: rich and markdown-it cost start-up time
    context_settings={"help_option_names": ["-h", "--help"]},
    cls=WholeSentenceGroup,  # no command's summary cut with "..."
)


def guarded(fn):
    """Turn library errors into one line and exit 2; keep tracebacks for RMQDUMP_TRACEBACK=1."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except InputError as e:
            fail(e.line(), 2)
        except BrokenPipeError:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            raise SystemExit(0) from None
        except (typer.Exit, typer.Abort, SystemExit, KeyboardInterrupt):
            raise
        except Exception as e:
            if os.environ.get("RMQDUMP_TRACEBACK"):
                raise
            if isinstance(e, OSError) and e.errno in NO_ROOM:  # a write outside a published output: standard output, a spill
                fail(f"{OUTPUT_NO_SPACE}: {e.filename or 'standard output or a temporary file'}: {os.strerror(e.errno)}", 2)
            text = str(e).strip()
            if type(e).__module__.startswith(("py4j", "pyspark")):  # a Spark job's error: pages of JVM stack trace
                from rmqdump.engines.spark.session import job_failure, spark_error_line

                known = job_failure(e)
                if known is not None:
                    fail(known.line(), 2)
                text = spark_error_line(text)
            first = next((x.strip() for x in text.splitlines() if x.strip()), "an unexpected failure")
            fail(f"internal_error: {first} (RMQDUMP_TRACEBACK=1 shows where and what)", 2)

    return wrapper


def _version(value: bool):
    if value:
        print(f"rmqdump {__version__}")
        raise typer.Exit(0)


@_app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version and exit.")):
    """Offline forensics for Apache RocketMQ broker stores."""


_registered = False


def __getattr__(name: str):
    """`app`: the typer app with every command registered (what tests, docs and completion see), unless this process's
    console script already registered the one its line names (main)."""
    if name != "app":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if not _registered:
        _register([])
    return _app


def _register(first: list[str]) -> None:
    """Register the command `first` names, when it names one, else every command.

    Each module of rmqdump.cli.commands registers the command of its own name.
    A run uses one command: importing the others and turning their signatures
    into click parameters (typer does it for every registered command before
    it parses the line) is a tenth of a small store's `cq verify`. Any other
    first word (an option, a typo, nothing) registers them all, so `--help`,
    completion and "No such command ... Did you mean" see every command.
    """
    global _registered
    from rmqdump.cli.commands import MODULES, register

    _registered = True
    register(_app, guarded, first[:1] if first and first[0] in MODULES else MODULES)


def main() -> None:
    """The console script: like app(), but usage errors are one line too."""
    from rmqdump.cli.nopandas import keep_out
    from rmqdump.common.allocator import tune
    from rmqdump.common.pipes import widen

    tune()  # before any thread starts
    widen(1)  # a listing into `| jq` or `| gzip`: its reader woken a sixteenth as often (common.pipes)
    _one_blas_thread()
    keep_out(sys.argv[1:])
    from rmqdump.scan.native import on_first_compile

    on_first_compile(_compile_notice)  # on a terminal or not: a script's log says why this run took seconds
    _register(sys.argv[1:2])
    _collect_from_here()
    try:
        _run()
    except SystemExit as e:
        _leave(e.code)
    _leave(0)


def _collect_from_here() -> None:
    """The collector back on when the console script (rmqdump.cli.entry) turned it off for the imports, the objects
    made so far set aside for good: a collection during the run then walks only what the run made."""
    if not gc.isenabled():
        gc.freeze()
        gc.enable()


def _one_blas_thread() -> None:
    """numpy starts OpenBLAS's thread pool (a buffer each) when it is imported: 70 ms of a small store's scan on two
    cores. rmqdump does no linear algebra, so one thread; a user's own BLAS or OpenMP setting is left as it is."""
    if not any(v in os.environ for v in ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")):
        os.environ["OPENBLAS_NUM_THREADS"] = "1"


def _compile_notice(what: str, cache: str) -> None:
    """A user waiting seconds for the first scan after an install is told why, in one line (never wrapped), once."""
    from rmqdump.cli import render

    render.err.print(f"rmqdump: compiling {what} for this install, once (some seconds; kept in {cache})", markup=False, highlight=False, soft_wrap=True)


def _leave(code) -> None:
    """Exit with `code`, skipping the interpreter's teardown.

    Tearing the modules down frees objects nobody will read again: 15-20 ms of
    a 0.25 s command on a small store (0.92-0.94x whole, 21-31 pairs), ~0.15 s
    once numba is loaded. The exit handlers run, threads are joined and the
    standard streams flushed as usual, then the process ends; every file
    rmqdump writes is closed (and published) before it gets here. Under a
    profiler or tracer (cProfile, a debugger) the exit is the usual one, so
    it can write what it gathered.
    """
    if sys.getprofile() is not None or sys.gettrace() is not None:
        raise SystemExit(code)
    import atexit
    import contextlib
    import threading

    if code is None:
        code = 0
    elif not isinstance(code, int):
        sys.stderr.write(f"{code}\n")
        code = 1
    threading._shutdown()  # what interpreter exit does first: executors' shutdown hooks, then non-daemon threads joined
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a reader that went away: as at a normal exit, not an error of ours
            stream.flush()
    os._exit(code)


def _run() -> None:
    try:
        rv = _app(standalone_mode=False)
    except typer.Abort:
        fail("aborted", 130)
    except typer.TyperException as e:  # click's usage errors, as typer ships them
        ctx = getattr(e, "ctx", None)
        if type(e).__name__ == "NoArgsIsHelpError":
            e.show()
            raise SystemExit(getattr(e, "exit_code", 2)) from None
        where = f"{ctx.command_path}: " if ctx is not None else ""
        hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
        message = e.format_message() if hasattr(e, "format_message") else str(e)
        fail(f"usage: {where}{' '.join(message.split())}{hint}", getattr(e, "exit_code", 2))
    except BrokenPipeError:
        raise SystemExit(0) from None
    raise SystemExit(rv if isinstance(rv, int) else 0)
