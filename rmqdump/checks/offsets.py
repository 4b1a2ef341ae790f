"""Committed consumer offsets (config/consumerOffset.json) against the queues on disk.

The broker corrects an offset outside [min, max] of its queue when a consumer
pulls (OFFSET_TOO_SMALL / OFFSET_OVERFLOW_BADLY) -- the consumer then jumps,
skipping or re-reading messages -- so those are flagged. The `.bak` copy is
written before the file; after a crash the two may differ.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from rmqdump.common.jsontext import fields_of
from rmqdump.common.problems import InputError
from rmqdump.readers.configfiles import CONFIG_DIR, ConfigFile, read_config
from rmqdump.readers.store import Store

OFFSETS_FILE = "consumerOffset.json"

OK = "ok"
BELOW_MIN = "below_min"
ABOVE_MAX = "above_max"
NO_QUEUE = "no_queue"
BAK_DIFFERS = "bak_differs"
ONLY_IN_BAK = "only_in_bak"
NOT_IN_BAK = "not_in_bak"


@dataclass
class OffsetRow:
    group: str
    topic: str
    queue_id: int
    committed: int | None
    bak: int | None
    min_offset: int | None
    max_offset: int | None
    flags: list[str]

    @property
    def lag(self) -> int | None:
        if self.committed is None or self.max_offset is None:
            return None
        return self.max_offset - self.committed

    def to_dict(self) -> dict:
        return {"kind": "offset", **fields_of(self, omit=("flags",)), "lag": self.lag, "flags": self.flags}


@dataclass
class OffsetsReport:
    file: ConfigFile | None
    bak: ConfigFile | None
    rows: list[OffsetRow]

    @property
    def flagged(self) -> int:
        return sum(1 for r in self.rows if r.flags != [OK])


def _table(cf: ConfigFile | None) -> dict[tuple[str, str, int], int]:
    if cf is None or cf.error is not None:
        return {}
    return offset_table(cf.data)


def offset_table(data) -> dict[tuple[str, str, int], int]:
    """(group, topic, queue id) -> committed offset, from a parsed consumerOffset.json; entries that are damage are left out."""
    if not isinstance(data, dict):
        return {}
    out: dict[tuple[str, str, int], int] = {}
    table = data.get("offsetTable") or {}
    if not isinstance(table, dict):
        return {}
    for key, per_queue in table.items():
        topic, sep, group = str(key).partition("@")
        if not sep or not isinstance(per_queue, dict):
            continue
        for q, off in per_queue.items():
            if isinstance(off, (bool, float)):  # fastjson writes offsets as longs: 1.5, 1e999 (inf) or true is damage
                continue
            try:
                out[(group, topic, int(q))] = int(off)
            except (TypeError, ValueError, OverflowError):
                continue
    return out


def consumer_offsets(store: Store, *, group: str | None = None, topic: str | None = None) -> OffsetsReport:
    """Every committed offset with its queue's bounds and lag; InputError when neither file exists."""
    path = os.path.join(store.root, CONFIG_DIR, OFFSETS_FILE)
    bak_path = path + ".bak"
    cf = read_config(path) if os.path.isfile(path) else None
    bf = read_config(bak_path) if os.path.isfile(bak_path) else None
    if cf is None and bf is None:
        raise InputError("not_found", path, "no consumerOffset.json (nor .bak): this store has no committed offsets")
    for c in (cf, bf):
        if c is not None and c.error is not None and (cf is None or bf is None or (cf.error and bf.error)):
            raise InputError("bad_config", c.path, c.error)
    main, bak = _table(cf), _table(bf)
    bounds: dict[tuple[str, int], tuple[int, int]] = {}
    rows: list[OffsetRow] = []
    for key in sorted(set(main) | set(bak)):
        g, t, qid = key
        if (group is not None and g != group) or (topic is not None and t != topic):
            continue
        q = store.queue(t, qid)
        if q is not None and (t, qid) not in bounds:
            bounds[(t, qid)] = q.bounds()
        lo, hi = bounds.get((t, qid), (None, None))
        committed = main.get(key)
        b = bak.get(key)
        flags = []
        if committed is None:
            flags.append(ONLY_IN_BAK)
        elif bf is not None and b is None:
            flags.append(NOT_IN_BAK)
        elif b is not None and b != committed:
            flags.append(BAK_DIFFERS)
        eff = committed if committed is not None else b
        if q is None:
            flags.append(NO_QUEUE)
        elif eff is not None and eff < lo:
            flags.append(BELOW_MIN)
        elif eff is not None and eff > hi:
            flags.append(ABOVE_MAX)
        rows.append(OffsetRow(g, t, qid, committed, b, lo, hi, flags or [OK]))
    return OffsetsReport(cf, bf, rows)
