"""The physical limits of a whole command on this machine, measured in the same run as the command.

    python bench/bench_limits.py [--store bench/data/gen-1m] [--repeat 3] [--out-dir DIR]

For `export` and `commitlog -f jsonl` (into a pipe), the speed rows this machine may not reach: each command's wall
time and CPU seconds (user + system, from os.wait4: its own threads), beside what the machine itself does in the same
minutes:

- the page cache, read: the CommitLog files read with read() (and mapped with every page touched, as the scan
  reads them), after a warm-up read, in bytes/s;
- the disk, written: the command's own output size written into the page cache (what export does: it syncs only
  the directory) and the same bytes written and fdatasync'd, in bytes/s;
- the cores: os.sched_getaffinity.

The floor of a command is the largest of: its CPU seconds spread perfectly over every core, the CommitLog's bytes
at the page cache's read rate, its output at the buffered write rate. A goal below the floor cannot be met without
doing less work per record; the report says which term binds. MB/s are of CommitLog record bytes (the store's
data end, from `rmqdump info -f jsonl`), never the files' preallocated zeros. Prints a Markdown table and one JSON
line per command.
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RMQDUMP = [sys.executable, "-m", "rmqdump"]
CHUNK = 16 << 20
PAGE = mmap.PAGESIZE


def commitlog_files(store: Path) -> list[Path]:
    return sorted(p for p in (store / "commitlog").iterdir() if p.is_file())


def read_rate(files: list[Path]) -> float:
    """Bytes/s of read() from the page cache (the files were read once before)."""
    buf = bytearray(CHUNK)
    total, t0 = 0, time.perf_counter()
    for f in files:
        with open(f, "rb", buffering=0) as fh:
            while n := fh.readinto(buf):
                total += n
    return total / (time.perf_counter() - t0)


def map_rate(files: list[Path]) -> float:
    """Bytes/s of mapping the files and touching every page (a fresh mapping each time: the page faults are counted)."""
    import numpy as np

    total, t0 = 0, time.perf_counter()
    for f in files:
        with open(f, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as m:
            a = np.frombuffer(m, dtype=np.uint8)
            int(a[::PAGE].sum())
            total += len(a)
            del a
    return total / (time.perf_counter() - t0)


def write_rates(where: Path, size: int) -> tuple[float, float]:
    """(buffered, synced) bytes/s of writing `size` bytes of incompressible data into `where`."""
    block = os.urandom(CHUNK)
    out = []
    for sync in (False, True):
        path = where / f"bench-limits-{os.getpid()}-{int(sync)}"
        t0 = time.perf_counter()
        with open(path, "wb", buffering=0) as fh:
            left = size
            while left > 0:
                left -= fh.write(block[: min(CHUNK, left)])
            if sync:
                os.fdatasync(fh.fileno())
        out.append(size / (time.perf_counter() - t0))
        path.unlink()
    return out[0], out[1]


def run(cmd: list[str], pipe: bool) -> tuple[float, float]:
    """(wall s, CPU s) of one command; with pipe, its stdout read by `cat > /dev/null`. (No peak RSS here: a child's
    ru_maxrss starts from this process's own, which maps the CommitLog to time the page cache; bench_scale has it.)"""
    t0 = time.perf_counter()
    if pipe:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        cat = subprocess.Popen(["cat"], stdin=p.stdout, stdout=subprocess.DEVNULL)
        p.stdout.close()
    else:
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        cat = None
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    if cat:
        cat.wait()
    code = os.waitstatus_to_exitcode(status)
    if code not in (0, 1):
        raise SystemExit(f"{' '.join(cmd)} failed ({code})")
    return wall, ru.ru_utime + ru.ru_stime


def tree_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def data_end(store: Path) -> tuple[int, int]:
    """(messages, record bytes) of the store, from `rmqdump sql` over its messages."""
    q = "SELECT count(*) AS n, sum(total_size) AS b FROM messages"
    out = subprocess.run([*RMQDUMP, "sql", "-s", str(store), "-f", "jsonl", q], capture_output=True, text=True, check=True).stdout
    row = json.loads(out.strip().splitlines()[-1])
    return int(row["n"]), int(row["b"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", default="bench/data/gen-1m")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out-dir", default=None, help="where export writes (default: a temp dir beside the store's filesystem's /tmp)")
    a = ap.parse_args()
    store = Path(a.store)
    files = commitlog_files(store)
    file_bytes = sum(f.stat().st_size for f in files)
    messages, record_bytes = data_end(store)
    cores = len(os.sched_getaffinity(0))
    base = Path(a.out_dir or tempfile.mkdtemp(prefix="bench-limits-"))
    out = base / "exported"
    commands = {
        "export": ([*RMQDUMP, "export", "-s", str(store), "-o", str(out), "--force"], False, 1e9),  # goal: 1 GB/s of records
        "commitlog -f jsonl": ([*RMQDUMP, "commitlog", str(store / "commitlog"), "-f", "jsonl"], True, None),  # goal: 1M msg/s
    }
    read_rate(files)  # warm the page cache
    rows = []
    try:
        for name, (cmd, pipe, goal_bps) in commands.items():
            run(cmd, pipe)  # warm-up
            walls, cpus, reads, maps = [], [], [], []
            for _ in range(a.repeat):
                reads.append(read_rate(files))
                maps.append(map_rate(files))
                w, c = run(cmd, pipe)
                walls.append(w), cpus.append(c)
            written = tree_bytes(out) if name == "export" else 0
            buffered, synced = write_rates(base, max(written, 256 << 20))
            wall, cpu, rd, mp = (statistics.median(x) for x in (walls, cpus, reads, maps))
            terms = {"cpu": cpu / cores, "page cache read": file_bytes / min(rd, mp), "buffered write": written / buffered}
            floor_term = max(terms, key=terms.get)
            goal_s = record_bytes / goal_bps if goal_bps else messages / 1e6
            row = {
                "command": name,
                "wall_s": round(wall, 3),
                "cpu_s": round(cpu, 3),
                "cpu_us_per_record": round(cpu / messages * 1e6, 3),
                "record_mb_s": round(record_bytes / wall / 1e6),
                "messages_per_s": round(messages / wall),
                "cores": cores,
                "page_cache_read_gb_s": round(rd / 1e9, 2),
                "page_cache_map_gb_s": round(mp / 1e9, 2),
                "output_bytes": written,
                "buffered_write_gb_s": round(buffered / 1e9, 2),
                "synced_write_gb_s": round(synced / 1e9, 2),
                "floor_s": round(terms[floor_term], 3),
                "floor_term": floor_term,
                "terms_s": {k: round(v, 3) for k, v in terms.items()},
                "goal_s": round(goal_s, 3),
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        if a.out_dir is None:
            shutil.rmtree(base, ignore_errors=True)
    print(f"\nstore {store}: {messages:,} messages, {record_bytes:,} record bytes, {file_bytes:,} file bytes; {cores} cores; median of {a.repeat}")
    print("| command | wall s | CPU s (us/record) | goal s | floor s (binding term) | CPU / cores s | page cache read GB/s (read, map) | output MB, buffered / synced write GB/s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        t = r["terms_s"]
        print(
            f"| `{r['command']}` | {r['wall_s']} | {r['cpu_s']} ({r['cpu_us_per_record']}) | {r['goal_s']} | {r['floor_s']} ({r['floor_term']}) | "
            f"{t['cpu']} | {r['page_cache_read_gb_s']}, {r['page_cache_map_gb_s']} | {r['output_bytes'] / 1e6:.0f}, {r['buffered_write_gb_s']} / {r['synced_write_gb_s']} |"
        )


if __name__ == "__main__":
    main()
