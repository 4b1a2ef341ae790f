"""Every byte the compiled kernels read or write is indexed through `rmqdump.scan.unsigned.u`.

numba gives an index of a signed type a negative-index fix-up; in a byte loop that select kept LLVM from compiling
the loop to vector code or memcpy (the JSON Lines kernel ran 1.6x longer, properties_columns 2x). Read from the
kernels' source: a subscript of a byte array is a slice, a 2-D index (the column arrays), or `_u(...)`.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
KERNELS = ("rmqdump/scan/kernel.py", "rmqdump/text/kernel.py", "rmqdump/scan/words.py")


# What the kernels name the byte arrays they take (the store's bytes, the output, string buffers); the 2-D column
# arrays (`out` of the walk) are indexed by a tuple, which the rule leaves alone.
BYTE_ARRAYS = {"data", "d", "out", "buf", "src", "vbuf", "nbuf", "a", "b"}


def _signed_subscripts(path: Path) -> list[str]:
    """`line function: subscript` for each byte-array subscript by one value not wrapped in `_u`."""
    tree = ast.parse(path.read_text())
    found = []
    for fn in (n for n in tree.body if isinstance(n, ast.FunctionDef)):
        arrays = {a.arg for a in fn.args.args} & BYTE_ARRAYS
        for node in ast.walk(fn):
            if not (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id in arrays):
                continue
            idx = node.slice
            if isinstance(idx, ast.Slice | ast.Tuple):
                continue  # a range of bytes, or a cell of the 2-D column arrays
            if isinstance(idx, ast.Call) and isinstance(idx.func, ast.Name) and idx.func.id == "_u":
                continue
            found.append(f"{node.lineno} {fn.name}: {ast.unparse(node)}")
    return found


@pytest.mark.parametrize("path", KERNELS)
def test_byte_indices_are_unsigned(path):
    assert _signed_subscripts(ROOT / path) == []


def test_the_rule_sees_a_signed_index(tmp_path):
    """The check itself: a byte read by a plain int is reported, a slice, a 2-D cell and `_u` are not."""
    (tmp_path / "k.py").write_text("def f(data, out, i):\n    out[0, i] = data[i] + data[_u(i)] + data[i:i + 2][0]\n")
    assert _signed_subscripts(tmp_path / "k.py") == ["2 f: data[i]"]
