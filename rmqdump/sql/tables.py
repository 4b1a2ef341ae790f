"""The tables `rmqdump sql` offers, each a stream of Arrow batches read straight from the stores.

Every table is declared once here (columns, types, one line of meaning) and
built only with the columns a query names: the messages are the `export`
rows (rmqdump.export.arrowbatch), decoded range by range from the CommitLog;
units come from the ConsumeQueue files file by file; index entries from the
mapped IndexFiles chunk by chunk; problems and each unit's status from the
`cq verify` analysis; offsets from `rmqdump offsets`. Nothing is copied or
held whole: a table is a RecordBatchReader over a generator.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from rmqdump.checks import compactionverify, cqunits, cqverify
from rmqdump.checks.offsets import consumer_offsets
from rmqdump.common.problems import InputError, Problem
from rmqdump.export import arrowbatch
from rmqdump.query.compaction import consumer_view
from rmqdump.readers.compaction import find_compaction
from rmqdump.readers.consumequeue import UNIT_SIZE, QueueUnits, read_units
from rmqdump.readers.indexfile import IndexFile, open_all
from rmqdump.readers.store import Store
from rmqdump.scan.compaction import ServedView, served_views
from rmqdump.scan.ranges import SERIAL, Mapper, map_ranges, range_batches
from rmqdump.scan.splits import Split, StoreRef, held_range_bytes, plan

INDEX_CHUNK = 1 << 20  # entries turned into one batch (about 40 MB of columns), then their pages are given back

_MESSAGE_MEANING = {
    "kind": "always 'message'",
    "file": "CommitLog file path",
    "phys_offset": "physical offset of the record (its position in the CommitLog)",
    "total_size": "record size in bytes",
    "magic_version": "record format: 1 (V1) or 2 (V2, long topic length)",
    "body_crc": "bodyCRC field as stored",
    "crc_ok": "body matches bodyCRC (null unless selected: CRCs are checked only when this column or prop_crc_ok is named)",
    "prop_crc_ok": "record matches its __CRC32# property (null when absent)",
    "queue_id": "queue id",
    "flag": "message flag set by the producer",
    "queue_offset": "queue offset the CommitLog assigned (the unit index in its ConsumeQueue)",
    "sys_flag": "sysFlag bits",
    "sys_flag_names": "sysFlag as names",
    "transaction": "transaction type: '', prepared, commit, rollback",
    "born_timestamp": "producer time, epoch ms",
    "born_host": "producer host:port",
    "store_timestamp": "broker store time, epoch ms",
    "store_host": "broker host:port",
    "reconsume_times": "redelivery count",
    "prepared_transaction_offset": "prepared transaction offset field",
    "body_length": "body size in bytes",
    "topic": "topic",
    "properties": "message properties (map)",
    "tags": "TAGS property",
    "keys": "KEYS property, split on spaces",
    "uniq_key": "UNIQ_KEY property (the client msgId)",
    "msg_id": "offset msgId (store host, port, physical offset)",
    "dledger_index": "a DLedger CommitLog's entry index of the message (null in a plain CommitLog)",
    "dledger_term": "the DLedger term of that entry (null in a plain CommitLog)",
    "broker": "broker name of the store (directory name, or NAME in -s NAME=DIR)",
    "body": "stored body bytes (decoded only when named)",
    "compaction_part": "compaction topics only: compacted or after_checkpoint when the compacted queue serves the record, else not_served",
    "compaction_log_offset": "compaction topics only: the offset of the served copy in the compaction log",
}


@dataclass(frozen=True)
class Column:
    name: str
    type: pa.DataType
    meaning: str


def _cols(*items: tuple[str, pa.DataType, str]) -> list[Column]:
    return [Column(*i) for i in items]


_BROKER = ("broker", pa.string(), "broker name of the store")  # every table's first column: which store a row is from


TABLES: dict[str, list[Column]] = {
    "messages": [Column(f.name, f.type, _MESSAGE_MEANING[f.name]) for f in arrowbatch.schema(with_body=True)],
    "units": _cols(
        _BROKER,
        ("topic", pa.string(), "topic (ConsumeQueue directory)"),
        ("queue_id", pa.int32(), "queue id (ConsumeQueue directory)"),
        ("queue_offset", pa.int64(), "unit index in the queue"),
        ("phys_offset", pa.int64(), "commitLogOffset: where the message should be"),
        ("size", pa.int32(), "message size the unit gives"),
        ("tags_code", pa.int64(), "tagsCode (the tag's hash, or a delay's delivery time)"),
        ("cq_file", pa.string(), "ConsumeQueue file path"),
        ("file_offset", pa.int64(), "byte offset of the unit in that file"),
        ("status", pa.string(), "'ok', 'filler' (padding before a queue's first unit), or the cq verify problem code at this unit"),
    ),
    "index_entries": _cols(
        _BROKER,
        ("file", pa.string(), "IndexFile path"),
        ("entry", pa.int32(), "entry number (1 is the first)"),
        ("slot", pa.int32(), "hash slot the entry's key falls in (key_hash mod slots)"),
        ("key_hash", pa.int32(), "hash of topic#key"),
        ("phys_offset", pa.int64(), "physical offset of the message"),
        ("time_diff", pa.int32(), "store time in seconds after the file's begin timestamp"),
        ("store_timestamp", pa.int64(), "begin timestamp + time_diff, epoch ms"),
        ("prev_entry", pa.int32(), "previous entry of the same slot's chain (0 ends it)"),
    ),
    "problems": _cols(
        _BROKER,
        ("code", pa.string(), "stable problem code (see the tables of `commitlog`, `cq verify` and `compaction verify`)"),
        ("file", pa.string(), "file the problem is in"),
        ("file_offset", pa.int64(), "byte offset in that file"),
        ("phys_offset", pa.int64(), "physical offset concerned"),
        ("detail", pa.string(), "what was found"),
        ("topic", pa.string(), "queue's topic (ConsumeQueue problems)"),
        ("queue_id", pa.int32(), "queue id (ConsumeQueue problems)"),
        ("unit_index", pa.int64(), "unit index (ConsumeQueue problems; for cq_missing_unit the message's queue offset)"),
    ),
    "compacted": _cols(
        _BROKER,
        ("topic", pa.string(), "compaction topic (cleanup.policy=COMPACTION)"),
        ("queue_id", pa.int32(), "queue id"),
        ("queue_offset", pa.int64(), "queue offset of the message a consumer of the compacted queue gets, in order"),
        ("keys", pa.string(), "KEYS property, whole: the compaction key"),
        ("uniq_key", pa.string(), "UNIQ_KEY property (the client msgId)"),
        ("phys_offset", pa.int64(), "CommitLog offset of the original (null when the CommitLog no longer holds it)"),
        ("compaction_log_offset", pa.int64(), "offset of the copy in the compaction log"),
        ("part", pa.string(), "'compacted' (at or before the compaction checkpoint) or 'after_checkpoint'"),
        ("size", pa.int32(), "record size in bytes"),
        ("store_timestamp", pa.int64(), "broker store time, epoch ms"),
        ("tags", pa.string(), "TAGS property"),
        ("body_length", pa.int32(), "body size (0: a tombstone)"),
    ),
    "offsets": _cols(
        _BROKER,
        ("group", pa.string(), "consumer group"),
        ("topic", pa.string(), "topic"),
        ("queue_id", pa.int32(), "queue id"),
        ("committed", pa.int64(), "committed offset in consumerOffset.json"),
        ("bak", pa.int64(), "offset in consumerOffset.json.bak"),
        ("min_offset", pa.int64(), "queue's first offset"),
        ("max_offset", pa.int64(), "queue's last valid unit + 1"),
        ("lag", pa.int64(), "max_offset - committed"),
        ("flags", pa.list_(pa.string()), "ok, below_min, above_max, no_queue, bak_differs, only_in_bak, not_in_bak"),
    ),
    "copies": _cols(
        _BROKER,
        ("uniq_key", pa.string(), "UNIQ_KEY of the message this record is a copy of (its offset msgId when it has none)"),
        ("hop", pa.string(), "what the copy is: put, scheduled, timer, delivered, half, half_check, commit, check_max, retry, pop_retry, dlq, prepared, rollback"),
        ("topic", pa.string(), "topic the copy is stored under"),
        ("queue_id", pa.int32(), "queue id"),
        ("queue_offset", pa.int64(), "queue offset"),
        ("phys_offset", pa.int64(), "CommitLog offset"),
        ("store_time", pa.int64(), "broker store time, epoch ms"),
        ("total_size", pa.int32(), "record size in bytes"),
        ("msg_id", pa.string(), "offset msgId of the copy"),
        ("real_topic", pa.string(), "REAL_TOPIC: where a held copy goes"),
        ("real_queue_id", pa.int32(), "REAL_QID"),
        ("delay_level", pa.int32(), "delay level (DELAY, or the schedule queue id + 1)"),
        ("due_time", pa.int64(), "when a held copy falls due, epoch ms"),
        ("reconsume_times", pa.int32(), "reconsumeTimes of the copy"),
        ("check_times", pa.int32(), "TRANSACTION_CHECK_TIMES of a half put again by a check"),
        ("prepared_offset", pa.int64(), "a commit's half (preparedTransactionOffset)"),
        ("origin_msg_id", pa.string(), "ORIGIN_MESSAGE_ID of a retry or DLQ copy"),
        ("retry_topic", pa.string(), "RETRY_TOPIC: the topic a retry or DLQ copy came from"),
        ("producer_group", pa.string(), "PGROUP"),
        ("recovery_drops", pa.bool_(), "past where the broker's recovery would cut the CommitLog"),
    ),
    "evidence": _cols(
        _BROKER,
        ("uniq_key", pa.string(), "the message the record names (one row per message named)"),
        ("hop", pa.string(), "op (settles a transaction's half), checkpoint or ack (POP)"),
        ("topic", pa.string(), "topic of the record"),
        ("queue_id", pa.int32(), "queue id of the record"),
        ("queue_offset", pa.int64(), "queue offset of the record"),
        ("phys_offset", pa.int64(), "CommitLog offset of the record"),
        ("store_time", pa.int64(), "store time of the record, epoch ms"),
        ("names_topic", pa.string(), "topic of the position it names"),
        ("names_queue_id", pa.int32(), "queue id of the position it names"),
        ("names_queue_offset", pa.int64(), "queue offset of the position it names"),
        ("held_in_timer", pa.bool_(), "a checkpoint or ack still in the timer wheel, not yet in the revive topic"),
        ("group", pa.string(), "POP consumer group"),
        ("pop_time", pa.int64(), "POP time, epoch ms"),
        ("invisible_time", pa.int64(), "a checkpoint's invisible time, ms"),
        ("revive_time", pa.int64(), "when a checkpoint's unacked messages are revived, epoch ms"),
    ),
    "journeys": _cols(
        _BROKER,
        ("uniq_key", pa.string(), "the message"),
        ("state", pa.string(), "scheduled, delivered, dead_letter, tx_pending, tx_committed, tx_rolled_back, tx_discarded"),
        ("groups", pa.map_(pa.string(), pa.string()), "consumer group -> consumed, not_consumed, acked, unacked"),
        ("why", pa.string(), "the verdict in one sentence"),
        ("due_time", pa.int64(), "when a scheduled message falls due, epoch ms"),
        ("copies", pa.int32(), "stored copies of the message"),
        ("first_phys_offset", pa.int64(), "CommitLog offset of its first copy"),
        ("problems", pa.list_(pa.string()), "codes of what is odd about its journey"),
    ),
    "transactions": _cols(
        _BROKER,
        ("uniq_key", pa.string(), "the transaction's message"),
        ("state", pa.string(), "tx_pending, tx_committed, tx_rolled_back, tx_discarded (or dead_letter after its commit)"),
        ("checks", pa.int32(), "broker checks so far (the highest TRANSACTION_CHECK_TIMES)"),
        ("halves", pa.int32(), "half copies (the first, and one per check)"),
        ("first_half_offset", pa.int64(), "CommitLog offset of the first half"),
        ("last_half_offset", pa.int64(), "CommitLog offset of the latest half"),
        ("op_offset", pa.int64(), "CommitLog offset of the op record settling it"),
        ("commit_offset", pa.int64(), "CommitLog offset of its (first) commit"),
        ("producer_group", pa.string(), "PGROUP"),
        ("topic", pa.string(), "the topic it is bound for"),
    ),
    "pops": _cols(
        _BROKER,
        ("uniq_key", pa.string(), "the popped message"),
        ("group", pa.string(), "POP consumer group"),
        ("state", pa.string(), "acked or unacked (the latest checkpoint against its acks)"),
        ("topic", pa.string(), "topic it was last popped from"),
        ("queue_id", pa.int32(), "queue id it was last popped from"),
        ("queue_offset", pa.int64(), "queue offset it was last popped from"),
        ("checkpoints", pa.int32(), "checkpoint records naming it (revive topic and timer wheel)"),
        ("invisible_until", pa.int64(), "revive time of its latest checkpoint, epoch ms"),
        ("revived_topic", pa.string(), "POP retry topic it was revived into"),
        ("revived_queue_offset", pa.int64(), "its queue offset there"),
    ),
    "delays": _cols(
        _BROKER,
        ("uniq_key", pa.string(), "a message still waiting in SCHEDULE_TOPIC_XXXX"),
        ("level", pa.int32(), "delay level"),
        ("due_time", pa.int64(), "when it falls due, epoch ms"),
        ("real_topic", pa.string(), "where it goes then"),
        ("real_queue_id", pa.int32(), "queue it goes to"),
        ("queue_offset", pa.int64(), "its offset in the level's schedule queue"),
        ("phys_offset", pa.int64(), "CommitLog offset of the scheduled copy"),
    ),
}


def columns_of(table: str) -> list[str]:
    return [c.name for c in TABLES[table]]


def arrow_schema(table: str, columns: list[str]) -> pa.Schema:
    types = {c.name: c.type for c in TABLES[table]}
    return pa.schema([(c, types[c]) for c in columns])


PROBLEM_BATCH = 10_000  # problems per Arrow batch


def verify_findings(ref: StoreRef, on_bytes: Callable[[int], None] | None = None, mapper: Mapper = SERIAL) -> Iterator[Problem]:
    """What `cq verify` reports on one store, as it finds it (its memory is bounded by its windows; its ranges read by `mapper`)."""
    return cqverify.verify(Store.open(ref.root), on_bytes=on_bytes, mapper=mapper)


def compaction_findings(ref: StoreRef) -> Iterator[Problem]:
    """What `cq verify` adds for the compaction topics (`compaction verify`); kept out of units.status: they are not ConsumeQueue units."""
    st = Store.open(ref.root)
    yield from compactionverify.verify(st.root, st.commitlog)


def marks_unit(p: Problem) -> bool:
    """Whether a cq verify finding is about a unit that exists (cq_missing_unit is about one that does not)."""
    return p.code != cqunits.CQ_MISSING_UNIT and p.extra.get("unit_index") is not None and p.extra.get("topic") is not None


class UnitStatus:
    """Per queue, the units where `cq verify` found a problem and the first code found there, as sorted arrays."""

    def __init__(self, found: Iterator[Problem]):
        self.codes: list[str] = []
        code_ids: dict[str, int] = {}
        per_queue: dict[tuple[str, int], tuple[list[int], list[int]]] = {}
        for p in found:
            if not marks_unit(p):
                continue
            i = p.extra["unit_index"]
            cid = code_ids.setdefault(p.code, len(code_ids))
            idx, ids = per_queue.setdefault((p.extra["topic"], p.extra["queue_id"]), ([], []))
            idx.append(i)
            ids.append(cid)
        self.codes = list(code_ids)
        self.queues: dict[tuple[str, int], tuple[np.ndarray, np.ndarray]] = {}
        for key, (idx, ids) in per_queue.items():
            ia, ca = np.array(idx, np.int64), np.array(ids, np.int32)
            order = np.argsort(ia, kind="stable")  # the first problem found at a unit wins
            ia, ca = ia[order], ca[order]
            first = np.concatenate(([True], ia[1:] != ia[:-1]))
            self.queues[key] = (ia[first], ca[first])

    def of(self, topic: str, queue_id: int, index: np.ndarray, filler: np.ndarray) -> list[str]:
        out = np.where(filler, "filler", "ok").astype(object)
        if (topic, queue_id) in self.queues:
            ia, ca = self.queues[(topic, queue_id)]
            pos = np.searchsorted(ia, index)
            hit = (pos < len(ia)) & (ia[np.minimum(pos, len(ia) - 1)] == index)
            out[hit] = np.array(self.codes, dtype=object)[ca[pos[hit]]]
        return out.tolist()


def _batch(schema: pa.Schema, values: dict[str, object]) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array(values[f.name], f.type) for f in schema], schema=schema)


def messages(stores: list[StoreRef], columns: list[str], on_bytes: Callable[[int], None] | None = None, mapper: Mapper = SERIAL) -> Iterator[pa.RecordBatch]:
    """The export rows of every store, range by range; CRCs are checked only when a CRC column is named."""
    splits, _layout = plan(stores, held_range_bytes("rows"))  # a range's rows wait whole for DuckDB (bodies too when named)
    served = compaction_views(stores, columns)
    task = functools.partial(_range_messages, columns=columns, views=served)
    for _, batches in map_ranges(splits, task, mapper, progress=on_bytes):  # ranges decoded side by side, taken in order
        yield from batches


def _range_messages(split: Split, columns: list[str], views: dict[str, ServedView]) -> list[pa.RecordBatch]:
    """A range's messages, whole (a task of the local map: the range's batches are held until taken)."""
    return list(split_messages(split, columns, views.get(split.broker)))


def compaction_views(stores: list[StoreRef], columns: list[str]) -> dict[str, ServedView]:
    """What the compacted queues serve, per broker, when a compaction column is named (read on the driver, small)."""
    return served_views(stores) if {"compaction_part", "compaction_log_offset"} & set(columns) else {}


def split_messages(split: Split, columns: list[str], served: ServedView | None = None) -> Iterator[pa.RecordBatch]:
    """One byte range's messages with `columns` (the unit of work of both engines); CRCs only when a CRC column is
    named; `served`: the store's compacted queues, for the compaction columns (compaction_views)."""
    split = dataclasses.replace(split, check_crc="crc_ok" in columns or "prop_crc_ok" in columns)
    for b in range_batches(split, keys=False):
        rbs = list(arrowbatch.record_batches(b, split.broker, with_body="body" in columns, columns=columns, served=served))
        if len(b):  # the rows are in Arrow (copies): the batch's pages of the map can go before the next batch
            b.mf.release(int(b.cols["_pos"][0]), int(b.cols["_end"][-1]))
        yield from rbs


def units(stores: list[StoreRef], columns: list[str], on_bytes: Callable[[int], None] | None = None, mapper: Mapper = SERIAL) -> Iterator[pa.RecordBatch]:
    """Every unit of every ConsumeQueue up to its last valid one (the zero tail of the last file is not units)."""
    schema = arrow_schema("units", columns)
    for ref in stores:
        store = Store.open(ref.root)
        status = UnitStatus(verify_findings(ref, on_bytes, mapper)) if "status" in columns else None
        for (topic, qid), q in sorted(store.queues.items()):
            yield from queue_units(ref.name, topic, qid, q, schema, status)


def queue_units(broker: str, topic: str, qid: int, q, schema: pa.Schema, status: UnitStatus | None) -> Iterator[pa.RecordBatch]:
    """One queue's units up to its last valid one, file by file. A `status` column without a UnitStatus
    says only 'filler' or 'ok' (the Spark engine joins the verify codes on afterwards)."""
    last = q.last_valid_index()
    for f in q.files:
        u = QueueUnits.from_array(read_units(f), f.first_index)
        keep = u.index <= last
        if not keep.any():
            continue
        n = int(keep.sum())
        vals: dict[str, object] = {
            "broker": [broker] * n,
            "topic": [topic] * n,
            "queue_id": np.full(n, qid, np.int32),
            "queue_offset": u.index[keep],
            "phys_offset": u.offset[keep],
            "size": u.size[keep],
            "tags_code": u.tags_code[keep],
            "cq_file": [f.path] * n,
            "file_offset": (u.index[keep] - f.first_index) * UNIT_SIZE,
        }
        if "status" in schema.names:
            filler = u.filler_mask()[keep]
            vals["status"] = status.of(topic, qid, u.index[keep], filler) if status is not None else np.where(filler, "filler", "ok").tolist()
        yield _batch(schema, {c: vals[c] for c in schema.names})


def index_entries(stores: list[StoreRef], columns: list[str]) -> Iterator[pa.RecordBatch]:
    """Every written entry of every IndexFile, a chunk at a time (pages given back after each)."""
    schema = arrow_schema("index_entries", columns)
    for ref in stores:
        for f in open_all(ref.root):
            try:
                yield from index_file_entries(ref.name, f, schema)
            finally:
                f.close()


def index_file_entries(broker: str, f: IndexFile, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """One opened IndexFile's written entries, INDEX_CHUNK at a time (its pages given back after each)."""
    for lo in range(1, f.count, INDEX_CHUNK):  # indexCount is the next entry's number
        e = f.entries[lo : min(f.count, lo + INDEX_CHUNK)]
        n = len(e)
        kh = e["key_hash"].astype(np.int32)
        diff = e["time_diff"].astype(np.int32)
        vals = {
            "broker": [broker] * n,
            "file": [f.path] * n,
            "entry": np.arange(lo, lo + n, dtype=np.int32),
            "slot": (kh.astype(np.int64) % f.layout.hash_slots).astype(np.int32),
            "key_hash": kh,
            "phys_offset": e["phys_offset"].astype(np.int64),
            "time_diff": diff,
            "store_timestamp": f.header.begin_timestamp + diff.astype(np.int64) * 1000,
            "prev_entry": e["prev_index"].astype(np.int32),
        }
        yield _batch(schema, {c: vals[c] for c in schema.names})
        f.release()


def problems(stores: list[StoreRef], columns: list[str], on_bytes: Callable[[int], None] | None = None, mapper: Mapper = SERIAL) -> Iterator[pa.RecordBatch]:
    """What `cq verify` reports on each store (layout, CommitLog, ConsumeQueue and compaction findings), streamed in its order."""
    schema = arrow_schema("problems", columns)
    for ref in stores:
        found = itertools.chain(verify_findings(ref, on_bytes, mapper), compaction_findings(ref))
        while chunk := list(itertools.islice(found, PROBLEM_BATCH)):
            yield problem_batch(ref.name, chunk, schema)


_PROBLEM_FIELDS: dict[str, Callable[[Problem], object]] = {
    "code": lambda p: p.code,
    "file": lambda p: p.file,
    "file_offset": lambda p: p.file_offset,
    "phys_offset": lambda p: p.phys_offset,
    "detail": lambda p: p.detail,
    "topic": lambda p: p.extra.get("topic"),
    "queue_id": lambda p: p.extra.get("queue_id"),
    "unit_index": lambda p: p.extra.get("unit_index"),
}


def problem_batch(broker: str, found: list[Problem], schema: pa.Schema) -> pa.RecordBatch:
    """Problems as rows of the problems table (the columns of `schema`)."""
    return _batch(schema, {c: [broker] * len(found) if c == "broker" else [_PROBLEM_FIELDS[c](p) for p in found] for c in schema.names})


def compacted(stores: list[StoreRef], columns: list[str], on_bytes: Callable[[int], None] | None = None) -> Iterator[pa.RecordBatch]:
    """What consumers of each compaction topic's queues get (`compaction view`); units whose record cannot be read are left out."""
    schema = arrow_schema("compacted", columns)
    for ref in stores:
        cf = find_compaction(ref.root)
        if cf is None or not cf.queues:
            continue
        rows = [r for r in consumer_view(cf, Store.open(ref.root).commitlog, None, on_bytes=on_bytes) if not isinstance(r, Problem)]
        yield from _row_batches(ref, schema, columns, rows)


def _row_batches(ref: StoreRef, schema: pa.Schema, columns: list[str], rows: list[dict]) -> Iterator[pa.RecordBatch]:
    """A store's rows (dicts with the table's columns) as batches of PROBLEM_BATCH, its broker name in `broker`."""
    for lo in range(0, len(rows), PROBLEM_BATCH):
        chunk = rows[lo : lo + PROBLEM_BATCH]
        yield _batch(schema, {c: [ref.name] * len(chunk) if c == "broker" else [r[c] for r in chunk] for c in columns})


def offsets(stores: list[StoreRef], columns: list[str]) -> Iterator[pa.RecordBatch]:
    """Committed consumer offsets with their queue's bounds and lag (none when a store has no consumerOffset.json)."""
    schema = arrow_schema("offsets", columns)
    for ref in stores:
        try:
            rows = consumer_offsets(Store.open(ref.root)).rows
        except InputError as e:
            if e.code != "not_found":
                raise
            continue
        yield from _row_batches(ref, schema, columns, [r.to_dict() for r in rows])


def _journey_rows(table: str, ref: StoreRef, on_bytes, mapper) -> Iterator[list[dict]]:
    """The rows of one journey table for a store, a range's single-copy journeys at a time, then the linked ones."""
    import json

    from rmqdump.checks.journey import Journey
    from rmqdump.query.journeys import all_journeys
    from rmqdump.query.journeyscan import Rendered

    for item in all_journeys(Store.open(ref.root), mapper=mapper, on_bytes=on_bytes, spell=table != "evidence"):
        if isinstance(item, Rendered):
            rows = [json.loads(line) for line in item.text.splitlines()]
            if table == "journeys":
                copies = {r["uniq_key"]: r for r in rows if r["kind"] == "copy"}
                yield [_journey_row(r, 1, copies[r["uniq_key"]]["phys_offset"], []) for r in rows if r["kind"] == "verdict"]
            elif table == "copies":
                yield [r for r in rows if r["kind"] == "copy"]
        elif isinstance(item, Journey):
            if table == "journeys":
                yield [_journey_row(item.verdict.to_dict(), len(item.copies), item.copies[0].phys_offset, [p.code for p in item.problems])]
            else:
                yield [r for r in item.rows() if r["kind"] == _ROW_KIND[table]]


def _journey_row(v: dict, copies: int, first: int, problems: list[str]) -> dict:
    return {**v, "groups": list(v["groups"].items()), "copies": copies, "first_phys_offset": first, "problems": problems}


_ROW_KIND = {"copies": "copy", "evidence": "evidence"}


def journey_tables(table: str, stores: list[StoreRef], columns: list[str], on_bytes=None, mapper: Mapper = SERIAL) -> Iterator[pa.RecordBatch]:
    """`copies`, `evidence` or `journeys`: the rows `rmqdump journey --all` prints, store by store, in bounded memory."""
    schema = arrow_schema(table, columns)
    for ref in stores:
        for rows in _journey_rows(table, ref, on_bytes, mapper):
            yield from _row_batches(ref, schema, columns, rows)


def _view_rows(table: str, sj) -> list[dict]:
    from rmqdump.query.delays import scheduled_rows
    from rmqdump.query.pops import popped_rows
    from rmqdump.query.transactions import transaction_row

    if table == "delays":
        return scheduled_rows(sj)
    if table == "pops":
        out = []
        for j in sj.found:
            for r in popped_rows(j):
                rv = r["revived_to"] or {}
                out.append({**r, "checkpoints": len(r["checkpoint_offsets"]), "revived_topic": rv.get("topic"), "revived_queue_offset": rv.get("queue_offset")})
        return out
    out = []
    for j in sj.found:
        r = transaction_row(j)
        if r is not None:
            h = r["half_offsets"]
            out.append({**r, "halves": len(h), "first_half_offset": h[0], "last_half_offset": h[-1]})
    return out


def lifecycle_tables(table: str, stores: list[StoreRef], columns: list[str], on_bytes=None, mapper: Mapper = SERIAL) -> Iterator[pa.RecordBatch]:
    """`transactions`, `pops` or `delays`: the rows of `rmqdump tx`, `pop` and `delay`, store by store."""
    from rmqdump.query.storejourneys import store_journeys

    schema = arrow_schema(table, columns)
    for ref in stores:
        yield from _row_batches(ref, schema, columns, _view_rows(table, store_journeys(Store.open(ref.root), mapper=mapper, on_bytes=on_bytes)))


JOURNEY_TABLES = ("copies", "evidence", "journeys")
LIFECYCLE_TABLES = ("transactions", "pops", "delays")


def message_story_tables(table: str, stores: list[StoreRef], columns: list[str], on_bytes=None, mapper: Mapper = SERIAL) -> Iterator[pa.RecordBatch]:
    """Any of the journey and lifecycle tables: the one entry the DuckDB and Spark engines call."""
    make = journey_tables if table in JOURNEY_TABLES else lifecycle_tables
    return make(table, stores, columns, on_bytes, mapper)

