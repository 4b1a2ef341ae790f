"""What one call of the text kernels needs besides a batch's columns: the per-sysFlag snippets, and the kernels.

The listing prints at the scan's pace only if no record becomes a Python
object on the way out: rmqdump.text.kernel renders a whole batch per call,
exactly as `json.dumps` of `Message.to_dict()` (and the table's cells) would.
"""

from __future__ import annotations

import json
from types import ModuleType

import numpy as np

from rmqdump.scan.aot import KernelSet, load
from rmqdump.scan.native import SHARED_HELPERS
from rmqdump.text.spelling import MAX_ITEMS


def flag_snippets(sys_flags: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per distinct sysFlag: the JSON of `sys_flag_names` and `transaction`, and the table's tx cell.

    Returns (json bytes, json offsets, tx bytes, tx offsets, index of each row's sysFlag). The CSV's
    `,transaction` is csv_snippets.
    """
    from rmqdump.readers.message import flag_names, transaction_name

    uniq, inverse = np.unique(sys_flags, return_inverse=True)
    js, tx = [], []
    for f in uniq.tolist():
        names = json.dumps(flag_names(int(f)), ensure_ascii=False, separators=(",", ":"))
        name = transaction_name(int(f))
        js.append(f',"sys_flag_names":{names},"transaction":{json.dumps(name, ensure_ascii=False)}'.encode())
        tx.append(b"" if name == "none" else name.encode())
    return (*_packed(js), *_packed(tx), inverse.reshape(len(sys_flags)).astype(np.int64))


def csv_snippets(sys_flags: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per distinct sysFlag the CSV text `,transaction`; (bytes, offsets, index of each row's sysFlag)."""
    from rmqdump.readers.message import transaction_name

    uniq, inverse = np.unique(sys_flags, return_inverse=True)
    return (*_packed([("," + transaction_name(int(f))).encode() for f in uniq.tolist()]), inverse.reshape(len(sys_flags)).astype(np.int64))


def _packed(parts: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    offs = np.zeros(len(parts) + 1, dtype=np.int64)
    np.cumsum([len(p) for p in parts], out=offs[1:])
    return np.frombuffer(b"".join(parts) or b"\0", dtype=np.uint8).copy(), offs


def item_room() -> np.ndarray:
    """Room for one record's property items (name starts, separators, ends), one per concurrent kernel call: the
    kernels allocate nothing themselves (rmqdump.text.kernel counts no references)."""
    return np.empty((3, MAX_ITEMS), dtype=np.int64)


def _signatures() -> dict:
    """Each text entry point and its one signature (what the listing passes: store bytes read-only, the rest
    writable, C order): what the ahead-of-time module is compiled for."""
    from numba import types as T

    data = T.Array(T.uint8, 1, "C", readonly=True)
    i1, i2, u8, s8 = T.int64[::1], T.int64[:, ::1], T.uint8[::1], T.int8[::1]
    filters = (u8, u8, u8, i1)  # topic, tag, key, and their lengths
    return {
        "json_lines": T.int64(data, T.int64, i2, u8, u8, i1, *filters, u8, u8, u8, i1, s8, i2),
        "csv_lines": T.int64(data, T.int64, i2, u8, u8, i1, *filters, u8, i1, s8, i2),
        "table_cells": T.int64(data, T.int64, i2, u8, i1, *filters, u8, i2, i2, s8, i2),
        "table_lines": T.int64(u8, i2, i2, i1, s8, T.int64, T.int64, u8),
        "gather": T.int64(i2, i1, i1, i1, i2),
    }


def _jit() -> ModuleType:
    from rmqdump.text import kernel

    return kernel


TEXT = KernelSet("rmqdump_text_kernel", ("text/kernel.py", "text/spelling.py", *SHARED_HELPERS, "scan/aot.py"), False, _signatures, _jit, "rmqdump.text.batches:TEXT", nrt=False)


def kernels():
    """The compiled text kernels (rmqdump.scan.aot.load: compiled at install, else in the user's cache, else JIT)."""
    return load(TEXT)
