"""A broker store root, opened read-only: what is there, and what we cannot decode.

Everything else in rmqdump works on one part (a CommitLog, one queue, one
index file); the Store finds the parts under a root the way the broker's
StorePathConfigHelper lays them out, and names the variants rmqdump does not
decode (RocksDB ConsumeQueues; the timer files are read by
readers/timerlog.py) so nothing is misread as the plain format. Batch
ConsumeQueues and ConsumeQueue ext files are found here too (readers.batchcq,
readers.cqext). A DLedger CommitLog (`dledger-<id>/data/`) is read as the
CommitLog, with its own state in `dledger` (readers.dledger).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from rmqdump.common.problems import InputError, Problem
from rmqdump.readers.batchcq import BatchConsumeQueue, find_batch_queues
from rmqdump.readers.checkpoint import Checkpoint, read_checkpoint
from rmqdump.readers.commitlog import CommitLog, commitlog_dir, frame_of
from rmqdump.readers.configfiles import config_files
from rmqdump.readers.consumequeue import CONSUMEQUEUE_DIR, ConsumeQueue, queue_dirs, usual_size
from rmqdump.readers.cqext import ConsumeQueueExt, find_ext_queues
from rmqdump.readers.dledger import DLedgerDir
from rmqdump.readers.indexfile import HEADER_SIZE as INDEX_HEADER_SIZE
from rmqdump.readers.indexfile import NAME_RE as INDEX_NAME_RE
from rmqdump.readers.indexfile import parse_header, size_problems
from rmqdump.readers.mapped import open_binary
from rmqdump.readers.rocksdbcq import RocksDBConsumeQueues, is_rocksdb, open_queues
from rmqdump.schemas import constants as C

COMMITLOG_DIR = "commitlog"
INDEX_DIR = "index"
# Written by 5.x brokers only (4.9.x has none of them): timer store, batch queues, compaction, the clean-shutdown
# abort.bak, the timer's config files.
FIVE_X_FILES = ("abort.bak", "timerwheel", "timerlog", "batchconsumequeue", "compaction", "config/timercheck", "config/timermetrics")
FIVE_X_TOPIC_FIELDS = (b"stateVersion", b"attributes")  # TopicConfig attributes and DataVersion.stateVersion: 5.0 on

# Store layout problems (stable codes).
INDEX_SHORT = "index_file_short"
NO_COMMITLOG = "no_commitlog"
KNOWN_ENTRIES = {COMMITLOG_DIR, CONSUMEQUEUE_DIR, INDEX_DIR, "checkpoint", "abort", "lock", "config"}
# What each part of a store root must be where it exists: anything else there is the input error `unreadable`, never
# taken for a part that is absent.
DIRECTORIES = (COMMITLOG_DIR, CONSUMEQUEUE_DIR, INDEX_DIR, "config")
FILES = ("checkpoint",)


def _of_kind(root: str, entries: list[str]) -> None:
    for name in DIRECTORIES:
        p = os.path.join(root, name)
        if name in entries and not os.path.isdir(p):
            raise InputError("unreadable", p, "not a directory", 0)
    for name in FILES:
        p = os.path.join(root, name)
        if name in entries and not os.path.isfile(p):
            raise InputError("unreadable", p, "not a regular file", 0)


@dataclass(frozen=True)
class IndexFileInfo:
    """One index/ file and its 40-byte header (None when the file is shorter than that)."""

    path: str
    size: int
    header: dict | None

    @property
    def name(self) -> str:
        return os.path.basename(self.path)

    def to_dict(self) -> dict:
        return {"file": self.name, "path": self.path, "size": self.size, **(self.header or {})}


@dataclass(frozen=True)
class Unsupported:
    """A part of the store rmqdump recognises but does not decode."""

    kind: str  # batch_consumequeue, consumequeue_ext, rocksdb, timer, dledger, commitlog
    path: str
    detail: str

    def to_dict(self) -> dict:
        return {"kind": "unsupported", "what": self.kind, "path": self.path, "detail": self.detail}


def read_index_header(path: str) -> IndexFileInfo:
    with open_binary(path) as f:
        size = os.fstat(f.fileno()).st_size
        if size < INDEX_HEADER_SIZE:
            return IndexFileInfo(path, size, None)
        raw = f.read(INDEX_HEADER_SIZE)
    return IndexFileInfo(path, size, parse_header(raw).to_dict())


@dataclass
class Store:
    root: str
    commitlog: CommitLog
    queues: dict[tuple[str, int], ConsumeQueue]
    cq_file_size: int | None
    index_files: list[IndexFileInfo]
    checkpoint_path: str | None
    abort: bool
    lock: bool
    configs: list[str]
    other_files: list[str]
    unsupported: list[Unsupported] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    rocksdb_cq: RocksDBConsumeQueues | None = None  # the RocksDB ConsumeQueue, when consumequeue/ is one
    batch_queues: dict[tuple[str, int], BatchConsumeQueue] = field(default_factory=dict)  # batchconsumequeue/
    ext_queues: dict[tuple[str, int], ConsumeQueueExt] = field(default_factory=dict)  # consumequeue_ext/
    dledger: DLedgerDir | None = None  # when the CommitLog is a DLedger one (its files are dledger-<id>/data/)
    # the broker release that will restart this store, as the operator says (--broker-version); None: inferred from
    # what the store shows (checks.recovery.store_rules)
    broker_version: tuple[int, ...] | None = None

    @classmethod
    def open(cls, root: str | os.PathLike, broker_version: tuple[int, ...] | None = None) -> Store:
        """Discover a store root; InputError when it is not a directory or holds no store at all."""
        root = str(root)
        if not os.path.exists(root):
            raise InputError("not_found", root, "no such directory")
        if not os.path.isdir(root):
            raise InputError("not_a_store", root, "not a directory (give the store root, which holds commitlog/ and consumequeue/)")
        try:
            entries = sorted(os.listdir(root))
        except OSError as e:
            raise InputError("unreadable", root, e.strerror or str(e)) from None
        if not KNOWN_ENTRIES & set(entries) and commitlog_dir(root) is None:  # a DLedger CommitLog alone is a store too
            hint = " (this looks like a commitlog/ directory: give its parent)" if any(e.isdigit() and len(e) == 20 for e in entries) else ""
            raise InputError("not_a_store", root, f"no commitlog/, consumequeue/, index/ or checkpoint here{hint}")
        _of_kind(root, entries)
        try:
            return cls._discover(root, entries, broker_version)
        except OSError as e:  # a directory of the store that cannot be listed: no part of it is passed over
            raise InputError("unreadable", e.filename or root, e.strerror or str(e), 0) from None

    @classmethod
    def _discover(cls, root: str, entries: list[str], broker_version: tuple[int, ...] | None) -> Store:
        cl_dir = commitlog_dir(root)  # commitlog/, or a DLedger CommitLog's dledger-<id>/data/
        cl = CommitLog.open(cl_dir) if cl_dir else CommitLog([], [], None)
        st = cls(
            root=root,
            commitlog=cl,
            queues={},
            cq_file_size=None,
            index_files=[],
            checkpoint_path=os.path.join(root, "checkpoint") if "checkpoint" in entries else None,
            abort=os.path.exists(os.path.join(root, "abort")),
            lock=os.path.exists(os.path.join(root, "lock")),
            configs=[p for p in config_files(root) if os.path.basename(p) != "timercheck"],  # binary: readers/timerlog.py
            other_files=[],
            broker_version=broker_version,
        )
        st.problems.extend(cl.problems)
        if cl_dir is None:
            st.problems.append(Problem(NO_COMMITLOG, os.path.join(root, COMMITLOG_DIR), None, "no commitlog/ directory: no message of the store can be read"))
        if cl_dir and frame_of(os.path.join(cl_dir, "0")):
            st.dledger = DLedgerDir.open(os.path.dirname(cl_dir))
            st.problems.extend(st.dledger.problems)
        st._find_queues()
        st._find_batch_and_ext_queues()
        st._find_index()
        st._find_unsupported(entries)
        st.other_files = [os.path.join(root, e) for e in entries if e not in KNOWN_ENTRIES and os.path.isfile(os.path.join(root, e))]
        return st

    # discovery -----------------------------------------------------------------------------

    def _find_queues(self) -> None:
        cq_root = os.path.join(self.root, CONSUMEQUEUE_DIR)
        if not os.path.isdir(cq_root):
            return
        if is_rocksdb(cq_root):  # 5.3 storeType=defaultRocksDB: the queues are in a RocksDB database
            self.rocksdb_cq, queues, probs = open_queues(cq_root)
            self.queues.update(queues)
            self.problems.extend(probs)
            return
        dirs, probs = queue_dirs(cq_root)
        self.problems.extend(probs)
        sizes = []
        for _, _, qdir in dirs:
            names = sorted(os.listdir(qdir))
            sizes.extend(os.path.getsize(os.path.join(qdir, n)) for n in names[:-1] if os.path.isfile(os.path.join(qdir, n)))
        if not sizes:  # every queue has one file: take the size most of them have
            for _, _, qdir in dirs:
                sizes.extend(os.path.getsize(os.path.join(qdir, n)) for n in os.listdir(qdir) if os.path.isfile(os.path.join(qdir, n)))
        self.cq_file_size = usual_size(sizes)
        for topic, qid, qdir in dirs:
            q = ConsumeQueue.open(qdir, topic, qid, self.cq_file_size)
            self.queues[(topic, qid)] = q
            self.problems.extend(q.problems)

    def _find_batch_and_ext_queues(self) -> None:
        """5.x queue kinds kept in their own directories: Batch ConsumeQueues and ConsumeQueue ext files."""
        bqs, probs = find_batch_queues(self.root)
        self.batch_queues = {(q.topic, q.queue_id): q for q in bqs}
        self.problems.extend(probs)
        self.ext_queues = find_ext_queues(self.root)

    def _find_index(self) -> None:
        d = os.path.join(self.root, INDEX_DIR)
        if not os.path.isdir(d):
            return
        for n in sorted(os.listdir(d)):  # the broker loads them in name order
            p = os.path.join(d, n)
            if not os.path.isfile(p) and not INDEX_NAME_RE.match(n):
                continue
            info = read_index_header(p)  # an index file that cannot be read (or is no file): the input error unreadable
            if info.header is None:
                self.problems.append(Problem(INDEX_SHORT, p, info.size, f"{info.size} bytes: shorter than the 40-byte index header"))
            else:
                self.problems.extend(size_problems(p, info.size, info.header["index_count"], info.header["hash_slot_count"]))
            self.index_files.append(info)

    def _find_unsupported(self, entries: list[str]) -> None:
        def add(kind: str, path: str, detail: str) -> None:
            self.unsupported.append(Unsupported(kind, path, detail))

        root = self.root
        used = self.dledger.path if self.dledger else None  # the DLedger directory read as the CommitLog
        cl_dir = os.path.join(root, COMMITLOG_DIR)
        for parent in (root, cl_dir):
            if not os.path.isdir(parent):
                continue
            for e in sorted(os.listdir(parent)):
                p = os.path.join(parent, e)
                if e.startswith("dledger") and os.path.isdir(p) and p != used:
                    add("dledger", p, "another DLedger directory: not read (the CommitLog is " + (used or cl_dir) + ")")
        if used and os.path.isdir(cl_dir) and any(n.isdigit() and os.path.isfile(os.path.join(cl_dir, n)) for n in os.listdir(cl_dir)):
            add("commitlog", cl_dir, "CommitLog files from before the switch to DLedger: not read (the CommitLog is " + used + ")")
        for e in entries:
            p = os.path.join(root, e)
            if not os.path.isdir(p):
                continue
            for d in [p, *[os.path.join(p, s) for s in sorted(os.listdir(p)) if os.path.isdir(os.path.join(p, s))][:50]]:
                if is_rocksdb(d) and not (self.rocksdb_cq is not None and d == self.rocksdb_cq.path):
                    add("rocksdb", d, "RocksDB store (5.2+ RocksDB ConsumeQueue or config): not decoded")

    # helpers -------------------------------------------------------------------------------

    def checkpoint(self) -> Checkpoint | None:
        """The checkpoint, or None when it is missing or too short to read (recorded in `problems` once)."""
        if not self.checkpoint_path:
            return None
        try:
            return read_checkpoint(self.checkpoint_path)
        except InputError as e:
            p = Problem(e.code, e.path, e.offset, e.detail + " (the broker would read zeros: recovery scans from the first file)")
            if p not in self.problems:
                self.problems.append(p)
            return None

    def queue(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self.queues.get((topic, queue_id))

    def select_queues(self, topic: str | None = None, queue_id: int | None = None) -> list[ConsumeQueue]:
        return [q for (t, i), q in sorted(self.queues.items()) if (topic is None or t == topic) and (queue_id is None or i == queue_id)]

    def queue_kinds_5x(self) -> list[str]:
        """The 5.x queue kinds present: 'batch' (batchconsumequeue/), 'ext' (consumequeue_ext/), 'lmq' (%LMQ% queues)."""
        out = []
        if self.batch_queues or os.path.isdir(os.path.join(self.root, "batchconsumequeue")):
            out.append("batch")
        if self.ext_queues or os.path.isdir(os.path.join(self.root, "consumequeue_ext")):
            out.append("ext")
        if any(t.startswith("%LMQ%") for t, _ in self.queues):
            out.append("lmq")
        return out

    def marks_of_5x(self) -> list[str]:
        """What in the store only a 5.x broker writes (files, directories, config fields, a V2 record at a file's
        head), named for the output: the recovery preview infers the broker release from it when none is given."""
        root = self.root
        found = [name for name in FIVE_X_FILES if os.path.exists(os.path.join(root, name))]
        if self.rocksdb_cq is not None:
            found.append("RocksDB consumequeue/")
        try:
            with open(os.path.join(root, "config", "topics.json"), "rb") as f:  # a config file: damage is configfiles' to name
                head = f.read(1 << 16)
            found += [f"config/topics.json {k.decode()}" for k in FIVE_X_TOPIC_FIELDS if b'"' + k + b'"' in head]
        except OSError:
            pass
        if self.dledger is None:
            for seg in self.commitlog.files:
                with open_binary(seg.path) as f:
                    head = f.read(8)
                if len(head) == 8 and int.from_bytes(head[4:], "big") == C.MAGIC_V2:
                    found.append(f"V2 record at {seg.base}")
                    break
        return found

    def select_batch_queues(self, topic: str | None = None, queue_id: int | None = None) -> list[BatchConsumeQueue]:
        return [q for (t, i), q in sorted(self.batch_queues.items()) if (topic is None or t == topic) and (queue_id is None or i == queue_id)]

    def rel(self, path: str) -> str:
        try:
            return os.path.relpath(path, self.root)
        except ValueError:
            return path
