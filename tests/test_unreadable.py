"""A store file that cannot be read stops every command that reads the store: one line naming the file, code
`unreadable`, exit 2, no traceback; never an answer from the rest of the store with the file passed over.

Two ways a file cannot be read: permission denied (chmod 000, the commands run as an unprivileged user: root reads
any file, so under root they run through `setpriv` as nobody), and something other than a file in its place (a
directory, a FIFO: also seen as root). The files: a CommitLog file in the middle and the last one, a ConsumeQueue
file, an IndexFile.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from conftest import observe_output, run, store_root

STORE = "rmq4-basic"
NOBODY = 65534


def _commands(s: str, out: str) -> dict[str, list[str]]:
    """Every command that reads a store, given the store root s (outputs under out)."""
    other = str(store_root(STORE))
    return {
        "commitlog": ["commitlog", "-s", s, "-f", "jsonl"],
        "info": ["info", "-s", s],
        "cq verify": ["cq", "verify", "-s", s],
        "index verify": ["index", "verify", "-s", s],
        "index lookup": ["index", "lookup", "k1_0", "-s", s],
        "msgid": ["msgid", "C000020230155FFD2B276C21C3CC0001", "-s", s],
        "rebuild": ["rebuild", s, "--out", f"{out}/rebuilt"],
        "export": ["export", "-s", s, "--out", f"{out}/export"],
        "salvage": ["salvage", s, "--out", f"{out}/salvage"],
        "repair": ["repair", s, "--out", f"{out}/repair"],
        "diff": ["diff", s, other],
        "sql": ["sql", "-s", s, "SELECT count(*) FROM messages"],
        "report": ["report", "-s", s, "--out", f"{out}/report.html"],
        "offsets": ["offsets", "-s", s],
        "timer verify": ["timer", "verify", "-s", s],
    }


def _victims(root: Path) -> dict[str, Path]:
    cl = sorted((root / "commitlog").iterdir())
    return {
        "middle commitlog file": cl[len(cl) // 2],
        "last commitlog file": cl[-1],
        "consumequeue file": sorted((root / "consumequeue" / "orders" / "0").iterdir())[0],
        "index file": sorted((root / "index").iterdir())[-1],
    }


@pytest.fixture(scope="module")
def scratch():
    """A directory every user may read and write (pytest's own tmp is root's only), removed afterwards."""
    d = Path(tempfile.mkdtemp(prefix="rmqdump-unreadable-"))
    d.chmod(0o777)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _copy(scratch: Path, name: str) -> Path:
    root = scratch / name.replace(" ", "-") / "store"
    shutil.copytree(store_root(STORE), root)
    for p in [root.parent, *root.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    out = root.parent / "out"
    out.mkdir(mode=0o777)
    out.chmod(0o777)
    return root


def _one_line(code: int, stdout: str, stderr: str, victim: Path) -> None:
    assert code == 2, (code, stdout[-500:], stderr[-500:])
    assert "Traceback" not in stdout + stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith(f"rmqdump: unreadable: {victim}@0: "), lines[0]


@pytest.mark.parametrize("what", ["middle commitlog file", "last commitlog file", "consumequeue file", "index file"])
def test_a_directory_in_a_files_place(scratch, what):
    root = _copy(scratch, "dir " + what)
    victim = _victims(root)[what]
    victim.unlink()
    victim.mkdir()
    for name, args in _commands(str(root), str(root.parent / "out")).items():
        r = run(*args)
        _one_line(r.exit_code, r.stdout, r.stderr, victim)
        assert r.stderr.strip().endswith(": not a regular file"), (name, r.stderr)
    assert not any((root.parent / "out").iterdir())  # nothing written


def test_a_fifo_in_a_files_place_does_not_hang(scratch):
    root = _copy(scratch, "fifo")
    victim = _victims(root)["middle commitlog file"]
    victim.unlink()
    os.mkfifo(victim)
    for args in (["info", "-s", str(root)], ["index", "lookup", "k1_0", "-s", str(root)]):
        r = subprocess.run([sys.executable, "-m", "rmqdump", *args], capture_output=True, text=True, timeout=120)
        observe_output(r.stdout, r.stderr)
        _one_line(r.returncode, r.stdout, r.stderr, victim)


def _as_unprivileged() -> list[str]:
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: chmod cannot deny root a read")
    return ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]


@pytest.mark.parametrize(
    ("what", "commands"),
    [
        ("middle commitlog file", None),  # every command
        ("last commitlog file", ["info", "index lookup", "offsets", "diff"]),
        ("consumequeue file", ["info", "index lookup", "export", "repair"]),
        ("index file", ["info", "msgid", "rebuild", "sql"]),
    ],
)
def test_permission_denied(scratch, what, commands):
    """chmod 000, read by a user the permission applies to: `info` used to say nothing and exit 0 for a middle file."""
    prefix = _as_unprivileged()
    root = _copy(scratch, "perm " + what)
    victim = _victims(root)[what]
    victim.chmod(0)
    cache = scratch / "cache"
    cache.mkdir(exist_ok=True)
    cache.chmod(0o777)  # mkdir's mode is cut by the umask
    env = {**os.environ, "HOME": str(cache), "RMQDUMP_CACHE_DIR": str(cache)}
    for name, args in _commands(str(root), str(root.parent / "out")).items():
        if commands is not None and name not in commands:
            continue
        r = subprocess.run([*prefix, sys.executable, "-m", "rmqdump", *args], capture_output=True, text=True, env=env, cwd=scratch, timeout=300)
        observe_output(r.stdout, r.stderr)
        _one_line(r.returncode, r.stdout, r.stderr, victim)
        assert r.stderr.strip().endswith(": Permission denied"), (name, r.stderr)
    victim.chmod(stat.S_IRUSR | stat.S_IWUSR)


def test_an_output_this_user_may_not_write_is_one_line_before_any_work(scratch):
    """Every command that writes, its --out under a directory only root may write, run by another user: exit 2 and one
    line naming the output and output_unwritable (it was an internal error, after the whole scan), nothing written."""
    prefix = _as_unprivileged()
    root = _copy(scratch, "unwritable")
    locked = scratch / "locked"
    locked.mkdir()
    locked.chmod(0o755 if prefix else 0o555)  # root's own, read-only to the user the commands run as
    cache = scratch / "cache"
    cache.mkdir(exist_ok=True)
    cache.chmod(0o777)
    env = {**os.environ, "HOME": str(cache), "RMQDUMP_CACHE_DIR": str(cache)}
    writers = ("rebuild", "export", "salvage", "repair", "report")
    for name, args in _commands(str(root), str(locked / "out")).items():
        if name not in writers:
            continue
        r = subprocess.run([*prefix, sys.executable, "-m", "rmqdump", *args], capture_output=True, text=True, env=env, cwd=scratch, timeout=300)
        observe_output(r.stdout, r.stderr)
        target = args[args.index("--out") + 1]
        assert r.returncode == 2 and "Traceback" not in r.stdout + r.stderr, (name, r.stderr[-500:])
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"rmqdump: output_unwritable: {target}: {locked}: Permission denied"), (name, lines)
    assert not any(locked.iterdir())
