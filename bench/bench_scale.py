"""Peak memory and time as the store grows, and time as workers are added: whole commands, as a user runs them.

    python bench/bench_scale.py [--stores bench/data/gen-1m,bench/data/gen-4m,bench/data/gen-16m]
                                [--repeat 3] [--rows rebuild,cq-verify,export,report,commitlog-jsonl,index-verify,sql]
                                [--jobs 1,2] [--jobs-store ...]
                                [--anchor] [--write-results]

Stores are made by bench/gen_store.py (1M, 4M, 16M messages: `--count`, default 1 GiB files); `cq verify`
needs ConsumeQueues, so each store gets a `<store>-full/` directory (one `rmqdump rebuild`, next to a link to its
commitlog/) on first use. Each row runs once to warm the page cache, then `--repeat` times under
`/usr/bin/time -v`; the median wall time and the largest peak RSS are reported, with messages/s and MB/s of
CommitLog record bytes (the records' totalSize, never the files' preallocated zeros). `--jobs` runs the rows again
with `-j N` on `--jobs-store` (how time falls with workers). `--anchor` times the broker's own rebuild and recovery
scan on the first store in the same run (shared/broker-oracle/anchor, next to the checkout), for ratios that do not
drift with the machine. `--write-results` appends a section to bench/RESULTS.md.
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
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RMQDUMP = str(Path(sys.executable).parent / "rmqdump")
ANCHOR = ROOT.parent / "shared" / "broker-oracle" / "anchor"


def load() -> float:
    return os.getloadavg()[0]


def timed(cmd: list[str], env: dict | None = None, discard: bool = False) -> tuple[float, int, int, str]:
    """(wall seconds, peak RSS KB, exit code, stdout) of one run under /usr/bin/time -v; `discard`: stdout to /dev/null (a listing of GBs)."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as tf:
        if discard:
            p = subprocess.run(["/usr/bin/time", "-v", "-o", tf.name, *cmd], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
        else:
            p = subprocess.run(["/usr/bin/time", "-v", "-o", tf.name, *cmd], capture_output=True, text=True, env=env)
        text = Path(tf.name).read_text()
    wall = rss = 0.0
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("Elapsed (wall clock) time"):
            t = line.rsplit(" ", 1)[1].split(":")
            wall = sum(float(x) * 60**i for i, x in enumerate(reversed(t)))
        elif line.startswith("Maximum resident set size"):
            rss = int(line.rsplit(" ", 1)[1])
    return wall, int(rss), p.returncode, p.stdout or ""


def record_stats(store: Path) -> tuple[int, int]:
    """(messages, record bytes) of a generated store, from gen_store.py's log or one export-free count."""
    out = subprocess.run([RMQDUMP, "sql", "-s", str(store), "SELECT count(*) AS n, sum(total_size) AS b FROM messages", "-f", "jsonl"], capture_output=True, text=True)
    row = json.loads(out.stdout.splitlines()[0])
    return int(row["n"]), int(row["b"])


def full_store(store: Path) -> Path:
    full = store.parent / (store.name + "-full")
    if not (full / "consumequeue").is_dir():
        tmp = store.parent / (store.name + "-idx")
        shutil.rmtree(tmp, ignore_errors=True)
        subprocess.run([RMQDUMP, "rebuild", str(store), "--out", str(tmp), "--no-sync", "-f", "jsonl"], check=False, capture_output=True)
        full.mkdir(exist_ok=True)
        for part in tmp.iterdir():
            part.rename(full / part.name)
        tmp.rmdir()
        (full / "commitlog").symlink_to(os.path.relpath(store / "commitlog", full))
    return full


def commands(row: str, store: Path, scratch: Path, jobs: int | None) -> tuple[list[str], Path | None]:
    j = ["-j", str(jobs)] if jobs else []
    if row == "rebuild":
        out = scratch / "rebuilt"
        return [RMQDUMP, "rebuild", str(store), "--out", str(out), "-f", "jsonl", *j], out
    if row == "cq-verify":
        return [RMQDUMP, "cq", "verify", "-s", str(full_store(store)), "-f", "jsonl", *j], None
    if row == "export":
        out = scratch / "exported"
        return [RMQDUMP, "export", "-s", str(store), "-o", str(out), *j], out
    if row == "report":  # on the store without ConsumeQueues: a finding per message, the heaviest case for memory
        out = scratch / "report.html"
        return [RMQDUMP, "report", "-s", str(store), "-o", str(out), "--force", *j], None
    if row == "commitlog-jsonl":  # the whole CommitLog listed into a pipe
        return [RMQDUMP, "commitlog", str(store / "commitlog"), "-f", "jsonl"], None
    if row == "sql":  # a GROUP BY over the messages table, bodies decoded (the most memory a messages query needs)
        q = "SELECT topic, count(*) AS n, sum(octet_length(body)) AS body_bytes FROM messages GROUP BY topic"
        return [RMQDUMP, "sql", "-s", str(store), "-f", "jsonl", *j, q], None
    if row == "index-verify":
        return [RMQDUMP, "index", "verify", "-s", str(full_store(store)), "-f", "jsonl", *j], None
    raise ValueError(row)


DISCARD_ROWS = {"commitlog-jsonl"}


def run_row(row: str, store: Path, repeat: int, jobs: int | None, scratch: Path) -> dict:
    cmd, out = commands(row, store, scratch, jobs)
    runs = []
    for i in range(repeat + 1):  # the first run warms the page cache and is not counted
        if out is not None:
            shutil.rmtree(out, ignore_errors=True)
        before = load()
        wall, rss, code, _ = timed(cmd, discard=row in DISCARD_ROWS)
        if code not in (0, 1):
            raise SystemExit(f"{shlex.join(cmd)} exited {code}")
        if i:
            runs.append((wall, rss, before, load()))
    if out is not None:
        shutil.rmtree(out, ignore_errors=True)
    return {
        "row": row,
        "store": store.name,
        "jobs": jobs,
        "command": shlex.join(cmd).replace(str(scratch) + "/", "OUT/").replace(str(ROOT) + "/", "").replace(".venv/bin/", ""),
        "median_s": statistics.median(r[0] for r in runs),
        "min_s": min(r[0] for r in runs),
        "max_s": max(r[0] for r in runs),
        "peak_rss_mb": max(r[1] for r in runs) / 1024,
        "load": [round(min(r[2] for r in runs), 2), round(max(r[3] for r in runs), 2)],
    }


def anchor(mode: str, store: Path, repeat: int) -> dict | None:
    if not ANCHOR.exists():
        return None
    env = dict(os.environ, PYTHON=sys.executable)
    p = subprocess.run([str(ANCHOR), mode, str(store), str(repeat)], capture_output=True, text=True, env=env)
    lines = [json.loads(x) for x in p.stdout.splitlines() if x.startswith("{")]
    if not lines:
        print(f"anchor {mode} failed: {p.stderr[-500:]}", file=sys.stderr)
        return None
    key = "total_ms" if mode == "rebuild" else "load_ms"
    ms = statistics.median(x[key] for x in lines)
    return {"mode": mode, "median_ms": ms, "runs": len(lines), "jvm_peak_rss_mb": max(x.get("peak_rss_kb", 0) for x in lines) / 1024}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stores", default="bench/data/gen-1m,bench/data/gen-4m,bench/data/gen-16m")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--rows", default="rebuild,cq-verify,export")
    ap.add_argument("--jobs", default="", help="worker counts to run the rows with on --jobs-store, e.g. 1,2")
    ap.add_argument("--jobs-store", default="bench/data/gen-4m")
    ap.add_argument("--anchor", action="store_true")
    ap.add_argument("--write-results", action="store_true")
    a = ap.parse_args()
    stores = [ROOT / s for s in a.stores.split(",") if s]
    rows = [r for r in a.rows.split(",") if r]
    results, stats = [], {}
    with tempfile.TemporaryDirectory(dir=ROOT / "bench" / "data") as scratch:
        for store in stores:
            stats[store.name] = record_stats(store)
            for row in rows:
                r = run_row(row, store, a.repeat, None, Path(scratch))
                results.append(r)
                print(json.dumps(r), flush=True)
        for jobs in [int(x) for x in a.jobs.split(",") if x]:
            store = ROOT / a.jobs_store
            stats.setdefault(store.name, record_stats(store))
            for row in rows:
                r = run_row(row, store, a.repeat, jobs, Path(scratch))
                results.append(r)
                print(json.dumps(r), flush=True)
    anchors = []
    if a.anchor:
        for mode in ("rebuild", "recovery"):
            got = anchor(mode, stores[0], a.repeat)
            if got:
                got["store"] = stores[0].name
                anchors.append(got)
                print(json.dumps(got), flush=True)
    if a.write_results:
        write_results(results, anchors, stats, Path(ROOT / "bench" / "RESULTS.md"))


def write_results(results: list[dict], anchors: list[dict], stats: dict, path: Path) -> None:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        f"\n## Scale: 1M, 4M, 16M messages and workers (bench_scale.py), {now}\n",
        f"Commit {commit}; {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
        "whole commands under `/usr/bin/time -v`, one warm-up run then the median of the rest; load = 1-min load average before/after.\n",
        "| command | store | -j | median s | min-max s | msg/s | MB/s of records | peak RSS MB | load |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        n, b = stats[r["store"]]
        lines.append(
            f"| `{r['command']}` | {r['store']} | {r['jobs'] or 'default'} | {r['median_s']:.2f} | {r['min_s']:.2f}-{r['max_s']:.2f} | "
            f"{n / r['median_s']:,.0f} | {b / r['median_s'] / 1e6:,.0f} | {r['peak_rss_mb']:.0f} | {r['load'][0]}-{r['load'][1]} |"
        )
    if anchors:
        lines += ["", "The broker's own code on the same store, in the same run (`shared/broker-oracle/anchor`):", ""]
        for x in anchors:
            n, _ = stats[x["store"]]
            lines.append(f"- {x['mode']} on {x['store']}: median {x['median_ms'] / 1000:.2f} s = {n / (x['median_ms'] / 1000):,.0f} msg/s (JVM peak RSS {x['jvm_peak_rss_mb']:.0f} MB)")
    with open(path, "a", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
