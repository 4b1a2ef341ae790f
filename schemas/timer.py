"""The 5.x timer message store: timer log units, wheel slots, timercheck.

store/timer/TimerLog.java (UNIT_SIZE = 52, blank record at a file's end),
store/timer/Slot.java + TimerWheel.java (32-byte slots; the first field is
time / timerPrecisionMs, not milliseconds), store/timer/TimerCheckpoint.java
(a 4 KiB mapped file, the first 56 bytes used). All big-endian.
"""

from __future__ import annotations

from construct import Bytes, Int32sb, Int64sb, Struct

from .constants import TIMERCHECK_SIZE

TimerLogUnit = Struct(
    "size" / Int32sb,  # always 52
    "prev_pos" / Int64sb,  # the previous unit of the same wheel slot; -1 ends the chain
    "magic" / Int32sb,  # bit flags: 1 default, 2 roll, 4 delete
    "curr_write_time_ms" / Int64sb,
    "delayed_time_offset" / Int32sb,  # delayedTime - currWriteTime, ms
    "offset_py" / Int64sb,  # the rmq_sys_wheel_timer record in the CommitLog
    "size_py" / Int32sb,
    "hash_code_of_real_topic" / Int32sb,  # String.hashCode() of REAL_TOPIC
    "reserved" / Int64sb,
)
"""One timer log unit; its position in the timer log is its offset (file name + position)."""

TimerLogBlank = Struct(
    "size" / Int32sb,  # bytes left in the file
    "prev_pos" / Int64sb,  # 0
    "magic" / Int32sb,  # TIMER_BLANK_MAGIC
)
"""The end-of-file record written when a unit and this marker no longer fit."""

TimerWheelSlot = Struct(
    "time" / Int64sb,  # timeMs / timerPrecisionMs
    "first_pos" / Int64sb,
    "last_pos" / Int64sb,
    "num" / Int32sb,
    "magic" / Int32sb,
)
"""One wheel slot; slot index = (timeMs / precision) mod slot count, file offset = index * 32."""

_CHECK_FIELDS = [
    "last_read_time_ms" / Int64sb,
    "last_timer_log_flush_pos" / Int64sb,
    "last_timer_queue_offset" / Int64sb,
    "master_timer_queue_offset" / Int64sb,
    "data_version_state_version" / Int64sb,
    "data_version_timestamp" / Int64sb,
    "data_version_counter" / Int64sb,
]

TimerCheck = Struct(*_CHECK_FIELDS, "reserved" / Bytes(TIMERCHECK_SIZE - 8 * len(_CHECK_FIELDS)))
"""config/timercheck."""
