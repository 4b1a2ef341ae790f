"""The 5.x timer message store: timer log, timer wheel, timercheck.

Timer messages are written to topic rmq_sys_wheel_timer; the broker's
TimerMessageStore then appends a 52-byte unit per message to `timerlog/` and
links it into the wheel slot of its delivery second (`timerwheel`): a slot
holds the first and last unit of a backwards chain through prevPos. The
dequeue walks slots from `config/timercheck`'s lastReadTimeMs on, so a unit
whose delivery time is before it has fired. Units sit on a fixed 52-byte grid
inside each file, which keeps damage local: a bad unit is reported at its own
offset and the next unit is read where it always is.
"""

from __future__ import annotations

import functools
import itertools
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from rmqdump.common.problems import InputError, Problem
from rmqdump.readers.commitlog import Blank, CommitLog
from rmqdump.readers.fastpath import field_offset, numpy_dtype
from rmqdump.readers.message import Message
from schemas import constants as C
from schemas.timer import TimerCheck, TimerLogBlank, TimerLogUnit, TimerWheelSlot

TIMERLOG_DIR = "timerlog"
TIMERWHEEL_FILE = "timerwheel"
TIMERCHECK_FILE = os.path.join("config", "timercheck")
TIMERMETRICS_FILE = os.path.join("config", "timermetrics")

UNIT_DTYPE = numpy_dtype(TimerLogUnit)
UNIT_SIZE = UNIT_DTYPE.itemsize
BLANK_DTYPE = numpy_dtype(TimerLogBlank)
SLOT_DTYPE = numpy_dtype(TimerWheelSlot)
SLOT_SIZE = SLOT_DTYPE.itemsize
CHECK_DTYPE = numpy_dtype(TimerCheck)
CHECK_USED = CHECK_DTYPE.itemsize - CHECK_DTYPE["reserved"].itemsize
_MAGIC_AT = field_offset(TimerLogUnit, "magic")
_RESERVED_AT = field_offset(TimerLogUnit, "reserved")
PRECISIONS = (100, 200, 500, 1000)  # MessageStoreConfig.setTimerPrecisionMs rounds down to one of these
NAME_RE = re.compile(rf"^\d{{{C.COMMITLOG_NAME_DIGITS}}}$")
_VALID_MAGICS = {C.TIMER_MAGIC_DEFAULT | r | d for r in (0, C.TIMER_MAGIC_ROLL) for d in (0, C.TIMER_MAGIC_DELETE)}

# Stable problem codes: timer log
TIMERLOG_BAD_FILE_NAME = "timerlog_bad_file_name"
TIMERLOG_FILE_SIZE = "timerlog_file_size"
TIMERLOG_GAP = "timerlog_gap"
TIMERLOG_BAD_UNIT = "timerlog_bad_unit"  # size field is not 52 and the unit is no valid blank
TIMERLOG_BAD_MAGIC = "timerlog_bad_magic"
TIMERLOG_BAD_BLANK = "timerlog_bad_blank"
TIMERLOG_ZEROED_UNIT = "timerlog_zeroed_unit"
TIMERLOG_BAD_RESERVED = "timerlog_bad_reserved"
# timer wheel and timercheck
TIMERWHEEL_FILE_SIZE = "timerwheel_file_size"
TIMERCHECK_SHORT = "timercheck_short"
TIMERCHECK_RESERVED = "timercheck_bad_reserved"


@dataclass(frozen=True)
class TimerLogFile:
    path: str
    base: int
    size: int

    @property
    def name(self) -> str:
        return os.path.basename(self.path)


@dataclass
class TimerUnits:
    """Units of the timer log as native columns; `offset` is each unit's timer log offset."""

    offset: np.ndarray
    file_index: np.ndarray  # which TimerLog.files entry holds the unit
    prev_pos: np.ndarray
    magic: np.ndarray
    curr_write_time_ms: np.ndarray
    delayed_time_offset: np.ndarray
    offset_py: np.ndarray
    size_py: np.ndarray
    hash_code_of_real_topic: np.ndarray
    reserved: np.ndarray

    FIELDS = (
        "offset", "file_index", "prev_pos", "magic", "curr_write_time_ms", "delayed_time_offset", "offset_py", "size_py",
        "hash_code_of_real_topic", "reserved",
    )  # fmt: skip

    def __len__(self) -> int:
        return len(self.offset)

    @functools.cached_property
    def deliver_ms(self) -> np.ndarray:
        """currWriteTimeMs + delay: when the wheel fires the unit (computed once)."""
        return self.curr_write_time_ms + self.delayed_time_offset

    @classmethod
    def concat(cls, parts: list[TimerUnits]) -> TimerUnits:
        if not parts:
            return cls(*(np.zeros(0, np.int64) for _ in cls.FIELDS))
        return cls(*(np.concatenate([getattr(p, f) for p in parts]) for f in cls.FIELDS))

    def take(self, idx) -> TimerUnits:
        return TimerUnits(*(getattr(self, f)[idx] for f in self.FIELDS))


@dataclass
class TimerLog:
    """The files of timerlog/, in offset order, with their layout problems."""

    path: str
    files: list[TimerLogFile]
    file_size: int | None
    problems: list[Problem] = field(default_factory=list)

    @classmethod
    def open(cls, path: str) -> TimerLog:
        probs: list[Problem] = []
        found: list[TimerLogFile] = []
        try:
            names = sorted(os.listdir(path))
        except OSError as e:
            raise InputError("unreadable", path, e.strerror or str(e)) from None
        for n in names:
            full = os.path.join(path, n)
            if not os.path.isfile(full):
                continue
            if not NAME_RE.match(n):
                probs.append(Problem(TIMERLOG_BAD_FILE_NAME, full, None, "not a 20-digit offset name: ignored"))
                continue
            found.append(TimerLogFile(full, int(n), os.path.getsize(full)))
        found.sort(key=lambda f: f.base)
        steps = [b.base - a.base for a, b in itertools.pairwise(found) if b.base > a.base]
        pool = steps or [f.size for f in found]
        file_size = max(set(pool), key=lambda s: (pool.count(s), -s)) if pool else None
        for i, f in enumerate(found):
            if file_size and f.size != file_size:
                probs.append(Problem(TIMERLOG_FILE_SIZE, f.path, f.size, f"file is {f.size} bytes, the others {file_size}"))
            if i and file_size:
                expect = found[i - 1].base + file_size
                if f.base != expect:
                    probs.append(Problem(TIMERLOG_GAP, f.path, 0, f"starts at {f.base}, the previous file ends at {expect}"))
        return cls(path, found, file_size, probs)

    def file_for(self, offset: int) -> int | None:
        for i, f in enumerate(self.files):
            if f.base <= offset < f.base + f.size:
                return i
        return None

    def read(self) -> tuple[TimerUnits, list[Blank], list[Problem], int]:
        """Every unit, the end-of-file blanks, the damage found, and the end of the written data."""
        parts, blanks, probs, end = [], [], [], self.files[0].base if self.files else 0
        for i, f in enumerate(self.files):
            u, b, p, file_end = read_file(f, i)
            parts.append(u)
            blanks.extend(b)
            probs.extend(p)
            if file_end is not None:
                end = f.base + file_end
        return TimerUnits.concat(parts), blanks, probs, end


def read_file(f: TimerLogFile, index: int) -> tuple[TimerUnits, list[Blank], list[Problem], int | None]:
    """One timer log file on its 52-byte grid: (units, blank, problems, end of written data or None if empty)."""
    n = f.size // UNIT_SIZE
    probs: list[Problem] = []
    blanks: list[Blank] = []
    with open(f.path, "rb") as fh:  # a copy, not a map: the columns below are taken from it once
        buf = fh.read(n * UNIT_SIZE)
        tail = fh.read(f.size - n * UNIT_SIZE)
    arr = np.frombuffer(buf, dtype=UNIT_DTYPE, count=n) if n else np.zeros(0, UNIT_DTYPE)
    size = arr["size"].astype(np.int64)
    magic = arr["magic"].astype(np.int64)
    pos = np.arange(n, dtype=np.int64) * UNIT_SIZE
    raw = arr.view(np.uint8).reshape(n, UNIT_SIZE) if n else np.zeros((0, UNIT_SIZE), np.uint8)
    zero = ~raw.any(axis=1)
    is_blank = magic == C.TIMER_BLANK_MAGIC
    # the data ends at the first blank marker; past the last non-zero unit only zeros follow
    stop = n
    first_blank = np.flatnonzero(is_blank)
    if first_blank.size:
        k = int(first_blank[0])
        stop = k
        left = f.size - k * UNIT_SIZE
        bsize = int(size[k])
        bprev = int(arr["prev_pos"][k])
        if bsize != left or bprev != 0:
            probs.append(Problem(TIMERLOG_BAD_BLANK, f.path, k * UNIT_SIZE, f"blank marker says {bsize} bytes left (prevPos {bprev}), the file has {left}"))
        blanks.append(Blank(f.path, k * UNIT_SIZE, f.base + k * UNIT_SIZE, left, "blank"))
        if left >= UNIT_SIZE + C.TIMER_MIN_BLANK_LEN:
            probs.append(
                Problem(
                    TIMERLOG_BAD_BLANK, f.path, k * UNIT_SIZE, f"blank marker with {left} bytes left: the broker writes one only when a unit no longer fits"
                )
            )
    elif len(tail) >= C.TIMER_MIN_BLANK_LEN and np.frombuffer(tail[: BLANK_DTYPE.itemsize], dtype=BLANK_DTYPE)["magic"][0] == C.TIMER_BLANK_MAGIC:
        b = np.frombuffer(tail[: BLANK_DTYPE.itemsize], dtype=BLANK_DTYPE)[0]
        if int(b["size"]) != len(tail) or int(b["prev_pos"]) != 0:
            probs.append(Problem(TIMERLOG_BAD_BLANK, f.path, n * UNIT_SIZE, f"blank marker says {int(b['size'])} bytes left, the file has {len(tail)}"))
        blanks.append(Blank(f.path, n * UNIT_SIZE, f.base + n * UNIT_SIZE, len(tail), "blank"))
    elif any(tail):
        probs.append(Problem(TIMERLOG_BAD_BLANK, f.path, n * UNIT_SIZE, f"{len(tail)} bytes after the last whole unit are neither zeros nor a blank marker"))
    live = np.flatnonzero(~zero[:stop])
    if blanks:
        data_end: int | None = f.size
    else:
        data_end = int(live[-1] + 1) * UNIT_SIZE if live.size else None
    holes = np.flatnonzero(zero[: (int(live[-1]) if live.size else 0)])
    for k in holes.tolist():
        probs.append(Problem(TIMERLOG_ZEROED_UNIT, f.path, k * UNIT_SIZE, "52 zero bytes where a unit should be, with units after it", extra=_where(f, k)))
    keep = np.zeros(n, dtype=bool)
    keep[: live[-1] + 1 if live.size else 0] = True
    keep &= ~zero
    bad_size = keep & (size != UNIT_SIZE)
    for k in np.flatnonzero(bad_size).tolist():
        probs.append(Problem(TIMERLOG_BAD_UNIT, f.path, k * UNIT_SIZE, f"size field {int(size[k])}, a timer log unit is {UNIT_SIZE}", extra=_where(f, k)))
    bad_magic = keep & ~bad_size & ~np.isin(magic, list(_VALID_MAGICS))
    for k in np.flatnonzero(bad_magic).tolist():
        probs.append(
            Problem(
                TIMERLOG_BAD_MAGIC,
                f.path,
                k * UNIT_SIZE + _MAGIC_AT,
                f"magic {int(magic[k])} is not a combination of 1 (default), 2 (roll), 4 (delete)",
                extra=_where(f, k),
            )
        )
    bad_res = keep & ~bad_size & ~bad_magic & (arr["reserved"] != 0)
    for k in np.flatnonzero(bad_res).tolist():
        probs.append(
            Problem(
                TIMERLOG_BAD_RESERVED,
                f.path,
                k * UNIT_SIZE + _RESERVED_AT,
                f"reserved field {int(arr['reserved'][k])}, the broker writes 0",
                extra=_where(f, k),
            )
        )
    good = np.flatnonzero(keep & ~bad_size & ~bad_magic)
    del raw, zero
    units = TimerUnits(
        f.base + pos[good],
        np.full(len(good), index, dtype=np.int32),
        *(arr[name][good].astype(np.int64 if arr.dtype[name].itemsize == 8 else np.int32) for name in TimerUnits.FIELDS[2:]),
    )
    return units, blanks, probs, data_end


def _where(f: TimerLogFile, k: int) -> dict:
    return {"timer_log_offset": f.base + k * UNIT_SIZE, "unit_index": k}


@dataclass
class TimerWheel:
    """The timerwheel file: 2 x 604,800 slots of 32 bytes."""

    path: str
    size: int
    problems: list[Problem] = field(default_factory=list)

    @classmethod
    def open(cls, path: str) -> TimerWheel:
        try:
            size = os.path.getsize(path)
        except OSError as e:
            raise InputError("unreadable", path, e.strerror or str(e)) from None
        w = cls(path, size)
        want = C.TIMER_WHEEL_SLOTS * SLOT_SIZE
        if size != want:
            w.problems.append(
                Problem(TIMERWHEEL_FILE_SIZE, path, size, f"file is {size} bytes, the wheel is always {want} ({C.TIMER_WHEEL_SLOTS} slots of {SLOT_SIZE})")
            )
        return w

    @property
    def slot_count(self) -> int:
        return self.size // SLOT_SIZE

    def slots(self) -> np.ndarray:
        """(index, time, first_pos, last_pos, num, magic) of every slot that is not all zeros, in index order.

        Reads only the file's data extents (the wheel is a 38.7 MB file mostly made of holes) in 4 MiB steps.
        """
        out = []
        step = 4 << 20
        fd = os.open(self.path, os.O_RDONLY)
        try:
            for lo, hi in _extents(fd, self.size):
                lo -= lo % SLOT_SIZE
                pos = lo
                while pos < hi:
                    n = min(step, hi - pos)
                    n -= (pos + n) % SLOT_SIZE if pos + n < self.size else 0
                    chunk = os.pread(fd, n, pos)
                    k = len(chunk) // SLOT_SIZE
                    arr = np.frombuffer(chunk[: k * SLOT_SIZE], dtype=SLOT_DTYPE)
                    nz = np.flatnonzero(np.frombuffer(chunk[: k * SLOT_SIZE], dtype=np.uint8).reshape(k, SLOT_SIZE).any(axis=1))
                    if nz.size:
                        sel = arr[nz]
                        rows = np.zeros(len(nz), dtype=WHEEL_ROW)
                        rows["index"] = pos // SLOT_SIZE + nz
                        for name in SLOT_DTYPE.names:
                            rows[name] = sel[name]
                        out.append(rows)
                    pos += max(n, SLOT_SIZE)
        finally:
            os.close(fd)
        if not out:
            return np.zeros(0, dtype=WHEEL_ROW)
        rows = np.concatenate(out)
        _, first = np.unique(rows["index"], return_index=True)
        return rows[first]


WHEEL_ROW = np.dtype([("index", np.int64), *((name, np.int64) for name in SLOT_DTYPE.names)])


def _extents(fd: int, size: int) -> Iterator[tuple[int, int]]:
    """The data extents of a sparse file (the whole file where SEEK_DATA is unsupported)."""
    seek_data, seek_hole = getattr(os, "SEEK_DATA", None), getattr(os, "SEEK_HOLE", None)
    if seek_data is None:
        yield 0, size
        return
    pos = 0
    try:
        while pos < size:
            try:
                lo = os.lseek(fd, pos, seek_data)
            except OSError:  # ENXIO: no data past pos
                return
            hi = min(os.lseek(fd, lo, seek_hole), size)
            yield lo, hi
            pos = hi
    except OSError:
        yield pos, size


@dataclass(frozen=True)
class TimerCheckFile:
    path: str
    size: int
    values: dict[str, int]
    problems: tuple[Problem, ...] = ()

    def to_dict(self) -> dict:
        return {"file": self.path, "size": self.size, **self.values}

    @property
    def last_read_time_ms(self) -> int:
        return self.values["last_read_time_ms"]


def read_timercheck(path: str) -> TimerCheckFile:
    """config/timercheck; InputError when it is shorter than the 56 bytes the broker uses."""
    try:
        with open(path, "rb") as f:
            raw = f.read(CHECK_DTYPE.itemsize)
        size = os.path.getsize(path)
    except OSError as e:
        raise InputError("unreadable", path, e.strerror or str(e)) from None
    if len(raw) < CHECK_USED:
        raise InputError(TIMERCHECK_SHORT, path, f"{len(raw)} bytes: shorter than the {CHECK_USED} bytes of the timer checkpoint")
    padded = raw + bytes(CHECK_DTYPE.itemsize - len(raw))
    rec = np.frombuffer(padded, dtype=CHECK_DTYPE)[0]
    values = {name: int(rec[name]) for name in CHECK_DTYPE.names if name != "reserved"}
    probs = []
    rest = raw[CHECK_USED:]
    if any(rest):
        k = CHECK_USED + next(i for i, b in enumerate(rest) if b)
        probs.append(Problem(TIMERCHECK_RESERVED, path, k, f"byte {k} is not zero: the broker uses only the first {CHECK_USED} bytes"))
    return TimerCheckFile(path, size, values, tuple(probs))


def infer_precision(slots: np.ndarray, units: TimerUnits) -> int | None:
    """timerPrecisionMs from the data: the slot's time field is deliverMs / precision of the units it holds."""
    if not len(slots) or not len(units):
        return None
    k = np.searchsorted(units.offset, slots["last_pos"])
    kc = np.minimum(k, len(units) - 1)
    found = (k < len(units)) & (units.offset[kc] == slots["last_pos"])
    votes: dict[int, int] = {}
    for t, d in zip(slots["time"][found].tolist(), units.deliver_ms[kc[found]].tolist(), strict=True):
        for p in PRECISIONS:
            if d // p == t:
                votes[p] = votes.get(p, 0) + 1
                break
    return max(votes, key=votes.get) if votes else None


@dataclass
class TimerRecord:
    """What a timer unit needs from its CommitLog record."""

    phys_offset: int
    total_size: int
    topic: str
    queue_offset: int
    properties: dict[str, str]
    keys: list[str]
    uniq_key: str | None

    @classmethod
    def of(cls, m: Message) -> TimerRecord:
        return cls(m.phys_offset, m.total_size, m.topic, m.queue_offset, m.properties, m.keys, m.uniq_key)


def records_at(cl: CommitLog, offsets: np.ndarray, *, check_crc: bool = False) -> dict[int, TimerRecord]:
    """The records starting exactly at these physical offsets, by one CommitLog scan over their range."""
    want = np.unique(offsets[offsets >= 0])
    found: dict[int, TimerRecord] = {}
    if not want.size or not cl.files:
        return found
    lo, hi = int(want[0]), int(want[-1]) + 1
    for batch in cl.scan(from_offset=lo, to_offset=hi, check_crc=check_crc):
        if not len(batch):
            continue
        phys = batch.phys
        hit = np.flatnonzero(np.isin(phys, want))
        for i in hit.tolist():
            found[int(phys[i])] = TimerRecord.of(batch.message(i))
    return found


def timer_paths(root: str) -> dict[str, str | None]:
    """The timer store's files under a store root (None when absent)."""

    def there(rel: str, isdir: bool = False) -> str | None:
        p = os.path.join(root, rel)
        return p if (os.path.isdir(p) if isdir else os.path.isfile(p)) else None

    return {
        "timerlog": there(TIMERLOG_DIR, True),
        "timerwheel": there(TIMERWHEEL_FILE),
        "timercheck": there(TIMERCHECK_FILE),
        "timermetrics": there(TIMERMETRICS_FILE),
    }


@dataclass
class TimerStore:
    """The timer files of one store, read once: what `timer` commands, verify and info share."""

    root: str
    paths: dict[str, str | None]
    log: TimerLog | None
    units: TimerUnits
    blanks: list[Blank]
    log_end: int
    wheel: TimerWheel | None
    slots: np.ndarray
    check: TimerCheckFile | None
    precision: int
    precision_source: str
    problems: list[Problem] = field(default_factory=list)

    @classmethod
    def open(cls, root: str, precision: int | None = None) -> TimerStore | None:
        """None when the store has no timer files; `precision` overrides the one inferred from the data."""
        paths = timer_paths(root)
        if not any(paths[k] for k in ("timerlog", "timerwheel", "timercheck")):
            return None
        probs: list[Problem] = []
        log = TimerLog.open(paths["timerlog"]) if paths["timerlog"] else None
        units, blanks, end = TimerUnits.concat([]), [], 0
        if log is not None:
            probs.extend(log.problems)
            units, blanks, p, end = log.read()
            probs.extend(p)
        wheel = TimerWheel.open(paths["timerwheel"]) if paths["timerwheel"] else None
        slots = np.zeros(0, dtype=WHEEL_ROW)
        if wheel is not None:
            probs.extend(wheel.problems)
            slots = wheel.slots()
        check = None
        if paths["timercheck"]:
            try:
                check = read_timercheck(paths["timercheck"])
                probs.extend(check.problems)
            except InputError as e:
                probs.append(Problem(e.code, e.path, e.offset, e.detail))
        if precision is not None:
            source = "given"
        else:
            precision = infer_precision(slots, units)
            source = "from the wheel slots and their units"
            if precision is None:
                precision, source = C.DEFAULT_TIMER_PRECISION_MS, "default (no slot to infer it from)"
        return cls(root, paths, log, units, blanks, end, wheel, slots, check, precision, source, probs)

    @property
    def last_read_time_ms(self) -> int | None:
        return self.check.last_read_time_ms if self.check else None

    def states(self) -> np.ndarray:
        """Per unit: True while pending (its delivery time is at or after timercheck's lastReadTimeMs)."""
        if self.last_read_time_ms is None:
            return np.ones(len(self.units), dtype=bool)
        return self.units.deliver_ms >= self.last_read_time_ms

    def unit_file(self, i: int) -> tuple[str, int]:
        """(path, file offset) of unit i."""
        f = self.log.files[int(self.units.file_index[i])]
        return f.path, int(self.units.offset[i]) - f.base

    def slot_time_ms(self) -> np.ndarray:
        return self.slots["time"] * self.precision
