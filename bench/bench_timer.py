"""Benchmark the `timer` commands on a large timer log: units/s and peak RSS.

    python bench/bench_timer.py gen SRC_STORE DEST --units N [--file-units K]
    python bench/bench_timer.py run STORE [--command verify|list|info]

`gen` grows a real timer store (SRC_STORE, e.g. the unpacked rmq53-timer fixture)
to N timer-log units by replicating its units R times with adjusted offsets: copy
r of a unit keeps every field but prevPos, which points at copy r of the same
predecessor, and a chain's first unit of copy r > 0 points at the last unit of
the same slot's chain in copy r - 1. The wheel slot of each chain then holds the
last copy's last unit as lastPos, the first copy's first unit as firstPos and R
times the count; timercheck's lastTimerLogFlushPos moves to the new end. Every
copy points at the same CommitLog records, so the grown store verifies as clean
as the original. K units per timer log file (each file ends with a 52-byte blank
as the broker leaves it). This writer is bench-only code: rmqdump never writes
into a store.

`run` runs the command in a fresh child process under /usr/bin/time -v (its peak
RSS is the command's own) and prints one JSON line: seconds, units/s, peak RSS.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time

import numpy as np

from rmqdump.readers.timerlog import CHECK_DTYPE, SLOT_DTYPE, SLOT_SIZE, UNIT_DTYPE, UNIT_SIZE, TimerStore
from rmqdump.schemas import constants as C


def gen(src: str, dest: str, units: int, file_units: int = 1_000_000) -> dict:
    """Write the grown store at `dest` (which must not exist); returns what was written."""
    ts = TimerStore.open(src)
    rows, offsets = [], []
    for u in ts.chunks():
        rows.append(np.stack([getattr(u, n) for n in UNIT_DTYPE.names if n != "size"], axis=1))
        offsets.append(u.offset)
    orig_off = np.concatenate(offsets)
    base_n = len(orig_off)
    index_of = {int(o): i for i, o in enumerate(orig_off.tolist())}
    orig = np.zeros(base_n, dtype=UNIT_DTYPE)
    cols = np.concatenate(rows)
    for j, n in enumerate(n for n in UNIT_DTYPE.names if n != "size"):
        orig[n] = cols[:, j]
    orig["size"] = UNIT_SIZE
    prev_idx = np.array([index_of.get(int(p), -1) for p in orig["prev_pos"].tolist()], dtype=np.int64)
    # each slot chain of the original: its head (prevPos -1) and its last unit
    chains = {}
    head_last = np.full(base_n, -1, dtype=np.int64)
    for row in ts.slots:
        last = index_of.get(int(row["last_pos"]))
        if last is None:
            continue
        k = last
        while prev_idx[k] >= 0:
            k = int(prev_idx[k])
        head_last[k] = last
        chains[int(row["index"])] = (k, last)
    copies = -(-units // base_n)
    total = copies * base_n
    file_size = (file_units + 1) * UNIT_SIZE  # the last 52 bytes: the blank the broker writes when a unit no longer fits

    def new_off(g: np.ndarray) -> np.ndarray:
        return (g // file_units) * file_size + (g % file_units) * UNIT_SIZE

    shutil.copytree(src, dest, ignore=shutil.ignore_patterns("timerlog", "timerwheel", "timercheck"))
    os.makedirs(os.path.join(dest, "timerlog"))
    for fi in range(-(-total // file_units)):
        g = np.arange(fi * file_units, min(total, (fi + 1) * file_units), dtype=np.int64)
        i, r = g % base_n, g // base_n
        out = orig[i]
        p = prev_idx[i]
        link = (p < 0) & (head_last[i] >= 0) & (r > 0)
        prev = np.full(len(g), -1, dtype=np.int64)
        prev[p >= 0] = new_off(r[p >= 0] * base_n + p[p >= 0])
        prev[link] = new_off((r[link] - 1) * base_n + head_last[i][link])
        out["prev_pos"] = prev
        path = os.path.join(dest, "timerlog", f"{fi * file_size:0{C.COMMITLOG_NAME_DIGITS}d}")
        with open(path, "wb") as f:
            f.write(out.tobytes())
            if len(g) == file_units:
                blank = np.zeros(1, dtype=UNIT_DTYPE)
                blank["size"], blank["magic"] = UNIT_SIZE, C.TIMER_BLANK_MAGIC
                f.write(blank.tobytes())
            f.truncate(file_size)
    # the wheel: a sparse file of the same size, only the non-empty slots written
    wheel = os.path.join(dest, "timerwheel")
    with open(wheel, "wb") as f:
        f.truncate(ts.wheel.size)
        for row in ts.slots:
            s = np.zeros(1, dtype=SLOT_DTYPE)
            for n in SLOT_DTYPE.names:
                s[n] = row[n]
            c = chains.get(int(row["index"]))
            if c is not None:
                head, last = c
                s["first_pos"] = new_off(np.int64(head))
                s["last_pos"] = new_off(np.int64((copies - 1) * base_n + last))
                s["num"] = int(row["num"]) * copies
            f.seek(int(row["index"]) * SLOT_SIZE)
            f.write(s.tobytes())
    with open(os.path.join(src, "config", "timercheck"), "rb") as f:
        raw = bytearray(f.read())
    chk = np.frombuffer(bytes(raw[: CHECK_DTYPE.itemsize]).ljust(CHECK_DTYPE.itemsize, b"\0"), dtype=CHECK_DTYPE).copy()
    last_file = (total - 1) // file_units
    chk["last_timer_log_flush_pos"] = last_file * file_size + (file_size if total % file_units == 0 else (total % file_units) * UNIT_SIZE)
    raw[: CHECK_DTYPE.itemsize] = chk.tobytes()[: len(raw)]
    with open(os.path.join(dest, "config", "timercheck"), "wb") as f:
        f.write(raw)
    ts.close()
    return {"units": total, "copies": copies, "files": -(-total // file_units), "file_size": file_size}


def run(store: str, command: str) -> dict:
    args = {
        "verify": ["timer", "verify", "-s", store, "-f", "jsonl"],
        "list": ["timer", "list", "-s", store, "-f", "jsonl"],
        "info": ["info", "-s", store, "-f", "jsonl", "--no-recovery"],
    }[command]
    code = "from rmqdump.cli.app import main; main()"
    t0 = time.perf_counter()
    p = subprocess.run(["/usr/bin/time", "-v", sys.executable, "-c", code, *args], capture_output=True, text=True)
    dt = time.perf_counter() - t0
    rss_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr).group(1))
    units = None
    last = p.stdout.rstrip("\n").rsplit("\n", 1)[-1] if p.stdout else ""
    if command == "verify" and last:
        units = json.loads(last)["units"]
    elif command == "list":
        units = p.stdout.count("\n")
    elif command == "info":
        units = next(json.loads(x)["units"] for x in p.stdout.splitlines() if '"kind": "timer"' in x or '"kind":"timer"' in x)
    out = {"command": " ".join(["rmqdump", *args]), "exit": p.returncode, "seconds": round(dt, 1), "units": units, "peak_rss_mb": round(rss_kb / 1024, 1)}
    if units:
        out["units_per_s"] = round(units / dt)
    if command == "verify" and last:
        out["problems"] = json.loads(last)["problems"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    g = sub.add_parser("gen")
    g.add_argument("src")
    g.add_argument("dest")
    g.add_argument("--units", type=int, required=True)
    g.add_argument("--file-units", type=int, default=1_000_000)
    r = sub.add_parser("run")
    r.add_argument("store")
    r.add_argument("--command", choices=("verify", "list", "info"), default="verify")
    a = ap.parse_args()
    if a.what == "gen":
        print(json.dumps(gen(a.src, a.dest, a.units, a.file_units)))
    else:
        print(json.dumps(run(a.store, a.command)))


if __name__ == "__main__":
    main()
