"""Export's JSON Lines: each message the `rmqdump commitlog -f jsonl` object, with the export's own fields
(`dledger_index`, `dledger_term`, `broker`, `compaction_part`, `compaction_log_offset`, and with `--body` the body)
before its closing brace.

The listing's compiled kernels (rmqdump.text) spell the object; where the export's fields are the same for every
row (a plain CommitLog, no compaction topic, no body) the kernel writes them too, as the line's tail, so a row never
becomes a Python object. Otherwise each line is finished from the row's Arrow values; a record the kernels leave to
Python (see rmqdump.text.spelling) is spelled whole from its Arrow row. Either way a line is `jsonl_lines`'s spelling
of the export's Arrow row, byte for byte.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator

import numpy as np
import pyarrow as pa

from rmqdump.common.jsontext import encode
from rmqdump.export import arrowbatch
from rmqdump.scan.compaction import ServedView
from rmqdump.scan.scanner import Batch
from rmqdump.text import spelling as K
from rmqdump.text.lines import OPEN, json_string, json_text

SUB_ROWS = 8192  # records spelled per kernel call: bounds the text buffer (about 10-20 MB)
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


def common_tail(broker: str) -> np.ndarray:
    """The export's fields of a plain CommitLog's row outside compaction topics, without body, and the line's end:
    the same for every row, so the kernel writes it."""
    row = {"dledger_index": None, "dledger_term": None, "broker": broker, "compaction_part": None, "compaction_log_offset": None}
    return np.frombuffer(("," + encode(row)[1:] + "\n").encode(), dtype=np.uint8).copy()


class Lines:
    """One task's JSON Lines spelling: the file names and the tail spelled once, reused for every batch."""

    def __init__(self, broker: str, with_body: bool, served: ServedView | None):
        self.broker, self.with_body, self.served = broker, with_body, served
        self.tail = common_tail(broker)
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
            own = b.entries is not None or self.with_body or (self.served is not None and topic in self.served.queues)
            pieces: list = []
            for lo in range(0, len(rows), SUB_ROWS):
                pieces += self._rows(b, rows[lo : lo + SUB_ROWS], file_json, own)
            yield topic, pieces

    def _rows(self, b: Batch, rows: np.ndarray, file_json: np.ndarray, own: bool) -> list:
        """The lines of `rows`: kernel text, finished per row when `own` (the row's own export fields); the rows the
        kernel left to Python spelled from their Arrow rows, in place."""
        status, ends, out = json_text(b, rows, file_json, tail=OPEN if own else self.tail)
        left = np.flatnonzero(status == K.FALLBACK)
        if not own and not len(left):
            return [out[: int(ends[-1])]]
        spelled = dict(zip(left.tolist(), self._arrow(b, rows[left], self.full), strict=True))
        if not own:  # runs of kernel text between the rows spelled whole
            pieces, start = [], 0
            for j, line in spelled.items():
                if int(ends[j]) > start:
                    pieces.append(out[start : int(ends[j])])
                pieces.append(line)
                start = int(ends[j])
            if int(ends[-1]) > start:
                pieces.append(out[start : int(ends[-1])])
            return [b"".join(pieces)]
        took = np.flatnonzero(status != K.FALLBACK)
        tails = self._arrow(b, rows[took], self.extra)
        parts, start, k = [], 0, 0
        for j in range(len(rows)):
            end = int(ends[j])
            if j in spelled:
                parts.append(spelled[j])
            else:
                parts.append(bytes(out[start:end]))
                parts.append(b"," + tails[k][1:])  # the row's own fields: its JSON object's members, then "}\n"
                k += 1
            start = end
        return [b"".join(parts)]

    def _arrow(self, b: Batch, rows: np.ndarray, sch: pa.Schema) -> list[bytes]:
        """Whole JSON Lines (with their newline) of the records `rows` with the columns of `sch`."""
        if not len(rows):
            return []
        rb = arrowbatch.selected(b, rows, self.broker, sch, self.served)
        return [(line + "\n").encode() for line in jsonl_lines(rb)]
