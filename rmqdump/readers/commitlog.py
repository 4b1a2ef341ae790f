"""The CommitLog as files: which ones, in offset order, and what is wrong with their layout.

Files are named by their 20-digit start offset; their configured size is the
usual step between names. A DLedger CommitLog's data files
(`dledger-<id>/data/`) are read the same way, each record framed by an entry
header (`SegmentFile.frame`). Reading their records is the scan's
(rmqdump.scan.scanner), not this module's.
"""

from __future__ import annotations

import collections
import itertools
import os
from dataclasses import dataclass

from rmqdump.common import problems as P
from rmqdump.common.problems import InputError, Problem
from rmqdump.readers.fastpath import struct_format
from rmqdump.readers.mapped import OFFSET_NAME_RE, OffsetFile, offset_files, open_binary
from rmqdump.schemas import RecordPrefix
from rmqdump.schemas import dledger as DL

_PREFIX = struct_format(RecordPrefix)  # totalSize, magic

FRAME_SIZE = DL.EntryHeader.sizeof()



class SegmentFile(OffsetFile):
    """One CommitLog file: its name is its 20-digit start offset."""

    @property
    def frame(self) -> int:
        """Bytes of entry header before each record: a DLedger data file's, else 0."""
        return frame_of(self.path)


def frame_of(path: str) -> int:
    """DLedger's entry header size for a file of a `dledger-<id>/data/` directory, else 0."""
    d = os.path.dirname(os.path.abspath(path))
    return FRAME_SIZE if os.path.basename(d) == DL.DATA_DIR and os.path.basename(os.path.dirname(d)).startswith(DL.DIR_PREFIX) else 0


def commitlog_dir(root: str) -> str | None:
    """A store root's CommitLog directory: `commitlog/`, or a DLedger CommitLog's `dledger-<id>/data/` (beside or inside it).

    A DLedger directory holding data files wins (the broker runs on it); an empty one only when there is no `commitlog/`.
    """
    plain = os.path.join(root, "commitlog")
    found = []
    for parent in (root, plain):
        try:
            names = sorted(os.listdir(parent))
        except OSError:
            continue
        found += [os.path.join(parent, n, DL.DATA_DIR) for n in names if n.startswith(DL.DIR_PREFIX) and os.path.isdir(os.path.join(parent, n, DL.DATA_DIR))]
    with_data = [d for d in found if _has_files(d)]
    if with_data:
        return with_data[0]
    if os.path.isdir(plain):
        return plain
    return found[0] if found else None


def commitlog_path(root: str) -> str:
    """commitlog_dir(root), or where a plain store's `commitlog/` would be (for messages about its absence)."""
    return commitlog_dir(root) or os.path.join(root, "commitlog")


def _has_files(d: str) -> bool:
    try:
        return any(OFFSET_NAME_RE.match(n) and os.path.isfile(os.path.join(d, n)) for n in os.listdir(d))
    except OSError:
        return False


@dataclass
class Blank:
    """The end of a file's data: the BLANK marker, or the zero tail of the newest file."""

    file: str
    file_offset: int
    phys_offset: int
    length: int
    marker: str  # "blank" or "zeros"

    def to_dict(self) -> dict:
        return {"kind": "blank", "file": self.file, "phys_offset": self.phys_offset, "length": self.length, "marker": self.marker}


class CommitLog:
    """The files of a CommitLog, in offset order, with what is wrong with their layout."""

    def __init__(self, files: list[SegmentFile], problems: list[Problem], file_size: int | None):
        self.files = files
        self.problems = problems
        self.file_size = file_size

    @classmethod
    def open(cls, paths: list[str] | str) -> CommitLog:
        """From a `commitlog/` directory or a list of CommitLog files."""
        if isinstance(paths, (str, os.PathLike)):
            paths = [paths]
        probs: list[Problem] = []
        found: list[SegmentFile] = []
        for p in map(str, paths):
            if os.path.isdir(p) and os.path.basename(p).startswith(DL.DIR_PREFIX) and os.path.isdir(os.path.join(p, DL.DATA_DIR)):
                p = os.path.join(p, DL.DATA_DIR)  # a DLedger directory was given
            elif os.path.isdir(p) and commitlog_dir(p) is not None:
                p = commitlog_dir(p)  # a store root was given
            if os.path.isdir(p):
                try:
                    files, others = offset_files(p, SegmentFile)
                except OSError as e:
                    raise InputError("unreadable", p, e.strerror or str(e)) from None
                found.extend(files)
                probs.extend(Problem(P.CL_BAD_FILE_NAME, o, None, "not a 20-digit offset name: ignored") for o in others)
            elif os.path.isfile(p):
                n = os.path.basename(p)
                if not OFFSET_NAME_RE.match(n):
                    raise InputError("commitlog_bad_file_name", p, "a CommitLog file is named by its 20-digit start offset")
                found.append(SegmentFile(p, int(n), os.path.getsize(p)))
            elif not os.path.exists(p):
                raise InputError("not_found", p, "no such file or directory")
            else:
                raise InputError("unreadable", p, "not a regular file or directory")
        found.sort(key=lambda f: f.base)
        file_size = log_file_size(found)
        for i, f in enumerate(found):
            if file_size and f.size != file_size:
                probs.append(Problem(P.CL_FILE_SIZE, f.path, f.size, f"file is {f.size} bytes, the others {file_size}", phys_offset=f.base + f.size))
            if i:
                prev = found[i - 1]
                expect = prev.base + (file_size or prev.size)
                if f.base > expect:
                    probs.append(Problem(P.CL_GAP, f.path, 0, f"gap: offsets {expect}..{f.base} are in no file", phys_offset=expect))
                elif f.base < expect:
                    probs.append(Problem(P.CL_OVERLAP, f.path, 0, f"starts at {f.base}, inside the previous file (ends at {expect})", phys_offset=f.base))
        return cls(found, probs, file_size)

    @property
    def min_offset(self) -> int:
        return self.files[0].base if self.files else 0

    def file_for(self, phys_offset: int) -> SegmentFile | None:
        for f in self.files:
            if f.base <= phys_offset < f.base + f.size:
                return f
        return None

    def nothing_after(self, phys_offset: int) -> bool:
        """Whether no record follows the one at `phys_offset`: it is in the last file, its totalSize is positive, and
        the file ends after it or holds 8 zero bytes there. A cheap look (12 bytes read), so a pass over what follows a
        point (the index's end) is skipped when there is nothing; False whenever unsure (a scan then decides)."""
        seg = self.file_for(phys_offset)
        if seg is None or seg is not self.files[-1] or seg.frame:
            return False
        pos = phys_offset - seg.base
        with open_binary(seg.path) as f:
            f.seek(pos)
            head = f.read(_PREFIX.size)
            if len(head) < _PREFIX.size:
                return False
            size = _PREFIX.unpack(head)[0]
            if size <= 0:
                return False
            if pos + size >= seg.size:
                return True
            f.seek(pos + size)
            return f.read(_PREFIX.size) == bytes(_PREFIX.size)  # no totalSize, no magic: nothing was written there

    def out_of_range(self, code: str, phys_offset: int) -> Problem:
        """An offset in no CommitLog file, located at the CommitLog's directory (no file holds it)."""
        where = os.path.dirname(self.files[0].path) if self.files else "commitlog"
        first, end = self.min_offset, (self.files[-1].base + self.files[-1].size if self.files else 0)
        return Problem(code, where, None, f"offset {phys_offset} is in no CommitLog file (they hold {first}..{end})", phys_offset=phys_offset)

def log_file_size(files: list[OffsetFile]) -> int | None:
    """The configured file size of a log (CommitLog, timer log): the usual step between file names, else the usual
    file size; the smaller on a tie."""
    counts = collections.Counter([b.base - a.base for a, b in itertools.pairwise(files) if b.base > a.base] or [f.size for f in files])
    return max(counts, key=lambda s: (counts[s], -s)) if counts else None

