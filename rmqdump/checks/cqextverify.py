"""`cq verify` for ConsumeQueue ext: every ext address lands on a well-formed ext unit that matches its record.

In a queue with an ext directory, a unit's tagsCode is either an ext
address (<= Integer.MIN_VALUE - 1) or, where the broker could not write
the ext unit, the plain tagsCode. An address must name the start of a unit
found by walking the ext files (readers.cqext), and that unit's tagsCode and
msgStoreTime must be the record's. The filter bitmap depends on the consumer
filters registered at the time, which the store does not keep: it is shown,
never judged.
"""

from __future__ import annotations

import numpy as np

from rmqdump.checks.cqunits import CQ_TAGS_CODE_MISMATCH, RecordWindow, findings_to_problems
from rmqdump.common.problems import Problem
from rmqdump.readers.consumequeue import QueueUnits
from rmqdump.readers.cqext import CQ_EXT_BAD_ADDRESS, ConsumeQueueExt, is_ext_address

CQ_EXT_TAGS_CODE_MISMATCH = "cq_ext_tags_code_mismatch"
CQ_EXT_STORE_TIME_MISMATCH = "cq_ext_store_time_mismatch"


def resolve_tags(u: QueueUnits, ext: ConsumeQueueExt | None) -> tuple[np.ndarray, np.ndarray]:
    """(real tagsCode per unit, index into ext.units() or -1): the plain tagsCode where the unit holds no address."""
    tags = u.tags_code.copy()
    k = np.full(len(u), -1, dtype=np.int64)
    addr = is_ext_address(u.tags_code)
    if ext is not None and addr.any():
        k[addr] = ext.lookup(u.tags_code[addr])
        got = k >= 0
        tags[got] = ext.units().tags_code[k[got]]
    return tags, k


def check_ext_units_in_window(
    u: QueueUnits,
    topic: str,
    queue_id: int,
    ext: ConsumeQueueExt | None,
    window: RecordWindow,
    *,
    seen_real: bool,
    cq_file_of,
) -> list[Problem]:
    """Tags of the valid units pointing into one window of records, through the ext file where they hold an address."""
    if len(u) == 0:
        return []
    records = window.records
    vpos, _ = window.pointing_in(u, seen_real)
    if not vpos.size:
        return []
    tags, k = resolve_tags(u, ext)
    addr = is_ext_address(u.tags_code)
    found = []
    for j in vpos[addr[vpos] & (k[vpos] < 0)].tolist():
        a = int(u.tags_code[j])
        where = f"{ext.locate(a)[0]}@{ext.locate(a)[1]}" if ext is not None else "no consumequeue_ext directory for this queue"
        found.append((j, CQ_EXT_BAD_ADDRESS, f"tagsCode {a} is an ext address (byte {a + (1 << 63)}) where no ext unit starts ({where})", int(u.offset[j])))
    probs = findings_to_problems(found, u, topic, queue_id, cq_file_of)
    hit, rc = records.rows_at(u.offset[vpos])
    hp, hr = vpos[hit], rc[hit]
    plain = ~addr[hp]
    found = []
    for j, ri in zip(hp[plain].tolist(), hr[plain].tolist(), strict=True):
        if tags[j] != records.tags_code[ri]:
            found.append((j, CQ_TAGS_CODE_MISMATCH, f"unit tagsCode {int(tags[j])}, record's is {int(records.tags_code[ri])}", int(u.offset[j])))
    probs += findings_to_problems(found, u, topic, queue_id, cq_file_of)
    if ext is None:
        return probs
    eu = ext.units()
    via = k[hp] >= 0
    for j, ri in zip(hp[via].tolist(), hr[via].tolist(), strict=True):
        e = int(k[j])
        checks = (
            (int(eu.tags_code[e]), int(records.tags_code[ri]), CQ_EXT_TAGS_CODE_MISMATCH, "tagsCode"),
            (int(eu.store_time[e]), int(records.store_timestamp[ri]), CQ_EXT_STORE_TIME_MISMATCH, "msgStoreTime"),
        )
        for got, want, code, name in checks:
            if got != want:
                path, _ = cq_file_of(int(u.index[j])) if cq_file_of else ("", None)
                f = ext.files[int(eu.file_index[e])]
                probs.append(
                    Problem(
                        code,
                        f.path,
                        int(eu.pos[e]),
                        f"ext unit {name} {got}, the record's is {want}",
                        phys_offset=int(u.offset[j]),
                        extra={"topic": topic, "queue_id": queue_id, "cq_file": path or None, "unit_index": int(u.index[j]), "ext_file": f.path},
                    )
                )
    return probs
