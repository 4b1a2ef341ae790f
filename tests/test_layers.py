"""The tree is the architecture: each layer imports only the layers below it (and itself), no modules import each
other in a circle, lazily or not, records are read outside rmqdump/scan/ only through its scanner, and
docs/architecture.md names every module in its layer's row."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import rmqdump
import rmqdump.schemas

ROOT = Path(rmqdump.__file__).parent
SCHEMAS = Path(rmqdump.schemas.__file__).parent  # the top-level schemas/ in a checkout (the build maps it into the package)
DOC = Path(__file__).resolve().parent.parent / "docs" / "architecture.md"

# Lowest first. A module may import its own layer and the ones before it.
LAYERS = [
    ("rmqdump.schemas",),
    ("rmqdump.common",),
    ("rmqdump.readers",),
    ("rmqdump.scan",),
    ("rmqdump.text",),
    ("rmqdump.checks", "rmqdump.builders", "rmqdump.export"),
    ("rmqdump.query", "rmqdump.sql", "rmqdump.report"),
    ("rmqdump.engines", "rmqdump.spark"),
    ("rmqdump.cli", "rmqdump.__main__"),
]


def layer_of(module: str) -> int | None:
    for i, names in enumerate(LAYERS):
        if any(module == n or module.startswith(n + ".") for n in names):
            return i
    return None


def module_name(path: Path, root: Path = ROOT, package: str = "rmqdump") -> str:
    """The dotted name of a file under `root`, the folder of `package`."""
    parts = [*package.split("."), *path.relative_to(root).with_suffix("").parts]
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def imports_of(path: Path, mod: str) -> set[str]:
    """Every project module a file (module `mod`) imports, at its top or inside a function."""
    package = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            names = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        out |= {n for n in names if n.split(".")[0] == "rmqdump"}
    return out


def project_modules() -> dict[str, Path]:
    """Every module of rmqdump, rmqdump.schemas read from the folder it is imported from."""
    return {module_name(p): p for p in ROOT.rglob("*.py")} | {module_name(p, SCHEMAS, "rmqdump.schemas"): p for p in SCHEMAS.glob("*.py")}


def resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The project module an imported name is (a `from pkg import mod` names a module; `from mod import f` the module)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def targets(path: Path, mod: str, modules: dict[str, Path]) -> set[str]:
    """The project modules a file (module `mod`) imports, resolved."""
    return {t for n in imports_of(path, mod) if (t := resolve(n, modules)) and t != mod}


def graph() -> dict[str, set[str]]:
    modules = project_modules()
    return {m: targets(p, m, modules) for m, p in modules.items()}


def test_every_module_has_a_layer():
    assert [m for m in project_modules() if layer_of(m) is None and m != "rmqdump"] == []


def upward(g: dict[str, set[str]]) -> list[str]:
    bad = []
    for m, targets in g.items():
        lm = layer_of(m)
        for t in targets:
            lt = layer_of(t)
            if lm is not None and lt is not None and lt > lm:
                bad.append(f"{m} -> {t}")
    return sorted(bad)


def cycles(g: dict[str, set[str]]) -> list[str]:
    found = []
    state: dict[str, int] = {}

    def visit(m: str, stack: list[str]) -> None:
        state[m] = 1
        stack.append(m)
        for t in sorted(g.get(m, ())):
            if t == "rmqdump":
                continue
            if state.get(t) == 1:
                found.append(" -> ".join([*stack[stack.index(t) :], t]))
            elif t not in state:
                visit(t, stack)
        stack.pop()
        state[m] = 2

    for m in sorted(g):
        if m not in state:
            visit(m, [])
    return found


def test_no_module_imports_a_layer_above_its_own():
    assert upward(graph()) == []


def test_no_import_cycles():
    assert cycles(graph()) == []


def test_the_checks_find_a_planted_upward_import_and_cycle():
    g = graph()
    assert "rmqdump.scan._walk" in g["rmqdump.scan.ranges"]  # real imports are read
    g["rmqdump.readers.commitlog"] = g["rmqdump.readers.commitlog"] | {"rmqdump.scan._walk"}
    assert upward(g) == ["rmqdump.readers.commitlog -> rmqdump.scan._walk"]
    assert any("rmqdump.readers.commitlog" in c and "rmqdump.scan._walk" in c for c in cycles(g))


# The walk and its compiled kernel: private to rmqdump/scan/, so no pass outside it grows a record loop of its own.
PRIVATE_SCAN = ("rmqdump.scan._walk", "rmqdump.scan.kernel")


def private_scan_imports(g: dict[str, set[str]]) -> list[str]:
    """Imports of the walk or the scan kernel by modules outside rmqdump/scan/ (they go through rmqdump.scan.scanner)."""
    inside = ("rmqdump.scan", "rmqdump.scan.")
    return sorted(f"{m} -> {t}" for m, ts in g.items() if not (m == inside[0] or m.startswith(inside[1])) for t in ts if t in PRIVATE_SCAN)


def test_only_the_scan_package_imports_the_walk_and_the_kernel():
    assert private_scan_imports(graph()) == []


def test_the_walk_check_finds_a_planted_import(tmp_path):
    g, modules = graph(), project_modules()
    assert {"rmqdump.scan._walk", "rmqdump.scan.kernel"} <= set().union(*(g[m] for m in g if m.startswith("rmqdump.scan.")))
    # a module someone adds outside scan/: the walk lazily inside a function, the kernel as a name of its package
    new = tmp_path / "newpass.py"
    new.write_text("from rmqdump.scan import kernel, scanner\n\n\ndef f():\n    from rmqdump.scan._walk import scan_file\n")
    g["rmqdump.checks.newpass"] = targets(new, "rmqdump.checks.newpass", modules)
    assert "rmqdump.scan.scanner" in g["rmqdump.checks.newpass"]
    assert private_scan_imports(g) == ["rmqdump.checks.newpass -> rmqdump.scan._walk", "rmqdump.checks.newpass -> rmqdump.scan.kernel"]
    # text/ has a kernel module of its own: not the scan kernel
    g["rmqdump.cli.newcmd"] = {"rmqdump.text.kernel", "rmqdump.scan.scanner"}
    assert private_scan_imports(g) == ["rmqdump.checks.newpass -> rmqdump.scan._walk", "rmqdump.checks.newpass -> rmqdump.scan.kernel"]


def layer_rows(doc: str) -> dict[int, str]:
    """The rows of the doc's layer table, by layer index (0: schemas)."""
    return {int(m[1]) - 1: m[0] for m in re.finditer(r"^\| (\d+) \|.*$", doc, flags=re.M)}


def doc_path(module: str, path: Path) -> str:
    """A module's file as the doc spells it: `schemas/x.py` for the layouts, `rmqdump/...` for the rest."""
    return "schemas/" + path.name if module.startswith("rmqdump.schemas") else "rmqdump/" + path.relative_to(ROOT).as_posix()


def unnamed(doc: str, modules: dict[str, Path]) -> list[str]:
    """Modules their layer's row does not name: by their path or a tail of it (`checks/salvage.py`), or by the file
    name alone when no other module of that layer has that name."""
    rows = layer_rows(doc)
    files = {m: doc_path(m, p) for m, p in modules.items() if p.name != "__init__.py"}
    out = []
    for m, f in files.items():
        layer, base = layer_of(m), f.rsplit("/", 1)[-1]
        named = set(re.findall(r"`([^`\s]+\.py)`", rows.get(layer, "")))
        alone = sum(layer_of(o) == layer and g.rsplit("/", 1)[-1] == base for o, g in files.items()) == 1
        if not any(f == n or (f.endswith("/" + n) and ("/" in n or alone)) for n in named):
            out.append(f)
    return sorted(out)


def test_the_architecture_doc_names_every_module():
    """Read from the tree at test time: a module added anywhere under rmqdump/ or schemas/ must get its line."""
    assert unnamed(DOC.read_text(encoding="utf-8"), project_modules()) == []


def test_the_doc_check_finds_a_module_left_out():
    doc, modules = DOC.read_text(encoding="utf-8"), project_modules()
    assert "rmqdump.scan.dataend" in modules and "rmqdump.schemas.timer" in modules  # the tree is read, schemas too
    assert unnamed(doc.replace("`dataend.py`", "the data end"), modules) == ["rmqdump/scan/dataend.py"]
    assert unnamed(doc.replace("`timer.py` (timer log unit", "the timer (timer log unit"), modules) == ["schemas/timer.py"]
    # a file name two modules of one layer share names neither of them
    assert unnamed(doc.replace("`checks/salvage.py`", "`salvage.py`"), modules) == ["rmqdump/checks/salvage.py"]
    modules = {**modules, "rmqdump.checks.newpass": ROOT / "checks" / "newpass.py"}  # a module someone adds
    assert unnamed(doc, modules) == ["rmqdump/checks/newpass.py"]
