"""The one publisher: outputs are written beside the target and renamed into place, never into a store."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

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
