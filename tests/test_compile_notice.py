"""The first run after an install compiles the kernels for some seconds: the user is told so in one line, on a
terminal or in a pipe, whenever (and only when) a run compiles.

Each case runs the CLI as a process with a cache directory of its own (RMQDUMP_CACHE_DIR), its stderr a
pseudo-terminal (or a pipe), and reads what the terminal showed.
"""

from __future__ import annotations

import os
import pty
import subprocess
import sys

from conftest import store_root

from rmqdump.scan.layout import fingerprint
from rmqdump.scan.native import crc_library

NOTICE = "rmqdump: compiling the scan kernel for this install, once"
TEXT_NOTICE = "rmqdump: compiling the text kernels for this install, once"


def run_on_terminal(args: list[str], cache: str) -> tuple[int, str, str]:
    """(exit code, stdout, what the terminal on stderr showed)."""
    master, slave = pty.openpty()
    env = {**os.environ, "RMQDUMP_CACHE_DIR": cache, "COLUMNS": "120"}
    env.pop("NUMBA_CACHE_DIR", None)
    p = subprocess.Popen([sys.executable, "-m", "rmqdump", *args], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=slave, env=env)
    os.close(slave)
    shown = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed its side
            break
        if not chunk:
            break
        shown += chunk
    out = p.stdout.read().decode()
    code = p.wait()
    os.close(master)
    return code, out, shown.decode(errors="replace")


def test_first_scan_after_install_says_it_compiles_once(tmp_path):
    cache = str(tmp_path / "cache")
    args = ["cq", "verify", "-s", str(store_root("rmq4-basic")), "-f", "jsonl"]
    code, _, shown = run_on_terminal(args, cache)
    assert code == 0
    assert shown.count(NOTICE) == 1
    code, _, shown = run_on_terminal(args, cache)  # compiled code is reused: nothing to say
    assert code == 0
    assert NOTICE not in shown
    code, _, shown = run_on_terminal(["commitlog", str(store_root("rmq4-basic") / "commitlog" / "00000000000000000000")], cache)
    assert code == 0
    assert shown.count(TEXT_NOTICE) == 1 and NOTICE not in shown  # the text kernels are compiled on their first use


def run_piped(args: list[str], cache: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "RMQDUMP_CACHE_DIR": cache}
    env.pop("NUMBA_CACHE_DIR", None)
    return subprocess.run([sys.executable, "-m", "rmqdump", *args], capture_output=True, text=True, env=env)


def test_notice_when_stderr_is_a_pipe_too(tmp_path):
    """A script's log says why its first run took seconds: one line, never wrapped, whatever the width."""
    cache = str(tmp_path / "cache")
    r = run_piped(["cq", "verify", "-s", str(store_root("rmq4-basic"))], cache)
    assert r.returncode == 0
    said = [line for line in r.stderr.splitlines() if line.startswith("rmqdump: ")]  # the summary goes to stderr too
    assert len(said) == 1 and said[0].startswith(NOTICE) and said[0].endswith(f"kept in {cache}/numba-{fingerprint()}-{crc_library()[0]})"), r.stderr
    r = run_piped(["cq", "verify", "-s", str(store_root("rmq4-basic"))], cache)  # cached: nothing said
    assert r.returncode == 0 and "rmqdump: " not in r.stderr


def test_notice_whenever_a_run_compiles_something_new(tmp_path):
    """The notice follows numba's own cache misses, not a guess from the cache's files: a text kernel the cache
    does not hold yet (CSV after a table) is announced although other text kernels are cached."""
    cache = str(tmp_path / "cache")
    cl = str(store_root("rmq4-basic") / "commitlog" / "00000000000000000000")
    r = run_piped(["commitlog", cl, "-n", "2", "-f", "jsonl"], cache)
    assert r.returncode == 0 and r.stderr.count(TEXT_NOTICE) == 1 and r.stderr.count(NOTICE) == 1
    r = run_piped(["commitlog", cl, "-n", "2", "-f", "csv"], cache)
    assert r.returncode == 0 and r.stderr.count(TEXT_NOTICE) == 1 and NOTICE not in r.stderr
    r = run_piped(["commitlog", cl, "-n", "2", "-f", "csv"], cache)
    assert r.returncode == 0 and "rmqdump: compiling" not in r.stderr
