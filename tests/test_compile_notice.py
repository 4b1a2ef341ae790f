"""The first run after an install compiles the kernels for some seconds: the user is told so in one line, on a
terminal or in a pipe, whenever (and only when) a run compiles.

Each case runs the CLI as a process with a cache directory of its own (RMQDUMP_CACHE_DIR), its stderr a
pseudo-terminal (or a pipe), and reads what the terminal showed. The kernels this install compiled are left aside
(RMQDUMP_AOT=off: numba's functions, as where the install could not build them, without the background build that
tests/test_aot_kernel.py covers) except in the last test, which holds that an install that built them compiles
nothing on its first run.
"""

from __future__ import annotations

import os
import pty
import subprocess
import sys

from conftest import store_root

from rmqdump.scan.native import code_fingerprint, crc_library

NOTICE = "rmqdump: compiling the scan kernel for this install, once"
TEXT_NOTICE = "rmqdump: compiling the text kernels for this install, once"


def run_on_terminal(args: list[str], cache: str) -> tuple[int, str, str]:
    """(exit code, stdout, what the terminal on stderr showed)."""
    master, slave = pty.openpty()
    env = {**os.environ, "RMQDUMP_CACHE_DIR": cache, "COLUMNS": "120", "RMQDUMP_AOT": "off"}
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


def run_piped(args: list[str], cache: str, aot: str = "off") -> subprocess.CompletedProcess:
    env = {**os.environ, "RMQDUMP_CACHE_DIR": cache, "RMQDUMP_AOT": aot}
    env.pop("NUMBA_CACHE_DIR", None)
    return subprocess.run([sys.executable, "-m", "rmqdump", *args], capture_output=True, text=True, env=env)


def test_notice_when_stderr_is_a_pipe_too(tmp_path):
    """A script's log says why its first run took seconds: one line, never wrapped, whatever the width."""
    cache = str(tmp_path / "cache")
    r = run_piped(["cq", "verify", "-s", str(store_root("rmq4-basic"))], cache)
    assert r.returncode == 0
    said = [line for line in r.stderr.splitlines() if line.startswith("rmqdump: ")]  # the summary goes to stderr too
    assert len(said) == 1 and said[0].startswith(NOTICE) and said[0].endswith(f"kept in {cache}/numba-{code_fingerprint()}-{crc_library()[0]})"), r.stderr
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


def test_an_install_that_built_the_kernels_compiles_nothing_on_its_first_run(tmp_path):
    """The package's build compiled the scan and text kernels (setup.py): a first run with an empty cache says
    nothing about compiling, imports no numba, starts no build and writes no cache, and lists every record the
    broker wrote, as the JIT kernels do."""
    import csv
    import io

    from conftest import jsonl, manifest

    from rmqdump.scan.aot import SCAN
    from rmqdump.text.batches import TEXT

    for k in (SCAN, TEXT):
        assert os.path.exists(k.installed), f"the install did not build {k.module} (a C compiler is needed: see setup.py)"
    root = store_root("rmq4-flags")
    want = sorted(m["wroteOffset"] for m in manifest("rmq4-flags"))
    probe = "import runpy, sys; sys.argv = ['rmqdump', *sys.argv[1:]]\ntry: runpy.run_module('rmqdump', run_name='__main__')\nfinally: sys.stderr.write('numba' in sys.modules and 'NUMBA' or '')"
    for args in (["commitlog", "-s", str(root), "-f", "jsonl"], ["commitlog", "-s", str(root), "-f", "csv"], ["commitlog", "-s", str(root)], ["cq", "verify", "-s", str(root), "-f", "jsonl"], ["info", "-s", str(root), "-f", "jsonl"]):
        cache = tmp_path / "-".join(args[:3:2])
        env = {**os.environ, "RMQDUMP_CACHE_DIR": str(cache)}
        env.pop("RMQDUMP_AOT", None)
        r = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True, env=env)
        jit = run_piped(args, str(tmp_path / "jit"), aot="off")
        assert r.returncode == jit.returncode == 0, r.stderr
        assert "rmqdump: compiling" not in r.stderr and "NUMBA" not in r.stderr, r.stderr
        assert not cache.exists(), "a first run wrote to the cache"
        assert r.stdout == jit.stdout, args
        if args[-1] == "jsonl" and args[0] == "commitlog":
            assert sorted(row["phys_offset"] for row in jsonl(r.stdout) if row["kind"] == "message") == want
        if args[0] == "cq":  # the summary counts every message the broker put, each in its ConsumeQueue
            assert jsonl(r.stdout)[-1]["messages"] == len(want)
        if args[0] == "info":  # where the scan found the data's end: after the broker's last record
            clog = next(row for row in jsonl(r.stdout) if row["kind"] == "commitlog")
            assert clog["data_end"] == max(m["wroteOffset"] + m["wroteBytes"] for m in manifest("rmq4-flags"))
        if args[-1] == "csv":
            assert sorted(int(row["phys_offset"]) for row in csv.DictReader(io.StringIO(r.stdout)) if row["kind"] == "message") == want
