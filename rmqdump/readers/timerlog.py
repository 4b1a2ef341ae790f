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

import bisect
import functools
import itertools
import os
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from rmqdump.common.problems import InputError, Problem
from rmqdump.readers.commitlog import Blank, log_file_size
from rmqdump.readers.fastpath import field_offset, numpy_dtype, struct_format
from rmqdump.readers.mapped import MappedFile, OffsetFile, next_data, offset_files, open_binary, open_readonly, readable_size
from rmqdump.readers.message import Message
from rmqdump.schemas import constants as C
from rmqdump.schemas.timer import TimerCheck, TimerLogBlank, TimerLogUnit, TimerWheelSlot

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
_VALID_MAGICS = {C.TIMER_MAGIC_DEFAULT | r | d for r in (0, C.TIMER_MAGIC_ROLL) for d in (0, C.TIMER_MAGIC_DELETE)}
_VALID_MAGICS_ARR = np.array(sorted(_VALID_MAGICS))

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


class TimerLogFile(OffsetFile):
    """One timer log file."""


@dataclass
class TimerUnits:
    """A run of timer-log units as native columns; `offset` is each unit's timer log offset, `grid` its place on the
    log's 52-byte grid counted over all files (what the chain walk's visited bitmap is indexed by)."""

    offset: np.ndarray
    file_index: np.ndarray  # which TimerLog.files entry holds the unit
    grid: np.ndarray
    prev_pos: np.ndarray
    magic: np.ndarray
    curr_write_time_ms: np.ndarray
    delayed_time_offset: np.ndarray
    offset_py: np.ndarray
    size_py: np.ndarray
    hash_code_of_real_topic: np.ndarray
    reserved: np.ndarray

    FIELDS = (
        "offset", "file_index", "grid", "prev_pos", "magic", "curr_write_time_ms", "delayed_time_offset", "offset_py", "size_py",
        "hash_code_of_real_topic", "reserved",
    )  # fmt: skip
    RAW = FIELDS[3:]  # the columns read from the unit itself

    def __len__(self) -> int:
        return len(self.offset)

    @functools.cached_property
    def deliver_ms(self) -> np.ndarray:
        """currWriteTimeMs + delay: when the wheel fires the unit (computed once)."""
        return self.curr_write_time_ms + self.delayed_time_offset

    @classmethod
    def empty(cls) -> TimerUnits:
        return cls(*(np.zeros(0, np.int64) for _ in cls.FIELDS))

    @classmethod
    def of(cls, rows: np.ndarray, offset: np.ndarray, file_index: np.ndarray, grid: np.ndarray) -> TimerUnits:
        """Columns of UNIT_DTYPE rows (a copy: nothing keeps the map alive)."""
        return cls(
            np.asarray(offset, np.int64),
            np.asarray(file_index, np.int32),
            np.asarray(grid, np.int64),
            *(rows[name].astype(np.int64 if rows.dtype[name].itemsize == 8 else np.int32) for name in cls.RAW),
        )

    def take(self, idx) -> TimerUnits:
        return TimerUnits(*(getattr(self, f)[idx] for f in self.FIELDS))


@dataclass
class FileLayout:
    """What one pass over a timer log file found: where its units may be, its blank, its damage, its counts."""

    units_on_grid: int  # whole 52-byte positions in the file
    keep_end: int  # positions [0, keep_end) may hold units (past the last non-zero one before the blank: nothing)
    data_end: int | None  # end of the written data in the file, None when it holds nothing
    blanks: list[Blank]
    problems: list[Problem]
    good: int = 0
    pending: int = 0


@dataclass
class TimerLog:
    """The files of timerlog/, in offset order, with their layout problems."""

    path: str
    files: list[TimerLogFile]
    file_size: int | None
    problems: list[Problem] = field(default_factory=list)

    @classmethod
    def open(cls, path: str) -> TimerLog:
        try:
            found, others = offset_files(path, TimerLogFile)
        except OSError as e:
            raise InputError("unreadable", path, e.strerror or str(e)) from None
        probs = [Problem(TIMERLOG_BAD_FILE_NAME, p, None, "not a 20-digit offset name: ignored") for p in others]
        file_size = log_file_size(found)
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


STEP = 1 << 16  # units one pass over a file holds at a time (3.4 MB of map, then given back)


def _is_good(rows: np.ndarray) -> np.ndarray:
    """Rows that are units (not a zeroed, mis-sized or bad-magic position)."""
    return (rows["size"] == UNIT_SIZE) & np.isin(rows["magic"], _VALID_MAGICS_ARR)


def layout_file(f: TimerLogFile, m: MappedFile, last_read_time_ms: int | None) -> FileLayout:
    """One timer log file on its 52-byte grid, read through its map STEP units at a time (pages given back as it goes).

    Finds the blank that ends its data, the last written unit, and every damaged position; counts the good and pending units.
    """
    n = f.size // UNIT_SIZE
    arr = np.frombuffer(m.view, dtype=UNIT_DTYPE, count=n) if n else np.zeros(0, UNIT_DTYPE)
    probs: list[Problem] = []
    blanks: list[Blank] = []
    # pass 1: the first blank marker (the data ends there) and the last non-zero unit before it
    stop, last_live = n, -1
    for lo in range(0, n, STEP):
        hi = min(n, lo + STEP)
        part = arr[lo:hi]
        bl = np.flatnonzero(part["magic"] == C.TIMER_BLANK_MAGIC)
        if bl.size:
            hi = lo + int(bl[0])
            stop = hi
        nz = np.flatnonzero(part[: hi - lo].view(np.uint8).reshape(hi - lo, UNIT_SIZE).any(axis=1)) if hi > lo else bl[:0]
        if nz.size:
            last_live = lo + int(nz[-1])
        m.release(lo * UNIT_SIZE, hi * UNIT_SIZE)
        if stop < n:
            break
    tail = bytes(m.view[n * UNIT_SIZE : f.size])
    if stop < n:
        k = stop
        left = f.size - k * UNIT_SIZE
        bsize = int(arr["size"][k])
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
        torn = len(tail) >= 4 and int.from_bytes(tail[:4], "big", signed=True) == UNIT_SIZE
        what = f": a torn unit, the file ends {len(tail)} bytes into it" if torn else ""
        probs.append(
            Problem(
                TIMERLOG_BAD_BLANK,
                f.path,
                n * UNIT_SIZE,
                f"{len(tail)} bytes after the last whole unit are neither zeros nor a blank marker{what}",
                extra=_where(f, n),
            )
        )
    keep_end = last_live + 1
    if blanks:
        data_end: int | None = f.size
    else:
        data_end = keep_end * UNIT_SIZE if keep_end else None
    # pass 2: damage inside the written part, reported kind by kind in unit order as one pass over all units would
    zeroed, bad_unit, bad_magic, bad_res = [], [], [], []
    out = FileLayout(n, keep_end, data_end, blanks, probs)
    for lo in range(0, keep_end, STEP):
        hi = min(keep_end, lo + STEP)
        part = arr[lo:hi]
        zero = ~part.view(np.uint8).reshape(hi - lo, UNIT_SIZE).any(axis=1)
        size = part["size"]
        magic = part["magic"]
        _flag(zeroed, f, lo, zero, TIMERLOG_ZEROED_UNIT, 0, "52 zero bytes where a unit should be, with units after it")
        bsz = ~zero & (size != UNIT_SIZE)
        _flag(bad_unit, f, lo, bsz, TIMERLOG_BAD_UNIT, 0, f"size field {{}}, a timer log unit is {UNIT_SIZE}", size)
        bmg = ~zero & ~bsz & ~np.isin(magic, _VALID_MAGICS_ARR)
        _flag(bad_magic, f, lo, bmg, TIMERLOG_BAD_MAGIC, _MAGIC_AT, "magic {} is not a combination of 1 (default), 2 (roll), 4 (delete)", magic)
        good = ~zero & ~bsz & ~bmg
        res = part["reserved"]
        _flag(bad_res, f, lo, good & (res != 0), TIMERLOG_BAD_RESERVED, _RESERVED_AT, "reserved field {}, the broker writes 0", res)
        out.good += int(good.sum())
        if last_read_time_ms is None:
            out.pending += int(good.sum())
        else:
            deliver = part["curr_write_time_ms"].astype(np.int64) + part["delayed_time_offset"]
            out.pending += int((good & (deliver >= last_read_time_ms)).sum())
        m.release(lo * UNIT_SIZE, hi * UNIT_SIZE)
    probs.extend(zeroed + bad_unit + bad_magic + bad_res)
    return out


def _flag(into: list[Problem], f: TimerLogFile, lo: int, mask: np.ndarray, code: str, at: int, detail: str, values: np.ndarray | None = None) -> None:
    """A problem for each unit lo + k of f where mask[k], at byte `at` of the unit; detail names values[k] where it says {}."""
    for k in np.flatnonzero(mask).tolist():
        text = detail if values is None else detail.format(int(values[k]))
        into.append(Problem(code, f.path, (lo + k) * UNIT_SIZE + at, text, extra=_where(f, lo + k)))


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
        size = readable_size(path)  # a directory or FIFO in its place is `unreadable`, never a wheel of 0 slots
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
        fd = open_readonly(self.path)
        try:
            extent = 0
            while extent < self.size:
                lo, hi = next_data(fd, extent, self.size)  # the data extents only: the holes read as zero slots
                extent = hi
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
                        rows = np.zeros(len(nz), dtype=WHEEL_ROW)
                        rows["index"] = pos // SLOT_SIZE + nz
                        for name in SLOT_DTYPE.names:  # field by field: taking whole big-endian records is 10x slower
                            rows[name] = arr[name] if nz.size == k else arr[name][nz]
                        out.append(rows)
                    pos += max(n, SLOT_SIZE)
        finally:
            os.close(fd)
        if not out:
            return np.zeros(0, dtype=WHEEL_ROW)
        rows = np.concatenate(out)
        if len(rows) > 1 and not (np.diff(rows["index"]) > 0).all():  # extents read in order never overlap; a sort only if they did
            _, first = np.unique(rows["index"], return_index=True)
            rows = rows[first]
        return rows


WHEEL_ROW = np.dtype([("index", np.int64), *((name, np.int64) for name in SLOT_DTYPE.names)])


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
        with open_binary(path) as f:  # open_readonly's checks: a directory or FIFO in its place is `unreadable`
            raw = f.read(CHECK_DTYPE.itemsize)
            size = os.fstat(f.fileno()).st_size
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


def infer_precision(slots: np.ndarray, ts: TimerStore) -> int | None:
    """timerPrecisionMs from the data: the slot's time field is deliverMs / precision of the units it holds."""
    if not len(slots) or not ts.count:
        return None
    votes: dict[int, int] = {}
    for lo in range(0, len(slots), STEP):  # as arrays: a wheel of a million slots pointing at units costs no Python loop
        part = slots[lo : lo + STEP]
        found, u = ts.units_at(part["last_pos"])
        t, d = part["time"][found], u.deliver_ms
        taken = np.zeros(len(t), dtype=bool)
        got = []  # (first slot voting, precision, votes): a tie goes to the precision voted for first, slot by slot
        for p in PRECISIONS:  # each slot votes for the first precision that puts its unit in it
            hit = np.flatnonzero(~taken & (d // p == t))
            if hit.size:
                got.append((int(hit[0]), p, int(hit.size)))
                taken[hit] = True
        for _, p, n in sorted(got):
            votes[p] = votes.get(p, 0) + n
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


def timer_paths(root: str) -> dict[str, str | None]:
    """The timer store's files under a store root (None when absent).

    A path that is there but of the wrong kind (a directory where the wheel or timercheck belongs, a file where
    timerlog/ belongs, a FIFO, a dangling link) is the input error `unreadable` naming it, never absent: the timer
    files would otherwise be passed over in silence. timermetrics, which no command reads, is only looked for.
    """

    def there(rel: str, isdir: bool = False) -> str | None:
        p = os.path.join(root, rel)
        if not os.path.lexists(p):
            return None
        if isdir:
            if not os.path.isdir(p):
                raise InputError("unreadable", p, "not a directory", 0)
            return p
        readable_size(p)  # open_readonly's checks: not a regular file, no permission
        return p

    return {
        "timerlog": there(TIMERLOG_DIR, True),
        "timerwheel": there(TIMERWHEEL_FILE),
        "timercheck": there(TIMERCHECK_FILE),
        "timermetrics": os.path.join(root, TIMERMETRICS_FILE) if os.path.isfile(os.path.join(root, TIMERMETRICS_FILE)) else None,
    }


_SIZE_I, _PREV_I, _MAGIC_I, _WRITE_I, _DELAY_I, _OFFSET_PY_I = (
    UNIT_DTYPE.names.index(n) for n in ("size", "prev_pos", "magic", "curr_write_time_ms", "delayed_time_offset", "offset_py")
)
# one unit as a struct format, derived from schemas.timer like the dtype: a single unit is unpacked straight from the
# map, about 20x faster than a numpy record
_UNIT_STRUCT = struct_format(TimerLogUnit)
MAPS_OPEN = 16  # timer log files kept mapped at once (a log of many small files is not mapped all at once)


@dataclass
class TimerStore:
    """The timer files of one store: what `timer` commands, verify and info share.

    Opening reads the timer log once, file by file through read-only maps, keeping only per-file facts (where its
    units end, its damage, its counts), never the units: they are read again in bounded chunks (`chunks`) or one by
    one (`unit`) from the maps, whose pages are given back as the reads go, so memory does not grow with the log.
    """

    root: str
    paths: dict[str, str | None]
    log: TimerLog | None
    layouts: list[FileLayout]
    blanks: list[Blank]
    log_end: int
    wheel: TimerWheel | None
    slots: np.ndarray
    check: TimerCheckFile | None
    precision: int
    precision_source: str
    problems: list[Problem] = field(default_factory=list)
    _maps: dict[int, tuple[MappedFile, np.ndarray]] = field(default_factory=dict, repr=False)  # file index -> (map, its units)
    _bases: list[int] = field(default_factory=list, repr=False)
    _grid0: list[int] = field(default_factory=lambda: [0], repr=False)

    @classmethod
    def open(cls, root: str, precision: int | None = None) -> TimerStore | None:
        """None when the store has no timer files; `precision` overrides the one inferred from the data."""
        paths = timer_paths(root)
        if not any(paths[k] for k in ("timerlog", "timerwheel", "timercheck")):
            return None
        check, check_probs = None, []
        if paths["timercheck"]:
            try:
                check = read_timercheck(paths["timercheck"])
                check_probs.extend(check.problems)
            except InputError as e:
                if e.code != TIMERCHECK_SHORT:  # a file that cannot be read stops the command
                    raise
                check_probs.append(Problem(e.code, e.path, e.offset, e.detail))
        probs: list[Problem] = []
        log = TimerLog.open(paths["timerlog"]) if paths["timerlog"] else None
        ts = cls(root, paths, log, [], [], 0, None, np.zeros(0, dtype=WHEEL_ROW), check, 0, "", probs)
        if log is not None:
            probs.extend(log.problems)
            ts.log_end = log.files[0].base if log.files else 0
            last_read = check.last_read_time_ms if check else None
            for i, f in enumerate(log.files):
                lay = layout_file(f, ts._map(i), last_read)
                ts.layouts.append(lay)
                ts.blanks.extend(lay.blanks)
                probs.extend(lay.problems)
                lay.problems = []  # held once, in ts.problems
                if lay.data_end is not None:
                    ts.log_end = f.base + lay.data_end
        ts._bases = [f.base for f in log.files] if log else []
        ts._grid0 = [0, *itertools.accumulate(lay.units_on_grid for lay in ts.layouts)]
        ts.wheel = TimerWheel.open(paths["timerwheel"]) if paths["timerwheel"] else None
        if ts.wheel is not None:
            probs.extend(ts.wheel.problems)
            ts.slots = ts.wheel.slots()
        probs.extend(check_probs)
        if precision is not None:
            source = "given"
        else:
            precision = infer_precision(ts.slots, ts)
            source = "from the wheel slots and their units"
            if precision is None:
                precision, source = C.DEFAULT_TIMER_PRECISION_MS, "default (no slot to infer it from)"
        ts.precision, ts.precision_source = precision, source
        return ts

    @property
    def last_read_time_ms(self) -> int | None:
        return self.check.last_read_time_ms if self.check else None

    @property
    def count(self) -> int:
        """Timer log units (positions holding a well-formed unit)."""
        return sum(lay.good for lay in self.layouts)

    @property
    def pending_count(self) -> int:
        return sum(lay.pending for lay in self.layouts)

    @property
    def grid_size(self) -> int:
        """52-byte positions over all files: the range of TimerUnits.grid."""
        return self._grid0[-1]

    def pending(self, u: TimerUnits) -> np.ndarray:
        """Per unit: True while pending (its delivery time is at or after timercheck's lastReadTimeMs)."""
        if self.last_read_time_ms is None:
            return np.ones(len(u), dtype=bool)
        return u.deliver_ms >= self.last_read_time_ms

    # -- reading units back from the maps --

    def _open_map(self, i: int) -> tuple[MappedFile, np.ndarray]:
        got = self._maps.get(i)
        if got is None:
            if len(self._maps) >= MAPS_OPEN:
                self._maps.pop(next(iter(self._maps)))[0].close()
            m = MappedFile(self.log.files[i].path)
            n = m.size // UNIT_SIZE
            got = self._maps[i] = (m, np.frombuffer(m.view, dtype=UNIT_DTYPE, count=n) if n else np.zeros(0, UNIT_DTYPE))
        return got

    def _map(self, i: int) -> MappedFile:
        return self._open_map(i)[0]

    def _rows(self, i: int) -> np.ndarray:
        """The units of file i as a read-only view over its map."""
        return self._open_map(i)[1]

    def release(self) -> None:
        """Give back the resident pages of every open map (they stay in the page cache)."""
        for m, _ in self._maps.values():
            m.release(0, m.size)

    def close(self) -> None:
        maps = [m for m, _ in self._maps.values()]
        self._maps.clear()
        for m in maps:
            m.close()

    def chunks(self, step: int = STEP) -> Iterator[TimerUnits]:
        """Every unit in log order, at most `step` positions at a time (pages given back after each)."""
        for i, lay in enumerate(self.layouts):
            f = self.log.files[i]
            for lo in range(0, lay.keep_end, step):
                hi = min(lay.keep_end, lo + step)
                part = self._rows(i)[lo:hi]
                k = np.flatnonzero(_is_good(part))
                u = TimerUnits.of(part[k], f.base + (lo + k) * UNIT_SIZE, np.full(len(k), i, np.int32), self._grid0[i] + lo + k)
                del part
                self._map(i).release(lo * UNIT_SIZE, hi * UNIT_SIZE)
                if len(u):
                    yield u

    def units_at(self, pos) -> tuple[np.ndarray, TimerUnits]:
        """(found, units): which timer log offsets hold a unit, and those units in the order asked."""
        pos = np.asarray(pos, dtype=np.int64)
        found = np.zeros(len(pos), dtype=bool)
        rows = np.zeros(len(pos), dtype=UNIT_DTYPE)
        fi = np.zeros(len(pos), dtype=np.int32)
        grid = np.zeros(len(pos), dtype=np.int64)
        if len(pos) and self.layouts:
            bases = np.asarray(self._bases, dtype=np.int64)
            i = np.searchsorted(bases, pos, side="right") - 1
            ic = np.maximum(i, 0)
            rel = pos - bases[ic]
            k = rel // UNIT_SIZE
            keep = np.asarray([lay.keep_end for lay in self.layouts], dtype=np.int64)
            ok = (i >= 0) & (rel >= 0) & (rel % UNIT_SIZE == 0) & (k < keep[ic])
            for j in np.unique(ic[ok]).tolist():
                sel = np.flatnonzero(ok & (ic == j))
                rows[sel] = self._rows(j)[k[sel]]
                fi[sel] = j
                grid[sel] = self._grid0[j] + k[sel]
            found = ok & _is_good(rows)
            self.release()
        return found, TimerUnits.of(rows[found], pos[found], fi[found], grid[found])

    def unit(self, pos: int) -> tuple | None:
        """(file index, grid, prevPos, magic, deliverMs, offsetPy) of the unit at timer log offset `pos`, None where there is none."""
        i = bisect.bisect_right(self._bases, pos) - 1
        if i < 0:
            return None
        rel = pos - self._bases[i]
        k, r = divmod(rel, UNIT_SIZE)
        if r or k >= self.layouts[i].keep_end:
            return None
        m = self._maps.get(i)
        row = _UNIT_STRUCT.unpack_from((m if m is not None else self._open_map(i))[0].view, k * UNIT_SIZE)
        if row[_SIZE_I] != UNIT_SIZE or row[_MAGIC_I] not in _VALID_MAGICS:
            return None
        return i, self._grid0[i] + k, row[_PREV_I], row[_MAGIC_I], row[_WRITE_I] + row[_DELAY_I], row[_OFFSET_PY_I]

    def unit_file(self, file_index: int, offset: int) -> tuple[str, int]:
        """(path, file offset) of the unit at timer log `offset` in file `file_index`."""
        f = self.log.files[file_index]
        return f.path, offset - f.base
