"""rmqdump.schemas as the build installs it: the top-level schemas/ mapped into the package (no link in the tree),
importable from any directory, listed with every other package for the build, and shipped to Spark executors."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import ROOT as REPO


def tree_packages() -> set[str]:
    """The packages a checkout holds: each folder of rmqdump/ with an __init__.py, and rmqdump.schemas (schemas/)."""
    pkgs = {".".join(["rmqdump", *p.parent.relative_to(REPO / "rmqdump").parts]) for p in (REPO / "rmqdump").rglob("__init__.py")}
    return pkgs | {"rmqdump.schemas"}


def test_the_build_lists_every_package_and_maps_schemas():
    tomllib = pytest.importorskip("tomllib")
    conf = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    assert sorted(conf["packages"]) == sorted(tree_packages())  # a new package left out would be missing from the wheel
    assert conf["package-dir"] == {"rmqdump.schemas": "schemas"}
    assert (REPO / "schemas" / "__init__.py").is_file()
    assert not (REPO / "rmqdump" / "schemas").exists() and not (REPO / "rmqdump" / "schemas").is_symlink()


def test_rmqdump_schemas_imports_from_another_directory(tmp_path):
    code = "import rmqdump, rmqdump.schemas.commitlog as m; print(rmqdump.__file__); print(m.__file__)"
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True).stdout.split()
    pkg = Path(out[0]).parent
    # a checkout (editable install) maps it from schemas/; an installed wheel holds it inside rmqdump/
    want = (REPO / "schemas" if pkg == REPO / "rmqdump" else pkg / "schemas") / "commitlog.py"
    assert Path(out[1]) == want


def test_the_executors_zip_holds_every_module_once():
    from rmqdump.engines.spark.session import package_zip

    names = zipfile.ZipFile(package_zip()).namelist()
    want = {"rmqdump/" + p.relative_to(REPO / "rmqdump").as_posix() for p in (REPO / "rmqdump").rglob("*.py")}
    want |= {"rmqdump/schemas/" + p.name for p in (REPO / "schemas").glob("*.py")}
    assert sorted(n for n in names if n.startswith("rmqdump/")) == sorted(want)
    assert len(names) == len(set(names)) and "construct/__init__.py" in names


def test_the_executors_zip_is_removed_when_the_driver_exits(tmp_path):
    """The zip is made in the temp directory for a command's session; the driver's exit takes it away."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    code = "import os; from rmqdump.engines.spark.session import package_zip; p = package_zip(); print(os.path.getsize(p))"
    env = {**os.environ, "TMPDIR": str(scratch)}
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert int(r.stdout) > 0  # it was there while the driver ran
    assert sorted(p.name for p in scratch.iterdir()) == []
