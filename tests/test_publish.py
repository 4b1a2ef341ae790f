"""The one publisher: outputs are written beside the target and renamed into place, never into a store."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import copy_store

from rmqdump.common.problems import InputError
from rmqdump.common.publish import TMP_MARK, check_target, publishing


def _leftovers(parent) -> list[str]:
    return [n for n in os.listdir(parent) if TMP_MARK in n]


def test_file_written_then_renamed(tmp_path):
    target = tmp_path / "sub" / "report.html"
    with publishing(str(target), force=False, kind="file") as tmp:
        assert os.path.dirname(tmp) == str(target.parent) and TMP_MARK in tmp
        assert not target.exists()
        with open(tmp, "w") as f:
            f.write("one")
    assert target.read_text() == "one" and _leftovers(target.parent) == []


def test_directory_written_then_renamed_and_replaced_only_with_force(tmp_path):
    target = tmp_path / "out"
    with publishing(str(target), force=False) as tmp:
        assert os.path.isdir(tmp) and os.listdir(tmp) == []
        (open(os.path.join(tmp, "a"), "w")).close()
    assert os.listdir(target) == ["a"]
    with pytest.raises(InputError) as e:
        check_target(str(target), force=False)
    assert e.value.code == "output_exists"
    with publishing(str(target), force=True) as tmp:
        (open(os.path.join(tmp, "b"), "w")).close()
    assert os.listdir(target) == ["b"] and _leftovers(tmp_path) == []


def test_an_empty_directory_is_written_without_force(tmp_path):
    (tmp_path / "empty").mkdir()
    with publishing(str(tmp_path / "empty"), force=False) as tmp:
        (open(os.path.join(tmp, "x"), "w")).close()
    assert os.listdir(tmp_path / "empty") == ["x"]


def test_failure_leaves_target_as_it_was(tmp_path):
    target = tmp_path / "q.csv"
    target.write_text("old")
    with pytest.raises(RuntimeError), publishing(str(target), force=True, kind="file") as tmp:
        with open(tmp, "w") as f:
            f.write("half")
        raise RuntimeError("query failed")
    assert target.read_text() == "old" and _leftovers(tmp_path) == []


def test_a_full_file_system_is_one_code_and_leaves_nothing(tmp_path):
    """ENOSPC (or a quota) while writing: output_no_space naming the target, the partial output removed."""
    target = tmp_path / "out"
    with pytest.raises(InputError) as e, publishing(str(target), force=False) as tmp:
        with open("/dev/full", "wb") as full:  # every write to it fails with ENOSPC
            full.write(b"x" * 4096)
            full.flush()
        (Path(tmp) / "never").write_text("")
    assert e.value.code == "output_no_space" and e.value.path == str(target)
    assert not target.exists() and _leftovers(tmp_path) == []


def test_spilled_columns_fail_with_the_errno_of_the_failed_write(tmp_path):
    """The column spills (salvage's survey, rebuild's and repair's self-check) raise the write's own error, so a full
    disk is reported as such (numpy's tofile raised a bare OSError without errno)."""
    import numpy as np

    from rmqdump.common.columnspill import ColumnSpill

    spill = ColumnSpill(str(tmp_path / "spill"), {"a": np.int64})
    spill._files["a"].close()
    spill._files["a"] = open("/dev/full", "wb")  # noqa: SIM115
    with pytest.raises(OSError) as e:
        spill.append({"a": np.arange(100_000)})
        spill._files["a"].flush()
    assert e.value.errno == errno.ENOSPC


@pytest.mark.parametrize("command", ["repair", "salvage", "rebuild"])
def test_a_full_disk_under_a_command_is_one_line_and_exit_2(tmp_path, monkeypatch, command):
    """The column spill hits ENOSPC mid-command: one line with the code and the target, exit 2, nothing published."""
    from conftest import run

    from rmqdump.common.columnspill import ColumnSpill

    def full(self, cols):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(ColumnSpill, "append", full)
    store = copy_store("rmq4-basic", tmp_path)
    out = tmp_path / "out"
    r = run(command, store, "--out", out, "--hash-slots", "500", "--index-entries", "2000") if command != "salvage" else run(command, store, "--out", out)
    assert r.exit_code == 2
    assert r.stderr.strip() == f"rmqdump: output_no_space: {out}: No space left on device while writing it: nothing was published (the partial output was removed)"
    assert not out.exists() and _leftovers(tmp_path) == []


def test_nothing_written_is_an_error_not_an_empty_output(tmp_path):
    with pytest.raises(FileNotFoundError), publishing(str(tmp_path / "f"), force=False, kind="file"):
        pass
    assert not (tmp_path / "f").exists()


def test_refusals_have_one_code_each(tmp_path):
    store = copy_store("rmq4-flags", tmp_path)
    cases = [
        (store / "commitlog" / "x", {"stores": [str(store)]}, "output_inside_store"),
        (store, {"stores": [str(store)]}, "output_inside_store"),
        (tmp_path, {"stores": [str(store)]}, "store_inside_output"),
        (store / "config", {"kind": "file"}, "output_is_directory"),
    ]
    f = tmp_path / "file"
    f.write_text("x")
    cases.append((f, {"kind": "dir", "force": True}, "output_not_directory"))
    cases.append((f, {"kind": "file"}, "output_exists"))
    cases.append((f / "out", {"kind": "dir"}, "output_parent_not_directory"))  # under a file: nothing can be created there
    cases.append((f / "a" / "b.csv", {"kind": "file"}, "output_parent_not_directory"))
    for target, kw, code in cases:
        kw.setdefault("force", False)
        with pytest.raises(InputError) as e:
            check_target(str(target), **kw)
        assert e.value.code == code, (target, kw)
    # through a symlink into the store is still inside it
    link = tmp_path / "link"
    link.symlink_to(store)
    with pytest.raises(InputError) as e:
        check_target(str(link / "out"), force=True, stores=[str(store)])
    assert e.value.code == "output_inside_store"


def test_killed_run_temporary_is_removed_by_the_next_run(tmp_path):
    target = tmp_path / "out.parquet"
    script = textwrap.dedent(
        f"""
        import os, signal
        from rmqdump.common.publish import publishing
        with publishing({str(target)!r}, force=False, kind="file") as tmp:
            open(tmp, "w").write("partial")
            os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    p = subprocess.run([sys.executable, "-c", script], capture_output=True)
    assert p.returncode == -signal.SIGKILL
    assert len(_leftovers(tmp_path)) == 1 and not target.exists()
    with publishing(str(target), force=False, kind="file") as tmp, open(tmp, "w") as f:
        f.write("done")
    assert target.read_text() == "done" and _leftovers(tmp_path) == []
