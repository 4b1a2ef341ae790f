"""What `rmqdump commitlog` lists: records, end-of-file markers and damage, filtered, range by range.

Filters that are plain columns (queue, store time) are applied to whole
batches before any record is turned into a Python object.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from rmqdump.common import problems as P
from rmqdump.common.problems import Problem
from rmqdump.readers.commitlog import Blank, CommitLog
from rmqdump.readers.message import Message, decompress
from rmqdump.scan import scanner
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
    with `record_entries` as the reference for one record.
    """

    batch: Batch
    rows: np.ndarray


def batch_items(b: Batch, flt: Filter, tally: Tally) -> Iterator[Records | Blank | Problem]:
    """One batch's share of the listing: its records the column filters keep, then what ended it (end-of-file markers,
    counted in `tally.blanks` and left out when `flt.selective`; damage). A consumer that stops at its limit after the
    records has counted no marker past them."""
    if len(b):
        yield Records(b, np.flatnonzero(flt.mask(b)))
    for e in b.events:
        if isinstance(e, Blank):
            tally.blanks += 1
            if flt.selective:
                continue
        yield e


def range_items(split: Split, flt: Filter, tally: Tally) -> Iterator[Records | Blank | Problem]:
    """One planned range's share of the listing, in offset order: the unit the command's mapper renders."""
    for b in range_batches(split):
        yield from batch_items(b, flt, tally)


def list_records(
    cl: CommitLog, flt: Filter, *, check_crc: bool = True, tally: Tally | None = None, on_bytes: Callable[[int], None] | None = None
) -> Iterator[Records | Blank | Problem]:
    """The CommitLog in offset order as whole batches of records, end-of-file markers and damage, by one in-order walk.

    The consumer counts what it prints in `tally` (messages, problems); the
    listing stops once `tally.messages` reaches `flt.limit`. Blanks are counted here.
    """
    tally = tally if tally is not None else Tally()
    yield from cl.problems
    done_at: dict[str, int] = {}
    for b in scanner.batches(cl, from_offset=flt.from_offset, to_offset=flt.to_offset, check_crc=check_crc):
        for item in batch_items(b, flt, tally):
            yield item
            if isinstance(item, Records) and flt.limit is not None and tally.messages >= flt.limit:
                return
        here = b.seg.base + (int(b.cols["_end"][-1]) if len(b) else 0)
        last = done_at.get(b.seg.path, b.seg.base)
        if on_bytes and here > last:
            on_bytes(here - last)
            done_at[b.seg.path] = here


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


def list_commitlog(
    cl: CommitLog,
    flt: Filter,
    *,
    check_crc: bool = True,
    with_body: bool = False,
    uncompress: bool = False,
    tally: Tally | None = None,
    on_bytes: Callable[[int], None] | None = None,
) -> Iterator[Entry]:
    """Every entry of the CommitLog in offset order, messages filtered by `flt`, one object each.

    The reference the CLI's compiled output (rmqdump.cli.records) is tested against.
    """
    tally = tally if tally is not None else Tally()
    for item in list_records(cl, flt, check_crc=check_crc, tally=tally, on_bytes=on_bytes):
        if not isinstance(item, Records):
            if isinstance(item, Problem):
                tally.problems += 1
            yield item
            continue
        b, kept = item.batch, set(item.rows.tolist())
        for i in sorted(kept | set(b.record_problems)):
            for e in record_entries(b, i, flt, kept=i in kept, with_body=with_body, uncompress=uncompress):
                if isinstance(e, Message):
                    tally.messages += 1
                else:
                    tally.problems += 1
                yield e
            if flt.limit is not None and tally.messages >= flt.limit:
                return
