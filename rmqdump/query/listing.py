"""What `rmqdump commitlog` lists: records, end-of-file markers and damage, filtered.

Filters that are plain columns (queue, store time) are applied to whole
batches before any record is turned into a Python object.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from rmqdump.common import problems as P
from rmqdump.common.problems import Problem
from rmqdump.readers.commitlog import Batch, Blank, CommitLog
from rmqdump.readers.message import Message, decompress
from schemas import constants as C


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
    bytes_scanned: int = 0


Entry = Message | Blank | Problem


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
    """Every entry of the CommitLog in offset order, messages filtered by `flt`."""
    tally = tally if tally is not None else Tally()
    for p in cl.problems:
        tally.problems += 1
        yield p
    done_at: dict[str, int] = {}
    for b in cl.scan(from_offset=flt.from_offset, to_offset=flt.to_offset, check_crc=check_crc):
        if len(b):
            sel = flt.mask(b)
            todo = sorted(set(np.flatnonzero(sel).tolist()) | set(b.record_problems))
            for i in todo:
                extra: list[Problem] = []
                if sel[i]:
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
                                extra.append(
                                    Problem(
                                        P.DECOMPRESS_FAILED, m.file, int(b.cols["body_pos"][i]), f"body does not decompress: {e}", phys_offset=m.phys_offset
                                    )
                                )
                        tally.messages += 1
                        yield m
                for p in b.record_problems.get(i, []) + extra:
                    tally.problems += 1
                    yield p
                if flt.limit is not None and tally.messages >= flt.limit:
                    return
        for e in b.events:
            if isinstance(e, Blank):
                tally.blanks += 1
                if flt.selective:
                    continue
            else:
                tally.problems += 1
            yield e
        here = b.seg.base + (int(b.cols["_end"][-1]) if len(b) else 0)
        last = done_at.get(b.seg.path, b.seg.base)
        if on_bytes and here > last:
            on_bytes(here - last)
            done_at[b.seg.path] = here
        tally.bytes_scanned = max(tally.bytes_scanned, here - cl.min_offset)
