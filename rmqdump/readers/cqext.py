"""ConsumeQueue ext files (`consumequeue_ext/TOPIC/QUEUE_ID/`): units a ConsumeQueue unit points at.

With enableConsumeQueueExt the broker writes, per message, an ext unit
(schemas.ConsumeQueueExtUnit: size, tagsCode, msgStoreTime, bitMapSize, the
consumer-filter bitmap) and stores its address in the ConsumeQueue unit's
tagsCode: Long.MIN_VALUE + the unit's byte offset in the ext queue, so every
address is <= Integer.MIN_VALUE - 1. Units follow each other; where the next
one would not fit before the file's last 4 bytes the broker writes a short -1
and goes on in the next file. Files are named by their byte offset.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from rmqdump.common.problems import Problem
from rmqdump.readers.consumequeue import NAME_RE, common_file_size
from rmqdump.readers.fastpath import numpy_dtype
from rmqdump.readers.mapped import MappedFile
from schemas import ConsumeQueueExtHeader
from schemas import constants as C

EXT_DIR = "consumequeue_ext"
EXT_HEADER = numpy_dtype(ConsumeQueueExtHeader)
EXT_HEADER_SIZE = EXT_HEADER.itemsize  # == C.EXT_MIN_UNIT_SIZE

# stable codes
CQ_EXT_BAD_UNIT = "cq_ext_bad_unit"  # a unit in an ext file that the broker could not read back
CQ_EXT_BAD_ADDRESS = "cq_ext_bad_address"  # a ConsumeQueue unit's ext address that does not land on a unit


def is_ext_address(tags_code: np.ndarray) -> np.ndarray:
    return tags_code <= C.EXT_ADDRESS_MAX


@dataclass(frozen=True)
class ExtFile:
    path: str
    base: int
    size: int


@dataclass
class ExtUnits:
    """Every unit found by walking the files from their start, as columns (address = Long.MIN_VALUE + byte offset)."""

    address: np.ndarray  # int64
    file_index: np.ndarray  # int32 into ConsumeQueueExt.files
    pos: np.ndarray  # int64 offset in its file
    size: np.ndarray  # int32
    tags_code: np.ndarray  # int64
    store_time: np.ndarray  # int64
    bitmap_size: np.ndarray  # int32

    def __len__(self) -> int:
        return len(self.address)


@dataclass
class ConsumeQueueExt:
    """One consumequeue_ext/TOPIC/QUEUE_ID directory."""

    topic: str
    queue_id: int
    path: str
    files: list[ExtFile]
    file_size: int | None
    problems: list[Problem] = field(default_factory=list)
    _units: ExtUnits | None = None

    @classmethod
    def open(cls, path: str, topic: str, queue_id: int, file_size: int | None = None) -> ConsumeQueueExt:
        files = []
        for n in sorted(os.listdir(path)):
            full = os.path.join(path, n)
            if NAME_RE.match(n) and os.path.isfile(full):
                files.append(ExtFile(full, int(n), os.path.getsize(full)))
        files.sort(key=lambda f: f.base)
        if file_size is None:
            file_size = common_file_size([f.size for f in files])
        return cls(topic, queue_id, path, files, file_size)

    def _problem(self, code: str, f: ExtFile, pos: int | None, detail: str) -> Problem:
        return Problem(
            code, f.path, pos, detail, extra={"topic": self.topic, "queue_id": self.queue_id, "cq_file": None, "unit_index": None, "ext_file": f.path}
        )

    def units(self) -> ExtUnits:
        """Walk every file as recover() does (size > 0: a unit; -1: the file's end; 0: the data's end); damage stops a file's walk and is recorded."""
        if self._units is not None:
            return self._units
        cols: dict[str, list[int]] = {k: [] for k in ("address", "file_index", "pos", "size", "tags_code", "store_time", "bitmap_size")}
        for fi, f in enumerate(self.files):
            with MappedFile(f.path) as mf:
                raw = mf.view
                limit = f.size
                p = 0
                while p + 2 <= limit:
                    size = int.from_bytes(raw[p : p + 2], "big", signed=True)
                    if size == 0 and not mf.data[p:limit].any():
                        break
                    if size == C.EXT_FILE_END and not mf.data[p + 2 : limit].any():
                        break
                    if size < C.EXT_MIN_UNIT_SIZE or p + size > limit - C.EXT_END_BLANK or p + EXT_HEADER_SIZE > limit:
                        self.problems.append(
                            self._problem(
                                CQ_EXT_BAD_UNIT,
                                f,
                                p,
                                f"ext unit size {size} at byte {p}: not a unit of at least {C.EXT_MIN_UNIT_SIZE} bytes ending before the file's last {C.EXT_END_BLANK}; rest of the file not read",
                            )
                        )
                        break
                    h = np.frombuffer(bytes(raw[p : p + EXT_HEADER_SIZE]), dtype=EXT_HEADER)[0]
                    bms = int(h["bitmap_size"])
                    step = size
                    if bms < 0 or size != C.EXT_MIN_UNIT_SIZE + bms:
                        self.problems.append(
                            self._problem(
                                CQ_EXT_BAD_UNIT, f, p, f"ext unit size {size} does not match its bitmap size {bms} (size = {C.EXT_MIN_UNIT_SIZE} + bitmap)"
                            )
                        )
                        # go on with whichever length leads to a well-formed next unit (one flipped byte is not the end of the file)
                        alt = C.EXT_MIN_UNIT_SIZE + bms
                        if bms >= 0 and not _plausible_next(mf, p + size, limit) and _plausible_next(mf, p + alt, limit):
                            step = alt
                    for k, v in (
                        ("address", C.EXT_ADDRESS_BASE + f.base + p),
                        ("file_index", fi),
                        ("pos", p),
                        ("size", size),
                        ("tags_code", int(h["tags_code"])),
                        ("store_time", int(h["msg_store_time"])),
                        ("bitmap_size", bms),
                    ):
                        cols[k].append(v)
                    p += step
        self._units = ExtUnits(
            np.array(cols["address"], dtype=np.int64),
            np.array(cols["file_index"], dtype=np.int32),
            np.array(cols["pos"], dtype=np.int64),
            np.array(cols["size"], dtype=np.int32),
            np.array(cols["tags_code"], dtype=np.int64),
            np.array(cols["store_time"], dtype=np.int64),
            np.array(cols["bitmap_size"], dtype=np.int32),
        )
        return self._units

    def lookup(self, addresses: np.ndarray) -> np.ndarray:
        """Index into units() of the unit at each address, -1 where no unit starts there."""
        u = self.units()
        i = np.searchsorted(u.address, addresses)
        ic = np.clip(i, 0, max(len(u) - 1, 0))
        hit = (i < len(u)) & (u.address[ic] == addresses) if len(u) else np.zeros(len(addresses), dtype=bool)
        return np.where(hit, ic, -1)

    def locate(self, address: int) -> tuple[str, int | None]:
        """(file, byte offset) an address names, whether or not a unit is there."""
        real = address - C.EXT_ADDRESS_BASE
        for f in self.files:
            if f.base <= real < f.base + f.size:
                return f.path, real - f.base
        fs = self.file_size or C.DEFAULT_EXT_FILE_SIZE
        return os.path.join(self.path, f"{real // fs * fs:020d}"), real % fs

    def bitmap(self, k: int) -> bytes:
        """The filter bitmap of unit k of units()."""
        u = self.units()
        f = self.files[int(u.file_index[k])]
        p = int(u.pos[k]) + EXT_HEADER_SIZE
        with open(f.path, "rb") as fh:
            fh.seek(p)
            return fh.read(int(u.bitmap_size[k]))


def _plausible_next(mf: MappedFile, p: int, limit: int) -> bool:
    """Does a unit (or the data's end, or the file-end mark) start at p?"""
    if p + 2 > limit or p + C.EXT_END_BLANK > limit:
        return p <= limit
    size = int.from_bytes(mf.view[p : p + 2], "big", signed=True)
    if size in (0, C.EXT_FILE_END):
        return not mf.data[p + 2 : limit].any()
    if size < C.EXT_MIN_UNIT_SIZE or p + size > limit - C.EXT_END_BLANK:
        return False
    bms = int.from_bytes(mf.view[p + EXT_HEADER_SIZE - 2 : p + EXT_HEADER_SIZE], "big", signed=True)
    return size == C.EXT_MIN_UNIT_SIZE + bms


def find_ext_queues(root: str) -> dict[tuple[str, int], ConsumeQueueExt]:
    base = os.path.join(root, EXT_DIR)
    out: dict[tuple[str, int], ConsumeQueueExt] = {}
    if not os.path.isdir(base):
        return out
    for topic in sorted(os.listdir(base)):
        tdir = os.path.join(base, topic)
        if not os.path.isdir(tdir):
            continue
        for q in sorted(os.listdir(tdir)):
            qdir = os.path.join(tdir, q)
            if os.path.isdir(qdir) and q.lstrip("-").isdigit():
                out[(topic, int(q))] = ConsumeQueueExt.open(qdir, topic, int(q))
    return out
