"""The physical limits of a whole command on this machine, measured in the same run as the command.

    python bench/bench_limits.py [--store bench/data/gen-1m] [--repeat 3] [--out-dir DIR]
                                 [--salvage DAMAGED [--broker-version 5.3.1]] [--profile]

For `export` and `commitlog -f jsonl` (into a pipe), the speed rows this machine may not reach: each command's wall
time and CPU seconds (user + system, from os.wait4: its own threads), beside what the machine itself does in the same
minutes. With --salvage (a store made by `bench_salvage.py setup`), `rebuild` and `salvage` of that store too, in
turn: salvage's goal is 1.5x the rebuild's wall time of the same run.

- the page cache, read: the CommitLog files read with read() (and mapped with every page touched, as the scan
  reads them), after a warm-up read, in bytes/s;
- the disk, written: the command's own output size written into the page cache (what export does: it syncs only
  the directory) and the same bytes written and fdatasync'd, in bytes/s;
- the cores: os.sched_getaffinity.

Each command's threads are read from /proc while it runs (every 20 ms): the busiest thread's CPU seconds are work
no other core can take over. The floor of a command is the largest of: its CPU seconds spread perfectly over every
core, its busiest thread's CPU seconds, the CommitLog's bytes at the page cache's read rate, its output at the
buffered write rate. A goal below the floor cannot be met without
doing less work per record; the report says which term binds. MB/s are of CommitLog record bytes (the store's
data end, from `rmqdump info -f jsonl`), never the files' preallocated zeros. Prints a Markdown table and one JSON
line per command.

With --profile, each command runs once more under `perf record` (Linux perf, CPU-clock samples of every thread):
where its CPU seconds go, by the library the samples fall in (the text and scan kernels, the CRC, Arrow and Parquet,
sha256, numpy, the Python interpreter, libc, the operating system; the compressors of Parquet's pages, which live in
Arrow's library, by their symbols), in seconds and microseconds per record.
Each command's start-up is the CPU of the same command on a 236-message real store (rmq4-flags), the median of three.

With --parts, the commands that write Parquet (export, salvage) get a second floor: the work no implementation
that scans with rmqdump's kernel and writes with pyarrow can leave out, each part timed alone in a process of its
own (bench_parts.py): the start-up, the scan kernel over every record, pyarrow encoding the command's own output
again (and salvage's sha256 of it), added up and spread perfectly over every core.
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
PARTS_SCRIPT = Path(__file__).resolve().parent / "bench_parts.py"
SMALL = Path(__file__).resolve().parent.parent / "fixtures" / "real" / "rmq4-flags" / "store"  # 236 messages in three small files: start-up
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


def _thread_cpu(pid: int, seen: dict[int, float]) -> None:
    """Each thread's user + system seconds so far (from /proc), into `seen` (a thread gone keeps its last reading)."""
    tick = os.sysconf("SC_CLK_TCK")
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        seen[int(tid)] = (int(fields[11]) + int(fields[12])) / tick  # utime, stime: fields 14 and 15 of stat


def run(cmd: list[str], pipe: bool) -> tuple[float, float, float]:
    """(wall s, CPU s, busiest thread's CPU s) of one command; with pipe, its stdout read by `cat > /dev/null`. (No
    peak RSS here: a child's ru_maxrss starts from this process's own, which maps the CommitLog to time the page
    cache; bench_scale has it.)"""
    t0 = time.perf_counter()
    if pipe:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        cat = subprocess.Popen(["cat"], stdin=p.stdout, stdout=subprocess.DEVNULL)
        p.stdout.close()
    else:
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        cat = None
    threads: dict[int, float] = {}
    while True:
        pid, status, ru = os.wait4(p.pid, os.WNOHANG)
        if pid:
            break
        _thread_cpu(p.pid, threads)
        time.sleep(0.02)
    wall = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    if cat:
        cat.wait()
    if p.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(cmd)} failed ({p.returncode})")
    return wall, ru.ru_utime + ru.ru_stime, max(threads.values(), default=0.0)


PERF_HZ = 999
# Where a sample's library puts it: (label, prefixes of the library's file name), first match wins.
PARTS = [
    ("text kernel (JSON/CSV spelling)", ("rmqdump_text_kernel",)),
    ("scan kernel (walk, checks, columns)", ("rmqdump_scan_kernel",)),
    ("CRC-32 of bodies", ("libdeflate", "libz.")),
    ("Parquet encoding", ("libparquet", "_parquet", "libsnappy", "libzstd", "liblz4")),
    ("Arrow arrays and casts", ("libarrow", "lib.cpython", "_compute")),
    ("sha256", ("libcrypto",)),
    ("numpy", ("_multiarray", "_umath", "libopenblas", "libscipy_openblas")),
    ("Python interpreter (start-up, per-batch steps)", ("libpython", "python3")),
    ("libc (copies, allocation)", ("libc.so", "libc-", "libm.so", "libstdc++", "ld-linux")),
    ("operating system (page faults, reads, writes)", ("[kernel",)),
]


# Code whose library says too little (Arrow's library holds the compressors Parquet's pages use): by symbol, first.
SYMBOL_PARTS = [("Parquet page compression (snappy)", ("snappy", "lz4", "zstd"))]


def part_of(dso: str, symbol: str = "") -> str:
    low = symbol.lower()
    for label, needles in SYMBOL_PARTS:
        if any(n in low for n in needles):
            return label
    for label, prefixes in PARTS:
        if dso.startswith(prefixes):
            return label
    return "other"


def profile(cmd: list[str], pipe: bool, messages: int) -> list[dict]:
    """One more run of `cmd` under perf record: its CPU seconds by part (part_of: SYMBOL_PARTS, then PARTS), largest first."""
    if shutil.which("perf") is None:
        raise SystemExit("--profile needs Linux perf (`perf record`) on PATH")
    with tempfile.TemporaryDirectory(prefix="bench-limits-perf-") as d:
        data = os.path.join(d, "perf.data")
        run(["perf", "record", "-q", "-F", str(PERF_HZ), "-o", data, "--", *cmd], pipe)
        report = subprocess.run(
            ["perf", "report", "-i", data, "-q", "--no-children", "--sort", "dso,sym", "-g", "none", "-F", "sample,dso,sym", "--stdio"],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
    samples: dict[str, int] = {}
    for line in report.splitlines():
        fields = line.split()
        if len(fields) >= 2 and fields[0].isdigit():
            label = part_of(fields[1], " ".join(fields[2:]))
            samples[label] = samples.get(label, 0) + int(fields[0])
    total = sum(samples.values()) or 1
    return [
        {"part": k, "cpu_s": round(v / PERF_HZ, 3), "us_per_record": round(v / PERF_HZ / messages * 1e6, 3), "share": round(v / total, 3)}
        for k, v in sorted(samples.items(), key=lambda kv: -kv[1])
    ]


def part_cpu(part: str, path: Path) -> float:
    """CPU seconds of one part of the work, timed alone (bench_parts.py): the median of three runs."""
    runs = []
    for _ in range(3):
        out = subprocess.run([sys.executable, str(PARTS_SCRIPT), part, str(path)], capture_output=True, text=True, check=True).stdout
        runs.append(json.loads(out)["cpu_s"])
    return statistics.median(runs)


def parts_floor(name: str, store: Path, target: Path, startup: float, cores: int) -> dict:
    """The parts a Parquet-writing command cannot leave out (--parts), their sum and that sum over every core."""
    parts = {"start-up": startup, "scan": part_cpu("scan", store), "encode": part_cpu("encode", target)}
    if name == "salvage":
        parts["sha256"] = part_cpu("sha256", target)
    total = sum(parts.values())
    return {"parts_cpu_s": {k: round(v, 3) for k, v in parts.items()}, "parts_sum_cpu_s": round(total, 3), "parts_floor_s": round(total / cores, 3)}


def command_lines(store: Path, base: Path, damaged: Path | None = None, version: str | None = None) -> dict[str, tuple[list[str], bool, Path | None]]:
    """name -> (command, whether its output goes into a pipe, what it writes): export and JSON Lines of `store`,
    and with `damaged` the rebuild and salvage of that store; outputs under `base`."""
    out = base / "exported"
    lines = {
        "export": ([*RMQDUMP, "export", "-s", str(store), "-o", str(out), "--force"], False, out),
        "commitlog -f jsonl": ([*RMQDUMP, "commitlog", str(store / "commitlog"), "-f", "jsonl"], True, None),
    }
    if damaged is not None:
        extra = ["--broker-version", version] if version else []
        lines["rebuild"] = ([*RMQDUMP, "rebuild", str(damaged), "--out", str(base / "rebuilt"), "--force"], False, base / "rebuilt")
        lines["salvage"] = ([*RMQDUMP, "salvage", str(damaged), "--out", str(base / "salvaged"), "--force", *extra], False, base / "salvaged")
    return lines


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
    ap.add_argument("--salvage", default=None, help="a store made by bench_salvage.py setup: time rebuild and salvage on it too")
    ap.add_argument("--broker-version", default=None, help="passed to salvage (5.3.1: the normal recovery walks the last three files)")
    ap.add_argument("--profile", action="store_true", help="one more run of each command under perf record: where its CPU seconds go")
    ap.add_argument("--parts", action="store_true", help="export and salvage: the parts of their work timed alone (bench_parts.py) and their floor")
    a = ap.parse_args()
    store = Path(a.store)
    files = commitlog_files(store)
    file_bytes = sum(f.stat().st_size for f in files)
    messages, record_bytes = data_end(store)
    cores = len(os.sched_getaffinity(0))
    base = Path(a.out_dir or tempfile.mkdtemp(prefix="bench-limits-"))
    commands = command_lines(store, base)
    small = command_lines(SMALL, base / "small", SMALL if a.salvage else None)  # each command's start-up, on a small real store
    goals = {"export": record_bytes / 1e9, "commitlog -f jsonl": messages / 1e6}  # 1 GB/s of records; 1M msg/s
    sizes = {name: (store, files, file_bytes, messages, record_bytes) for name in commands}
    if a.salvage:
        damaged = Path(a.salvage)
        d_files = commitlog_files(damaged)
        d_sizes = (damaged, d_files, sum(f.stat().st_size for f in d_files), *data_end(damaged))
        commands = command_lines(store, base, damaged, a.broker_version)
        sizes["rebuild"] = sizes["salvage"] = d_sizes
    for _, fs, *_ in sizes.values():
        read_rate(fs)  # warm the page cache
    rows = []
    try:
        for name, (cmd, pipe, target) in commands.items():
            _, fs, f_bytes, msgs, r_bytes = sizes[name]
            run(small[name][0], pipe)  # warm-up
            startup = statistics.median(run(small[name][0], pipe)[1] for _ in range(3))
            run(cmd, pipe)  # warm-up
            walls, cpus, busiest, reads, maps = [], [], [], [], []
            for _ in range(a.repeat):
                reads.append(read_rate(fs))
                maps.append(map_rate(fs))
                w, c, b = run(cmd, pipe)
                walls.append(w), cpus.append(c), busiest.append(b)
            written = tree_bytes(target) if target else 0
            buffered, synced = write_rates(base, max(written, 256 << 20))
            wall, cpu, top, rd, mp = (statistics.median(x) for x in (walls, cpus, busiest, reads, maps))
            if name == "rebuild":
                goals["salvage"] = 1.5 * wall  # salvage's goal: 1.5x the rebuild of the same store, same run
            terms = {"cpu": cpu / cores, "busiest thread": top, "page cache read": f_bytes / min(rd, mp), "buffered write": written / buffered}
            floor_term = max(terms, key=terms.get)
            goal_s = goals.get(name)
            row = {
                "command": name,
                "store": str(sizes[name][0]),
                "wall_s": round(wall, 3),
                "cpu_s": round(cpu, 3),
                "busiest_thread_cpu_s": round(top, 3),
                "cpu_us_per_record": round(cpu / msgs * 1e6, 3),
                "startup_cpu_s": round(startup, 3),
                "record_mb_s": round(r_bytes / wall / 1e6),
                "messages_per_s": round(msgs / wall),
                "cores": cores,
                "page_cache_read_gb_s": round(rd / 1e9, 2),
                "page_cache_map_gb_s": round(mp / 1e9, 2),
                "output_bytes": written,
                "buffered_write_gb_s": round(buffered / 1e9, 2),
                "synced_write_gb_s": round(synced / 1e9, 2),
                "floor_s": round(terms[floor_term], 3),
                "floor_term": floor_term,
                "terms_s": {k: round(v, 3) for k, v in terms.items()},
                "goal_s": None if goal_s is None else round(goal_s, 3),
            }
            if a.parts and name in ("export", "salvage"):
                row.update(parts_floor(name, sizes[name][0], target, startup, cores))
            if a.profile:
                row["profile"] = profile(cmd, pipe, msgs)
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        if a.out_dir is None:
            shutil.rmtree(base, ignore_errors=True)
    for st, _, f_bytes, msgs, r_bytes in {v[0]: v for v in sizes.values()}.values():
        print(f"\nstore {st}: {msgs:,} messages, {r_bytes:,} record bytes, {f_bytes:,} file bytes; {cores} cores; median of {a.repeat}")
    print("| command | wall s | CPU s (us/record) | of which start-up CPU s | busiest thread CPU s | goal s | floor s (binding term) | CPU / cores s | page cache read GB/s (read, map) | output MB, buffered / synced write GB/s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        t = r["terms_s"]
        goal = "-" if r["goal_s"] is None else r["goal_s"]
        print(
            f"| `{r['command']}` | {r['wall_s']} | {r['cpu_s']} ({r['cpu_us_per_record']}) | {r['startup_cpu_s']} | {r['busiest_thread_cpu_s']} | {goal} | {r['floor_s']} ({r['floor_term']}) | "
            f"{t['cpu']} | {r['page_cache_read_gb_s']}, {r['page_cache_map_gb_s']} | {r['output_bytes'] / 1e6:.0f}, {r['buffered_write_gb_s']} / {r['synced_write_gb_s']} |"
        )
    parted = [r for r in rows if "parts_cpu_s" in r]
    if parted:
        print("\nThe parts no implementation with this scan kernel and pyarrow's writer can leave out, each timed alone (CPU s, median of three):\n")
        print("| command | start-up | scan | encode (pyarrow, the command's own output) | sha256 | sum | over every core: floor s | goal s | the command's CPU s |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for r in parted:
            p = r["parts_cpu_s"]
            print(
                f"| `{r['command']}` | {p['start-up']} | {p['scan']} | {p['encode']} | {p.get('sha256', '-')} | {r['parts_sum_cpu_s']} | "
                f"{r['parts_floor_s']} | {r['goal_s']} | {r['cpu_s']} |"
            )
    for r in rows:
        if "profile" in r:
            print(f"\nWhere `{r['command']}`'s CPU goes (one more run under perf record, {PERF_HZ} Hz; {r['cpu_s']} CPU s in the timed runs, {r['startup_cpu_s']} of them the start-up, as on a 236-message store):\n")
            print("| part | CPU s | us/record | share |")
            print("|---|---:|---:|---:|")
            for p in r["profile"]:
                print(f"| {p['part']} | {p['cpu_s']} | {p['us_per_record']} | {p['share']:.0%} |")


if __name__ == "__main__":
    main()
