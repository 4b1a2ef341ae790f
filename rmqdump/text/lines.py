"""A scanned batch's rows handed to the text kernels: the row matrix they read, and a JSON Lines call on one thread
or on two.

Shared by every writer of record text: the listing (`rmqdump commitlog`) and the JSON Lines export. Each line is
the listing's object up to its `msg_id`; what follows it (`tail`) is the caller's: the listing's closing brace, or
the export's own fields, so neither becomes a Python object on the way out.
"""

from __future__ import annotations

import json

import numpy as np

from rmqdump.scan.scanner import Batch
from rmqdump.schemas import constants as C
from rmqdump.text import batches as TB
from rmqdump.text import spelling as K

CLOSE = np.frombuffer(b"}\n", dtype=np.uint8).copy()  # the listing's tail: the object closed, the line ended
OPEN = np.zeros(0, dtype=np.uint8)  # no tail: the caller finishes each line itself
_EMPTY = np.zeros(0, dtype=np.uint8)
TEXT_BYTES = 16 << 20  # record bytes per kernel call at most: a call's buffer holds their text, bodies in base64 too
NO_FILTER = (_EMPTY, _EMPTY, _EMPTY, np.zeros(3, dtype=np.int64))  # the kernels' topic, tag and key filters, all off
_POOL = None


def pool():
    """The one extra thread a batch's second half is rendered on."""
    global _POOL
    if _POOL is None:
        from concurrent.futures import ThreadPoolExecutor

        _POOL = ThreadPoolExecutor(1, thread_name_prefix="rmqdump-text")
    return _POOL


def selector(rows: np.ndarray):
    """Sorted distinct row numbers as a slice when they are consecutive (nothing filtered out): each column is then
    read as a view, not gathered by fancy indexing."""
    if len(rows) and int(rows[-1]) - int(rows[0]) == len(rows) - 1:
        return slice(int(rows[0]), int(rows[-1]) + 1)
    return rows


def json_string(text: str) -> np.ndarray:
    """`text` as a JSON string (json.dumps, non-ASCII kept), as the kernels' bytes."""
    return np.frombuffer(json.dumps(text, ensure_ascii=False).encode(), dtype=np.uint8).copy()


def rows_matrix(b: Batch, rows: np.ndarray, flag_idx: np.ndarray) -> np.ndarray:
    """The kernels' input: one int64 row per record, columns rmqdump.text.spelling.MATRIX."""
    c = b.cols
    n = len(rows)
    mat = np.empty((n, len(K.MATRIX)), dtype=np.int64)
    raw = b.raw_columns(K.MATRIX)
    if raw is not None:  # one compiled pass over the kernel's rows
        TB.kernels().gather(raw[0], raw[1], raw[2], np.ascontiguousarray(rows, dtype=np.int64), mat)
    rows = selector(rows)
    if raw is None:
        for j, name in enumerate(K.MATRIX):
            if name in c:
                mat[:, j] = c[name][rows]
    mat[:, K.M["magic_version"]] = np.where(c["magic"][rows] == C.MAGIC_V2, 2, 1)
    mat[:, K.M["crc"]] = -1 if b.crc_ok is None else b.crc_ok[rows]
    mat[:, K.M["prop_crc"]] = -1 if b.prop_crc is None else b.prop_crc[rows]
    mat[:, K.M["flag_idx"]] = flag_idx
    return mat


class Halves:
    """A sub-batch's text rendered by two threads into two stretches of one buffer: its rows' ends number the second
    stretch's bytes as if it followed the first, which it is never copied behind."""

    def __init__(self, first: np.ndarray, second: np.ndarray):
        self.first, self.second = first, second

    def pieces(self, start: int, end: int) -> list[np.ndarray]:
        """The text of positions [start, end): one stretch's slice, or the end of the first and the start of the second."""
        cut = len(self.first)
        if end <= cut:
            return [self.first[start:end]]
        if start >= cut:
            return [self.second[start - cut : end - cut]]
        return [self.first[start:], self.second[: end - cut]]

    def __getitem__(self, s: slice) -> bytes:
        return b"".join(bytes(p) for p in self.pieces(s.start, s.stop))


def json_text(b: Batch, rows: np.ndarray, file_json: np.ndarray, filters=NO_FILTER, tail: np.ndarray = CLOSE, two: bool = False, body_end: np.ndarray = OPEN):
    """(status per row, text end per row, the text) of the records `rows` (sorted) of a batch as JSON Lines: each
    line the listing's object up to its msg_id, then `tail` (and with a `body_end`, the body in base64, then it). The
    text is an array, or with `two` a Halves: the rows split between this thread and pool()'s (the kernel releases
    the GIL)."""
    sel = selector(rows)
    snip, snip_offs, _tx, _txo, idx = TB.flag_snippets(b.cols["sys_flag"][sel])
    mat = rows_matrix(b, rows, idx)
    c = b.cols
    bound = (
        K.FIXED_JSON + len(file_json) + len(tail) + int(np.diff(snip_offs).max()) + 400
        + c["topic_length"][sel].astype(np.int64) + 7 * c["properties_length"][sel].astype(np.int64)
    )  # fmt: skip
    if len(body_end):
        bound += len(body_end) + 4 * ((c["body_length"][sel].astype(np.int64) + 2) // 3)
    n = len(rows)
    out = np.empty(int(bound.sum()), dtype=np.uint8)
    ends = np.empty(n, dtype=np.int64)
    status = np.empty(n, dtype=np.int8)
    json_lines = TB.kernels().json_lines

    def part(lo: int, hi: int, at: int) -> int:
        return json_lines(b.mf.data, b.seg.base, mat[lo:hi], file_json, snip, snip_offs, *filters, tail, body_end, out[at:], ends[lo:hi], status[lo:hi], TB.item_room())

    if not two:
        part(0, n, 0)
        return status, ends, out
    # the second half is written after the first half's room, and stays there (moved down behind the first half's
    # text, it cost a copy into fresh pages: 80 of a listing's 286 huge-page faults at 1M)
    h = n // 2
    at = int(bound[:h].sum())
    second = pool().submit(part, h, n, at)
    end1 = part(0, h, 0)
    end2 = second.result()
    ends[h:] += end1
    return status, ends, Halves(out[:end1], out[at : at + end2])
