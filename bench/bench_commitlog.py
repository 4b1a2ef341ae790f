"""CommitLog decode throughput: count-only, CRC, header+properties, JSON Lines, construct.

    python bench/bench_commitlog.py [--store bench/data/gen-1m] [--repeat 3] [--write-results]

The store (a directory holding commitlog/) is made with bench/gen_store.py when
missing: 1,000,000 messages in 1 GiB files (about 1.2 GB of records), the shape
of the broker benchmark the issues cite. Every measurement runs in its own
process so its peak RSS (os.wait4 rusage) is its own; the page cache is warmed
first; each mode runs --repeat times and the fastest run is kept.

Modes:
  count      scanner.batches(CommitLog, check_crc=False), counting records
  crc        scanner.batches(CommitLog, check_crc=True): body CRC of every record checked
  columns    rmqdump.scan.dispatch.dispatch_columns: header columns + properties
             (topic ids, TAGS -> tagsCode, index-key hashes), what every command
             computes with: the header-and-properties scan the target
             (>= 500k messages/s) is about
  message    Batch.message(i) for every record: the full Message object, no output
  cli        `rmqdump commitlog DIR -f jsonl > /dev/null` (subprocess, wall clock)
  construct  schemas.MessageRecord.parse per record on a sample (--sample records)
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rmqdump.scan import scanner

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_STORE = ROOT / "bench" / "data" / "gen-1m"
GEN_ARGS = ["--size", "2GiB", "--count", "1000000", "--file-size", "1GiB", "--seed", "1"]
MODES = ["count", "crc", "columns", "message", "cli", "construct"]
SECTION = "## commitlog"


# --- child side: one measurement in this process -------------------------------------------


def _child(mode: str, commitlog: str, sample: int) -> dict:
    from rmqdump.readers.commitlog import CommitLog
    from rmqdump.scan import scanner

    cl = CommitLog.open(commitlog)
    n = 0
    extra: dict = {}
    t0 = time.perf_counter()
    if mode == "count":
        for b in scanner.batches(cl, check_crc=False):
            n += len(b)
    elif mode == "crc":
        bad = 0
        for b in scanner.batches(cl, check_crc=True):
            n += len(b)
            bad += len(b.record_problems)
        extra["records_with_problems"] = bad
    elif mode == "columns":
        from rmqdump.scan.dispatch import DelayLevels, dispatch_columns

        delays = DelayLevels.parse()
        keys = tagged = 0
        for b in scanner.batches(cl, check_crc=False):
            d = dispatch_columns(b, delays)
            n += len(d)
            keys += len(d.key_rec)
            tagged += int((d.tags_code != 0).sum())
        extra.update(index_keys=keys, tagged=tagged)
    elif mode == "message":
        for b in scanner.batches(cl, check_crc=False):
            for i in range(len(b)):
                b.message(i)
            n += len(b)
    elif mode == "construct":
        from rmqdump.readers.mapped import MappedFile
        from rmqdump.schemas import MessageRecord

        seg = cl.files[0]
        spans = []
        with MappedFile(seg.path) as mf:
            for b in scanner.file_batches_from(seg, mf, check_crc=False):
                c = b.cols
                if len(b):
                    spans.extend(zip(c["_pos"].tolist(), c["total_size"].tolist(), strict=True))
                if len(spans) >= sample:
                    break
            spans = spans[:sample]
            view = mf.view
            t0 = time.perf_counter()
            for p, size in spans:
                MessageRecord.parse(bytes(view[p : p + size]))
            n = len(spans)
            del b, c, view
    else:
        raise ValueError(mode)
    return {"records": n, "seconds": time.perf_counter() - t0, **extra}


# --- parent side ---------------------------------------------------------------------------


def _run_measured(cmd: list[str], stdout) -> tuple[float, int, int]:
    """(wall seconds, exit status, peak RSS bytes) of one child process."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=stdout, stderr=subprocess.PIPE)
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    if proc.returncode not in (0,):
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}: {err[-2000:]}")
    return wall, proc.returncode, ru.ru_maxrss * 1024


def measure(mode: str, commitlog: str, sample: int) -> dict:
    if mode == "cli":
        exe = shutil.which("rmqdump") or sys.executable
        cmd = [exe, "commitlog", commitlog, "-f", "jsonl"] if exe != sys.executable else [exe, "-m", "rmqdump", "commitlog", commitlog, "-f", "jsonl"]
        wall, _, rss = _run_measured(cmd, subprocess.DEVNULL)
        return {"mode": mode, "seconds": wall, "wall": wall, "rss": rss, "command": " ".join(["rmqdump", *cmd[-4:]]) + " > /dev/null"}
    cmd = [sys.executable, __file__, "--child", mode, "--commitlog", commitlog, "--sample", str(sample)]
    with tempfile.TemporaryFile() as out:
        wall, _, rss = _run_measured(cmd, out)
        out.seek(0)
        res = json.loads(out.read())
    return {"mode": mode, "wall": wall, "rss": rss, **res}


def warm(commitlog: str) -> None:
    """Read every file once so the measurements see a warm page cache."""
    for p in sorted(Path(commitlog).iterdir()):
        with open(p, "rb") as f:
            while f.read(16 << 20):
                pass


def machine() -> dict:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import numpy

    mem = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem = int(line.split()[1]) * 1024
    except OSError:
        pass
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "mem_gib": round(mem / (1 << 30), 1),
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "kernel": platform.release(),
        "commit": commit,
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }


def store_facts(commitlog: str) -> dict:
    from rmqdump.readers.commitlog import CommitLog

    cl = CommitLog.open(commitlog)
    n = data = 0
    for b in scanner.batches(cl, check_crc=False):
        n += len(b)
        if len(b):
            data += int(b.cols["total_size"].sum())
    return {"messages": n, "record_bytes": data, "files": len(cl.files), "file_bytes": sum(f.size for f in cl.files), "problems": len(cl.problems)}


def render_section(facts: dict, mach: dict, rows: list[dict], args_line: str, loads: list[float], store: str) -> str:
    mb = facts["record_bytes"] / 1e6
    fsize = facts["file_bytes"] // max(1, facts["files"])
    made = (
        f"store made by `python bench/gen_store.py bench/data/gen-1m {' '.join(GEN_ARGS)}`"
        if Path(store).resolve() == DEFAULT_STORE.resolve()
        else f"store {store}"
    )
    busy = " (other work was running on the machine)" if max(loads) > 1.0 else ""
    lines = [
        SECTION,
        "",
        f"Command: `{args_line}` ({made}).",
        f"Store: {facts['messages']:,} messages, {facts['record_bytes']:,} bytes of records ({mb:,.0f} MB) in {facts['files']} CommitLog files of "
        f"{fsize:,} bytes; bodies 200-1,800 bytes, 1-2 KEYS + UNIQ_KEY each, TAGS on 85%.",
        f"Machine: {mach['nproc']} cores, {mach['cpu']}, {mach['mem_gib']} GiB RAM, Linux {mach['kernel']}, Python {mach['python']}, numpy {mach['numpy']}; "
        f"commit {mach['commit']}; {mach['date']}.",
        f"Warm page cache; each mode in its own process, best of {rows[0]['repeats']} runs; 1-minute load average when the runs started: "
        f"{min(loads):.2f}-{max(loads):.2f}{busy}.",
        "MB = 10^6 bytes of CommitLog records. Peak RSS = the process's maximum resident set (os.wait4), including the mapped pages it touched.",
        "Times are the scan loop's own (interpreter start-up excluded), except `cli`: the whole process, start-up and imports included.",
        "",
        "| mode | what | messages/s | MB/s | time (s) | peak RSS (MB) |",
        "|---|---|---:|---:|---:|---:|",
    ]
    what = {
        "count": "`scanner.batches(CommitLog, check_crc=False)`, count records",
        "crc": "`scanner.batches(CommitLog, check_crc=True)` (body CRC of every record)",
        "columns": "header + properties: `rmqdump.scan.dispatch.dispatch_columns` (columnar: topic ids, tagsCode, index-key hashes)",
        "message": "`Batch.message(i)` for every record (full Message objects, no output)",
        "cli": "`rmqdump commitlog DIR -f jsonl > /dev/null` (whole process, wall clock)",
        "construct": "`MessageRecord.parse` per record (construct), sample",
    }
    for r in rows:
        secs = r["seconds"]
        n = r["records"]
        rate = n / secs if secs else 0
        mbs = rate * facts["record_bytes"] / facts["messages"] / 1e6 if facts["messages"] else 0
        n_note = f" ({n:,} records)" if r["mode"] == "construct" else ""
        lines.append(f"| {r['mode']} | {what[r['mode']]}{n_note} | {rate:,.0f} | {mbs:,.0f} | {secs:.2f} | {r['rss'] / 1e6:,.0f} |")
    lines.append("")
    return "\n".join(lines) + "\n"


def write_section(path: Path, section: str) -> None:
    """Replace (or append) the '## commitlog' section, leaving every other section as it is."""
    text = path.read_text(encoding="utf-8") if path.exists() else "# Benchmarks\n"
    lines = text.splitlines(keepends=True)
    start = next((i for i, ln in enumerate(lines) if ln.rstrip() == SECTION), None)
    if start is None:
        new = text.rstrip("\n") + "\n\n" + section
    else:
        end = next((j for j in range(start + 1, len(lines)) if lines[j].startswith("## ")), len(lines))
        new = "".join(lines[:start]) + section + ("\n" if end < len(lines) else "") + "".join(lines[end:])
    tmp = path.with_name(path.name + f".tmp-{os.getpid()}")
    tmp.write_text(new, encoding="utf-8")
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", default=str(DEFAULT_STORE), help="store root holding commitlog/ (generated when missing)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--sample", type=int, default=50_000, help="records for the construct mode")
    ap.add_argument("--modes", default=",".join(MODES), help=f"comma-separated subset of {','.join(MODES)}")
    ap.add_argument("--write-results", action="store_true", help="replace the '## commitlog' section of bench/RESULTS.md")
    ap.add_argument("--results", default=str(ROOT / "bench" / "RESULTS.md"))
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--commitlog", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        print(json.dumps(_child(a.child, a.commitlog, a.sample)))
        return 0
    modes = [m for m in a.modes.split(",") if m]
    unknown = set(modes) - set(MODES)
    if unknown:
        ap.error(f"unknown modes {sorted(unknown)}")
    store = Path(a.store)
    commitlog = store / "commitlog"
    if not commitlog.is_dir():
        print(f"generating {store} ...", file=sys.stderr, flush=True)
        subprocess.run([sys.executable, str(ROOT / "bench" / "gen_store.py"), str(store), *GEN_ARGS], check=True)
    warm(str(commitlog))
    facts = store_facts(str(commitlog))
    if facts["problems"]:
        print(f"warning: the store has {facts['problems']} layout problems", file=sys.stderr)
    mach = machine()
    print(json.dumps({"store": facts, "machine": mach}), file=sys.stderr)
    rows, loads = [], []
    for mode in modes:
        runs = []
        for _ in range(a.repeat):
            loads.append(os.getloadavg()[0])
            r = measure(mode, str(commitlog), a.sample)
            if mode == "cli":
                r["records"] = facts["messages"]
            runs.append(r)
            print(json.dumps(r), file=sys.stderr, flush=True)
        best = min(runs, key=lambda r: r["seconds"])
        best["rss"] = max(r["rss"] for r in runs)
        best["repeats"] = a.repeat
        rows.append(best)
    argv_line = "python bench/bench_commitlog.py " + " ".join(argv if argv is not None else sys.argv[1:])
    section = render_section(facts, mach, rows, argv_line.strip(), loads, str(store))
    print(section)
    if a.write_results:
        write_section(Path(a.results), section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
