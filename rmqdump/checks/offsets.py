"""Committed consumer offsets (config/consumerOffset.json) against the queues on disk.

The broker corrects an offset outside [min, max] of its queue when a consumer
pulls (OFFSET_TOO_SMALL / OFFSET_OVERFLOW_BADLY) -- the consumer then jumps,
skipping or re-reading messages -- so those are flagged. The `.bak` copy is
written before the file; after a crash the two may differ.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from rmqdump.common.jsontext import fields_of
from rmqdump.common.problems import InputError, Problem
from rmqdump.readers.configfiles import CONFIG_DIR, JAVA_INT, JAVA_LONG, ConfigFile, bad_config, config_table, json_kind, read_config, whole_number
from rmqdump.readers.store import Store

OFFSETS_FILE = "consumerOffset.json"
_INT_KEY = re.compile(r"-?\d+")

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
    problems: list[Problem] = field(default_factory=list)  # entries of a file that parses which are not what the broker writes

    @property
    def flagged(self) -> int:
        return sum(1 for r in self.rows if r.flags != [OK])


def _table(cf: ConfigFile | None, problems: list[Problem]) -> dict[tuple[str, str, int], int]:
    if cf is None or cf.error is not None:
        return {}
    table, bad = offset_entries(cf.data)
    problems += [bad_config(cf.path, why) for why in bad]
    return table


def offset_table(data) -> dict[tuple[str, str, int], int]:
    """(group, topic, queue id) -> committed offset, from a parsed consumerOffset.json; entries that are damage are left out."""
    return offset_entries(data)[0]


def offset_entries(data) -> tuple[dict[tuple[str, str, int], int], list[str]]:
    """(group, topic, queue id) -> committed offset, from a parsed consumerOffset.json, and why each entry that is not
    what the broker reads (ConsumerOffsetManager: `{"offsetTable":{"TOPIC@GROUP":{QUEUE_ID:OFFSET}}}`, queue ids Java
    ints, offsets Java longs) was left out, naming its key."""
    table, bad = config_table(data, "offsetTable")
    out: dict[tuple[str, str, int], int] = {}
    for key, per_queue in table.items():
        topic, sep, group = str(key).partition("@")
        if not sep:
            bad.append(f"offsetTable key {key!r} is not TOPIC@GROUP")
            continue
        if not isinstance(per_queue, dict):
            bad.append(f"offsetTable[{key!r}] is not an object but {json_kind(per_queue)}")
            continue
        for q, off in per_queue.items():
            qid = _queue_id(q)
            if qid is None:
                bad.append(f"offsetTable[{key!r}]: queue id {q!r} is not an integer in [{JAVA_INT[0]}, {JAVA_INT[1]}]")
                continue
            why = whole_number(off, *JAVA_LONG)  # fastjson writes offsets as longs: null, "7", 1.5 or true is damage
            if why is not None:
                bad.append(f"offsetTable[{key!r}][{q!r}]: offset {why}")
                continue
            out[(group, topic, qid)] = off
    return out, bad


def _queue_id(q: str) -> int | None:
    """A queue id key the broker reads as a Java int (decimal digits, a sign allowed), or None."""
    if not (isinstance(q, str) and _INT_KEY.fullmatch(q.strip())):
        return None
    n = int(q)
    return n if JAVA_INT[0] <= n <= JAVA_INT[1] else None


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
            raise InputError("bad_config", c.path, c.error, c.offset)
    problems: list[Problem] = []
    main, bak = _table(cf, problems), _table(bf, problems)
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
    return OffsetsReport(cf, bf, rows, problems)
