"""Findings and input errors.

A Problem is damage found in the data: scans record it and go on. An
InputError means the input cannot be read at all (exit 2). Codes are stable:
scripts and tests match on them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# CommitLog directory layout
CL_BAD_FILE_NAME = "commitlog_bad_file_name"
CL_FILE_SIZE = "commitlog_file_size"
CL_GAP = "commitlog_gap"
CL_OVERLAP = "commitlog_overlap"
# CommitLog records
BAD_MAGIC = "bad_magic"
BAD_TOTAL_SIZE = "bad_total_size"
RECORD_PAST_END = "record_past_end"
SIZE_MISMATCH = "size_mismatch"
PHYS_OFFSET_MISMATCH = "phys_offset_mismatch"
BODY_CRC_MISMATCH = "body_crc_mismatch"
PROP_CRC_MISMATCH = "prop_crc_mismatch"
BAD_PROPERTIES = "bad_properties"
BAD_BLANK = "bad_blank_marker"
ZEROED_RANGE = "zeroed_range"
TRUNCATED_TAIL = "truncated_tail"
TRAILING_GARBAGE = "trailing_garbage"
DECOMPRESS_FAILED = "decompress_failed"
# Compaction topics (compaction/): file layout and checkpoint
COMPACTION_BAD_FILE_NAME = "compaction_bad_file_name"
COMPACTION_FILE_SIZE = "compaction_file_size"
COMPACTION_FILE_UNPAIRED = "compaction_file_unpaired"
COMPACTION_LOG_GAP = "compaction_log_gap"
COMPACTION_CHECKPOINT_UNREADABLE = "compaction_checkpoint_unreadable"
COMPACTION_CHECKPOINT_MISMATCH = "compaction_checkpoint_mismatch"
# Compaction topics: log records against the CommitLog and their units
COMPACTION_RECORD_WRONG_QUEUE = "compaction_record_wrong_queue"
COMPACTION_RECORD_DIFFERS = "compaction_record_differs"
COMPACTION_RECORD_NO_ORIGINAL = "compaction_record_no_original"
COMPACTION_RECORD_NO_UNIT = "compaction_record_no_unit"
COMPACTION_CQ_BAD_POINTER = "compaction_cq_bad_pointer"
COMPACTION_CQ_SIZE_MISMATCH = "compaction_cq_size_mismatch"
COMPACTION_CQ_TAGS_MISMATCH = "compaction_cq_tags_mismatch"
COMPACTION_CQ_STORE_TIME_MISMATCH = "compaction_cq_store_time_mismatch"
COMPACTION_CQ_QUEUE_OFFSET_MISMATCH = "compaction_cq_queue_offset_mismatch"
COMPACTION_CQ_INVALID_UNIT = "compaction_cq_invalid_unit"
COMPACTION_CQ_ORDER = "compaction_cq_order"
# Compaction topics: the retention rule (CompactionLog.shouldRetainMsg)
COMPACTION_DUPLICATE_SURVIVOR = "compaction_duplicate_survivor"
COMPACTION_TOMBSTONE_KEPT = "compaction_tombstone_kept"
COMPACTION_STALE_SURVIVOR = "compaction_stale_survivor"
COMPACTION_SURVIVOR_LOST = "compaction_survivor_lost"
COMPACTION_RECORD_MISSING = "compaction_record_missing"


@dataclass(frozen=True)
class Problem:
    code: str
    file: str
    file_offset: int | None
    detail: str
    phys_offset: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self, columns: tuple[str, ...] = (), **more: Any) -> dict[str, Any]:
        """The JSON Lines object of this problem (`from_dict` reads it back).

        columns: a command's location keys, present on every line (None where a
        problem has none: a CommitLog problem in `cq verify`); file and
        file_offset then come last. more: keys appended (an export's broker).
        """
        if columns:
            d = {"kind": "problem", "code": self.code, **dict.fromkeys(columns), "phys_offset": self.phys_offset, "detail": self.detail}
            d.update(self.extra)
            d["file"] = self.file
            d["file_offset"] = self.file_offset
        else:
            d = {
                "kind": "problem",
                "code": self.code,
                "file": self.file,
                "file_offset": self.file_offset,
                "phys_offset": self.phys_offset,
                "detail": self.detail,
            }
            d.update(self.extra)
        d.update(more)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Problem:
        """The Problem `to_dict()` wrote (with no columns and nothing more)."""
        extra = {k: v for k, v in d.items() if k not in _OWN_KEYS}
        return cls(d["code"], d["file"], d["file_offset"], d["detail"], phys_offset=d["phys_offset"], extra=extra)

    def line(self) -> str:
        where = self.file if self.file_offset is None else f"{self.file}@{self.file_offset}"
        return f"{self.code}: {where}: {self.detail}"


_OWN_KEYS = frozenset({"kind", "code", "file", "file_offset", "phys_offset", "detail"})


class InputError(Exception):
    """The input cannot be used at all: missing, unreadable, not a store."""

    def __init__(self, code: str, path: str, detail: str, offset: int | None = None):
        self.code = code
        self.path = path
        self.detail = detail
        self.offset = offset
        super().__init__(self.line())

    def line(self) -> str:
        where = self.path if self.offset is None else f"{self.path}@{self.offset}"
        return f"{self.code}: {where}: {self.detail}"
