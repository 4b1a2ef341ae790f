"""Byte ranges are planned in one place, rmqdump/scan/ (splits.py, with its one range size): no module outside it
defines a range size, builds a range (`Split(...)`; a task rebuilding a planned one from its fields, `Split(**row)`,
plans nothing) or defines a planner of its own (a function named for the splits or cuts it makes)."""

from __future__ import annotations

import ast
import operator
import re
from pathlib import Path

import rmqdump

ROOT = Path(rmqdump.__file__).parent
SCAN = ROOT / "scan"
SIZED_NAME = re.compile(r"split|range|cut", re.I)  # what a range size is called
PLANNER_NAME = re.compile(r"(^|_)(splits|cuts)(_past)?$")  # a function that makes ranges: commitlog_splits, _cuts, splits_past
SIZE_AT_LEAST = 1 << 20  # a literal this big named like a range is a range size
_OPS = {ast.Mult: operator.mul, ast.LShift: operator.lshift, ast.Add: operator.add, ast.Pow: operator.pow}


def literal_int(node: ast.AST) -> int | None:
    """The value of an integer written as literals (`64 << 20`, `128 * 1024 * 1024`), else None."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        a, b = literal_int(node.left), literal_int(node.right)
        return None if a is None or b is None else _OPS[type(node.op)](a, b)
    return None


def _names(target: ast.AST) -> list[str]:
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, ast.Attribute):
        return [target.attr]
    if isinstance(target, ast.Tuple):
        return [n for t in target.elts for n in _names(t)]
    return []


def planning_outside_scan(source: str, where: str) -> list[str]:
    """What a module's source does that only the planner may: range sizes, Split(...) built, planner functions."""
    out = []
    for node in ast.walk(ast.parse(source, where)):
        pairs: list[tuple[str, ast.AST]] = []
        if isinstance(node, ast.Assign):
            pairs = [(n, node.value) for t in node.targets for n in _names(t)]
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            pairs = [(n, node.value) for n in _names(node.target)]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if PLANNER_NAME.search(node.name):
                out.append(f"{where}:{node.lineno}: planner function {node.name}")
            a = node.args
            positional = a.posonlyargs + a.args
            pairs = list(zip([p.arg for p in positional[len(positional) - len(a.defaults) :]], a.defaults, strict=True))
            pairs += [(p.arg, d) for p, d in zip(a.kwonlyargs, a.kw_defaults, strict=True) if d is not None]
        elif isinstance(node, ast.Call):
            f = node.func
            rebuilt = not node.args and [k.arg for k in node.keywords] == [None]  # Split(**row): a planned range sent to a task
            if (f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else "") == "Split" and not rebuilt:
                out.append(f"{where}:{node.lineno}: Split(...) built")
        for name, value in pairs:
            v = literal_int(value)
            if SIZED_NAME.search(name) and v is not None and v >= SIZE_AT_LEAST:
                out.append(f"{where}:{value.lineno}: range size {name} = {v}")
    return out


def test_no_range_size_split_or_planner_outside_scan():
    found = []
    for p in sorted(ROOT.rglob("*.py")):
        if SCAN not in p.parents:
            found += planning_outside_scan(p.read_text(encoding="utf-8"), str(p.relative_to(ROOT)))
    assert found == []


def test_the_check_finds_planted_planners():
    """What the tree held before the planner was made one: each is found, and nothing in the planner's own style of use."""
    planted = {
        "RANGE_BYTES = 64 << 20\n": "range size RANGE_BYTES",
        "SQL_RANGE_BYTES = 16 * 1024 * 1024\n": "range size SQL_RANGE_BYTES",
        "def f(cl, split_size: int = 128 << 20):\n    pass\n": "range size split_size",
        "def f(cl, *, range_bytes=1 << 26):\n    pass\n": "range size range_bytes",
        "def _cuts(a, b, lo, hi, step):\n    pass\n": "planner function _cuts",
        "def group_splits(splits, workers):\n    pass\n": "planner function group_splits",
        "def splits_past(cl, start):\n    pass\n": "planner function splits_past",
        "sp = Split(sp.broker, sp.path, sp.base, 0, 1, 2, True)\n": "Split(...) built",
        "sp = splits.Split('', 'f', 0, 0, 1, 1)\n": "Split(...) built",
    }
    for source, what in planted.items():
        (hit,) = planning_outside_scan(source, "planted.py")
        assert what in hit, source
    fine = (
        "READ_BYTES = 1 << 20\nsplits = commitlog_splits(cl, range_bytes)\n"
        "RENDER_SPLIT = held_range_bytes('text')\n"
        "def split_messages(split, columns):\n    pass\n"
        "def f(range_bytes: int = RANGE_BYTES, small_range: int = 4096):\n    pass\n"
        "def splits_frame(spark, splits):\n    return [Split(**row) for row in rows]\n"
    )
    assert planning_outside_scan(fine, "fine.py") == []
