"""What one call of the text kernels needs besides a batch's columns: the per-sysFlag snippets, and the kernels.

The listing prints at the scan's pace only if no record becomes a Python
object on the way out: rmqdump.text.kernel renders a whole batch per call,
exactly as `json.dumps` of `Message.to_dict()` (and the table's cells) would.
"""

from __future__ import annotations

import json

import numpy as np

from rmqdump.scan.native import configure


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


def kernels():
    """The compiled text kernels (numba imported, its cache directory set and the CRC library loaded first).

    Compiled code is cached in the scan kernel's user cache directory
    (rmqdump.scan.native.cache_dir), so only the first run after an install compiles.
    """
    configure()
    from rmqdump.text import kernel

    return kernel
