"""A controller-mode (5.x AutoSwitchHA) broker's epoch history: `epochFileCheckpoint` in the store root.

The broker writes it as text (common CheckpointFile + EpochFileCache's serializer): the number of entries, the
CRC32 (& 0x7FFFFFFF) of the entry lines, then one `epoch-startOffset` line per epoch, oldest first. Each epoch ends
where the next starts; the last one at the store's max physical offset. When the file is absent or empty the
broker reads `.bak`; a count or CRC that does not match makes it refuse the file.
"""

from __future__ import annotations

import os
import zlib
from dataclasses import dataclass

EPOCH_FILE = "epochFileCheckpoint"
EPOCH_FILE_DAMAGED = "epoch_file_damaged"  # stable problem code: count or CRC line does not match the entries


@dataclass(frozen=True)
class Epoch:
    epoch: int
    start_offset: int


@dataclass
class EpochFile:
    path: str  # the file read (the .bak when the broker would read that)
    entries: list[Epoch]
    error: str | None = None  # why the broker would refuse it (code EPOCH_FILE_DAMAGED)
    error_offset: int | None = None  # byte offset of the line at fault


def _parse(path: str) -> EpochFile:
    with open(path, "rb") as f:
        raw = f.read()
    lines = raw.decode("utf-8", errors="replace").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) < 2:
        return EpochFile(path, [], "shorter than its count and CRC lines", len(raw))
    try:
        count, crc = int(lines[0]), int(lines[1])
    except ValueError:
        return EpochFile(path, [], "count or CRC line is not a number", 0)
    body_at = len(lines[0]) + len(lines[1]) + 2
    entries = []
    pos = body_at
    for line in lines[2:]:
        epoch, sep, start = line.partition("-")
        try:
            if not sep:
                raise ValueError
            entries.append(Epoch(int(epoch), int(start)))
        except ValueError:
            return EpochFile(path, entries, f"line {line!r} is not epoch-startOffset", pos)
        pos += len(line) + 1
    body = "".join(line + "\n" for line in lines[2:]).encode()
    if len(entries) != count:
        return EpochFile(path, entries, f"count line says {count} entries, {len(entries)} follow", 0)
    if crc != 0 and zlib.crc32(body) & 0x7FFFFFFF != crc:  # 0: written without a CRC
        return EpochFile(path, entries, f"CRC line says {crc}, the entries' CRC32 is {zlib.crc32(body) & 0x7FFFFFFF}", len(lines[0]) + 1)
    return EpochFile(path, entries)


def read_epoch_file(root: str) -> EpochFile | None:
    """The store's epoch history as the broker loads it: the file, else (absent, empty or refused) its .bak;
    None when neither exists. A refused file with no usable .bak comes back with its error."""
    path = os.path.join(root, EPOCH_FILE)
    main = _parse(path) if os.path.isfile(path) else None
    if main is not None and main.entries and main.error is None:
        return main
    bak = _parse(path + ".bak") if os.path.isfile(path + ".bak") else None
    if bak is not None and bak.error is None and (bak.entries or main is None):
        return bak
    return main if main is not None else bak
