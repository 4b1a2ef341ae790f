"""Where a CommitLog's written data ends: the end of the last record of the newest file that holds one.

One rule for `info`'s "data ends at", `diff`'s data ends and `timer verify`'s past-the-end units. A file whose
first 8 bytes are zero holds no record yet (the broker fills a file from its start; a file it has only created is
zeros), so a preallocated newest file costs 8 bytes read, not a walk; only the file holding the last record is walked.
"""

from __future__ import annotations

from collections.abc import Callable

from rmqdump.readers.commitlog import CommitLog, SegmentFile
from rmqdump.readers.mapped import MappedFile, open_binary
from rmqdump.scan._walk import scan_file


def _starts_with_data(seg: SegmentFile) -> bool:
    if seg.size == 0:
        return False
    with open_binary(seg.path) as f:
        return any(f.read(8))


def data_end_bytes(cl: CommitLog) -> int:
    """The bytes data_end_of() walks when the newest file with a non-zero head holds a record (a progress bar's total)."""
    return next((seg.size for seg in reversed(cl.files) if _starts_with_data(seg)), 0)


def data_end_of(cl: CommitLog, on_bytes: Callable[[int], None] | None = None) -> int:
    """The end of the CommitLog's last record (the newest file holding one is walked); its min offset when none.

    on_bytes(n) is told of the bytes of each file walked, as it goes.
    """
    for seg in reversed(cl.files):
        if not _starts_with_data(seg):
            continue
        with MappedFile(seg.path, limit=cl.file_size) as mf:  # past the configured size is no data (as the scan)
            end, done = None, 0
            for b in scan_file(seg, mf, start=0, check_crc=False, keys=False):
                if len(b):
                    end = seg.base + int(b.cols["_end"][-1])
                    if on_bytes is not None and end - seg.base > done:
                        on_bytes(end - seg.base - done)
                        done = end - seg.base
            if on_bytes is not None and seg.size > done:
                on_bytes(seg.size - done)
            if end is not None:
                return end
    return cl.min_offset
