"""Where two CommitLogs part: the first differing byte, found range by range, and the record boundary before it.

The CommitLogs are compared as byte streams (a file's absent bytes read as zeros, as a preallocated file's
unwritten tail): range by range by CRC32 first (both sides at once), bytes only inside the first range whose
CRCs differ, so identical stretches are hashed in one pass and never compared twice; the same files given twice
are not read at all. The common prefix ends at the start of the record that holds the first differing byte,
found by walking that file's records (for DLedger, with the entry's index and term).
"""

from __future__ import annotations

import itertools
import os
import zlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from rmqdump.common.problems import InputError
from rmqdump.readers.commitlog import CommitLog

RANGE_BYTES = 64 << 20  # bytes per compared range (its CRC32 on each side)
READ_BYTES = 1 << 20  # bytes per read inside a range (small reads: no fresh pages to fault in per read)


@dataclass
class Prefix:
    """Where two CommitLogs part: bytes [start, identical_up_to) hold the same records on both sides."""

    start: int  # the first offset both sides hold (their min offsets' max)
    identical_up_to: int  # end of the last record before the first differing byte (or the end when identical)
    first_differing_byte: int | None  # None: the byte streams are identical
    end: int  # the end of the longer stream (its last file's end)
    ranges: int = 0  # ranges whose CRCs were compared
    bytes_hashed: int = 0  # bytes read for CRCs (both sides)
    bytes_compared: int = 0  # bytes read again to find the first differing byte (both sides)
    same_files: bool = False  # both sides are the same files: nothing read
    last_common_entry: tuple[int, int] | None = None  # DLedger: (index, term) of the last entry both ledgers hold


def _files(cl: CommitLog) -> list[tuple[int, int, str]]:
    return [(f.base, f.size, f.path) for f in cl.files]


class _Stream:
    """A CommitLog's files as one byte stream read with pread; offsets in no file read as zeros."""

    def __init__(self, cl: CommitLog):
        self.files = _files(cl)
        self.fds: dict[str, int] = {}

    def read(self, lo: int, hi: int) -> bytes:
        parts, pos = [], lo
        for base, size, path in self.files:
            if base + size <= pos or base >= hi:
                continue
            if base > pos:
                parts.append(bytes(base - pos))
                pos = base
            stop = min(hi, base + size)
            fd = self.fds.get(path)
            if fd is None:
                try:
                    fd = self.fds[path] = os.open(path, os.O_RDONLY)
                except OSError as e:
                    raise InputError("unreadable", path, e.strerror or str(e)) from None
            data = os.pread(fd, stop - pos, pos - base)
            parts.append(data + bytes(stop - pos - len(data)))  # a file that shrank under us: zeros
            pos = stop
        if pos < hi:
            parts.append(bytes(hi - pos))
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def close(self) -> None:
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()


def _cuts(a: list, b: list, lo: int, hi: int, step: int) -> list[tuple[int, int]]:
    """Ranges of at most `step` bytes covering [lo, hi), cut at every file boundary of either side."""
    bounds = {lo, hi}
    for base, size, _ in a + b:
        bounds.update(x for x in (base, base + size) if lo < x < hi)
    edges = sorted(bounds)
    out = []
    for s, e in itertools.pairwise(edges):
        out.extend((p, min(e, p + step)) for p in range(s, e, step))
    return out


def _crc(stream: _Stream, lo: int, hi: int) -> int:
    crc = 0
    for p in range(lo, hi, READ_BYTES):
        crc = zlib.crc32(stream.read(p, min(hi, p + READ_BYTES)), crc)
    return crc


def _first_difference(sa: _Stream, sb: _Stream, lo: int, hi: int) -> tuple[int | None, int]:
    """The first offset in [lo, hi) where the streams differ (None if nowhere) and the bytes read."""
    read = 0
    for p in range(lo, hi, READ_BYTES):
        q = min(hi, p + READ_BYTES)
        x, y = sa.read(p, q), sb.read(p, q)
        read += 2 * (q - p)
        if x != y:
            ne = np.flatnonzero(np.frombuffer(x, np.uint8) != np.frombuffer(y, np.uint8))
            return p + int(ne[0]), read
    return None, read


def _same_files(a: CommitLog, b: CommitLog) -> bool:
    """Both CommitLogs are the very same files (one store given twice, or hard links)."""
    if len(a.files) != len(b.files):
        return False
    try:
        return all(x.base == y.base and x.size == y.size and os.path.samefile(x.path, y.path) for x, y in zip(a.files, b.files, strict=True))
    except OSError:
        return False


def common_prefix(a: CommitLog, b: CommitLog, *, range_bytes: int = RANGE_BYTES, progress: Callable[[int], None] | None = None) -> Prefix:
    """Compare two CommitLogs range by range (CRC32 first, bytes in the first range that differs)."""
    fa, fb = _files(a), _files(b)
    start = max(a.min_offset if fa else 0, b.min_offset if fb else 0)
    end = max([base + size for base, size, _ in fa + fb] or [start])
    if _same_files(a, b):
        return Prefix(start, end, None, end, same_files=True)
    sa, sb = _Stream(a), _Stream(b)
    pre = Prefix(start, end, None, end)
    pool = ThreadPoolExecutor(1)  # B's CRC of a range in a thread while A's runs here: both release the GIL
    try:
        for lo, hi in _cuts(fa, fb, start, end, range_bytes):
            pre.ranges += 1
            pre.bytes_hashed += 2 * (hi - lo)
            other = pool.submit(_crc, sb, lo, hi)
            equal = _crc(sa, lo, hi) == other.result()
            if progress:
                progress(hi - lo)
            if equal:
                continue
            d, read = _first_difference(sa, sb, lo, hi)
            pre.bytes_compared += read
            if d is not None:  # (a CRC collision on different bytes is caught here; equal bytes with unequal CRCs cannot be)
                pre.first_differing_byte = d
                pre.identical_up_to, pre.last_common_entry = _record_start(a if a.file_for(d) else b, d)
                break
    finally:
        pool.shutdown()
        sa.close()
        sb.close()
    return pre


def _record_start(cl: CommitLog, d: int) -> tuple[int, tuple[int, int] | None]:
    """The end of the last whole record before byte `d`, walking the records of the file that holds `d`;
    for a DLedger CommitLog also that record's entry (index, term)."""
    seg = cl.file_for(d)
    if seg is None:
        return d, None
    end, entry = seg.base, None
    for batch in cl.scan(from_offset=seg.base, to_offset=d, check_crc=False):
        if not len(batch):
            continue
        ends = batch.phys + batch.cols["total_size"].astype(np.int64)
        whole = np.flatnonzero(ends <= d)
        if len(whole) and int(ends[whole[-1]]) >= end:
            end = int(ends[whole[-1]])
            if batch.entries is not None:
                entry = (int(batch.entries["index"][whole[-1]]), int(batch.entries["term"][whole[-1]]))
    return end, entry
