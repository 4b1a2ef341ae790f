"""Every command of issue 9's table, timed as a user runs it, against the broker's figures.

    python bench/bench_commands.py [--store bench/data/gen-1m] [--repeat 3] [--rows ROW,ROW...] [--write-results]

The store is generated on first use (bench/gen_store.py: 1,000,000 messages in two 1 GiB CommitLog files).
Each row is the real command in a subprocess under `/usr/bin/time -v` (peak RSS: the largest process of
the command; for a pipeline, of rmqdump's side), run `--repeat` times; the median wall time is reported
(the pipe reader `cat` included where the row says "into a pipe"). The page cache is warmed first.

Rows (`--rows`, default all): rebuild, rebuild-no-verify, cq-verify, export-local, commitlog-jsonl,
commitlog-table, export-spark, help, compile. `cq verify` needs the store's ConsumeQueues: they come from
one `rmqdump rebuild` of the same store, into bench/data/<store>-full/ next to a link to its commitlog/.
`compile` is the first run after an install: `rmqdump commitlog -f jsonl` and the table on a small real
store with an empty compile cache (RMQDUMP_CACHE_DIR set to a new temporary directory).

Broker figures the ratios are taken against: rebuild 685,000 msg/s (the broker's own dispatch of 1M
messages); the recovery scan with CRC 1,100,000 msg/s (cq verify's reference). --write-results appends a
section to bench/RESULTS.md with the commands, the commit, the machine, the load and the peak RSS.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BROKER_REBUILD = 685_000  # msg/s
BROKER_RECOVERY = 1_100_000  # msg/s, recovery scan with CRC
SMALL_STORE = ROOT / "fixtures" / "real" / "rmq4-basic" / "store"
ROWS = ["rebuild", "rebuild-no-verify", "cq-verify", "export-local", "commitlog-jsonl", "commitlog-table", "export-spark", "help", "compile"]


@dataclass
class Run:
    seconds: float
    rss_kb: int
    code: int
    stdout: str = ""


@dataclass
class Row:
    name: str
    command: str
    unit: str  # "msg/s", "units/s", "MB/s", "s"
    target: float
    broker: float | None = None
    runs: list[Run] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    note: str = ""

    @property
    def value(self) -> float:
        return statistics.median(self.values)

    @property
    def met(self) -> bool:
        return self.value < self.target if self.unit == "s" else self.value >= self.target


def rmqdump() -> list[str]:
    return [sys.executable, "-m", "rmqdump"]


def timed(cmd: list[str], *, pipe: bool = False, capture: bool = False, env: dict | None = None) -> Run:
    """One run of `cmd` under /usr/bin/time -v; with `pipe`, its stdout goes through `cat` to /dev/null."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as tf:
        inner = ["/usr/bin/time", "-v", "-o", tf.name, *cmd]
        if pipe:
            shell = f"set -o pipefail; {shlex.join(inner)} | cat > /dev/null"
            args, kw = ["bash", "-c", shell], {}
        else:
            args, kw = inner, {}
        t0 = time.perf_counter()
        p = subprocess.run(args, stdout=subprocess.PIPE if capture else subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env, **kw)
        seconds = time.perf_counter() - t0
        rss = 0
        for line in tf.read().splitlines():
            if "Maximum resident set size" in line:
                rss = int(line.split(":")[1])
    if p.returncode not in (0, 1):
        sys.exit(f"failed ({p.returncode}): {shlex.join(cmd)}\n{p.stderr[-2000:]}")
    return Run(seconds, rss, p.returncode, p.stdout if capture else "")


def ensure_store(store: Path) -> None:
    if (store / "commitlog").is_dir():
        return
    print(f"generating {store} (1,000,000 messages) ...", file=sys.stderr)
    subprocess.run(
        [sys.executable, str(ROOT / "bench" / "gen_store.py"), str(store), "--size", "2GiB", "--count", "1000000", "--file-size", "1GiB", "--seed", "1"],
        check=True,
    )


def warm(paths: list[Path]) -> None:
    for root in paths:
        for p in sorted(root.rglob("*")):
            if p.is_file():
                with open(p, "rb") as f:
                    while f.read(16 << 20):
                        pass


def full_store(store: Path) -> Path:
    """The store with ConsumeQueues, IndexFiles and checkpoint (from one rebuild), for cq verify."""
    full = store.parent / (store.name + "-full")
    if (full / "consumequeue").is_dir():
        return full
    tmp = store.parent / (store.name + "-full.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    subprocess.run([*rmqdump(), "rebuild", str(store), "-o", str(tmp), "--no-verify", "-f", "jsonl"], check=True, stdout=subprocess.DEVNULL)
    os.symlink(os.path.abspath(store / "commitlog"), tmp / "commitlog")
    os.rename(tmp, full)
    return full


def summary_of(stdout: str) -> dict:
    for line in reversed(stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    return {}


def machine() -> dict:
    cpu = "unknown"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True).stdout.strip()
    return {"nproc": os.cpu_count(), "cpu": cpu, "python": platform.python_version(), "commit": commit + (" (with uncommitted changes)" if dirty else "")}


def precompile() -> None:
    """Byte-compile rmqdump and schemas as a regular pip install does (an editable checkout under
    PYTHONDONTWRITEBYTECODE=1 would otherwise compile every module again in every timed command)."""
    import compileall

    for d in (ROOT / "rmqdump", ROOT / "schemas"):  # rmqdump.schemas is mapped from schemas/ by the build
        compileall.compile_dir(str(d), quiet=1)


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def run_rows(a) -> tuple[list[Row], list[str]]:
    store = Path(a.store)
    ensure_store(store)
    wanted = a.rows.split(",") if a.rows else ROWS
    unknown = set(wanted) - set(ROWS)
    if unknown:
        sys.exit(f"unknown rows: {', '.join(sorted(unknown))} (known: {', '.join(ROWS)})")
    loads = [loadavg()]
    precompile()
    warm([store / "commitlog"])
    work = Path(tempfile.mkdtemp(prefix="bench-commands-", dir=store.parent))
    messages = None
    rows: list[Row] = []
    R = rmqdump()

    def repeat(row: Row, make_cmd, value_of, **kw):
        for k in range(a.repeat):
            cmd = make_cmd(k)
            r = timed(cmd, **kw)
            row.runs.append(r)
            row.values.append(value_of(r))
            print(f"  {row.name} #{k + 1}: {r.seconds:.2f} s, {row.values[-1]:,.1f} {row.unit}, peak RSS {r.rss_kb / 1024:.0f} MB", file=sys.stderr)
        loads.append(loadavg())
        rows.append(row)

    try:
        for name in wanted:
            print(f"{name} (load {loadavg()})", file=sys.stderr)
            if name in ("rebuild", "rebuild-no-verify"):
                extra = [] if name == "rebuild" else ["--no-verify"]
                out = work / "rebuilt"
                row = Row(
                    name,
                    f"rmqdump rebuild {store} --out OUT{' --no-verify' if extra else ''}",
                    "msg/s",
                    BROKER_REBUILD * (1 if name == "rebuild" else 2),
                    BROKER_REBUILD,
                )

                def cmd(k, extra=extra, out=out):
                    shutil.rmtree(out, ignore_errors=True)
                    return [*R, "rebuild", str(store), "--out", str(out), "-f", "jsonl", *extra]

                def val(r):
                    nonlocal messages
                    messages = summary_of(r.stdout).get("messages", messages)
                    return messages / r.seconds

                repeat(row, cmd, val, capture=True)
                shutil.rmtree(out, ignore_errors=True)
                continue
            if messages is None:
                r = timed([*R, "rebuild", str(store), "--out", str(work / "count"), "-f", "jsonl", "--no-verify", "--only", "consumequeue"], capture=True)
                messages = summary_of(r.stdout)["messages"]
                shutil.rmtree(work / "count", ignore_errors=True)
            if name == "cq-verify":
                full = full_store(store)
                warm([full / "consumequeue"])
                row = Row(name, f"rmqdump cq verify -s {full}", "units/s", 2 * BROKER_RECOVERY, BROKER_RECOVERY)
                repeat(row, lambda k, full=full: [*R, "cq", "verify", "-s", str(full), "-f", "jsonl"], lambda r, n=messages: n / r.seconds, capture=True)
            elif name in ("export-local", "export-spark"):
                out = work / "export"
                spark = name == "export-spark"
                eng = ["--engine", "spark", "--master", "local[2]"] if spark else ["--engine", "local"]
                local = next((x for x in rows if x.name == "export-local"), None)
                target = 0.5 * local.value if spark and local else (0.0 if spark else 1000.0)
                row = Row(name, f"rmqdump export -s {store} -o OUT {' '.join(eng)}", "MB/s", target)
                if spark:
                    row.note = "MB/s after the Spark session start (spark_startup_seconds of the export summary taken off)"
                    if not local:
                        row.note += "; no export-local row to set the target (0.5x local)"

                def cmd(k, out=out, eng=eng):
                    shutil.rmtree(out, ignore_errors=True)
                    return [*R, "export", "-s", str(store), "-o", str(out), *eng]

                def val(r, spark=spark):
                    s = summary_of(r.stdout)
                    secs = r.seconds - (s.get("spark_startup_seconds", 0.0) if spark else 0.0)
                    return s["record_bytes"] / secs / 1e6

                repeat(row, cmd, val, capture=True)
                shutil.rmtree(out, ignore_errors=True)
            elif name in ("commitlog-jsonl", "commitlog-table"):
                jsonl = name == "commitlog-jsonl"
                args = [*R, "commitlog", str(store)] + (["-f", "jsonl"] if jsonl else [])
                row = Row(name, shlex.join(["rmqdump", *args[3:]]) + " | cat > /dev/null", "msg/s", 500_000 if jsonl else 200_000)
                repeat(row, lambda k, args=args: args, lambda r, n=messages: n / r.seconds, pipe=True)
            elif name == "help":
                row = Row(name, "rmqdump --help", "s", 0.3)
                repeat(row, lambda k: [*R, "--help"], lambda r: r.seconds)
            elif name == "compile":
                row = Row(name, f"rmqdump commitlog {SMALL_STORE.relative_to(ROOT)} -f jsonl, then the table, with an empty compile cache", "s", float("inf"))
                row.note = "first run after an install: the compiled code is cached for later runs (no target)"

                def first_run(k):
                    cache = tempfile.mkdtemp(prefix="rmqdump-cache-")
                    env = dict(os.environ, RMQDUMP_CACHE_DIR=cache)
                    both = [timed([*R, "commitlog", str(SMALL_STORE), *f], env=env) for f in (["-f", "jsonl"], [])]
                    shutil.rmtree(cache, ignore_errors=True)
                    return Run(sum(x.seconds for x in both), max(x.rss_kb for x in both), 0)

                for k in range(a.repeat):
                    r = first_run(k)
                    row.runs.append(r)
                    row.values.append(r.seconds)
                    print(f"  compile #{k + 1}: {r.seconds:.2f} s", file=sys.stderr)
                rows.append(row)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return rows, loads


def fmt_value(row: Row) -> str:
    return f"{row.value:.2f} s" if row.unit == "s" else f"{row.value:,.0f} {row.unit}"


def table(rows: list[Row]) -> list[str]:
    out = ["| row | command | median (runs) | target | vs broker | vs target | peak RSS |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        runs = ", ".join(f"{x.seconds:.2f}" for x in r.runs)
        target = "-" if r.target == float("inf") else (f"< {r.target} s" if r.unit == "s" else f">= {r.target:,.0f} {r.unit}")
        vs_broker = f"{r.value / r.broker:.2f}x" if r.broker else "-"
        if r.target in (0.0, float("inf")):
            vs_target = "-"
        elif r.unit == "s":
            vs_target = f"{r.target / r.value:.2f}x ({'met' if r.met else 'not met'})"
        else:
            vs_target = f"{r.value / r.target:.2f}x ({'met' if r.met else 'not met'})"
        rss = max((x.rss_kb for x in r.runs), default=0)
        note = f" ({r.note})" if r.note else ""
        command = r.command.replace("|", "\\|")
        out.append(f"| {r.name} | `{command}`{note} | {fmt_value(r)} ({runs} s) | {target} | {vs_broker} | {vs_target} | {rss / 1024:.0f} MB |")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", default=str(ROOT / "bench" / "data" / "gen-1m"), help="store root (generated if it has no commitlog/)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per row (the median is reported)")
    ap.add_argument("--rows", default="", help=f"comma-separated subset of: {','.join(ROWS)}")
    ap.add_argument("--write-results", action="store_true", help="append a section to --results")
    ap.add_argument("--results", default=str(ROOT / "bench" / "RESULTS.md"))
    a = ap.parse_args()
    started = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    rows, loads = run_rows(a)
    lines = table(rows)
    print("\n".join(lines))
    if a.write_results:
        m = machine()
        section = [
            "",
            f"## Whole commands (bench_commands.py), {started}",
            "",
            f"Command: `python bench/bench_commands.py --store {a.store} --repeat {a.repeat}{' --rows ' + a.rows if a.rows else ''}`. "
            f"Commit {m['commit']}; machine: `nproc` {m['nproc']}, {m['cpu']}, Python {m['python']}; load average (1/5/15 min) "
            f"before and after each row: {' -> '.join(loads)}. Median of the runs; warm page cache; peak RSS from `/usr/bin/time -v`.",
            "",
            *lines,
        ]
        with open(a.results, "a", encoding="utf-8") as f:
            f.write("\n".join(section) + "\n")
        print(f"appended to {a.results}", file=sys.stderr)


if __name__ == "__main__":
    main()
