"""The first run after an install compiles the kernels for some seconds: a terminal user is told so, once.

Each case runs the CLI as a process with a cache directory of its own (RMQDUMP_CACHE_DIR), its stderr a
pseudo-terminal (or a pipe), and reads what the terminal showed.
"""

from __future__ import annotations

import os
import pty
import subprocess
import sys

from conftest import store_root

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


def test_no_notice_when_stderr_is_not_a_terminal(tmp_path):
    env = {**os.environ, "RMQDUMP_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("NUMBA_CACHE_DIR", None)
    r = subprocess.run([sys.executable, "-m", "rmqdump", "cq", "verify", "-s", str(store_root("rmq4-basic"))], capture_output=True, text=True, env=env)
    assert r.returncode == 0
    assert "compiling" not in r.stderr
