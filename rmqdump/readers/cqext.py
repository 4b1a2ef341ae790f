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
from rmqdump.readers.consumequeue import common_file_size, queue_dirs, queue_files
from rmqdump.readers.fastpath import gather, numpy_dtype
from rmqdump.readers.mapped import MappedFile, OffsetFile, open_binary
from rmqdump.schemas import ConsumeQueueExtHeader
from rmqdump.schemas import constants as C

EXT_DIR = "consumequeue_ext"
EXT_HEADER = numpy_dtype(ConsumeQueueExtHeader)
EXT_HEADER_SIZE = EXT_HEADER.itemsize  # == C.EXT_MIN_UNIT_SIZE

# stable codes
CQ_EXT_BAD_UNIT = "cq_ext_bad_unit"  # a unit in an ext file that the broker could not read back
CQ_EXT_BAD_ADDRESS = "cq_ext_bad_address"  # a ConsumeQueue unit's ext address that does not land on a unit


def is_ext_address(tags_code: np.ndarray) -> np.ndarray:
    return tags_code <= C.EXT_ADDRESS_MAX


class ExtFile(OffsetFile):
    """One ConsumeQueue ext file."""


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
        files, _ = queue_files(path, ExtFile, lambda p: {})  # the ext files only follow their ConsumeQueue: nothing to report
        if file_size is None:
            file_size = common_file_size([f.size for f in files])
        return cls(topic, queue_id, path, files, file_size)

    def _problem(self, code: str, f: ExtFile, pos: int | None, detail: str) -> Problem:
        return Problem(
            code, f.path, pos, detail, extra={"topic": self.topic, "queue_id": self.queue_id, "cq_file": None, "unit_index": None, "ext_file": f.path}
        )

    def units(self) -> ExtUnits:
        """Walk every file as recover() does (size > 0: a unit; -1: the file's end; 0: the data's end).

        Runs of units of one size (the usual case: one bitmap length) are taken
        a run at a time with numpy; a unit that breaks the run is read alone.
        Damage that leaves no way on stops that file's walk and is recorded.
        """
        if self._units is not None:
            return self._units
        parts: list[tuple[int, np.ndarray, np.ndarray]] = []  # (file index, positions, headers)
        for fi, f in enumerate(self.files):
            with MappedFile(f.path) as mf:
                for pos, hdr in self._walk(f, mf):
                    parts.append((fi, pos, hdr))
        if parts:
            pos = np.concatenate([p for _, p, _ in parts])
            hdr = np.concatenate([h for _, _, h in parts])
            fidx = np.concatenate([np.full(len(p), fi, dtype=np.int32) for fi, p, _ in parts])
        else:
            pos, hdr, fidx = np.zeros(0, np.int64), np.zeros(0, EXT_HEADER), np.zeros(0, np.int32)
        bases = np.array([f.base for f in self.files], dtype=np.int64)
        self._units = ExtUnits(
            C.EXT_ADDRESS_BASE + (bases[fidx] if len(fidx) else np.zeros(0, np.int64)) + pos,
            fidx,
            pos,
            hdr["size"].astype(np.int32),
            hdr["tags_code"].astype(np.int64),
            hdr["msg_store_time"].astype(np.int64),
            hdr["bitmap_size"].astype(np.int32),
        )
        return self._units

    def _walk(self, f: ExtFile, mf: MappedFile):
        """(positions, headers) runs of one file's units, in order."""
        data, limit = mf.data, f.size
        end_room = limit - C.EXT_END_BLANK
        p = 0
        while p + 2 <= limit:
            size = int.from_bytes(mf.view[p : p + 2], "big", signed=True)
            if size == 0 and not data[p:limit].any():
                return
            if size == C.EXT_FILE_END and not data[p + 2 : limit].any():
                return
            if size < C.EXT_MIN_UNIT_SIZE or p + size > end_room or p + EXT_HEADER_SIZE > limit:
                self.problems.append(
                    self._problem(
                        CQ_EXT_BAD_UNIT,
                        f,
                        p,
                        f"ext unit size {size} at byte {p}: not a unit of at least {C.EXT_MIN_UNIT_SIZE} bytes ending before the file's last "
                        f"{C.EXT_END_BLANK}; rest of the file not read",
                    )
                )
                return
            # a run of units of this size, each with a matching bitmap size
            cand = p + np.arange((end_room - p) // size, dtype=np.int64) * size
            hdr = gather(data, cand, EXT_HEADER)
            ok = (hdr["size"] == size) & (hdr["bitmap_size"] == size - C.EXT_MIN_UNIT_SIZE)
            k = len(ok) if ok.all() else int(np.argmin(ok))
            if k:
                yield cand[:k], hdr[:k]
                p += k * size
                continue
            # one unit whose size and bitmap size disagree
            h = hdr[:1]
            bms = int(h["bitmap_size"][0])
            self.problems.append(
                self._problem(CQ_EXT_BAD_UNIT, f, p, f"ext unit size {size} does not match its bitmap size {bms} (size = {C.EXT_MIN_UNIT_SIZE} + bitmap)")
            )
            yield cand[:1], h
            # go on with whichever length leads to a well-formed next unit (one flipped byte is not the end of the file)
            alt = C.EXT_MIN_UNIT_SIZE + bms
            step = alt if bms >= 0 and not _plausible_next(mf, p + size, limit) and _plausible_next(mf, p + alt, limit) else size
            p += step

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
        """The filter bitmap of unit k of units() (none when bitMapSize < 1, as CqExtUnit.read has it: a damaged size may be negative)."""
        u = self.units()
        f = self.files[int(u.file_index[k])]
        p = int(u.pos[k]) + EXT_HEADER_SIZE
        with open_binary(f.path) as fh:
            fh.seek(p)
            return fh.read(max(0, int(u.bitmap_size[k])))


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
    """Every consumequeue_ext/TOPIC/QUEUE_ID under a store root (directories not named by a queue id are skipped)."""
    dirs, _ = queue_dirs(os.path.join(root, EXT_DIR))
    return {(topic, qid): ConsumeQueueExt.open(qdir, topic, qid) for topic, qid, qdir in dirs}
