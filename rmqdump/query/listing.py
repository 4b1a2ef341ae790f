"""What `rmqdump commitlog` lists: records, end-of-file markers and damage, filtered, range by range.

Filters that are plain columns (queue, store time) are applied to whole
batches before any record is turned into a Python object.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from rmqdump.common import problems as P
from rmqdump.common.problems import Problem
from rmqdump.readers.commitlog import Blank
from rmqdump.readers.message import Message, decompress
from rmqdump.scan.ranges import range_batches
from rmqdump.scan.scanner import Batch
from rmqdump.scan.splits import Split
from rmqdump.schemas import constants as C


@dataclass
class Filter:
    topic: str | None = None
    queue: int | None = None
    from_offset: int | None = None
    to_offset: int | None = None
    since: int | None = None
    until: int | None = None
    key: str | None = None
    tag: str | None = None
    limit: int | None = None

    @property
    def selective(self) -> bool:
        """True when messages are picked by content; end-of-file markers are then left out."""
        return any(v is not None for v in (self.topic, self.queue, self.since, self.until, self.key, self.tag))

    def mask(self, b: Batch) -> np.ndarray:
        c = b.cols
        m = np.ones(len(b), dtype=bool)
        if self.queue is not None:
            m &= c["queue_id"] == self.queue
        if self.since is not None:
            m &= c["store_timestamp"] >= self.since
        if self.until is not None:
            m &= c["store_timestamp"] < self.until
        return m

    def accepts(self, m: Message) -> bool:
        if self.topic is not None and m.topic != self.topic:
            return False
        if self.tag is not None and m.tags != self.tag:
            return False
        return not (self.key is not None and self.key not in m.keys and m.uniq_key != self.key)


@dataclass
class Tally:
    messages: int = 0
    blanks: int = 0
    problems: int = 0


Entry = Message | Blank | Problem


@dataclass
class Records:
    """One batch's records that the column filters (queue, store time) kept, by index.

    Records not kept still have their problems reported (`Batch.record_problems`);
    the content filters (topic, tag, key) are left to whoever reads the records,
    with `record_entries` as the Python way for one record.
    """

    batch: Batch
    rows: np.ndarray


def range_items(split: Split, flt: Filter, tally: Tally) -> Iterator[Records | Blank | Problem]:
    """One planned range's share of the listing, in offset order, the unit the command's mapper renders: batch by
    batch, its records the column filters keep, then what ended it (end-of-file markers, counted in `tally.blanks`
    and left out when `flt.selective`; damage). A consumer that stops at its limit after the records has counted no
    marker past them."""
    for b in range_batches(split, keys=False):
        if len(b):
            yield Records(b, np.flatnonzero(flt.mask(b)))
        for e in b.events:
            if isinstance(e, Blank):
                tally.blanks += 1
                if flt.selective:
                    continue
            yield e


def record_entries(b: Batch, i: int, flt: Filter, *, kept: bool, with_body: bool = False, uncompress: bool = False) -> list[Entry]:
    """What the listing shows for record i of a batch: the message if `kept` (by the column filters) and
    accepted by the content filters, then the record's problems."""
    entries: list[Entry] = []
    extra: list[Problem] = []
    if kept:
        m = b.message(i, with_body=with_body)
        if not m.properties_ok:
            extra.append(
                Problem(
                    P.BAD_PROPERTIES,
                    m.file,
                    int(b.cols["properties_pos"][i]),
                    "properties are not well-formed UTF-8 name\\x01value\\x02 pairs",
                    phys_offset=m.phys_offset,
                )
            )
        if flt.accepts(m):
            if uncompress and with_body and m.sys_flag & C.FLAG_COMPRESSED:
                try:
                    m.body = decompress(m.body, m.sys_flag)
                    m.extra["decompressed"] = True
                except Exception as e:
                    extra.append(Problem(P.DECOMPRESS_FAILED, m.file, int(b.cols["body_pos"][i]), f"body does not decompress: {e}", phys_offset=m.phys_offset))
            entries.append(m)
    return entries + b.record_problems.get(i, []) + extra

