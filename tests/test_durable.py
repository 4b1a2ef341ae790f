"""What a command publishes is on the disk before it is renamed into place (common.publish), and big outputs are
started on their way to the disk as they are written (common.writeback).

The model of "on the disk": every file of the published tree was fsynced, and every directory of it, before the
rename that shows it, and the parent directory after it. fsync and rename are watched (os.open maps each fd to its
path), so the order is the one the calls were made in. A crash cannot be staged here; what a crash keeps of a
file that was fsynced is the file system's promise.
"""

from __future__ import annotations

import errno
import os
import sys
from pathlib import Path
from unittest import mock

import pytest
from conftest import REAL, run
from hypothesis import example, given, settings
from hypothesis import strategies as st

from rmqdump.common import directfile, writeback
from rmqdump.common.publish import TMP_MARK


def _watch(monkeypatch) -> list[tuple]:
    """("fsync", path) and ("rename", src, dst) in the order made."""
    events: list[tuple] = []
    paths: dict[int, str] = {}
    real_open, real_fsync, real_rename = os.open, os.fsync, os.rename

    def open_(path, flags, *a, **k):
        fd = real_open(path, flags, *a, **k)
        paths[fd] = os.path.abspath(os.fspath(path))
        return fd

    def fsync(fd):
        events.append(("fsync", paths.get(fd, f"fd {fd}")))
        return real_fsync(fd)

    def rename(src, dst, *a, **k):
        events.append(("rename", os.path.abspath(os.fspath(src)), os.path.abspath(os.fspath(dst))))
        return real_rename(src, dst, *a, **k)

    monkeypatch.setattr(os, "open", open_)
    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "rename", rename)
    return events


def _tree(top) -> tuple[list[str], list[str]]:
    """(files, directories) under top, relative to it ("" is top itself)."""
    files, dirs = [], []
    for root, _d, names in os.walk(top):
        dirs.append(os.path.relpath(root, top) if root != str(top) else "")
        files += [os.path.relpath(os.path.join(root, n), top) for n in names]
    return files, dirs


def _commands(tmp_path):
    out = tmp_path / "out"
    return {
        "salvage": (["salvage", REAL / "rmq53-damaged-size-field" / "store", "--out", out], out),
        "export": (["export", "-s", REAL / "rmq4-basic" / "store", "--out", out], out),
        "export-body": (["export", "-s", REAL / "rmq53-lmq" / "store", "--out", out, "--body", "raw"], out),
        "export-jsonl": (["export", "-s", REAL / "rmq4-basic" / "store", "--out", out, "-f", "jsonl"], out),
        "diff": (["diff", REAL / "rmq53-ha-lag" / "master" / "store", REAL / "rmq53-ha-lag" / "slave" / "store", "--out", out], out),
        "rebuild": (["rebuild", REAL / "rmq4-basic" / "store", "--out", out, "--hash-slots", "500", "--index-entries", "2000"], out),
        "repair": (["repair", "-s", REAL / "rmq53-damaged-bodycrc" / "store", "--out", out, "--hash-slots", "500", "--index-entries", "2000"], out),
        "report": (["report", "-s", REAL / "rmq4-basic" / "store", "--out", tmp_path / "page.html"], tmp_path / "page.html"),
        "sql": (["sql", "-s", REAL / "rmq4-basic" / "store", "-f", "csv", "--out", tmp_path / "n.csv", "SELECT count(*) AS n FROM messages"], tmp_path / "n.csv"),
    }


@pytest.mark.parametrize("command", ["salvage", "export", "export-body", "export-jsonl", "diff", "rebuild", "repair", "report", "sql"])
def test_every_file_published_is_synced_before_the_rename(tmp_path, monkeypatch, command):
    """Every command that writes: a directory's files and directories, or the one file, synced before the rename."""
    args, out = _commands(tmp_path)[command]
    events = _watch(monkeypatch)
    r = run(*args)
    assert r.exit_code in (0, 1), r.stderr
    files, dirs = _tree(out) if out.is_dir() else ([""], [])
    assert files
    shown = [i for i, e in enumerate(events) if e[0] == "rename" and e[2] == str(out)]
    assert len(shown) == 1, events
    tmp = events[shown[0]][1]
    synced_before = {e[1] for e in events[: shown[0]] if e[0] == "fsync"}
    for rel in files:
        assert os.path.normpath(os.path.join(tmp, rel)) in synced_before, f"{rel or out.name} not on the disk before the rename"
    for rel in dirs:
        assert os.path.normpath(os.path.join(tmp, rel)) in synced_before, f"directory {rel or '.'} not synced before the rename"
    assert ("fsync", str(out.parent)) in events[shown[0] :], "the rename itself not synced"


@pytest.mark.parametrize("command", ["salvage", "export", "export-jsonl", "diff"])
def test_no_sync_syncs_nothing(tmp_path, monkeypatch, command):
    args, out = _commands(tmp_path)[command]
    events = _watch(monkeypatch)
    r = run(*args, "--no-sync")
    assert r.exit_code in (0, 1), r.stderr
    assert _tree(out)[0] and [e for e in events if e[0] == "fsync"] == []


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 3 * writeback.EVERY), max_size=40))
@example([writeback.EVERY - 1, 1, writeback.EVERY, 0, 2 * writeback.EVERY + 5])
def test_a_growing_file_is_started_in_order_and_whole(sizes):
    """Model: the ranges started follow each other from 0, each at least EVERY bytes, and what was never started is
    less than EVERY (the last bytes written, left to the fsync)."""
    calls = []
    with mock.patch.object(writeback, "start", lambda fd, off, n: calls.append((fd, off, n)) or True):
        g = writeback.Growing(7)
        for n in sizes:
            g.wrote(n)
    pos = 0
    for fd, off, n in calls:
        assert fd == 7 and off == pos and n >= writeback.EVERY
        pos += n
    assert 0 <= sum(sizes) - pos < writeback.EVERY


def test_salvage_writes_its_files_past_the_page_cache(tmp_path, monkeypatch):
    """The messages file written with O_DIRECT in whole buffers but for its tail (common.directfile)."""
    from test_directfile import _need_direct, _watch_writes

    _need_direct(tmp_path / "probe")
    monkeypatch.setattr(directfile, "BUFFER", 8192)
    seen = _watch_writes(monkeypatch)
    out = tmp_path / "out"
    assert run("salvage", REAL / "rmq53-damaged-size-field" / "store", "--out", out).exit_code == 1
    size = (out / "messages.parquet").stat().st_size
    assert size > 4 * 8192
    mine = [(n, d) for path, n, d in seen if os.path.basename(path) == "messages.parquet"]
    assert mine == [(8192, True)] * (size // 8192) + [(size % 8192, False)] * bool(size % 8192)


def test_salvage_starts_its_files_writeback_as_they_grow_where_direct_writes_are_refused(tmp_path, monkeypatch):
    """With O_DIRECT refused and a tiny EVERY, the messages file's pages were handed to the disk in order, all but its
    last EVERY bytes."""
    calls: dict[int, list] = {}
    monkeypatch.setattr(directfile, "_set_direct", lambda fd, on: False)
    monkeypatch.setattr(writeback, "EVERY", 4096)
    monkeypatch.setattr(writeback, "start", lambda fd, off, n: calls.setdefault(fd, []).append((off, n)) or True)
    out = tmp_path / "out"
    assert run("salvage", REAL / "rmq53-damaged-size-field" / "store", "--out", out).exit_code == 1
    size = (out / "messages.parquet").stat().st_size
    assert size > 4 * 4096
    runs = [c for c in calls.values() if c[0][0] == 0 and sum(n for _, n in c) > size - 4096]
    assert len(runs) == 1
    pos = 0
    for off, n in runs[0]:
        assert off == pos and n >= 4096
        pos += n
    assert size - 4096 < pos <= size


def test_export_starts_each_part_files_writeback(tmp_path, monkeypatch):
    """Each part file (its topic directory and name) was handed to the disk after its row groups were written."""
    started: list[tuple[str, ...]] = []
    monkeypatch.setattr(writeback, "start_path", lambda p: started.append(Path(p).parts[-2:]) or True)
    out = tmp_path / "out"
    assert run("export", "-s", REAL / "rmq4-basic" / "store", "--out", out).exit_code == 0
    parts = sorted(Path(f).parts[-2:] for f in _tree(out)[0] if f.endswith(".parquet"))
    assert len(parts) > 1 and sorted(set(started)) == parts


@pytest.mark.skipif(not sys.platform.startswith("linux") and not os.environ.get("CI"), reason="names a descriptor's file by /proc")
def test_export_jsonl_starts_each_part_files_writeback_as_it_grows(tmp_path, monkeypatch):
    """With a tiny EVERY and a line per write, each JSON Lines part file's pages were handed to the disk in order
    from its first byte, all but its last EVERY bytes, each only once out of Python's buffer; every byte written
    was counted."""
    from rmqdump.export import jsonlines

    calls: dict[tuple[str, ...], list] = {}
    counted: dict[tuple[str, ...], int] = {}

    def name(fd):
        return Path(os.readlink(f"/proc/self/fd/{fd}")).parts[-2:]

    def start(fd, off, n):
        assert os.fstat(fd).st_size >= off + n, "asked to write back bytes still in Python's buffer"
        calls.setdefault(name(fd), []).append((off, n))
        return True

    class Counted(writeback.Growing):
        def wrote(self, n):
            counted[name(self.fd)] = counted.get(name(self.fd), 0) + n
            super().wrote(n)

    monkeypatch.setattr(writeback, "EVERY", 4096)
    monkeypatch.setattr(writeback, "start", start)
    monkeypatch.setattr(writeback, "Growing", Counted)
    monkeypatch.setattr(jsonlines, "SUB_ROWS", 1)  # pieces smaller than Python's write buffer
    out = tmp_path / "out"
    assert run("export", "-s", REAL / "rmq4-basic" / "store", "--out", out, "-f", "jsonl").exit_code == 0
    parts = {Path(f).parts[-2:]: (out / f).stat().st_size for f in _tree(out)[0]}
    assert len(parts) > 1 and counted == parts
    assert set(calls) == {p for p, size in parts.items() if size >= 4096}
    for p, size in parts.items():
        pos = 0
        for off, n in calls.get(p, []):
            assert off == pos and n >= 4096
            pos += n
        assert 0 <= size - pos < 4096, p


def test_export_jsonl_writes_a_tasks_first_topics_past_the_page_cache(tmp_path, monkeypatch):
    """With 8 KiB buffers and one direct file a task: each task's first topic file written with O_DIRECT in whole
    buffers but for its tail, every other one through the page cache only; the bytes are the same as a run where
    nothing is direct."""
    from test_directfile import _need_direct, _watch_writes

    from rmqdump.export import dataset

    _need_direct(tmp_path / "probe")
    monkeypatch.setattr(dataset, "LINE_BUFFER", 8192)
    monkeypatch.setattr(dataset, "DIRECT_FILES", 1)
    seen = _watch_writes(monkeypatch)
    out = tmp_path / "out"
    assert run("export", "-s", REAL / "rmq4-basic" / "store", "--out", out, "-f", "jsonl").exit_code == 0
    monkeypatch.undo()
    monkeypatch.setattr(directfile, "_set_direct", lambda fd, on: False)
    cached = tmp_path / "cached"
    assert run("export", "-s", REAL / "rmq4-basic" / "store", "--out", cached, "-f", "jsonl").exit_code == 0
    files = sorted(_tree(out)[0])
    assert files == sorted(_tree(cached)[0]) and len(files) > 2
    for f in files:
        assert (out / f).read_bytes() == (cached / f).read_bytes(), f
    writes: dict[str, list] = {}
    for path, n, direct in seen:
        writes.setdefault("/".join(Path(path).parts[-2:]), []).append((n, direct))
    direct_by_task: dict[str, list] = {}
    for f in files:
        ws, size = writes.get(f, []), (out / f).stat().st_size
        assert sum(n for n, _ in ws) == size, f
        if any(d for _, d in ws):
            assert ws == [(8192, True)] * (size // 8192) + [(size % 8192, False)] * bool(size % 8192), f
            direct_by_task.setdefault(Path(f).name, []).append(f)
        else:
            assert ws and not any(d for _, d in ws), f
    assert direct_by_task and all(len(fs) == 1 for fs in direct_by_task.values()), direct_by_task


def test_the_kernel_takes_the_request_on_linux(tmp_path):
    """sync_file_range is called for real: on Linux the kernel accepts it; elsewhere nothing is asked."""
    path = tmp_path / "f"
    path.write_bytes(os.urandom(1 << 20))
    assert writeback.start_path(str(path)) is sys.platform.startswith("linux")
    assert writeback.start_path(str(tmp_path / "gone")) is False  # advice only: never an error of its own


@pytest.mark.parametrize(("errno_", "code"), [(errno.EIO, "output_not_synced"), (errno.ENOSPC, "output_no_space")])
def test_a_refused_fsync_publishes_nothing(tmp_path, monkeypatch, errno_, code):
    """The disk refuses the messages file's fsync (EIO; ENOSPC from a delayed allocation): one line with the code and
    the target, exit 2, no output and no temporary left; the other files went through."""
    real_open, real_fsync = os.open, os.fsync
    paths: dict[int, str] = {}

    def open_(path, flags, *a, **k):
        fd = real_open(path, flags, *a, **k)
        paths[fd] = os.fspath(path)
        return fd

    def fsync(fd):
        if paths.get(fd, "").endswith("messages.parquet"):
            raise OSError(errno_, os.strerror(errno_))
        return real_fsync(fd)

    monkeypatch.setattr(os, "open", open_)
    monkeypatch.setattr(os, "fsync", fsync)
    out = tmp_path / "out"
    r = run("salvage", REAL / "rmq53-damaged-size-field" / "store", "--out", out)
    assert r.exit_code == 2
    if code == "output_not_synced":
        want = f"rmqdump: output_not_synced: {out}: {os.strerror(errno_)} while {{}}/messages.parquet was put on the disk: nothing was published\n"
        tmp = r.stderr.split(" while ")[1].rsplit("/messages.parquet", 1)[0]
        assert TMP_MARK in tmp and r.stderr == want.format(tmp)
    else:
        assert r.stderr.startswith(f"rmqdump: output_no_space: {out}: {os.strerror(errno_)} while writing it: nothing was published")
    assert not out.exists() and [n for n in os.listdir(tmp_path) if TMP_MARK in n] == []
