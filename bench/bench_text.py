"""JSON Lines outputs as whole commands: `export -f jsonl` (with and without bodies), `commitlog --body base64` and
`salvage -f jsonl`, each beside the same command of another tree (`--baseline`, run with PYTHONPATH).

    python bench/bench_text.py --store bench/data/gen-1m [--damaged /tmp/dmg-1m --broker-version 5.3.1]
                               [--baseline /tmp/base-tree] [--repeat 3] [--only export-jsonl,...]

Each command runs a warm-up and then `--repeat` times from a temporary directory (outputs removed after each run);
the table gives the median wall time, the largest peak RSS (the process's own, from wait4), the output's size and
the CommitLog record bytes per second. Run it from outside the checkout when a baseline is given, so the
checkout's package does not shadow the baseline's.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_limits import data_end  # noqa: E402  (the record bytes of a store, by its own reader)


def commands(store: Path, damaged: Path | None, version: str | None, out: Path) -> dict[str, tuple[list[str], Path | None]]:
    cmds = {
        "export-jsonl": (["export", "-s", str(store), "-o", str(out), "-f", "jsonl"], out),
        "export-jsonl-body": (["export", "-s", str(store), "-o", str(out), "-f", "jsonl", "--body", "raw"], out),
        "commitlog-base64": (["commitlog", str(store / "commitlog"), "-f", "jsonl", "--body", "base64"], None),
    }
    if damaged is not None:
        cmds["salvage-jsonl"] = (["salvage", str(damaged), "--out", str(out), "-f", "jsonl", *(["--broker-version", version] if version else [])], out)
    return cmds


def run_once(python: str, args: list[str], out: Path | None, env: dict) -> tuple[float, int, int]:
    """(wall seconds, peak RSS bytes, output bytes) of one whole command; stdout to /dev/null unless it is the output."""
    if out is not None and out.exists():
        shutil.rmtree(out)
    t0 = time.perf_counter()
    with open(os.devnull, "wb") as null:
        p = subprocess.Popen([python, "-m", "rmqdump", *args], stdout=null, stderr=subprocess.DEVNULL, env=env)
        _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) not in (0, 1):
        raise SystemExit(f"{args} failed: {status}")
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file()) if out is not None else 0
    if out is not None:
        shutil.rmtree(out)
    return wall, usage.ru_maxrss * 1024, size


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--store", type=Path, required=True)
    ap.add_argument("--damaged", type=Path)
    ap.add_argument("--broker-version")
    ap.add_argument("--baseline", type=Path, help="another tree of rmqdump to time the same commands with")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", default="", help="comma-separated command names")
    a = ap.parse_args()
    record_bytes = data_end(a.store)[1]
    trees = [("this", None)] + ([("baseline", a.baseline)] if a.baseline else [])
    print("| command | tree | median s | runs | peak RSS MiB | output MiB | MB/s of records |")
    print("|---|---|---:|---|---:|---:|---:|")
    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:
        out = Path(tmp) / "out"
        for name, (args, target) in commands(a.store.resolve(), a.damaged, a.broker_version, out).items():
            if a.only and name not in a.only.split(","):
                continue
            for label, tree in trees:
                env = dict(os.environ)
                if tree is not None:
                    env["PYTHONPATH"] = str(tree)
                run_once(sys.executable, args, target, env)  # warm-up
                runs = [run_once(sys.executable, args, target, env) for _ in range(a.repeat)]
                walls = [r[0] for r in runs]
                med = statistics.median(walls)
                rate = "" if name == "salvage-jsonl" else f"{record_bytes / med / 1e6:.0f}"
                print(
                    f"| {name} | {label} | {med:.2f} | {', '.join(f'{w:.2f}' for w in walls)} | {max(r[1] for r in runs) / 2**20:.0f} "
                    f"| {runs[0][2] / 2**20:.0f} | {rate} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
