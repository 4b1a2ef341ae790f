"""The 5.3 RocksDB ConsumeQueue (storeType=defaultRocksDB): a RocksDB database in consumequeue/.

The evidence is never opened in place: RocksDB bindings may write beside a
database even when it is opened read-only (rocksdict leaves a config file),
so the database is mirrored into a private temporary directory -- the
immutable .sst files as symlinks, the small mutable ones (CURRENT, MANIFEST,
OPTIONS, WAL) as copies -- and opened read-only there. Each queue then reads
like a file-based one: units in queue-offset order as QueueUnits columns, in
chunks of bounded size, plus the store time every RocksDB unit carries.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field

import numpy as np
from construct import Struct

from rmqdump.common.problems import InputError, Problem
from rmqdump.readers.consumequeue import UNIT_DTYPE, UNIT_SIZE, QueueUnits, UnitChunks, unit_row
from rmqdump.readers.fastpath import numpy_dtype, struct_format
from rmqdump.schemas import RocksCheckpointValue, RocksCQValue, RocksOffsetValue
from rmqdump.schemas.rocksdbcq import (
    CTRL_1,
    LOG_BLOCK_SIZE,
    LOG_RECYCLABLE_TYPES,
    LOG_ZERO_TYPE,
    RocksCQKey,
    RocksCQKeyTail,
    RocksLogRecordHeader,
    RocksOffsetKeyTail,
)

VALUE_DTYPE = numpy_dtype(RocksCQValue)
VALUE_SIZE = VALUE_DTYPE.itemsize
MAX_GAP = 1024  # missing queue offsets tolerated inside one chunk (read as zero units); a longer gap starts a new chunk
OFFSET_VALUE_DTYPE = numpy_dtype(RocksOffsetValue)
CHECKPOINT_DTYPE = numpy_dtype(RocksCheckpointValue)
_TAIL = struct_format(RocksCQKeyTail)
_OTAIL = struct_format(RocksOffsetKeyTail)
_LEN = struct_format(Struct(RocksCQKey.subcons[0]))  # the topic length prefix
_LOG_HEADER = struct_format(RocksLogRecordHeader)
CHUNK_UNITS = 1 << 20  # units read per chunk (bounded memory per queue)
CF_UNITS = "default"
CF_OFFSET = "offset"
CHECKPOINT_TOPIC = "CHECKPOINT_TOPIC"
_IMMUTABLE = (".sst", ".blob")

# Stable problem codes
ROCKSDB_UNREADABLE = "rocksdb_unreadable"  # the binding refused the database (corruption, missing file)
ROCKSDB_CORRUPTION = "rocksdb_corruption"  # a block failed its checksum while reading
ROCKSDB_BINDING_MISSING = "rocksdb_binding_missing"
RCQ_BAD_KEY = "rocksdb_cq_bad_key"
RCQ_BAD_VALUE = "rocksdb_cq_bad_value"
RCQ_OFFSET_MISMATCH = "rocksdb_cq_offset_mismatch"  # the `offset` family's bounds disagree with the units

_WHERE = re.compile(r"(?:in|file:?|read:)\s+(\S+?\.(?:sst|log|blob))(?:\D+offset\s+(\d+))?")


def is_rocksdb(d: str) -> bool:
    try:
        names = os.listdir(d)
    except OSError:
        return False
    return "CURRENT" in names and any(n.startswith("MANIFEST-") for n in names)


def _mirror(src: str) -> str:
    """A private read-only view of the database at src: symlinks to immutable files, copies of the rest."""
    dst = tempfile.mkdtemp(prefix="rmqdump-rocksdb-")
    p = src
    try:
        for n in os.listdir(src):
            p = os.path.join(src, n)
            if not os.path.isfile(p) or n == "LOCK" or n.startswith("LOG"):
                continue
            if n.endswith(_IMMUTABLE):
                os.symlink(os.path.abspath(p), os.path.join(dst, n))
            else:
                shutil.copyfile(p, os.path.join(dst, n))
    except OSError as e:  # a file of the database that cannot be read: named, and nothing of the mirror left behind
        shutil.rmtree(dst, ignore_errors=True)
        raise InputError(ROCKSDB_UNREADABLE, p, e.strerror or str(e), offset=0) from None
    return dst


def _options():
    """Raw keys and values, and every table file opened when the database opens (the mirror is removed then)."""
    from rocksdict import Options

    o = Options(raw_mode=True)
    o.set_max_open_files(-1)
    return o


def _check_manifest(db_dir: str) -> None:
    """Walk the record headers of the MANIFEST that CURRENT names, as RocksDB's reader steps through them, and refuse
    one RocksDB cannot read safely: a recyclable record type there makes its reader loop forever, holding the GIL, so
    it is found here first and reported like any other unreadable database, at its byte."""
    try:
        with open(os.path.join(db_dir, "CURRENT"), "rb") as f:
            name = f.read(256).decode("ascii", "replace").strip()
    except OSError:
        return  # RocksDB names what is missing itself
    if not name.startswith("MANIFEST-") or os.sep in name or "\0" in name:
        return  # not a name RocksDB can open either: it says so
    path = os.path.join(db_dir, name)
    hsize = _LOG_HEADER.size
    try:
        with open(path, "rb") as f:
            base = 0
            while block := f.read(LOG_BLOCK_SIZE):
                at = 0
                while at + hsize <= len(block):
                    _crc, length, kind = _LOG_HEADER.unpack_from(block, at)
                    if kind in LOG_RECYCLABLE_TYPES:
                        raise InputError(
                            ROCKSDB_UNREADABLE, path, f"record type {kind} (a recycled WAL's) in a MANIFEST, which RocksDB never writes there", offset=base + at
                        )
                    if (kind == LOG_ZERO_TYPE and length == 0) or at + hsize + length > len(block):
                        break  # preallocated space, or a bad length: RocksDB's reader drops the rest of the block
                    at += hsize + length
                base += len(block)
    except OSError:
        return


def _problem_from_error(db_dir: str, mirror: str, e: Exception, code: str, extra: dict | None = None) -> Problem:
    text = str(e).replace(mirror, db_dir)
    m = _WHERE.search(text)
    path, off = db_dir, None
    if m:
        path = os.path.join(db_dir, os.path.basename(m.group(1)))
        off = int(m.group(2)) if m.group(2) else None
    return Problem(code, path, off, " ".join(text.split()), extra=extra or {})


@dataclass
class RocksChunk:
    """A stretch of one queue's units (the RocksDB counterpart of a ConsumeQueue file).

    Read as an array of 20-byte ConsumeQueue units, one per queue offset from
    first_index; a key missing inside the stretch reads as a zero unit, as a
    zeroed unit of a file would.
    """

    queue: RocksQueue = field(repr=False, compare=False)
    first_index: int = 0
    count: int = 0

    @property
    def path(self) -> str:
        return self.queue.db.path

    @property
    def base(self) -> int:
        return self.first_index * UNIT_SIZE

    @property
    def size(self) -> int:
        return self.count * UNIT_SIZE

    @property
    def units(self) -> int:
        return self.count

    @property
    def name(self) -> str:
        return f"units {self.first_index}..{self.first_index + self.count - 1}"

    def read_array(self) -> np.ndarray:
        u, _, _ = self.queue.read_range(self.first_index, None, stop=self.first_index + self.count)
        arr = np.zeros(self.count, dtype=UNIT_DTYPE)
        pos = u.index - self.first_index
        arr["commit_log_offset"][pos] = u.offset
        arr["size"][pos] = u.size
        arr["tags_code"][pos] = u.tags_code
        return arr


class RocksDBConsumeQueues:
    """The database, opened read-only on a mirror; queues found by skipping from one (topic, queueId) prefix to the next."""

    def __init__(self, db_dir: str):
        self.path = db_dir
        self.problems: list[Problem] = []
        try:
            from rocksdict import AccessType, Rdict
        except ImportError:
            raise InputError(ROCKSDB_BINDING_MISSING, db_dir, "a RocksDB ConsumeQueue needs the rocksdict package (pip install rocksdict)") from None
        _check_manifest(db_dir)
        self.mirror = _mirror(db_dir)
        try:
            cfs = Rdict.list_cf(self.mirror)
            self.db = Rdict(
                self.mirror,
                options=_options(),
                column_families={n: _options() for n in cfs},
                access_type=AccessType.read_only(),
            )
        except Exception as e:
            p = _problem_from_error(db_dir, self.mirror, e, ROCKSDB_UNREADABLE)
            raise InputError(ROCKSDB_UNREADABLE, p.file, p.detail, offset=p.file_offset) from None
        finally:
            # Every file the database reads is open by now (max_open_files=-1 opens each table at open), so the
            # mirror goes at once: a process that never closes the database (a Spark worker, which exits without
            # running atexit hooks) leaves nothing in the temp directory.
            shutil.rmtree(self.mirror, ignore_errors=True)
        self.cfs = cfs
        self.units_cf = self.db.get_column_family(CF_UNITS)
        self.offset_cf = self.db.get_column_family(CF_OFFSET) if CF_OFFSET in cfs else None

    def close(self) -> None:
        self.units_cf = self.offset_cf = None
        self.db.close()

    # keys ----------------------------------------------------------------------------------

    def parse_key(self, key: bytes) -> tuple[str, int, int] | None:
        """(topic, queueId, cqOffset) of a `default` key, None when it is not laid out as RocksCQKey."""
        if len(key) < 4 + 1 + _TAIL.size:
            return None
        (n,) = _LEN.unpack_from(key, 0)
        if n < 0 or len(key) != 4 + 1 + n + _TAIL.size or key[4:5] != CTRL_1:
            return None
        s2, qid, s3, off = _TAIL.unpack_from(key, 5 + n)
        if s2 != CTRL_1 or s3 != CTRL_1:
            return None
        return key[5 : 5 + n].decode("utf-8", errors="replace"), qid, off

    @staticmethod
    def prefix(topic: str, queue_id: int) -> bytes:
        t = topic.encode()
        return _LEN.pack(len(t)) + CTRL_1 + t + CTRL_1 + queue_id.to_bytes(4, "big", signed=True) + CTRL_1

    def _iter(self, cf, start: bytes | None = None):
        it = cf.iter()
        if start is None:
            it.seek_to_first()
        else:
            it.seek(start)
        return it

    def _bad(self, code: str, detail: str, **extra) -> None:
        """A key or value of the database that is not laid out as the broker writes it."""
        self.problems.append(Problem(code, self.path, None, detail, extra=extra))

    def find_queues(self) -> list[tuple[str, int]]:
        """Every (topic, queueId) with units, by seeking past each queue's last possible key."""
        out: list[tuple[str, int]] = []
        try:
            it = self._iter(self.units_cf)
            while it.valid():
                key = it.key()
                k = self.parse_key(key)
                if k is None:
                    self._bad(RCQ_BAD_KEY, f"key {key[:64].hex()} is not topicLen|0x01|topic|0x01|queueId|0x01|cqOffset", key=key.hex())
                    it.next()
                    continue
                out.append((k[0], k[1]))
                it.seek(self.prefix(k[0], k[1]) + b"\xff" * 8)
                if it.valid() and it.key() == self.prefix(k[0], k[1]) + b"\xff" * 8:
                    it.next()
            it.status()  # an iterator stops at a damaged block: raise what stopped it
        except Exception as e:
            self.problems.append(_problem_from_error(self.path, self.mirror, e, ROCKSDB_CORRUPTION))
        return out

    def offset_table(self) -> tuple[dict[tuple[str, int, str], tuple[int, int]], int | None]:
        """The `offset` family: {(topic, queueId, "max"|"min"): (commitLogOffset, cqOffset)} and the checkpoint's max physical offset."""
        table: dict[tuple[str, int, str], tuple[int, int]] = {}
        checkpoint = None
        if self.offset_cf is None:
            return table, checkpoint
        try:
            it = self._iter(self.offset_cf)
            while it.valid():
                key, val = it.key(), it.value()
                it.next()
                if len(key) < 4 + 1 + _OTAIL.size:
                    continue
                (n,) = _LEN.unpack_from(key, 0)
                if n < 0 or len(key) != 4 + 1 + n + _OTAIL.size:
                    self._bad(RCQ_BAD_KEY, f"offset key {key[:64].hex()} is not topicLen|0x01|topic|0x01|max/min|0x01|queueId", key=key.hex())
                    continue
                topic = key[5 : 5 + n].decode("utf-8", errors="replace")
                _, bound, _, qid = _OTAIL.unpack_from(key, 5 + n)
                if topic == CHECKPOINT_TOPIC and len(val) == CHECKPOINT_DTYPE.itemsize:
                    checkpoint = int(np.frombuffer(val, CHECKPOINT_DTYPE)[0]["commit_log_offset"])
                    continue
                if len(val) != OFFSET_VALUE_DTYPE.itemsize:
                    detail = f"offset value of {topic}/{qid} {bound.decode(errors='replace')} is {len(val)} bytes, not {OFFSET_VALUE_DTYPE.itemsize}"
                    self._bad(RCQ_BAD_VALUE, detail, topic=topic, queue_id=qid, key=key.hex())
                    continue
                v = np.frombuffer(val, OFFSET_VALUE_DTYPE)[0]
                table[(topic, qid, bound.decode(errors="replace"))] = (int(v["commit_log_offset"]), int(v["cq_offset"]))
            it.status()
        except Exception as e:
            self.problems.append(_problem_from_error(self.path, self.mirror, e, ROCKSDB_CORRUPTION))
        return table, checkpoint


@dataclass
class RocksQueue(UnitChunks):
    """One topic/queue of a RocksDB ConsumeQueue, read like a ConsumeQueue directory."""

    db: RocksDBConsumeQueues
    topic: str
    queue_id: int
    files: list[RocksChunk] = field(default_factory=list, repr=False)
    problems: list[Problem] = field(default_factory=list, repr=False)
    file_size: int | None = None
    kind: str = "rocksdb"

    @property
    def path(self) -> str:
        return self.db.path

    def _extra(self, index: int | None, key: bytes | None = None) -> dict:
        d = {"topic": self.topic, "queue_id": self.queue_id, "cq_file": self.db.path, "unit_index": index}
        if key is not None:
            d["key"] = key.hex()
        return d

    def read_range(self, start: int | None = None, limit: int | None = None, *, stop: int | None = None) -> tuple[QueueUnits, np.ndarray, list[Problem]]:
        """Units from queue offset `start` (at most `limit`, below queue offset `stop`): columns, store times, damage found on the way."""
        prefix = self.db.prefix(self.topic, self.queue_id)
        idx: list[int] = []
        vals = bytearray()
        probs: list[Problem] = []
        first = prefix + (max(start, 0) if start is not None else 0).to_bytes(8, "big")
        try:
            it = self.db._iter(self.db.units_cf, first)
            while it.valid() and (limit is None or len(idx) < limit):
                key = it.key()
                if not key.startswith(prefix):
                    break
                val = it.value()
                k = self.db.parse_key(key)
                if stop is not None and k is not None and k[2] >= stop:
                    break
                if k is None:
                    probs.append(Problem(RCQ_BAD_KEY, self.db.path, None, f"key {key[:64].hex()} is not laid out as a unit key", extra=self._extra(None, key)))
                elif len(val) != VALUE_SIZE:
                    probs.append(
                        Problem(RCQ_BAD_VALUE, self.db.path, None, f"value of unit {k[2]} is {len(val)} bytes, not {VALUE_SIZE}", extra=self._extra(k[2], key))
                    )
                else:
                    idx.append(k[2])
                    vals += val
                it.next()
            it.status()
        except Exception as e:
            probs.append(_problem_from_error(self.db.path, self.db.mirror, e, ROCKSDB_CORRUPTION, self._extra(idx[-1] + 1 if idx else start)))
        arr = np.frombuffer(bytes(vals), dtype=VALUE_DTYPE)
        u = QueueUnits(
            np.array(idx, dtype=np.int64), arr["commit_log_offset"].astype(np.int64), arr["size"].astype(np.int32), arr["tags_code"].astype(np.int64)
        )
        return u, arr["store_time"].astype(np.int64), probs

    def scan_layout(self) -> None:
        """Cut the queue into chunks (at most CHUNK_UNITS offsets, split at gaps over MAX_GAP), one pass over its keys."""
        self.files = []
        start = None
        while True:
            u, _, probs = self.read_range(start, CHUNK_UNITS)
            self.problems.extend(probs)
            if not len(u):
                break
            idx = u.index
            cuts = np.flatnonzero(np.diff(idx) > MAX_GAP) + 1
            for a, b in zip(np.r_[0, cuts], np.r_[cuts, len(idx)], strict=True):
                self.files.append(RocksChunk(self, int(idx[a]), int(idx[b - 1]) - int(idx[a]) + 1))
            if len(u) < CHUNK_UNITS or probs:
                break
            start = int(idx[-1]) + 1

    def probe(self) -> None:
        """Point lookups of the first and last unit, as the broker's reads do: they load the blocks an
        iteration skips (the bloom filter), so their checksums are checked too; damage goes to `problems`."""
        if not self.files:
            return
        last = self.files[-1].first_index + self.files[-1].count - 1
        for index in (self.files[0].first_index, last):
            key = self.db.prefix(self.topic, self.queue_id) + index.to_bytes(8, "big", signed=True)
            try:
                val = self.db.units_cf.get(key)
            except Exception as e:
                self.problems.append(_problem_from_error(self.db.path, self.db.mirror, e, ROCKSDB_CORRUPTION, self._extra(index, key)))
                continue
            if val is None:
                self.problems.append(
                    Problem(
                        ROCKSDB_CORRUPTION, self.db.path, None, f"unit {index} is found by iteration but not by a point lookup", extra=self._extra(index, key)
                    )
                )

    def read_file(self, f: RocksChunk) -> QueueUnits:
        return QueueUnits.from_array(f.read_array(), f.first_index)

    def bounds(self) -> tuple[int, int]:
        if not self.files:
            return 0, 0
        return self.files[0].first_index, self.files[-1].first_index + self.files[-1].count

    def unit_at(self, index: int) -> tuple[int, int, int] | None:
        key = self.db.prefix(self.topic, self.queue_id) + index.to_bytes(8, "big", signed=True)
        try:
            val = self.db.units_cf.get(key)
        except Exception:
            return None
        if val is None or len(val) != VALUE_SIZE:
            return None
        v = np.frombuffer(val, VALUE_DTYPE)[0]
        return int(v["commit_log_offset"]), int(v["size"]), int(v["tags_code"])

    def file_for_index(self, index: int) -> RocksChunk | None:
        for f in self.files:
            if f.first_index <= index < f.first_index + f.count:
                return f
        return None

    def expected_path(self, index: int) -> str:
        return self.db.path

    def locate(self, index: int) -> tuple[str, int | None]:
        """Where a unit lives for a problem line: the database (the key names the unit: topic, queue, offset)."""
        return self.db.path, None

    def dump_rows(self, *, start: int | None = None, limit: int | None = None):
        """Units as `cq dump` rows, with the store time RocksDB keeps per unit."""
        n = 0
        pos = start
        while limit is None or n < limit:
            want = CHUNK_UNITS if limit is None else min(CHUNK_UNITS, limit - n)
            u, times, _ = self.read_range(pos, want)
            if not len(u):
                return
            valid = u.valid_mask()
            for k in range(len(u)):
                row = unit_row(self, int(u.index[k]), self.db.path, None, u.offset[k], u.size[k], u.tags_code[k])
                yield {**row, "store_time": int(times[k]), "filler": False, "valid": bool(valid[k])}
                n += 1
            if len(u) < want:
                return
            pos = int(u.index[-1]) + 1


def open_queues(db_dir: str) -> tuple[RocksDBConsumeQueues, dict[tuple[str, int], RocksQueue], list[Problem]]:
    """The database and its queues; problems: damaged keys/values and `offset` bounds that disagree with the units."""
    db = RocksDBConsumeQueues(db_dir)
    queues: dict[tuple[str, int], RocksQueue] = {}
    for topic, qid in db.find_queues():
        q = RocksQueue(db, topic, qid)
        q.scan_layout()
        q.probe()
        queues[(topic, qid)] = q
    table, _ = db.offset_table()
    probs = list(db.problems)
    for (topic, qid), q in sorted(queues.items()):
        probs.extend(q.problems)
        lo, hi = q.bounds()
        for bound, want in (("min", lo), ("max", hi - 1)):
            got = table.get((topic, qid, bound))
            if got is None:
                continue
            if got[1] != want:
                probs.append(
                    Problem(
                        RCQ_OFFSET_MISMATCH,
                        db_dir,
                        None,
                        f"`offset` family says {bound} cqOffset {got[1]} for {topic}/{qid}, the units {'start' if bound == 'min' else 'end'} at {want}",
                        extra={"topic": topic, "queue_id": qid, "cq_file": db_dir, "unit_index": want},
                    )
                )
    return db, queues, probs
