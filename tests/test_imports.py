"""No module of rmqdump imports another module's private name.

A leading underscore says "only this module uses it"; a second user means the
name belongs in the public interface (or in a module both can import).
"""

import ast
from pathlib import Path

import rmqdump
import rmqdump.schemas

ROOT = Path(rmqdump.__file__).parent
SCHEMAS = Path(rmqdump.schemas.__file__).parent  # the top-level schemas/ in a checkout (the build maps it into the package)


def _modules() -> list[Path]:
    return sorted({*ROOT.rglob("*.py"), *SCHEMAS.glob("*.py")})


def _private_imports(path: Path, root: Path = ROOT.parent) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.ImportFrom):
            continue
        if not (node.level or (node.module or "").split(".")[0] == "rmqdump"):
            continue
        for alias in node.names:
            name = alias.name
            if name.startswith("_") and not (name.startswith("__") and name.endswith("__")):
                found.append(f"{path.relative_to(root)}:{node.lineno}: from {'.' * node.level}{node.module or ''} import {name}")
    return found


def test_walk_sees_every_module():
    modules = _modules()
    assert len(modules) > 30
    assert ROOT / "checks" / "cqverify.py" in modules
    assert SCHEMAS / "commitlog.py" in modules


def test_detector_flags_a_private_import(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("from rmqdump.readers.commitlog import scan_file, _hidden\nfrom rmqdump import __version__\nfrom os import _exit\n")
    sample.write_text(sample.read_text() + "from .sibling import _near\n")
    assert _private_imports(sample, tmp_path) == [
        "sample.py:1: from rmqdump.readers.commitlog import _hidden",
        "sample.py:4: from .sibling import _near",
    ]


def test_no_module_imports_a_private_name_of_another():
    offenders = [line for path in _modules() for line in _private_imports(path)]
    assert offenders == []
