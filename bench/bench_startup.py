"""Start-up: whole `rmqdump` processes on a 3,000-message real store, warm and with an empty compile cache.

    python bench/bench_startup.py [--repeat 3] [--first] [--store fixtures/real/rmq4-basic/store]

Warm rows: each command runs once (warm-up: the page cache, the compiled code in a cache directory of the
benchmark's own), then `--repeat` times under `/usr/bin/time`; the median wall time and the largest peak RSS
are printed. `--first` adds the first runs after an install: each command alone with a new empty cache
directory (RMQDUMP_CACHE_DIR), as a new user meets it, and the notice lines it printed on stderr.
Bytecode is compiled first (`compileall`), as an installed package has it.
Prints a Markdown table; the machine has 2 cores shared with other work, so figures drift between runs.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STORE = ROOT / "fixtures" / "real" / "rmq4-basic" / "store"
RMQDUMP = str(Path(sys.executable).with_name("rmqdump"))


def commands(store: Path, out: Path) -> dict[str, list[str]]:
    with open(store.parent / "manifest.jsonl", encoding="utf-8") as f:
        key = next(m["keys"][0] for m in map(json.loads, f) if m["keys"])
    first = sorted((store / "commitlog").iterdir())[0]
    return {
        "info": ["info", "-s", str(store)],
        "cq verify": ["cq", "verify", "-s", str(store)],
        f"index lookup {key}": ["index", "lookup", key, "-s", str(store)],
        "commitlog FILE -n 5": ["commitlog", str(first), "-n", "5"],
        "--version": ["--version"],
        "export": ["export", "-s", str(store), "-o", str(out / "export"), "--force"],
        "salvage": ["salvage", str(store), "--out", str(out / "salvage"), "--force"],
    }


def timed(args: list[str], cache: str) -> tuple[float, int, str]:
    """(wall seconds, peak RSS KiB, stderr without the timing line) of one whole process."""
    env = {**os.environ, "RMQDUMP_CACHE_DIR": cache}
    env.pop("NUMBA_CACHE_DIR", None)
    r = subprocess.run(["/usr/bin/time", "-f", "@@ %e %M", RMQDUMP, *args], env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    lines = r.stderr.splitlines()
    wall, rss = lines[-1].split()[1:]
    return float(wall), int(rss), "\n".join(lines[:-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", type=Path, default=STORE)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--first", action="store_true", help="also the first run of each command with an empty cache")
    a = ap.parse_args()
    compileall.compile_dir(str(ROOT / "rmqdump"), quiet=1)
    work = Path(tempfile.mkdtemp(prefix="rmqdump-startup-"))
    try:
        cache = str(work / "cache")
        cmds = commands(a.store, work)
        print("| command | median s | peak RSS MiB |\n|---|---:|---:|")
        for name, args in cmds.items():
            timed(args, cache)  # warm-up (compiles, the first time)
            runs = [timed(args, cache) for _ in range(a.repeat)]
            print(f"| `rmqdump {name}` warm | {statistics.median(w for w, _, _ in runs):.3f} | {max(r for _, r, _ in runs) / 1024:.0f} |", flush=True)
        if a.first:
            for name, args in cmds.items():
                if name == "--version":
                    continue
                fresh = tempfile.mkdtemp(dir=work)
                wall, rss, err = timed(args, fresh)
                said = sum(line.startswith("rmqdump: compiling") for line in err.splitlines())
                print(f"| `rmqdump {name}` first run (empty cache; {said} notice lines) | {wall:.2f} | {rss / 1024:.0f} |", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
