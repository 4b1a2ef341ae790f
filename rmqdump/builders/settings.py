"""Store sizing a rebuild needs: units per ConsumeQueue file, index slots and entries, delay levels.

The sizes are not written anywhere in a store; a broker takes them from its
config. A rebuild that guesses them wrong writes files the broker rejects or
misreads, so each value comes from, in order: a command-line flag, a
broker.conf, the store's own files when they agree on one answer, else the
broker default when the store has no such files at all. When the files are
there but do not settle the value, the caller is told which flag to pass.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from rmqdump.common.jsontext import fields_of
from rmqdump.common.problems import InputError
from rmqdump.readers.consumequeue import ConsumeQueue
from rmqdump.readers.indexfile import file_size as index_file_size
from rmqdump.readers.indexfile import infer_store_sizing, list_index_files
from rmqdump.readers.rocksdbcq import is_rocksdb
from rmqdump.readers.store import Store
from rmqdump.scan.dispatch import DelayLevels
from rmqdump.schemas import constants as C

SETTINGS_AMBIGUOUS = "settings_ambiguous"
BAD_BROKER_CONF = "bad_broker_conf"


@dataclass(frozen=True)
class StoreSettings:
    cq_units_per_file: int
    hash_slots: int
    index_entries: int
    delay_spec: str
    source: dict[str, str] = field(default_factory=dict)  # setting -> where it came from
    bcq_file_size: int = C.DEFAULT_BCQ_FILE_SIZE  # bytes per Batch ConsumeQueue file (mapperFileSizeBatchConsumeQueue)
    ext_bitmap_bits: int | None = None  # ConsumeQueue ext filter bitmap length (None: no ext files are written)
    ext_file_size: int = C.DEFAULT_EXT_FILE_SIZE  # bytes per ext file (mappedFileSizeConsumeQueueExt)
    lmq: bool = False  # write LMQ units (the store has %LMQ% queues, or broker.conf enables LMQ / multi-dispatch)

    @property
    def delays(self) -> DelayLevels:
        return DelayLevels.parse(self.delay_spec)

    @property
    def cq_file_size(self) -> int:
        return self.cq_units_per_file * C.CQ_UNIT_SIZE

    @property
    def index_file_size(self) -> int:
        return index_file_size(self.hash_slots, self.index_entries)

    def to_dict(self) -> dict:
        return {**fields_of(self, omit=("source",), rename={"delay_spec": "delay_levels"}), "source": dict(self.source)}


def read_properties(path: str) -> dict[str, str]:
    """A Java .properties file (broker.conf): `key=value` or `key: value`, # and ! comments, \\ continuations."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError as e:
        raise InputError("unreadable", path, e.strerror or str(e)) from None
    out: dict[str, str] = {}
    logical = ""
    for raw in text.splitlines():
        line = raw.lstrip()
        if not logical and (not line or line[0] in "#!"):
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            logical += line[:-1]
            continue
        logical += line
        m = re.match(r"([^=:\s]+)\s*[=:\s]\s*(.*)$", logical)
        if m:
            out[m.group(1)] = m.group(2).strip()
        elif logical.strip():
            out[logical.strip()] = ""
        logical = ""
    return out


def _conf_int(conf: dict[str, str], name: str, path: str) -> int | None:
    v = conf.get(name)
    if v is None or v == "":
        return None
    try:
        n = int(v)
    except ValueError:
        raise InputError(BAD_BROKER_CONF, path, f"{name}={v!r} is not an integer") from None
    if n <= 0:
        raise InputError(BAD_BROKER_CONF, path, f"{name}={n} must be positive")
    return n


def _cq_files(store: str) -> list[tuple[str, int, int]]:
    """(path, name offset, size) of every ConsumeQueue file, as the store model discovers them."""
    try:
        st = Store.open(store)
    except InputError:
        return []
    return [(f.path, f.base, f.size) for q in st.select_queues() if isinstance(q, ConsumeQueue) for f in q.files]  # not a RocksDB ConsumeQueue's units


def infer_cq_units(store: str) -> tuple[int | None, str]:
    """Units per file from the existing ConsumeQueue files: one common size, names multiples of it."""
    files = _cq_files(store)
    if not files:
        return None, "no ConsumeQueue files to infer from"
    sizes: dict[int, int] = {}
    for _, _, s in files:
        sizes[s] = sizes.get(s, 0) + 1
    if len(sizes) > 1:
        listing = ", ".join(f"{s} bytes ({n} files)" for s, n in sorted(sizes.items()))
        return None, f"ConsumeQueue files disagree on their size: {listing}"
    (size,) = sizes
    if size <= 0 or size % C.CQ_UNIT_SIZE:
        return None, f"ConsumeQueue files are {size} bytes, not a whole number of {C.CQ_UNIT_SIZE}-byte units"
    odd = [p for p, off, _ in files if off % size]
    if odd:
        return None, f"{odd[0]} is named by an offset that is not a multiple of the file size {size}"
    return size // C.CQ_UNIT_SIZE, f"inferred from {len(files)} ConsumeQueue files of {size} bytes"


def infer_bcq_file_size(store: str) -> tuple[int | None, str]:
    """Bytes per Batch ConsumeQueue file from the store's own: one common size, names multiples of it."""
    from rmqdump.readers.batchcq import find_batch_queues

    queues, _ = find_batch_queues(store)
    files = [f for q in queues for f in q.files]
    if not files:
        return None, "no Batch ConsumeQueue files to infer from"
    sizes = sorted({f.size for f in files})
    if len(sizes) > 1:
        return None, f"Batch ConsumeQueue files disagree on their size: {sizes} bytes"
    size = sizes[0]
    if size < C.BCQ_UNIT_SIZE:
        return None, f"Batch ConsumeQueue files are {size} bytes, shorter than one 46-byte unit"
    odd = [f.path for f in files if f.base % size]
    if odd:
        return None, f"{odd[0]} is named by an offset that is not a multiple of the file size {size}"
    return size, f"inferred from {len(files)} Batch ConsumeQueue files of {size} bytes"


def resolve(
    store: str,
    *,
    cq_units: int | None = None,
    hash_slots: int | None = None,
    index_entries: int | None = None,
    delay_levels: str | None = None,
    broker_conf: str | None = None,
    bcq_file_size: int | None = None,
    ext_bitmap_bits: int | None = None,
) -> StoreSettings:
    """The sizing to rebuild with; InputError(settings_ambiguous) names the flag to pass when it cannot tell."""
    source: dict[str, str] = {}
    conf: dict[str, str] = {}
    if broker_conf:
        conf = read_properties(broker_conf)

    if cq_units is not None:
        source["cq_units_per_file"] = "--cq-units-per-file"
    else:
        b = _conf_int(conf, "mappedFileSizeConsumeQueue", broker_conf or "")
        if b is not None:
            cq_units = -(-b // C.CQ_UNIT_SIZE)  # the broker rounds the byte size up to whole units
            source["cq_units_per_file"] = f"{broker_conf}: mappedFileSizeConsumeQueue={b}"
        else:
            cq_units, why = infer_cq_units(store)
            if cq_units is not None:
                source["cq_units_per_file"] = why
            elif not _cq_files(store):
                cq_units = C.DEFAULT_CQ_UNITS_PER_FILE
                source["cq_units_per_file"] = (
                    "broker default (the store's ConsumeQueue is a RocksDB database: written as the file-based ConsumeQueue of storeType=default)"
                    if is_rocksdb(os.path.join(store, "consumequeue"))
                    else "broker default (the store has no ConsumeQueue files)"
                )
            else:
                raise InputError(SETTINGS_AMBIGUOUS, os.path.join(store, "consumequeue"), f"{why}; pass --cq-units-per-file (or --broker-conf)")

    hs_conf = _conf_int(conf, "maxHashSlotNum", broker_conf or "")
    ie_conf = _conf_int(conf, "maxIndexNum", broker_conf or "")
    if hash_slots is None and hs_conf is not None:
        hash_slots = hs_conf
        source["hash_slots"] = f"{broker_conf}: maxHashSlotNum"
    elif hash_slots is not None:
        source["hash_slots"] = "--hash-slots"
    if index_entries is None and ie_conf is not None:
        index_entries = ie_conf
        source["index_entries"] = f"{broker_conf}: maxIndexNum"
    elif index_entries is not None:
        source["index_entries"] = "--index-entries"
    if hash_slots is None or index_entries is None:
        inferred, why = infer_store_sizing(list_index_files(store))
        if inferred is not None and (hash_slots is None or hash_slots == inferred[0]) and (index_entries is None or index_entries == inferred[1]):
            for name in ("hash_slots", "index_entries"):
                if name not in source:
                    source[name] = why
            hash_slots, index_entries = inferred
        elif not list_index_files(store):
            if hash_slots is None:
                hash_slots = C.DEFAULT_HASH_SLOTS
                source["hash_slots"] = "broker default (the store has no index files)"
            if index_entries is None:
                index_entries = C.DEFAULT_INDEX_ENTRIES
                source["index_entries"] = "broker default (the store has no index files)"
        else:
            missing = " and ".join(f for f, v in (("--hash-slots", hash_slots), ("--index-entries", index_entries)) if v is None)
            if inferred is not None:
                why = f"{why}, which does not match the value given"
            raise InputError(SETTINGS_AMBIGUOUS, os.path.join(store, "index"), f"{why}; pass {missing} (or --broker-conf)")

    if delay_levels is not None:
        source["delay_levels"] = "--delay-levels"
    elif conf.get("messageDelayLevel"):
        delay_levels = conf["messageDelayLevel"]
        source["delay_levels"] = f"{broker_conf}: messageDelayLevel"
    else:
        delay_levels = C.DEFAULT_DELAY_LEVELS
        source["delay_levels"] = "broker default"
    try:
        DelayLevels.parse(delay_levels)
    except ValueError as e:
        raise InputError(
            BAD_BROKER_CONF if source["delay_levels"] != "--delay-levels" else "bad_delay_levels", broker_conf or "--delay-levels", str(e)
        ) from None

    if bcq_file_size is not None:
        source["bcq_file_size"] = "--bcq-file-size"
    else:
        bcq_file_size = _conf_int(conf, "mapperFileSizeBatchConsumeQueue", broker_conf or "")
        if bcq_file_size is not None:
            source["bcq_file_size"] = f"{broker_conf}: mapperFileSizeBatchConsumeQueue"
        else:
            bcq_file_size, why = infer_bcq_file_size(store)
            if bcq_file_size is not None:
                source["bcq_file_size"] = why
            elif os.path.isdir(os.path.join(store, "batchconsumequeue")) and "no Batch" not in why:
                raise InputError(SETTINGS_AMBIGUOUS, os.path.join(store, "batchconsumequeue"), f"{why}; pass --bcq-file-size (or --broker-conf)")
            else:
                bcq_file_size = C.DEFAULT_BCQ_FILE_SIZE
                source["bcq_file_size"] = "broker default (the store has no Batch ConsumeQueue files)"
    if bcq_file_size < C.BCQ_UNIT_SIZE:
        raise InputError("bad_setting", "bcq_file_size", f"{bcq_file_size} bytes cannot hold one {C.BCQ_UNIT_SIZE}-byte Batch ConsumeQueue unit")

    ext_file_size = C.DEFAULT_EXT_FILE_SIZE
    if ext_bitmap_bits is not None:
        source["ext_bitmap_bits"] = "--ext-bitmap-bits"
    elif conf.get("enableConsumeQueueExt", "").strip().lower() == "true":
        ext_bitmap_bits = _conf_int(conf, "bitMapLengthConsumeQueueExt", broker_conf or "") or 64
        source["ext_bitmap_bits"] = f"{broker_conf}: enableConsumeQueueExt, bitMapLengthConsumeQueueExt"
    if ext_bitmap_bits is not None:
        size = _conf_int(conf, "mappedFileSizeConsumeQueueExt", broker_conf or "")
        if size is not None:
            ext_file_size, source["ext_file_size"] = size, f"{broker_conf}: mappedFileSizeConsumeQueueExt"
        else:
            from rmqdump.readers.cqext import find_ext_queues

            sizes = sorted({f.size for q in find_ext_queues(store).values() for f in q.files})
            if len(sizes) == 1:
                ext_file_size, source["ext_file_size"] = sizes[0], f"inferred from the store's ext files ({sizes[0]} bytes)"
            elif sizes:
                raise InputError(SETTINGS_AMBIGUOUS, os.path.join(store, "consumequeue_ext"), f"ext files disagree on their size: {sizes}; pass --broker-conf")
            else:
                source["ext_file_size"] = "broker default"
        if ext_bitmap_bits < 0 or C.EXT_MIN_UNIT_SIZE + -(-ext_bitmap_bits // 8) > ext_file_size - C.EXT_END_BLANK:
            raise InputError("bad_setting", "ext_bitmap_bits", f"{ext_bitmap_bits} bits: an ext unit of that size does not fit a {ext_file_size}-byte ext file")

    lmq = any(conf.get(k, "").strip().lower() == "true" for k in ("enableLmq", "enableMultiDispatch"))
    if lmq:
        source["lmq"] = f"{broker_conf}: enableLmq / enableMultiDispatch"
    else:
        cq_dir = os.path.join(store, "consumequeue")
        lmq = os.path.isdir(cq_dir) and any(t.startswith(C.LMQ_PREFIX) for t in os.listdir(cq_dir))
        source["lmq"] = "the store has %LMQ% queues" if lmq else "the store has no %LMQ% queue (broker default: LMQ off)"

    for name, v in (("cq_units_per_file", cq_units), ("hash_slots", hash_slots), ("index_entries", index_entries)):
        if v <= 0:
            raise InputError("bad_setting", name, f"{v} must be positive")
    if index_entries < 2:
        raise InputError("bad_setting", "index_entries", "an index file needs at least 2 entries (entry 0 is never written)")
    if index_file_size(hash_slots, index_entries) > (1 << 31) - 1:
        raise InputError("bad_setting", "index", "an index file of these sizes is over 2 GiB, which the broker cannot map")
    return StoreSettings(cq_units, hash_slots, index_entries, delay_levels, source, bcq_file_size, ext_bitmap_bits, ext_file_size, lmq)
