"""Export's JSON Lines: each message the `rmqdump commitlog -f jsonl` object, with the export's own fields
(`dledger_index`, `dledger_term`, `broker`, `compaction_part`, `compaction_log_offset`, and with `--body` the body)
before its closing brace.

The listing's compiled kernels (rmqdump.text) spell the object; where the export's fields are the same for every
row (a plain CommitLog, no compaction topic) the kernel writes them too, as the line's tail, with the body in
base64 after it, so a row never becomes a Python object. Otherwise each line is finished from the row's Arrow
values; a record the kernels leave to Python (see rmqdump.text.spelling) is spelled whole from its Arrow row. Either
way a line is `jsonl_lines`'s spelling of the export's Arrow row, byte for byte.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator

import numpy as np
import pyarrow as pa

from rmqdump.common.jsontext import encode
from rmqdump.export import arrowbatch
from rmqdump.scan.compaction import ServedView
from rmqdump.scan.scanner import Batch, runs
from rmqdump.text import spelling as K
from rmqdump.text.lines import OPEN, TEXT_BYTES, json_string, json_text

SUB_ROWS = 8192  # records spelled per kernel call (and TEXT_BYTES of them at most): bounds the text buffer
Rows = Callable[[np.ndarray], list[bytes]]  # positions in a call's rows -> a line (or a line's own fields) each
EXTRA = ("dledger_index", "dledger_term", "broker", "compaction_part", "compaction_log_offset")  # after the listing's fields


def jsonl_lines(rb: pa.RecordBatch, binary: tuple[str, ...] = ("body",)) -> list[str]:
    """A record batch as JSON Lines, each line the `rmqdump commitlog -f jsonl` object plus broker (and body): properties
    as an object, the `binary` columns there in base64, each named so by a `NAME_encoding` field after the row's own."""
    out = []
    for r in rb.to_pylist():
        if "properties" in r:
            r["properties"] = dict(r["properties"])
        there = [k for k in binary if k in r]
        for k in there:
            r[k] = base64.b64encode(r[k]).decode()
        r.update((f"{k}_encoding", "base64") for k in there)
        out.append(encode(r))
    return out


def common_tail(broker: str, with_body: bool) -> tuple[np.ndarray, np.ndarray]:
    """(tail, body end) of a plain CommitLog's row outside compaction topics, for the kernel: the export's fields,
    the same for every row, then (with a body) `"body":"`, the body in base64, and its encoding."""
    row = {"dledger_index": None, "dledger_term": None, "broker": broker, "compaction_part": None, "compaction_log_offset": None}
    if not with_body:
        return _u8("," + encode(row)[1:] + "\n"), OPEN
    row |= {"body": "", "body_encoding": "base64"}
    head, _, end = ("," + encode(row)[1:] + "\n").partition('"body":""')
    return _u8(head + '"body":"'), _u8('"' + end)


def _u8(text: str) -> np.ndarray:
    return np.frombuffer(text.encode(), dtype=np.uint8).copy()


def spell(
    b: Batch, rows: np.ndarray, file_json: np.ndarray, whole: Rows, *, tail: np.ndarray = OPEN, body_end: np.ndarray = OPEN, own: Rows | None = None, suffix: Rows | None = None
) -> list:
    """The JSON Lines of the records `rows` (sorted) of a batch, in order: the kernel's text, each line ended by
    `tail` (and with a `body_end`, the body in base64, then it), then with `suffix` by each row's own bytes
    (suffix(k): for the rows at positions k of `rows`, what follows the kernel's text, the newline included); or with
    `own` by each row's own fields (own(k): each one's JSON object of them, its newline after). A row the kernel
    leaves to Python is spelled whole (whole(k), likewise)."""
    if own is not None:
        tail = body_end = OPEN

        def suffix(k: np.ndarray) -> list[bytes]:  # the object's members after the listing's, then its "}\n"
            return [b"," + line[1:] for line in own(k)]

    status, ends, out = json_text(b, rows, file_json, tail=tail, body_end=body_end)
    left = np.flatnonzero(status == K.FALLBACK)
    if suffix is None and not len(left):
        return [out[: int(ends[-1])]]
    spelled = dict(zip(left.tolist(), whole(left), strict=True))
    parts: list = []
    start = 0
    if suffix is None:  # runs of kernel text between the rows spelled whole
        for j, line in spelled.items():
            if int(ends[j]) > start:
                parts.append(out[start : int(ends[j])])
            parts.append(line)
            start = int(ends[j])
        if int(ends[-1]) > start:
            parts.append(out[start : int(ends[-1])])
        return [b"".join(parts)]
    text = memoryview(out)
    tails = iter(suffix(np.flatnonzero(status != K.FALLBACK)))
    for j, end in enumerate(ends.tolist()):
        if j in spelled:
            parts.append(spelled[j])
        else:
            parts.append(text[start:end])
            parts.append(next(tails))
        start = end
    return [b"".join(parts)]


def arrow_lines(rb: pa.RecordBatch, binary: tuple[str, ...] = ("body",)) -> list[bytes]:
    """jsonl_lines as bytes, each with its newline."""
    return [(line + "\n").encode() for line in jsonl_lines(rb, binary)]


class Lines:
    """One task's JSON Lines spelling: the file names and the tail spelled once, reused for every batch."""

    def __init__(self, broker: str, with_body: bool, served: ServedView | None):
        self.broker, self.with_body, self.served = broker, with_body, served
        self.tail, self.body_end = common_tail(broker, with_body)
        self.full = arrowbatch.schema(with_body)
        self.extra = pa.schema([self.full.field(n) for n in (*EXTRA, *(("body",) if with_body else ()))])
        self._file_json: dict[str, np.ndarray] = {}

    def batch(self, b: Batch) -> Iterator[tuple[str, list]]:
        """(topic, text pieces) for each topic of a batch, its records in CommitLog order: one group per topic."""
        if not len(b):
            return
        file_json = self._file_json.get(b.seg.path)
        if file_json is None:
            file_json = self._file_json[b.seg.path] = json_string(b.seg.path)
        for sel in arrowbatch.topic_groups(b, 0, len(b)):
            rows = np.arange(sel.start, sel.stop, dtype=np.int64) if isinstance(sel, slice) else sel.astype(np.int64)
            topic = b.topic(int(rows[0]))
            own = b.entries is not None or (self.served is not None and topic in self.served.queues)
            pieces: list = []
            for lo, hi in runs(b.cols["total_size"][rows], TEXT_BYTES, SUB_ROWS):
                pieces += self._rows(b, rows[lo:hi], file_json, own)
            yield topic, pieces

    def _rows(self, b: Batch, rows: np.ndarray, file_json: np.ndarray, own: bool) -> list:
        """The lines of `rows`: the kernel's text, finished per row when `own` (the row's own export fields)."""

        def arrow(sch: pa.Schema) -> Rows:
            return lambda k: arrow_lines(arrowbatch.selected(b, rows[k], self.broker, sch, self.served)) if len(k) else []

        return spell(b, rows, file_json, arrow(self.full), tail=self.tail, body_end=self.body_end, own=arrow(self.extra) if own else None)


def line_values(text) -> pa.Array:
    """Lines, each ended by its newline (a piece of Lines.batch), as a string array of the lines without it: what
    Spark's text writer takes, adding its own. A JSON line holds no other newline byte (JSON escapes it)."""
    buf = np.frombuffer(text, dtype=np.uint8)
    nl = np.flatnonzero(buf == 10)
    offsets = np.zeros(len(nl) + 1, dtype=np.int32)
    offsets[1:] = nl - np.arange(len(nl))
    return pa.StringArray.from_buffers(len(nl), pa.py_buffer(offsets), pa.py_buffer(np.delete(buf, nl)))
