"""How `rmqdump commitlog` writes what it lists: JSON Lines, a streamed table, or CSV.

The listing is the planner's ranges mapped by an engine: `render_range` is the
range function (pure: a range's text, or for the table its cells and lines to
lay out, with its tally), `Printer` the fold that writes them in range order.
Batches of records are rendered whole by the compiled kernels of
rmqdump.text; a record the kernels leave to Python (see rmqdump.text), and
every record with problems, goes through rmqdump.query.listing.record_entries,
whose entries' to_dict() the kernels spell byte for byte, so the text is the same either way.
"""

from __future__ import annotations

import abc
import csv
import io
import json
import sys
from collections.abc import Iterable
from dataclasses import dataclass, replace

import numpy as np

from rmqdump.cli import render
from rmqdump.common.background import Background
from rmqdump.common.problems import Problem
from rmqdump.query.listing import Filter, Records, Tally, range_items, record_entries
from rmqdump.readers.commitlog import Blank
from rmqdump.readers.message import Message
from rmqdump.scan.scanner import Batch, runs
from rmqdump.scan.splits import Split
from rmqdump.schemas import constants as C
from rmqdump.text import batches as TB
from rmqdump.text import spelling as K
from rmqdump.text.lines import CLOSE, OPEN, TEXT_BYTES, Halves, json_string, json_text, pool, rows_matrix, selector

SUB_ROWS = 8192  # records rendered per kernel call (and TEXT_BYTES of them at most): bounds the output buffer
PARALLEL_ROWS = 2048  # from this many records a sub-batch is rendered by two threads


def _writer(ahead: int = 2) -> Background:
    """Buffers written to stdout in order from a thread, so the scan and the kernels go on while a pipe drains.

    Every buffer handed over is the writer's alone (the kernels render into fresh arrays); a write
    error (a closed pipe) is raised by the next put() or by close().
    """
    out = sys.stdout.buffer
    return Background(out.write, out.flush, ahead=ahead, name="rmqdump-write")


_ENCODE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
BODY_FIELD = np.frombuffer(b',"body":"', dtype=np.uint8).copy()  # a line's tail before its base64 body, spelled by the kernel
BODY_END = np.frombuffer(b'","body_encoding":"base64"}\n', dtype=np.uint8).copy()  # and after it

CSV_COLUMNS = [
    "kind", "file", "phys_offset", "total_size", "magic_version", "body_crc", "crc_ok", "prop_crc_ok", "queue_id", "flag",
    "queue_offset", "sys_flag", "transaction", "born_timestamp", "born_host", "store_timestamp", "store_host", "reconsume_times",
    "prepared_transaction_offset", "body_length", "topic", "tags", "keys", "uniq_key", "msg_id", "properties", "body", "body_encoding",
    "code", "file_offset", "detail", "length", "marker", "dledger_index", "dledger_term",
]  # fmt: skip
TABLE_COLUMNS = ["offset", "size", "topic", "q", "qoffset", "stored (UTC)", "tags", "keys", "uniq_key", "tx", "crc"]


def _filter_args(flt: Filter):
    def enc(v):
        return np.frombuffer((v or "").encode(), dtype=np.uint8).copy()

    return enc(flt.topic), enc(flt.tag), enc(flt.key), np.array([flt.topic is not None, flt.tag is not None, flt.key is not None], dtype=np.int64)


def _union(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The sorted distinct values of two sorted arrays: np.union1d's answer without its np.unique, whose first call
    imports numpy.ma (10-20 ms of a listing's start-up); mostly both are empty."""
    if not len(b):
        return a
    both = np.sort(np.concatenate([a, b]), kind="stable")
    return both[np.concatenate([[True], both[1:] != both[:-1]])]


@dataclass(frozen=True)
class ListSpec:
    """How every range of a listing is rendered (sent with each Spark task)."""

    fmt: str  # jsonl, csv or table
    flt: Filter
    body: str = "none"
    uncompress: bool = False
    halves: bool = True  # a big sub-batch rendered by two threads: for one worker, whose second core is otherwise idle


@dataclass
class RangeText:
    """What one range (or the CommitLog's layout problems) prints, in order, and its tally: text, or for the table
    what Printer lays out at its running column widths."""

    pieces: list
    messages: int = 0
    blanks: int = 0
    problems: int = 0


def render_items(items: Iterable, spec: ListSpec, tally: Tally | None = None) -> RangeText:
    """The listing's text of `items` (rmqdump.query.listing's), up to the filter's limit."""
    tally = tally if tally is not None else Tally()
    r = {"jsonl": JsonLinesOut, "csv": CsvOut, "table": TableOut}[spec.fmt](spec.flt, tally, body=spec.body, uncompress=spec.uncompress)
    r.halves = spec.halves
    for item in items:
        r.item(item)
        if r.done:
            break
    return RangeText(r.pieces, tally.messages, tally.blanks, tally.problems)


def render_range(split: Split, spec: ListSpec, limit: int | None = None) -> RangeText:
    """The range function: what one range prints, up to its `limit`-th message (the filter's limit by default).

    A pure function of the range, so -j1, -jN and Spark print the same; the fold cuts a range where the listing's
    limit falls inside it by asking again with the messages it still needs.
    """
    if limit is not None:
        spec = replace(spec, flt=replace(spec.flt, limit=limit))
    tally = Tally()
    items = range_items(split, spec.flt, tally)
    try:
        return render_items(items, spec, tally)
    finally:
        items.close()  # the range's file unmapped now, not when the generator is collected


class RecordsOut(abc.ABC):
    """Renders listing items into `pieces`; counts messages and problems in `tally`; stops at `flt.limit`."""

    def __init__(self, flt: Filter, tally: Tally, *, body: str = "none", uncompress: bool = False):
        self.flt, self.tally, self.body, self.uncompress = flt, tally, body, uncompress
        self.with_body = body != "none"
        self.filters = _filter_args(flt)
        self.done = False
        self.halves = True
        self.pieces: list = []

    # -- output
    def write_bytes(self, data) -> None:
        """A rendered stretch: a kernel's output array (the slice holds no more than it shows when pickled) or bytes."""
        self.pieces.append(data)

    def write_text(self, text: str) -> None:
        self.write_bytes(text.encode("utf-8", errors="surrogateescape"))

    def fields(self, e) -> dict:
        """An entry's fields as JSON Lines and CSV spell them, with its body in the asked encoding."""
        d = e.to_dict()
        if isinstance(e, Message) and e.body is not None:
            d["body"] = render.encode_body(e.body, self.body)
            d["body_encoding"] = "utf-8" if self.body == "text" else self.body
        return d

    # -- what subclasses render
    @abc.abstractmethod
    def entry(self, e) -> None:
        """Write one scan entry (a message, a blank or a problem) through Python: what the kernel does not take."""

    def kernel(self, b: Batch, rows: np.ndarray, mat: np.ndarray):
        """(status per row, text end per row, the text) for a sub-batch; None: every row through Python.

        With `halves`, a big sub-batch is rendered by both threads (else by the calling thread alone)."""
        return None

    def taken(self, out, ends: np.ndarray, status: np.ndarray, lo: int, hi: int, b: Batch, rows: np.ndarray) -> None:
        """Write rows lo..hi-1 (of this sub-batch) that the kernel took; `out` an array or a Halves."""
        start = int(ends[lo - 1]) if lo else 0
        end = int(ends[hi - 1])
        for piece in out.pieces(start, end) if isinstance(out, Halves) else (out[start:end],):
            self.write_bytes(piece)

    def taken_finished(self, out, ends, status, lo: int, hi: int, rows, cut: int, finish) -> None:
        """Write the taken rows lo..hi-1, each line's last `cut` bytes replaced by finish(record index in the batch):
        what a format adds that the kernel does not render (a body, DLedger cells), one Python step per row."""
        parts = []
        start = int(ends[lo - 1]) if lo else 0
        for j in range(lo, hi):
            end = int(ends[j])
            if status[j] == K.TAKEN:
                parts.append(bytes(out[start : end - cut]))
                parts.append(finish(int(rows[j])))
            start = end
        self.write_bytes(b"".join(parts))

    def item(self, item) -> None:
        if isinstance(item, Records):
            self.records(item)
            return
        if isinstance(item, Problem):
            self.tally.problems += 1
        self.entry(item)

    def records(self, rec: Records) -> None:
        b = rec.batch
        rows = rec.rows
        probs = np.array(sorted(b.record_problems), dtype=np.int64)
        # sub-batches of SUB_ROWS records and TEXT_BYTES of them at most: a kernel's buffer holds their bodies too
        for lo, hi in runs(b.cols["total_size"][rows], TEXT_BYTES, SUB_ROWS) or [(0, 0)]:
            if self.done:
                return
            part = rows[lo:hi]
            last = hi >= len(rows)
            first_i = int(part[0]) if lo else 0  # the first sub-batch holds the problems before its first row too
            end_i = len(b) if last else int(rows[hi])
            here = probs[(probs >= first_i) & (probs < end_i)]
            self._part(b, part, here)

    def _part(self, b: Batch, rows: np.ndarray, probs: np.ndarray) -> None:
        n = len(rows)
        res = self.kernel(b, rows, None) if n else None
        if res is None:
            status = np.full(n, K.FALLBACK, dtype=np.int8)
            out = ends = None
        else:
            status, ends, out = res
            if self.uncompress and self.with_body:
                compressed = (b.cols["sys_flag"][rows] & C.FLAG_COMPRESSED) != 0
                status[compressed & (status == K.TAKEN)] = K.FALLBACK
        stops = _union(rows[status == K.FALLBACK], probs)
        pos = np.searchsorted(rows, stops)
        j = 0
        for s, k in zip(stops.tolist(), pos.tolist(), strict=True):
            if k > j and not self._run(out, ends, status, j, k, b, rows):
                return
            kept = k < n and int(rows[k]) == s
            if kept and status[k] == K.TAKEN:
                if not self._run(out, ends, status, k, k + 1, b, rows):
                    return
                entries = b.record_problems.get(s, [])
            elif kept and status[k] == K.FILTERED:
                entries = b.record_problems.get(s, [])
            else:
                entries = record_entries(b, s, self.flt, kept=kept, with_body=self.with_body, uncompress=self.uncompress)
            for e in entries:
                if isinstance(e, Message):
                    self.tally.messages += 1
                else:
                    self.tally.problems += 1
                self.entry(e)
            if self._at_limit():
                return
            j = k + 1 if kept else k
        if n > j:
            self._run(out, ends, status, j, n, b, rows)

    def _at_limit(self) -> bool:
        if self.flt.limit is not None and self.tally.messages >= self.flt.limit:
            self.done = True
        return self.done

    def _run(self, out, ends, status, lo: int, hi: int, b: Batch, rows: np.ndarray) -> bool:
        """Rows lo..hi-1 that the kernel took or filtered; False once the limit is reached."""
        taken = status[lo:hi] == K.TAKEN
        count = int(taken.sum())
        if not count:
            return True
        limit = self.flt.limit
        if limit is not None and self.tally.messages + count >= limit:
            cut = int(np.flatnonzero(taken)[limit - self.tally.messages - 1]) + lo + 1
            self.taken(out, ends, status, lo, cut, b, rows)
            self.tally.messages = limit
            self.done = True
            return False
        self.taken(out, ends, status, lo, hi, b, rows)
        self.tally.messages += count
        return True



class JsonLinesOut(RecordsOut):
    """One JSON object per line, exactly `json.dumps(entry.to_dict())` (plus body fields)."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self._file_json: dict[str, np.ndarray] = {}

    def kernel(self, b, rows, _):
        file_json = self._file_json.get(b.seg.path)
        if file_json is None:
            file_json = self._file_json[b.seg.path] = json_string(b.seg.path)
        two = self.halves and len(rows) >= PARALLEL_ROWS  # both cores: one worker's second core is otherwise idle
        if self._closed(b):  # the kernel ends each line (and writes a base64 body); else it is finished here
            tail, body_end = (BODY_FIELD, BODY_END) if self.body == "base64" else (CLOSE, OPEN)
            return json_text(b, rows, file_json, self.filters, tail, two, body_end)
        return json_text(b, rows, file_json, self.filters, OPEN, two)

    def _closed(self, b) -> bool:
        """Whether the kernel writes the whole line: no DLedger entry fields, and no body or a body in base64."""
        return b.entries is None and self.body in ("none", "base64")

    def taken(self, out, ends, status, lo, hi, b, rows):
        if self._closed(b):
            super().taken(out, ends, status, lo, hi, b, rows)
            return

        def finish(i: int) -> bytes:
            entry = b""
            if b.entries is not None:  # Message.to_dict's extra fields on a DLedger CommitLog
                entry = b',"dledger_index":%d,"dledger_term":%d' % (int(b.entries["index"][i]), int(b.entries["term"][i]))
            return entry + (self._body_tail(b.body(i)) if self.with_body else b"}\n")

        self.taken_finished(out, ends, status, lo, hi, rows, 0, finish)

    def _body_tail(self, body: bytes) -> bytes:
        enc = "utf-8" if self.body == "text" else self.body
        return (',"body":' + _ENCODE(render.encode_body(body, self.body)) + ',"body_encoding":' + _ENCODE(enc) + "}\n").encode()

    def entry(self, e) -> None:
        self.write_text(_ENCODE(self.fields(e)) + "\n")


class CsvOut(RecordsOut):
    """CSV rows of CSV_COLUMNS, as csv.writer writes them (dicts and lists as JSON)."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self._file = None

    def entry(self, e) -> None:
        self.write_text(csv_line([_csv_value(v) for v in map(self.fields(e).get, CSV_COLUMNS)]))

    def kernel(self, b, rows, _):
        if self.with_body:
            return None
        if self._file != b.seg.path:
            self._file = b.seg.path
            self._file_csv = np.frombuffer(csv_line([b.seg.path])[:-1].encode(), dtype=np.uint8).copy()
        sel = selector(rows)
        snip, snip_offs, idx = TB.csv_snippets(b.cols["sys_flag"][sel])
        mat = rows_matrix(b, rows, idx)
        c = b.cols
        bound = 500 + len(self._file_csv) + c["topic_length"][sel].astype(np.int64) + 9 * c["properties_length"][sel].astype(np.int64)
        out = np.empty(int(bound.sum()), dtype=np.uint8)
        ends = np.empty(len(rows), dtype=np.int64)
        status = np.empty(len(rows), dtype=np.int8)
        TB.kernels().csv_lines(b.mf.data, b.seg.base, mat, self._file_csv, snip, snip_offs, *self.filters, out, ends, status, TB.item_room())
        return status, ends, out

    def taken(self, out, ends, status, lo, hi, b, rows):
        if b.entries is None:
            super().taken(out, ends, status, lo, hi, b, rows)
            return
        # a DLedger CommitLog: each line's last two cells (",,\n") become the entry's index and term
        self.taken_finished(out, ends, status, lo, hi, rows, 3, lambda i: b",%d,%d\n" % (int(b.entries["index"][i]), int(b.entries["term"][i])))


def csv_line(cells: list) -> str:
    """One CSV line as csv.writer writes it."""
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow(cells)
    return buf.getvalue()


def _csv_value(v):
    if isinstance(v, (dict, list)):
        return json.dumps(v, ensure_ascii=False)
    return "" if v is None else v


def _crc_cell(m: Message) -> str:
    if m.crc_ok is None:
        return "-"
    s = "ok" if m.crc_ok else "BAD"
    if m.prop_crc_ok is not None:
        s += "/ok" if m.prop_crc_ok else "/BAD"
    return s


def _cells(e, body: str) -> list[tuple[list[str], str]]:
    """The table rows of one entry (Python way), each with its style on a terminal."""
    if isinstance(e, Message):
        rows = [([*render.message_cells(e), e.transaction if e.transaction != "none" else "", _crc_cell(e)], "")]
        if e.body is not None:
            rows.append((["", "", "body", "", "", render.encode_body(e.body, body)[:200]], "dim"))
        return rows
    if isinstance(e, Blank):
        return [([str(e.phys_offset), str(e.length), f"<end of file: {e.marker}>"], "dim")]
    return [([str(e.phys_offset if e.phys_offset is not None else ""), "", e.code, "", "", e.detail], "red")]


class TableOut(RecordsOut):
    """The table's cells, not yet its lines: their widths grow as wider values come, which only the fold, taking the
    ranges in order, knows (TableLines). Pieces: ("widen", cells), ("rows", [(cells, style)], is a message),
    ("run", cells, bounds, widths, status): rows the kernel rendered."""

    def entry(self, e) -> None:
        self.pieces.append(("rows", _cells(e, self.body), isinstance(e, Message)))

    def kernel(self, b, rows, _):
        if self.with_body:
            return None
        sel = selector(rows)
        _s, _so, tx, tx_offs, idx = TB.flag_snippets(b.cols["sys_flag"][sel])
        mat = rows_matrix(b, rows, idx)
        c = b.cols
        bound = 200 + c["topic_length"][sel].astype(np.int64) + 3 * c["properties_length"][sel].astype(np.int64)
        cells = np.empty(int(bound.sum()), dtype=np.uint8)
        n = len(rows)
        bounds = np.empty((n, K.TABLE_CELLS + 1), dtype=np.int64)
        widths = np.zeros((n, K.TABLE_CELLS), dtype=np.int64)
        status = np.empty(n, dtype=np.int8)
        table_cells = TB.kernels().table_cells

        def part(lo: int, hi: int, at: int) -> None:
            table_cells(b.mf.data, b.seg.base, mat[lo:hi], tx, tx_offs, *self.filters, cells[at:], bounds[lo:hi], widths[lo:hi], status[lo:hi], TB.item_room())
            if at:
                bounds[lo:hi] += at

        if n < PARALLEL_ROWS or not self.halves:
            part(0, n, 0)
        else:  # both cores, as for JSON Lines; the cells stay where each half wrote them
            h = n // 2
            second = pool().submit(part, h, n, int(bound[:h].sum()))
            part(0, h, 0)
            second.result()
        self._parts = (cells, bounds, widths)
        for j in np.flatnonzero(status == K.FALLBACK).tolist():  # their widths count too
            m = b.message(int(rows[j]))
            self.pieces.append(("widen", _cells(m, self.body)[0][0]))
        return status, None, None

    def taken(self, out, ends, status, lo, hi, b, rows):
        cells, bounds, widths = self._parts
        at = int(bounds[lo, 0])
        self.pieces.append(("run", cells[at : int(bounds[hi - 1, -1])], bounds[lo:hi] - at, widths[lo:hi], status[lo:hi]))


class TableLines:
    """The table's lines: columns two spaces apart, widths growing as wider values come (the header is printed
    again when they do); a bold header and coloured problem lines on a terminal only."""

    def __init__(self, write_text, write_bytes, terminal: bool):
        self.write_text, self.write_bytes, self.terminal = write_text, write_bytes, terminal
        self.colw = np.array([len(h) for h in TABLE_COLUMNS], dtype=np.int64)
        self.header_w = None  # the widths the last header was printed with

    def piece(self, piece) -> None:
        kind = piece[0]
        if kind == "run":
            self._run(*piece[1:])
        elif kind == "widen":
            self._widths(piece[1])
        else:
            rows, is_message = piece[1], piece[2]
            if is_message:
                self._widths(rows[0][0])
            for cells, style in rows:
                self._emit(self._line(cells), style)

    def _widths(self, cells: list[str]) -> None:
        from rich.cells import cell_len

        for c, text in enumerate(cells[: len(self.colw)]):
            self.colw[c] = max(self.colw[c], cell_len(text))

    def _line(self, cells: list[str]) -> str:
        from rich.cells import cell_len

        while cells and not cells[-1]:
            cells = cells[:-1]
        parts = [t + " " * (int(self.colw[c]) - cell_len(t) + 2) if c < len(cells) - 1 and c < len(self.colw) else t for c, t in enumerate(cells)]
        return "".join(parts)

    def _emit(self, line: str, style: str) -> None:
        self._head()
        if self.terminal and style:
            render.out.print(line, style=style, markup=False, highlight=False)
        else:
            self.write_text(line + "\n")

    def _head(self) -> None:
        """The header, again whenever a column has widened since it was printed: lines always align with the header above them."""
        if self.header_w is None or (self.colw > self.header_w).any():
            self.header_w = self.colw.copy()
            line = self._line(list(TABLE_COLUMNS))
            if self.terminal:
                render.out.print(line, style="bold", markup=False, highlight=False)
            else:
                self.write_text(line + "\n")

    def _run(self, cells, bounds, widths, status) -> None:
        np.maximum(self.colw, widths.max(axis=0), out=self.colw)
        self._head()
        n = len(status)
        size = int((bounds[-1, -1] - bounds[0, 0]) + n * (int(self.colw.sum()) + 2 * K.TABLE_CELLS + 1))
        buf = np.empty(size, dtype=np.uint8)
        end = TB.kernels().table_lines(cells, bounds, widths, self.colw, status, 0, n, buf)
        self.write_bytes(buf[:end])


class Printer:
    """The fold's side: ranges' pieces written to stdout in range order, from a writer thread when stdout is not a
    terminal (a terminal gets rich's lines in between: written in place); the CSV header first, and the JSON Lines
    summary last."""

    def __init__(self, fmt: str):
        self.fmt = fmt
        self._writer = None if sys.stdout.isatty() else _writer()
        if self._writer is not None:
            sys.stdout.flush()
        self.table = TableLines(self.write_text, self.write_bytes, sys.stdout.isatty()) if fmt == "table" else None
        if fmt == "csv":
            self.write_text(csv_line(CSV_COLUMNS))

    def write_bytes(self, data) -> None:
        if self._writer is not None:
            self._writer.put(data)
            return
        sys.stdout.flush()
        sys.stdout.buffer.write(data)

    def write_text(self, text: str) -> None:
        self.write_bytes(text.encode("utf-8", errors="surrogateescape"))

    def put(self, text: RangeText) -> None:
        for piece in text.pieces:
            if self.table is not None:
                self.table.piece(piece)
            elif isinstance(piece, str):
                self.write_text(piece)
            else:
                self.write_bytes(piece)

    def summary(self, d: dict) -> None:
        self.write_text(_ENCODE(d) + "\n")

    def finish(self) -> None:
        """Everything written: the last buffers out of the writer thread (and its error raised, if any)."""
        if self._writer is not None:
            self._writer.close()
