"""Write what checks.salvage found: the records to re-send, the flagged ones, and a manifest, into one new directory.

OUT/messages.parquet (or .jsonl): every intact record a restart loses or no
consumer reaches, with the columns `rmqdump export` writes (body included),
plus `reason`, `raw_without_body` and `body_offset` (the record's bytes as
stored are raw_without_body[:body_offset] + body + raw_without_body[body_offset:]:
each byte is written once), in physical order: what a producer needs to send
each message again, and the record itself. OUT/flagged.parquet: stale
tails and damaged records, evidence only. OUT/manifest.json: counts by reason
and topic, byte ranges, the damage, the recovery that decides it all, and the
sha256 of each file. Written beside OUT and renamed into place
(common.publish), never inside the store.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from rmqdump.checks import salvage as S
from rmqdump.checks.recovery import store_rules
from rmqdump.common.columnspill import ColumnSpill
from rmqdump.common.directfile import DirectFile
from rmqdump.common.jsontext import encode
from rmqdump.common.problems import Problem
from rmqdump.common.publish import publishing
from rmqdump.export import arrowbatch, parquetparts
from rmqdump.export.dataset import parquet_options
from rmqdump.export.jsonlines import EXTRA, arrow_lines, common_tail, spell
from rmqdump.export.parquetparts import Part, PartsWriter, encode_part
from rmqdump.readers.store import Store
from rmqdump.scan import scanner
from rmqdump.scan.headerfix import Restored, store_units, unit_agrees
from rmqdump.scan.ranges import SERIAL, Mapper, map_ranges
from rmqdump.scan.splits import RANGE_BYTES, commitlog_splits
from rmqdump.schemas import constants as C
from rmqdump.text.lines import json_string

FORMATS = ("parquet", "jsonl")
MANIFEST = "manifest.json"
SPILL_DIR = ".rmqdump-salvage-columns"  # the survey's columns, in the publishing directory until the sets are written
SETS = {"messages": S.TO_RESEND, "flagged": S.FLAGGED}
# A row group (an Arrow batch built, then encoded) holds at most this many records and record bytes: bodies and raw
# bytes are copies, so the bytes bound memory whatever the messages' size; the rows bound what small records cost per
# group (4,096 a group took 1.16x the time of 16,384 at 4M, for 100 MiB less)
ROWS_PER_GROUP = 16384
GROUP_BYTES = 16 << 20  # a chunk is one row group: it, its Arrow and its encoded part are what a worker holds
# JSON Lines has no row groups; its text (bodies in base64) and the Python values a line's own fields pass through
# are several times the records: smaller chunks keep the workers' and the waiting results' share bounded
TEXT_GROUP_BYTES = 4 << 20
_REASONS = list(S.REASONS)
# each set's reasons as a table by reason code: picked with a take, not np.isin (which sorts through np.unique, whose
# first call imports numpy.ma)
_IN_SET = {name: np.array([r in reasons for r in S.REASONS]) for name, reasons in SETS.items()}


# A record given back always has its bytes (an empty body is empty, not null): required Parquet columns, written
# without definition levels (6% of the encoder's thread, the one salvage waits on, in-process on gen-4m's records)
_BODY = pa.field(*arrowbatch.BODY_FIELD, nullable=False)
_RAW = [pa.field(*arrowbatch.BODY_OFFSET_FIELD, nullable=False), pa.field(*arrowbatch.RAW_WITHOUT_BODY_FIELD, nullable=False)]
# a header_damaged record's restored fields (rmqdump.scan.headerfix: magic_code, total_size), as found and as restored;
# null for every other record
_BINARY = ("body", "raw_without_body")  # in base64 in JSON Lines, each with its `_encoding`
_HEADER = [("header_fields", pa.list_(pa.string())), ("header_found", pa.list_(pa.int64())), ("header_restored", pa.list_(pa.int64()))]


def schema() -> pa.Schema:
    return pa.schema([*arrowbatch.FIELDS, _BODY, ("reason", pa.string()), *_HEADER, *_RAW])


def _base_schema() -> pa.Schema:
    """The columns built from a scanned batch, `body` as views of the map (arrowbatch._views: its bytes are copied
    once, by the Parquet encoder): a Parquet row group's bytes are the same from binary_view as from binary, and the
    file's footer says binary (tests/test_parquetparts.py)."""
    return pa.schema([*arrowbatch.FIELDS, pa.field("body", pa.binary_view(), nullable=False), *_RAW])


def _part_schema() -> pa.Schema:
    """schema() with `body` as binary_view: what the parts are encoded from."""
    sch = schema()
    return sch.set(sch.get_field_index("body"), pa.field("body", pa.binary_view(), nullable=False))


class _Output:
    """One output file, written in order as the parts come: Parquet parts joined under one footer
    (export.parquetparts), or JSON Lines text; the sha256 of every byte as written, so the manifest's hash needs no
    second read. Written by the thread that takes the mapper's results: the parts are encoded on its threads
    meanwhile (hashing and writing release the GIL)."""

    def __init__(self, path: str, fmt: str, template: bytes, sync: bool):
        self.path, self.fmt, self.rows = path, fmt, 0
        self.f = DirectFile(path, sync)  # past the page cache where it can be; publishing fsyncs it
        self.sha = hashlib.sha256()
        self.parts = PartsWriter(self._store, template) if fmt == "parquet" else None

    def _store(self, data) -> None:
        self.sha.update(data)
        self.f.write(data)

    def write(self, piece: Part | bytes, rows: int) -> None:
        self.rows += rows
        if self.parts is not None:
            self.parts.append(piece)
        else:
            self._store(piece)

    def close(self) -> str:
        """The footer written (Parquet) and the file closed; its sha256."""
        try:
            if self.parts is not None:
                self.parts.close()
        finally:
            self.f.close()
        return self.sha.hexdigest()


@dataclass
class _Ranges:
    """Byte ranges [start, end) of one reason's records, adjacent records merged; the first RANGES_LISTED kept."""

    listed: list[list[int]] = field(default_factory=list)
    count: int = 0
    last_end: int = -1

    def add(self, start: np.ndarray, end: np.ndarray) -> None:
        if not len(start):
            return
        breaks = np.flatnonzero(start[1:] != end[:-1]) + 1
        firsts, lasts = np.concatenate([[0], breaks]), np.concatenate([breaks - 1, [len(start) - 1]])
        for s, e in zip(start[firsts].tolist(), end[lasts].tolist(), strict=True):
            if s == self.last_end:  # continues the previous range
                if self.count == len(self.listed):
                    self.listed[-1][1] = e
            else:
                self.count += 1
                if len(self.listed) < S.RANGES_LISTED:
                    self.listed.append([s, e])
            self.last_end = e


@dataclass
class SalvageResult:
    store: str
    out: str
    format: str
    recovery: dict = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(S.REASONS, 0))
    bytes: dict[str, int] = field(default_factory=lambda: dict.fromkeys(S.REASONS, 0))
    topics: dict[str, dict[str, int]] = field(default_factory=dict)
    ranges: dict[str, _Ranges] = field(default_factory=lambda: {r: _Ranges() for r in S.REASONS})
    damage: list[dict] = field(default_factory=list)
    damage_count: int = 0
    damage_bytes: int = 0
    header_damaged: list[dict] = field(default_factory=list)  # records given back with their header restored
    files: list[dict] = field(default_factory=list)
    records_scanned: int = 0
    filters: dict = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def salvaged(self) -> int:
        """Records written to either set."""
        return sum(self.counts.values())

    def note_damage(self, p: Problem) -> None:
        self.damage_count += 1
        self.damage_bytes += int(p.extra.get("skipped") or 0)
        if len(self.damage) < S.RANGES_LISTED:
            self.damage.append(p.to_dict())

    def to_dict(self) -> dict:
        return {
            "kind": "salvage",
            "store": self.store,
            "out": self.out,
            "format": self.format,
            "recovery": self.recovery,
            "filters": self.filters,
            "records_scanned": self.records_scanned,
            "salvaged": {name: sum(self.counts[r] for r in reasons) for name, reasons in SETS.items()},
            "counts": self.counts,
            "bytes": self.bytes,
            "topics": self.topics,
            "ranges": {r: self.ranges[r].listed for r in S.REASONS},
            "ranges_total": {r: self.ranges[r].count for r in S.REASONS},
            "damage": self.damage,
            "damage_count": self.damage_count,
            "damage_bytes": self.damage_bytes,
            "header_damaged": self.header_damaged,
            "files": self.files,
            "seconds": round(self.seconds, 3),
        }


def _recovery(p: S.Plan) -> dict:
    """The recovery that decides it all; what lies past its new end is added as the windows are classified."""
    r = p.preview
    return {
        "broker_rules": r.rules,
        "broker_rules_why": r.rules_why,
        "abnormal": r.abnormal,
        "scan_from": r.scan_from,
        "valid_end": r.valid_end,
        "stop": r.stop,
        "data_end": r.valid_end,  # raised to the end of the last record the survey decoded past it
        "dropped_messages": 0,  # records the survey decoded past it
        "commitlog_files_deleted": r.commitlog_files_dropped,
        "redispatch_from": r.redispatch_from,
        "load_errors": list(r.load_errors),  # why the broker would not load the store at all (repair pads or cuts a file of another size)
    }


def _note_past(rec: dict, cols: dict[str, np.ndarray]) -> None:
    past = cols["phys"] >= rec["valid_end"]
    if past.any():
        rec["dropped_messages"] += int(past.sum())
        rec["data_end"] = max(rec["data_end"], int((cols["phys"][past] + cols["size"][past]).max()))


@dataclass
class _Window:
    """The survey's rows of one byte range: the records that start in [start, next window's start)."""

    start: int
    rows: tuple[int, int]


def _survey(store: Store, spill: ColumnSpill, res: SalvageResult, check_crc: bool, range_bytes: int, on_bytes, mapper: Mapper, allow_v2: bool):
    """Every range's survey columns appended to `spill` in CommitLog order (topic indices into one list); (windows,
    topics, chains (found with allow_v2), the records restored from damaged stretches, in physical order)."""
    splits = commitlog_splits(store.commitlog, range_bytes, check_crc=check_crc)
    names: dict[str, int] = {}
    chains: dict = {}
    windows: list[_Window] = []
    restored: dict[int, Restored] = {}
    for sp, (arrays, topics, damage, _nbytes, chain, found) in map_ranges(splits, functools.partial(S.survey_range, allow_v2=allow_v2), mapper, progress=on_bytes):
        restored.update((r.phys, r) for r in found)
        if chain is not None:
            chains[chain[0]] = chain[1]
        if len(arrays["topic"]):
            arrays["topic"] = np.array([names.setdefault(t, len(names)) for t in topics], dtype=np.int32)[arrays["topic"]]
        rows = spill.rows
        spill.append(arrays)
        windows.append(_Window(sp.base + sp.start, (rows, spill.rows)))
        for pr in damage:
            res.note_damage(pr)
    return windows, list(names), chains, [restored[k] for k in sorted(restored)]


class _UnitsByWindow:
    """The ConsumeQueue units a restart keeps, sorted into one file per survey window by the record they point at:
    a window's classification reads only its own (memory bounded by a window, whatever the store's size)."""

    DTYPE = np.dtype([("offset", "<i8"), ("size", "<i4")])

    def __init__(self, directory: str, starts: list[int]):
        self.dir = directory
        self.starts = np.array(starts, dtype=np.int64)

    def _path(self, i: int) -> str:
        return os.path.join(self.dir, f"units-{i}")

    def add(self, offsets: np.ndarray, sizes: np.ndarray) -> None:
        if not len(offsets):
            return
        w = np.searchsorted(self.starts, offsets, side="right") - 1
        order = np.argsort(w, kind="stable")
        w = w[order]
        cuts = np.flatnonzero(np.concatenate([[True], w[1:] != w[:-1]])).tolist()
        for a, b in zip(cuts, [*cuts[1:], len(w)], strict=True):
            if w[a] < 0:
                continue  # before the first file: no record there
            rows = np.empty(b - a, self.DTYPE)
            rows["offset"], rows["size"] = offsets[order[a:b]], sizes[order[a:b]]
            with open(self._path(int(w[a])), "ab") as f:
                f.write(rows.data)  # a failed write raises with its errno (tofile's does not)

    def reach(self, i: int) -> S.Reach:
        path = self._path(i)
        rows = np.fromfile(path, dtype=self.DTYPE) if os.path.exists(path) else np.zeros(0, self.DTYPE)
        return S.Reach.of(rows["offset"].astype(np.int64), rows["size"].astype(np.int32))


def _with_verdicts(b, idx: np.ndarray, crc: np.ndarray, prop_crc: np.ndarray) -> None:
    """Give batch `b`, read again without CRCs, the survey's CRC verdicts of its records `idx` (the others are not taken)."""
    if (crc >= 0).any():
        b.crc_ok = np.ones(len(b), dtype=bool)
        b.crc_ok[idx] = crc == 1
    if (prop_crc >= 0).any():
        b.prop_crc = np.full(len(b), -1, dtype=np.int8)
        b.prop_crc[idx] = prop_crc


def _tally(res: SalvageResult, c: dict[str, np.ndarray], reason: np.ndarray, topic_names: list[str]) -> None:
    """Counts, bytes, byte ranges and topics of one window's chosen records, from the survey's columns."""
    for code in np.flatnonzero(np.bincount(reason[reason != S.NONE], minlength=len(S.REASONS))).tolist():
        these = np.flatnonzero(reason == code)
        r = S.REASONS[code]
        start, size = c["phys"][these], c["size"][these].astype(np.int64)
        res.counts[r] += len(these)
        res.bytes[r] += int(size.sum())
        res.ranges[r].add(start, start + size)
        for t, n in zip(*np.unique(c["topic"][these], return_counts=True), strict=True):
            per = res.topics.setdefault(topic_names[int(t)], {})
            per[r] = per.get(r, 0) + int(n)


def _tally_restored(res: SalvageResult, r: Restored) -> None:
    """Counts, bytes, range and topic of one record given back with its header restored; its manifest entry."""
    m = r.batch().message(0)
    code = S.HEADER_DAMAGED
    res.counts[code] += 1
    res.bytes[code] += r.length
    res.ranges[code].add(np.array([r.phys]), np.array([r.phys + r.length]))
    per = res.topics.setdefault(m.topic, {})
    per[code] = per.get(code, 0) + 1
    entry = {**r.to_dict(), "topic": m.topic, "queue_id": m.queue_id, "queue_offset": m.queue_offset, "uniq_key": m.properties.get(C.PROPERTY_UNIQ_KEY)}
    if len(res.header_damaged) < S.RANGES_LISTED:
        res.header_damaged.append(entry)


@dataclass
class _Chunk:
    """Chosen records of one window, sorted, to read again and turn into Arrow: their offsets, reason codes and the
    survey's CRC verdicts."""

    phys: np.ndarray
    why: np.ndarray
    crc: np.ndarray
    prop_crc: np.ndarray


def _with_header(rb: pa.RecordBatch, reason: pa.Array, r: Restored | None = None) -> pa.RecordBatch:
    """A record batch of _base_schema() with the reason and header columns (of `r` when one restored record) added."""
    at = rb.num_columns - len(_RAW)
    n = rb.num_rows
    cols = [reason]
    for (_, typ), values in zip(
        _HEADER, (None, None, None) if r is None else (r.fields, [r.found[k] for k in r.fields], [r.restored[k] for k in r.fields]), strict=True
    ):
        cols.append(pa.nulls(n, typ) if values is None else pa.array([values], typ))
    for i, (name, col) in enumerate(zip(["reason", *(f[0] for f in _HEADER)], cols, strict=True)):
        rb = rb.add_column(at + i, pa.field(name, col.type), col)
    return rb


def _restored_arrow(broker: str, r: Restored) -> pa.RecordBatch:
    """One record given back with its header restored (its restored bytes, CRCs as the kernel checked them)."""
    rb = arrowbatch.selected(r.batch(), np.array([0]), broker, _base_schema())
    return _with_header(rb, pa.array([S.HEADER_DAMAGED], pa.string()), r)


def _encoded(parts: list, fmt: str, options: dict) -> tuple[Part | bytes, int]:
    """One set's share of a chunk as one Parquet row group (from record batches), or as JSON Lines text (from
    `_lines`'s pieces, or a record batch: a restored record); and its rows."""
    if fmt == "parquet":
        return encode_part(parts, _part_schema(), options), sum(rb.num_rows for rb in parts)
    text, rows = [], 0
    for p in parts:
        pieces, n = p if isinstance(p, tuple) else (arrow_lines(p, _BINARY), p.num_rows)
        text += pieces
        rows += n
    return b"".join(text), rows


def _tail_schema() -> pa.Schema:
    """What a JSON Lines row holds after the listing's fields: the export's own, the body, and salvage's (its reason
    and header columns are added by _with_header, before _RAW)."""
    return pa.schema([*(arrowbatch.schema().field(n) for n in EXTRA), pa.field("body", pa.binary_view(), nullable=False), *_RAW])


def _lines(b, rows: np.ndarray, reasons: np.ndarray, broker: str) -> tuple[list, int]:
    """The JSON Lines of records `rows` of a batch given back for `reasons`: the listing's compiled text, then on a
    plain CommitLog the export's fields and the body in base64 by the kernel too, and each row's own bytes after them
    (_suffixes); on a DLedger CommitLog each line finished with its own fields from its Arrow row
    (export.jsonlines.spell)."""

    def arrow(sch: pa.Schema):
        def lines(k: np.ndarray) -> list[bytes]:
            if not len(k):
                return []
            rb = arrowbatch.selected(b, rows[k], broker, sch)
            return arrow_lines(_with_header(rb, arrowbatch.coded(_REASONS, reasons[k])), _BINARY)

        return lines

    file_json = json_string(b.seg.path)
    if b.entries is not None:  # each row's DLedger index and term among the export's fields
        return spell(b, rows, file_json, arrow(_base_schema()), own=arrow(_tail_schema())), len(rows)
    ends = _text_ends(broker)
    return spell(b, rows, file_json, arrow(_base_schema()), tail=ends.tail, body_end=ends.body_end, suffix=lambda k: _suffixes(b, rows[k], reasons[k], ends)), len(rows)


@dataclass(frozen=True)
class _TextEnds:
    """A given-back row's line after the listing's fields, as jsonl_lines spells its Arrow row, in the pieces no
    row changes: the kernel's tail (the export's fields, then the body's opening quote) and body end (the body's
    closing quote, up to the reason's value), each reason's value, and the rest around body_offset's value and
    raw_without_body's base64 (`rest`, a %-format of the two)."""

    tail: np.ndarray
    body_end: np.ndarray
    reasons: list[bytes]
    rest: bytes


@functools.cache
def _text_ends(broker: str) -> _TextEnds:
    tail, _ = common_tail(broker, with_body=True)  # ...,"compaction_log_offset":null,"body":"
    headers = "".join(f",{encode(name)}:null" for name, _ in _HEADER)  # only a restored record has them
    offset, raw = (f.name for f in _RAW)
    encodings = "".join(f",{encode(name + '_encoding')}:{encode('base64')}" for name in _BINARY)
    rest = f"{headers},{encode(offset)}:%d,{encode(raw)}:\"%s\"{encodings}}}\n"
    body_end = np.frombuffer(f'",{encode("reason")}:'.encode(), dtype=np.uint8).copy()
    return _TextEnds(tail, body_end, [encode(r).encode() for r in _REASONS], rest.encode())


def _suffixes(b, rows: np.ndarray, reasons: np.ndarray, ends: _TextEnds) -> list[bytes]:
    """Each row's bytes after the kernel's text: its reason, body_offset and raw_without_body (the record's bytes
    before its body and after it) in base64."""
    c = {k: b.cols[k][rows] for k in ("_pos", "body_pos", "body_length", "total_size")}
    offsets, buf = arrowbatch.without_body(b.mf.data, c)
    raw = memoryview(buf)
    cut = offsets.tolist()
    b64, rest, spelled = base64.b64encode, ends.rest, ends.reasons
    body_offset = (c["body_pos"].astype(np.int64) - c["_pos"]).tolist()
    return [spelled[r] + rest % (o, b64(raw[lo:hi])) for r, o, lo, hi in zip(reasons.tolist(), body_offset, cut[:-1], cut[1:], strict=True)]


def _chunk_parts(store: Store, broker: str, fmt: str, options: dict, ch: _Chunk | Restored) -> list[tuple[str, Part | bytes, int]]:
    """A chunk's records read again (the survey checked their CRCs), built into Arrow and encoded: (set, part, rows)
    for each set it has records of, at most one row group each. A pure function of the chunk, run on any of the
    mapper's threads: the parts' bytes do not depend on which."""
    if isinstance(ch, Restored):
        return [("messages", *_encoded([_restored_arrow(broker, ch)], fmt, options))]
    per: dict[str, list[pa.RecordBatch]] = {name: [] for name in SETS}
    for b, idx, at in S.records(store, ch.phys, check_crc=False):
        _with_verdicts(b, idx, ch.crc[at], ch.prop_crc[at])
        reason = ch.why[at]
        for name in SETS:
            pick = _IN_SET[name][reason] & (reason != S.NONE)
            if pick.any() and fmt == "jsonl":
                per[name].append(_lines(b, idx[pick], reason[pick], broker))
            elif pick.any():
                rb = arrowbatch.selected(b, idx[pick], broker, _base_schema())
                per[name].append(_with_header(rb, arrowbatch.coded(_REASONS, reason[pick])))
    # the bodies are views of the map: it stays open until the parts are encoded (its pages go with it)
    return [(name, *_encoded(rbs, fmt, options)) for name, rbs in per.items() if rbs]


def salvage(
    store: Store,
    out: str,
    *,
    fmt: str = "parquet",
    force: bool = False,
    check_crc: bool = True,
    topics: list[str] | None = None,
    since: int | None = None,
    until: int | None = None,
    broker: str = "",
    sync: bool = True,
    on_bytes: Callable[[int], None] | None = None,
    mapper: Mapper = SERIAL,
    range_bytes: int = RANGE_BYTES,
) -> SalvageResult:
    """Survey every record (its columns spilled to disk), preview the broker's recovery over the survey's findings, then
    window after window (a survey range each) sort the records into reasons and read the chosen ones again into both
    sets; write the manifest; all into `out`, published atomically. The result is the manifest."""
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}")
    t0 = time.perf_counter()
    res = SalvageResult(os.path.abspath(store.root), os.path.abspath(out), fmt, filters={"topic": topics or None, "since": since, "until": until})
    with publishing(out, force=force, stores=[store.root], kind="dir", sync=sync) as tmp:
        for pr in store.commitlog.problems:
            res.note_damage(pr)
        cols = ColumnSpill(os.path.join(tmp, SPILL_DIR), S.SURVEY_DTYPES)
        sinks: dict[str, _Output] = {}
        hashes: dict[str, str] = {}
        try:
            # the survey first (the mapper's threads), then the recovery preview, whose walk steps over the stretches the
            # survey read without finding anything it stops at: every byte is scanned once
            allow_v2 = store_rules(store).allow_v2  # the chains are found with the checks of the walk they stand in for
            windows, topic_names, chains, restored = _survey(store, cols, res, check_crc, range_bytes, on_bytes, mapper, allow_v2)
            if restored:  # the ConsumeQueue unit at its queue offset, where one exists, must name it
                unit_at = store_units(store)
                restored = [r for r in restored if unit_agrees(r, unit_at)]
            at = np.searchsorted(np.array([w.start for w in windows], dtype=np.int64), [r.phys for r in restored], side="right") - 1
            cols.finish()
            p = S.plan(store, check_crc=check_crc, topics=topics, since=since, until=until, on_bytes=on_bytes, chains=lambda: chains, chains_allow_v2=allow_v2)
            res.recovery = _recovery(p)
            res.records_scanned = cols.rows
            units = _UnitsByWindow(cols.dir, [w.start for w in windows])
            damaged: set[tuple[str, int]] = set()
            for key, offsets, sizes, bad in S.kept_units(store, p.valid_end):
                units.add(offsets, sizes)
                if bad:
                    damaged.add(key)
            clf = S.Classifier(p, damaged)
            group_bytes = GROUP_BYTES if fmt == "parquet" else TEXT_GROUP_BYTES

            def chunks() -> Iterator[_Chunk | Restored]:
                """Each window classified and tallied, in order; its chosen records in chunks, and the records restored
                in it given back, each in its place."""
                for i, w in enumerate(windows):
                    c = cols.window(*w.rows)
                    _note_past(res.recovery, c)
                    reach = units.reach(i)
                    reason = clf.classify(c, topic_names, reach)
                    _tally(res, c, reason, topic_names)
                    mine = [r for r, j in zip(restored, at, strict=True) if j == i and S.header_damaged(p, r, reach)]
                    for r in mine:
                        _tally_restored(res, r)
                    wanted = np.flatnonzero(reason != S.NONE)
                    # the records before each restored one first, then it: physical order
                    cuts = [*np.searchsorted(c["phys"][wanted], [r.phys for r in mine]).tolist(), len(wanted)]
                    prev = 0
                    for cut, r in zip(cuts, [*mine, None], strict=True):
                        for lo, hi in scanner.runs(c["size"][wanted[prev:cut]], group_bytes, ROWS_PER_GROUP):  # a row group each
                            k = wanted[prev + lo : prev + hi]
                            yield _Chunk(c["phys"][k], reason[k], c["crc"][k], c["prop_crc"][k])
                        if r is not None:
                            yield r
                        prev = cut

            options = parquet_options(schema())
            template = parquetparts.template(schema(), options) if fmt == "parquet" else b""
            sinks = {name: _Output(os.path.join(tmp, f"{name}.{fmt}"), fmt, template, sync) for name in SETS}
            # the chunks are read again, built and encoded on the mapper's threads (every core: one Parquet writer's
            # thread was salvage's slowest), and their parts written in order here, as the mapper gives them back
            for parts in mapper.on_driver(functools.partial(_chunk_parts, store, broker, fmt, options), chunks()):
                for name, part, rows in parts:
                    sinks[name].write(part, rows)
        finally:
            for name, sk in sinks.items():
                hashes[name] = sk.close()
            cols.remove()  # the spill (and the units by window) never reach the published directory
        for name, sk in sinks.items():
            res.files.append({"name": os.path.basename(sk.path), "set": name, "rows": sk.rows, "bytes": os.path.getsize(sk.path), "sha256": hashes[name]})
        res.seconds = time.perf_counter() - t0
        with open(os.path.join(tmp, MANIFEST), "w", encoding="utf-8") as f:
            json.dump(res.to_dict(), f, ensure_ascii=False, indent=1)
            f.write("\n")
    return res
