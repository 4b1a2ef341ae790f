"""`rmqdump diff` on the 1M-message store against a copy whose last 1% of messages differ.

    python bench/bench_diff.py [--store bench/data/gen-1m] [--percent 1] [--repeat 3]

The copy (STORE-diverged/) holds the same CommitLog bytes except that each of the last PERCENT % of the
messages carries another UNIQ_KEY (its last hex digit replaced by Z, same length: no other message's key): the same sizes and queue
offsets, other messages, as after a failover where both sides went on writing. Both stores get their
ConsumeQueues from one `rmqdump rebuild` each (STORE-full/, STORE-diverged-full/, beside links to
their commitlog/), so the command reads what it reads on a broker's store.

Figures (page cache warm, each the smallest of --repeat runs):
  hash     CRC32 of both CommitLogs, whole (zlib, 8 MiB reads), in process
  decode   both sides' records from the first differing record on, decoded to the diff's columns, in process
  command  `python -m rmqdump diff A B -f jsonl > /dev/null`, whole process, under /usr/bin/time -v (peak RSS)
  baseline_process  hash then decode as a program of its own (interpreter, imports, kernel load included)
  diff_in_process   diff_stores plus its JSON Lines to /dev/null in the same warm process as hash and decode
The target: command <= 1.2 x (hash + decode); RSS < 500 MB.

    python bench/bench_diff.py --stress [--repeat 1]

Memory whatever the size: two pairs diverging over (nearly) every message, measured as whole commands under
/usr/bin/time -v: `all` (STORE-diverged-100: every message's UNIQ_KEY changed, so both sides hold 1M messages past
the prefix, every queue offset divergent) and `cut` (STORE-cut: the CommitLog's first 10 MiB only, so A holds
~990k messages B has not). `ratio` divides by the in-process figures (no
start-up), `ratio_to_process` by the baseline program; CPU seconds (user + system) are given beside the wall
clock, as a shared machine's load moves the wall clock more.
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
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_STORE = ROOT / "bench" / "data" / "gen-1m"
sys.path.insert(0, str(ROOT))  # this checkout's rmqdump, not an installed one


def rmqdump() -> list[str]:
    return [sys.executable, "-m", "rmqdump"]


def ensure_store(store: Path) -> None:
    if (store / "commitlog").is_dir():
        return
    subprocess.run(
        [sys.executable, str(ROOT / "bench" / "gen_store.py"), str(store), "--size", "2GiB", "--count", "1000000", "--file-size", "1GiB", "--seed", "1"],
        check=True,
    )


def diverge(store: Path, out: Path, percent: float) -> dict:
    """Copy the CommitLog and give each of the last `percent` % of its messages another UNIQ_KEY."""
    from rmqdump.readers.commitlog import CommitLog
    from rmqdump.scan import scanner

    if (out / "commitlog").is_dir():
        return json.loads((out / "diverged.json").read_text())
    tmp = out.parent / (out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "commitlog").mkdir(parents=True)
    cl = CommitLog.open(str(store / "commitlog"))
    total = sum(len(b) for b in scanner.batches(cl, check_crc=False))
    first = total - int(total * percent / 100)
    for f in cl.files:  # sparse like the original (the newest file's unwritten tail is a hole)
        subprocess.run(["cp", "--sparse=always", f.path, str(tmp / "commitlog" / f.name)], check=True)
    seen, at, changed = 0, None, 0
    needle = b"UNIQ_KEY\x01"
    for b in scanner.batches(cl, check_crc=False):
        n = len(b)
        if seen + n > first:
            with open(tmp / "commitlog" / b.seg.name, "r+b") as fh:
                for i in range(max(0, first - seen), n):
                    props = b.properties_bytes(i)
                    j = props.index(needle) + len(needle) + 31  # the key's last hex digit
                    pos = int(b.cols["properties_pos"][i]) + j
                    fh.seek(pos)
                    fh.write(b"Z")  # not a hex digit: no other message's key
                    if at is None:
                        at = int(b.phys[i])
                    changed += 1
        seen += n
    info = {"messages": total, "changed": changed, "first_changed_offset": at}
    (tmp / "diverged.json").write_text(json.dumps(info))
    os.rename(tmp, out)
    return info


def cut(store: Path, out: Path, keep: int = 10 << 20) -> None:
    """A copy whose CommitLog is the first `keep` bytes of the store's (then zeros to the file's size): a lagging slave."""
    if (out / "commitlog").is_dir():
        return
    tmp = out.parent / (out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "commitlog").mkdir(parents=True)
    first = sorted((store / "commitlog").iterdir())[0]
    with open(first, "rb") as src, open(tmp / "commitlog" / first.name, "wb") as dst:
        dst.write(src.read(keep))
        dst.truncate(first.stat().st_size)
    os.rename(tmp, out)


def full_store(store: Path) -> Path:
    full = store.parent / (store.name + "-full")
    if (full / "consumequeue").is_dir():
        return full
    tmp = store.parent / (store.name + "-full.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    r = subprocess.run([*rmqdump(), "rebuild", str(store), "-o", str(tmp), "--no-verify", "-f", "jsonl"], stdout=subprocess.DEVNULL)
    if r.returncode not in (0, 1):  # 1: problems found (the cut copy's torn last record), the queues still built
        raise SystemExit(f"rebuild of {store} failed: exit {r.returncode}")
    os.symlink(os.path.abspath(store / "commitlog"), tmp / "commitlog")
    os.rename(tmp, full)
    return full


def warm(paths: list[Path]) -> None:
    for root in paths:
        for p in sorted(root.rglob("*")):
            if p.is_file():
                with open(p, "rb") as f:
                    while f.read(16 << 20):
                        pass


def hash_both(a: Path, b: Path) -> tuple[float, float]:
    import zlib

    t0, c0 = time.perf_counter(), time.process_time()
    for root in (a, b):
        for p in sorted((root / "commitlog").iterdir()):
            crc = 0
            with open(p, "rb") as f:
                while chunk := f.read(8 << 20):
                    crc = zlib.crc32(chunk, crc)
    return time.perf_counter() - t0, time.process_time() - c0


def decode_both(a: Path, b: Path, start: int) -> tuple[float, float]:
    from rmqdump.checks.diff import decoded_past
    from rmqdump.readers.commitlog import CommitLog

    decoded_past(CommitLog.open(str(a / "commitlog")), start)  # compile the kernel outside the timing
    t0, c0 = time.perf_counter(), time.process_time()
    for root in (a, b):
        table, _, _ = decoded_past(CommitLog.open(str(root / "commitlog")), start)
        table.to_pylist()
    return time.perf_counter() - t0, time.process_time() - c0


def baseline_process(a: Path, b: Path, start: int) -> tuple[float, float]:
    """The same work as a program of its own: interpreter, imports and kernel load included (hash, then decode)."""
    code = (
        f"import sys; sys.path.insert(0, {str(ROOT)!r}); sys.argv = ['x']; import bench_diff as B; from pathlib import Path; "
        f"B.hash_both(Path({str(a)!r}), Path({str(b)!r})); B.decode_once(Path({str(a)!r}), Path({str(b)!r}), {start})"
    )
    t0 = time.perf_counter()
    r = subprocess.run(["/usr/bin/time", "-v", sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT / "bench", check=True)
    wall = time.perf_counter() - t0
    cpu = sum(float(re.search(rf"{k} time \(seconds\): ([\d.]+)", r.stderr).group(1)) for k in ("User", "System"))
    return wall, cpu


def decode_once(a: Path, b: Path, start: int) -> None:
    from rmqdump.checks.diff import decoded_past
    from rmqdump.readers.commitlog import CommitLog

    for root in (a, b):
        decoded_past(CommitLog.open(str(root / "commitlog")), start)[0].to_pylist()


def diff_in_process(a: Path, b: Path) -> tuple[float, float]:
    """diff_stores and its JSON Lines rendered to /dev/null, in this (warm) process: the command without start-up."""
    import contextlib

    from rmqdump.checks.diff import diff_stores
    from rmqdump.cli import render
    from rmqdump.readers.store import Store

    t0, c0 = time.perf_counter(), time.process_time()
    with diff_stores(Store.open(a), Store.open(b)) as d, open(os.devnull, "w") as f, contextlib.redirect_stdout(f):
        for rec in d.records():
            render.jsonl_streamed(rec) if rec.get("kind") == "queue" else render.jsonl(rec)
    return time.perf_counter() - t0, time.process_time() - c0


def command(a: Path, b: Path) -> tuple[float, int, int, float]:
    t0 = time.perf_counter()
    r = subprocess.run(
        ["/usr/bin/time", "-v", *rmqdump(), "diff", str(a), str(b), "-f", "jsonl"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT
    )
    wall = time.perf_counter() - t0
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", r.stderr).group(1))
    cpu = sum(float(re.search(rf"{k} time \(seconds\): ([\d.]+)", r.stderr).group(1)) for k in ("User", "System"))
    return wall, rss, r.returncode, cpu


def stress(store: Path, repeat: int) -> None:
    """Whole commands on pairs diverging over (nearly) every message: wall, CPU and peak RSS."""
    everything = store.parent / (store.name + "-diverged-100")
    diverge(store, everything, 100.0)
    cut(store, store.parent / (store.name + "-cut"))
    pairs = {"all": (full_store(store), full_store(everything)), "cut": (full_store(store), full_store(store.parent / (store.name + "-cut")))}
    for name, (a, b) in pairs.items():
        runs = [command(a, b) for _ in range(repeat)]
        best = min(runs)
        print(json.dumps({"pair": name, "a": str(a), "b": str(b), "command_s": round(best[0], 3), "command_cpu_s": round(best[3], 3),
                          "peak_rss_mb": round(max(r[1] for r in runs) / 1024, 1), "exit": best[2], "load": os.getloadavg()}))  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", type=Path, default=DEFAULT_STORE)
    ap.add_argument("--percent", type=float, default=1.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--stress", action="store_true", help="the two pairs diverging over (nearly) every message, whole commands only")
    args = ap.parse_args()
    ensure_store(args.store)
    if args.stress:
        stress(args.store, args.repeat)
        return
    info = diverge(args.store, args.store.parent / (args.store.name + "-diverged"), args.percent)
    a, b = full_store(args.store), full_store(args.store.parent / (args.store.name + "-diverged"))
    warm([args.store / "commitlog", args.store.parent / (args.store.name + "-diverged") / "commitlog", a / "consumequeue", b / "consumequeue"])
    start = info["first_changed_offset"]
    hashes = [hash_both(a, b) for _ in range(args.repeat)]
    decodes = [decode_both(a, b, start) for _ in range(args.repeat)]
    inproc = [diff_in_process(a, b) for _ in range(args.repeat)]
    runs = [command(a, b) for _ in range(args.repeat)]
    procs = [baseline_process(a, b, start) for _ in range(args.repeat)]
    best = min(runs)
    out = {
        "messages": info["messages"],
        "differing": info["changed"],
        "first_changed_offset": start,
        "hash_s": round(min(h[0] for h in hashes), 3),
        "decode_s": round(min(d[0] for d in decodes), 3),
        "command_s": round(best[0], 3),
        "ratio": round(best[0] / (min(h[0] for h in hashes) + min(d[0] for d in decodes)), 3),
        "diff_in_process_s": round(min(x[0] for x in inproc), 3),
        "diff_in_process_cpu_s": round(min(x[1] for x in inproc), 3),
        "ratio_in_process": round(min(x[0] for x in inproc) / (min(h[0] for h in hashes) + min(d[0] for d in decodes)), 3),
        "hash_cpu_s": round(min(h[1] for h in hashes), 3),
        "decode_cpu_s": round(min(d[1] for d in decodes), 3),
        "command_cpu_s": round(min(r[3] for r in runs), 3),
        "baseline_process_s": round(min(p[0] for p in procs), 3),
        "baseline_process_cpu_s": round(min(p[1] for p in procs), 3),
        "ratio_to_process": round(best[0] / min(p[0] for p in procs), 3),
        "peak_rss_mb": round(max(r[1] for r in runs) / 1024, 1),
        "exit": best[2],
        "load": os.getloadavg(),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
