"""What `repair` carries into NEWDIR besides the CommitLog and what is rebuilt from it: compaction and timer state.

Both keep pointing at the right things because a repair keeps every intact
record at its physical offset and every message at its queue offset.

compaction/ (kv/CompactionStore, CompactionLog): a COMPACTION topic is served
from its compaction log alone (DefaultMessageStore.getMessage hands the pull to
CompactionStore). The log holds copies of the records, with PHYSICALOFFSET
rewritten to the record's place in the compaction log; its SparseConsumeQueue
units hold compaction-log offsets and queue offsets; position-checkpoint holds
queue offsets. Nothing in it names a CommitLog offset, and loading it
(TopicPartitionLog.init: the compaction CQ's recovery, the log truncated to
the CQ's end, the file-name sanity check) reads only these files: it is
copied unchanged. A message destroyed in the CommitLog keeps its copy there.
What a repair cannot give it: the normal recovery does not dispatch again, so
records the compaction log never received (a crash between the ConsumeQueue
and the compaction dispatcher) stay out of it; they are counted per queue.

timerlog/, timerwheel (timer/TimerMessageStore): units name the
rmq_sys_wheel_timer record by CommitLog offset and size (offsetPy, sizePy);
the wheel names timer-log positions; config/timercheck names a queue offset of
rmq_sys_wheel_timer. Recovery (TimerMessageStore.recover) reads the timer log,
revises the wheel from it, and looks up the record of the last unit to revise
its queue offset. All of that stays true, except for a unit whose record was
destroyed: its offset now holds a filler (or lies inside one), which the
dequeue would decode and try to deliver to a null topic (retried for ever
unless timerSkipUnknownError), and which the queue-offset revision would read
as queue offset 0 (every timer message enqueued again). Such a unit's sizePy
is set to 0: getMessageByCommitOffset then reads no message (a miss: the
dequeue drops the unit, the revision falls back to the checkpoint), while its
offsetPy stays, so the timer log's clean-up by CommitLog offset
(deleteExpiredFileByOffsetForTimerLog) is unchanged. A hole in
rmq_sys_wheel_timer at or past the timer's checkpoint is not skipped by the
timer's enqueue (it reads the filler unit's size Integer.MAX_VALUE into a
buffer of maxMessageSize): said in the notes.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field

import numpy as np

from rmqdump.builders.sparsecopy import copy_file
from rmqdump.schemas import constants as C

TIMER_TOPIC = "rmq_sys_wheel_timer"


@dataclass
class CarriedState:
    """What was carried over, and what in it was changed or needs a look."""

    copied: list[str] = field(default_factory=list)  # store-relative paths
    voided_timer_units: list[dict] = field(default_factory=list)  # timer log units whose record was destroyed
    compaction_behind: list[dict] = field(default_factory=list)  # queues whose compaction log lacks messages of the CommitLog
    notes: list[str] = field(default_factory=list)


def _copy_tree(src: str, dst: str) -> None:
    shutil.copytree(src, dst, copy_function=copy_file)


def carry_compaction(store: str, tmp: str, queues: list, out: CarriedState) -> None:
    """compaction/ copied unchanged; queues whose compaction log ends below their rebuilt ConsumeQueue
    (`queues`: the rebuild's QueueResults) counted."""
    from rmqdump.readers.compaction import find_compaction, queue_units_bounds

    src = os.path.join(store, C.COMPACTION_DIR)
    if not os.path.isdir(src):
        return
    _copy_tree(src, os.path.join(tmp, C.COMPACTION_DIR))
    out.copied.append(C.COMPACTION_DIR)
    comp = find_compaction(tmp)
    if comp is None:
        return
    rebuilt = {(q.topic, q.queue_id): q.next_offset for q in queues}
    for q in comp.queues:
        _, _, end = queue_units_bounds(q)
        rebuilt_end = rebuilt.get((q.topic, q.queue_id), 0)
        if rebuilt_end > end:
            out.compaction_behind.append({"topic": q.topic, "queue_id": q.queue_id, "compaction_log_end": end, "queue_end": rebuilt_end})
    if out.compaction_behind:
        out.notes.append(
            "compaction: "
            + ", ".join(f"{d['topic']}/{d['queue_id']} queue offsets {d['compaction_log_end']}..{d['queue_end'] - 1}" for d in out.compaction_behind)
            + " are in the CommitLog but not in the compaction log, which alone serves a COMPACTION topic; the normal recovery "
            "does not dispatch them again (salvage them and send them again)"
        )


def carry_timer(store: str, tmp: str, replaced: list[tuple[int, int]], holes: list[dict], out: CarriedState) -> None:
    """timerlog/ and timerwheel copied; units whose record lies in a replaced range get sizePy 0 (see the module docstring).

    `replaced`: the [start, end) CommitLog ranges the repair overwrote; `holes`: the rebuilt queues' holes.
    config/ (timercheck, timermetrics) is copied with the rest of config/.
    """
    from rmqdump.readers.timerlog import TIMERLOG_DIR, TIMERWHEEL_FILE, read_timercheck, timer_paths

    paths = timer_paths(store)
    if paths["timerlog"] is None and paths["timerwheel"] is None:
        return
    if paths["timerwheel"] is not None:
        copy_file(paths["timerwheel"], os.path.join(tmp, TIMERWHEEL_FILE))
        out.copied.append(TIMERWHEEL_FILE)
    if paths["timerlog"] is not None:
        _copy_tree(paths["timerlog"], os.path.join(tmp, TIMERLOG_DIR))
        out.copied.append(TIMERLOG_DIR)
        if replaced:
            _void_units(store, tmp, replaced, out)
    check = read_timercheck(paths["timercheck"]) if paths["timercheck"] else None
    enqueued = check.values["last_timer_queue_offset"] if check is not None else None
    late = [h for h in holes if h["topic"] == TIMER_TOPIC and (enqueued is None or h["to"] > enqueued)]
    if late:
        out.notes.append(
            f"timer: {TIMER_TOPIC} has holes at queue offsets "
            + ", ".join(f"{h['from']}..{h['to'] - 1}" for h in late)
            + f" the timer has not enqueued yet (its checkpoint is at {enqueued}); its enqueue stops at a hole "
            "(TimerMessageStore.enqueue reads a filler unit's size Integer.MAX_VALUE into a maxMessageSize buffer) "
            "unless the broker runs with timerSkipUnknownError=true until it has passed them"
        )


def _void_units(store: str, tmp: str, replaced: list[tuple[int, int]], out: CarriedState) -> None:
    from rmqdump.readers.timerlog import TIMERLOG_DIR, UNIT_DTYPE, TimerStore
    from rmqdump.schemas.timer import TimerLogUnit

    ts = TimerStore.open(store)
    if ts is None or ts.log is None:
        return
    starts = np.array([a for a, _ in replaced], dtype=np.int64)
    ends = np.array([b for _, b in replaced], dtype=np.int64)
    size_at = sum(UNIT_DTYPE[n].itemsize for n in UNIT_DTYPE.names[: UNIT_DTYPE.names.index("size_py")])
    zero = bytes(UNIT_DTYPE["size_py"].itemsize)
    assert TimerLogUnit.sizeof() == UNIT_DTYPE.itemsize
    try:
        for u in ts.chunks():
            k = np.searchsorted(starts, u.offset_py, side="right") - 1
            kc = np.maximum(k, 0)
            hit = np.flatnonzero((k >= 0) & (u.offset_py < ends[kc]) & (u.size_py != 0))
            for i in hit.tolist():
                f = ts.log.files[int(u.file_index[i])]
                pos = int(u.offset[i]) - f.base
                dst = os.path.join(tmp, TIMERLOG_DIR, os.path.basename(f.path))
                fd = os.open(dst, os.O_WRONLY)
                try:
                    os.pwrite(fd, zero, pos + size_at)
                finally:
                    os.close(fd)
                out.voided_timer_units.append(
                    {
                        "kind": "timer_unit",
                        "timerlog_offset": int(u.offset[i]),
                        "file": os.path.relpath(f.path, store),
                        "offset_py": int(u.offset_py[i]),
                        "size_py_was": int(u.size_py[i]),
                        "range": [int(starts[k[i]]), int(ends[k[i]])],
                    }
                )
    finally:
        ts.close()
    if out.voided_timer_units:
        out.notes.append(
            f"timer: {len(out.voided_timer_units)} timer log units named a destroyed record; their sizePy is now 0 "
            "(the broker reads no message for them and drops them when their time comes)"
        )
