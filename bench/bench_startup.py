"""Start-up: whole `rmqdump` processes on a 3,000-message real store, warm and with an empty compile cache.

    python bench/bench_startup.py [--repeat 3] [--first] [--store fixtures/real/rmq4-basic/store]
    python bench/bench_startup.py --baseline DIR [--repeat 5] [--only info --only "cq verify"]

Warm rows: each command runs once (warm-up: the page cache, the compiled code in a cache directory of the
benchmark's own, and the ahead-of-time kernel that run starts building, waited for), then `--repeat` times under
`/usr/bin/time`; the median wall time and the largest peak RSS are printed, with the ahead-of-time kernel
(what a user meets from the second run on) and with `RMQDUMP_AOT=off` (numba's cached JIT kernel). `--first` adds the first runs after an install: each command alone with a new empty cache
directory (RMQDUMP_CACHE_DIR), as a new user meets it, and the notice lines it printed on stderr.
Bytecode is compiled first (`compileall`), as an installed package has it.
`--baseline DIR` compares this tree with another copy of the package (DIR holds its `rmqdump/`, e.g. an unpacked
`git archive`, with the same kernel source so both use one ahead-of-time kernel): the two run by turns, command by
command, each as `python -m rmqdump` (its own entry), so a busy machine slows both alike; the table gives each side's median wall time and median CPU time (user +
system), which drifts less with load. Prints a Markdown table; the machine has 2 cores shared with other work, so
figures drift between runs.
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
import time
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


def timed(args: list[str], cache: str, aot: bool = True, package: Path | None = None, as_module: bool = False) -> tuple[float, int, str, float]:
    """(wall seconds, peak RSS KiB, stderr without the timing line, CPU seconds) of one whole process; `package`: a
    directory whose rmqdump/ is imported instead of this tree's; `as_module`: run as `python -m rmqdump` (each tree's
    own entry: the console script names this tree's, which an older tree may not have)."""
    env = {**os.environ, "RMQDUMP_CACHE_DIR": cache, "RMQDUMP_AOT": "on" if aot else "off"}
    env.pop("NUMBA_CACHE_DIR", None)
    if package is not None:
        env["PYTHONPATH"] = str(package)
    entry = [sys.executable, "-m", "rmqdump"] if as_module else [RMQDUMP]
    # run outside the checkout: a background build the baseline starts (`python -m`) imports its own tree, not this one
    r = subprocess.run(["/usr/bin/time", "-f", "@@ %e %M %U %S", *entry, *args], env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL, cwd=tempfile.gettempdir())
    if r.returncode not in (0, 1):  # 1: problems found (salvage: messages to re-send)
        raise SystemExit(f"{' '.join(args)} ({package or 'this tree'}) exited {r.returncode}: {r.stderr.strip()[-500:]}")
    lines = r.stderr.splitlines()
    wall, rss, user, system = lines[-1].split()[1:]
    return float(wall), int(rss), "\n".join(lines[:-1]), float(user) + float(system)


def compare(cmds: dict[str, list[str]], cache: str, baseline: Path, repeat: int) -> None:
    """This tree beside `baseline`, by turns, with the ahead-of-time kernel: medians of wall and CPU seconds."""
    print("| command | baseline wall s | this wall s | baseline CPU s | this CPU s |\n|---|---:|---:|---:|---:|")
    for name, args in cmds.items():
        for package in (baseline, None):
            timed(args, cache, package=package, as_module=True)  # warm-up
            wait_builds(cache)
        runs: dict = {baseline: [], None: []}
        for i in range(repeat):
            for package in ((baseline, None) if i % 2 == 0 else (None, baseline)):
                runs[package].append(timed(args, cache, package=package, as_module=True))
        med = {k: (statistics.median(r[0] for r in v), statistics.median(r[3] for r in v)) for k, v in runs.items()}
        print(f"| `rmqdump {name}` | {med[baseline][0]:.3f} | {med[None][0]:.3f} | {med[baseline][1]:.3f} | {med[None][1]:.3f} |", flush=True)


def wait_builds(cache: str, limit: float = 900) -> None:
    """Until no ahead-of-time kernel build is running in `cache` (its lock file gone)."""
    deadline = time.time() + limit
    while list(Path(cache).rglob("aot-*.lock")) and time.time() < deadline:
        time.sleep(1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", type=Path, default=STORE)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--first", action="store_true", help="also the first run of each command with an empty cache")
    ap.add_argument("--baseline", type=Path, help="a directory holding another rmqdump/ to run by turns with this tree")
    ap.add_argument("--only", action="append", help="only the commands whose name starts with this (repeatable)")
    a = ap.parse_args()
    for tree in (ROOT, a.baseline):  # with rmqdump.schemas, which the build maps from schemas/
        for package in (tree / "rmqdump", tree / "schemas") if tree is not None else ():
            compileall.compile_dir(str(package), quiet=1)
    work = Path(tempfile.mkdtemp(prefix="rmqdump-startup-"))
    try:
        cache = str(work / "cache")
        cmds = {k: v for k, v in commands(a.store, work).items() if not a.only or k.startswith(tuple(a.only))}
        if a.baseline is not None:
            compare(cmds, cache, a.baseline.resolve(), a.repeat)
            return
        print("| command | median s | peak RSS MiB |\n|---|---:|---:|")
        for aot in (True, False):
            for name, args in cmds.items():
                timed(args, cache, aot)  # warm-up (compiles, the first time)
                wait_builds(cache)
                runs = [timed(args, cache, aot) for _ in range(a.repeat)]
                kind = "warm, ahead-of-time kernel" if aot else "warm, RMQDUMP_AOT=off"
                print(f"| `rmqdump {name}` {kind} | {statistics.median(w for w, _, _, _ in runs):.3f} | {max(r for _, r, _, _ in runs) / 1024:.0f} |", flush=True)
        if a.first:
            for name, args in cmds.items():
                if name == "--version":
                    continue
                fresh = tempfile.mkdtemp(dir=work)
                wall, rss, err, _ = timed(args, fresh)
                wait_builds(fresh)  # the background build it started is not part of its time, nor of the next row's
                said = sum(line.startswith("rmqdump: compiling") for line in err.splitlines())
                print(f"| `rmqdump {name}` first run (empty cache; {said} notice lines) | {wall:.2f} | {rss / 1024:.0f} |", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
