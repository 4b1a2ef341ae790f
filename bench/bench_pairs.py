"""Two trees of rmqdump, or two environments, timed as pairs of whole commands run by turns.

    python bench/bench_pairs.py --baseline DIR [--pairs 7] [--pipe] [--out OUT] -- ARGS...
    python bench/bench_pairs.py --env NAME=VALUE [--pairs 7] [--pipe] [--out OUT] -- ARGS...

Runs `python -m rmqdump ARGS` with this checkout's package and with DIR's (an unpacked `git archive` of another
commit, its compiled kernels copied in), or with this checkout alone without and with the environment variables
`--env` names. Each side once as a warm-up, then `--pairs` pairs, the order swapped every pair, so a machine that
slows or speeds up moves both alike. `--pipe`: stdout into `cat > /dev/null`, as a user's pipe; else /dev/null.
`--out`: removed before each run (a directory the command creates). `{out}` in ARGS is replaced by it.

Every run starts in a fresh temporary directory, never inside a checkout: `python -m` puts the current directory
first on sys.path, so a run started in this checkout imports this checkout's package whatever PYTHONPATH says, and
a baseline run there would time this tree twice.

Prints per side the median wall and CPU seconds (user + system of the command and, with --pipe, of cat) and the
largest peak RSS, then the median of the pairs' ratios (B/A, B being this tree or the environment given), which
drifts far less than either side's median on this machine.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def one(args: list[str], package: Path, env_extra: dict[str, str], pipe: bool, out: str | None) -> tuple[float, float, int]:
    """(wall s, CPU s, peak RSS MiB) of one whole command, run from a fresh temporary directory."""
    if out:
        shutil.rmtree(out, ignore_errors=True)
    env = {**os.environ, "PYTHONPATH": str(package), **env_extra}
    cmd = [sys.executable, "-m", "rmqdump", *(a.replace("{out}", out or "") for a in args)]
    with tempfile.TemporaryDirectory(prefix="bench-pairs-") as cwd:
        rss_file = os.path.join(cwd, ".time")  # /usr/bin/time's own output, in the run's own directory
        timed = ["/usr/bin/time", "-f", "%e %M", "-o", rss_file, *cmd]
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        if pipe:
            p = subprocess.Popen(timed, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=cwd, env=env)
            cat = subprocess.run(["cat"], stdin=p.stdout, stdout=subprocess.DEVNULL, check=False)
            p.stdout.close()
            code = p.wait()
            assert cat.returncode == 0
        else:
            code = subprocess.run(timed, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=cwd, env=env, check=False).returncode
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        if code not in (0, 1):
            raise SystemExit(f"{' '.join(cmd)} exited {code}")
        with open(rss_file) as f:
            wall, rss = f.read().split()[-2:]
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    return float(wall), cpu, int(rss) // 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    side = ap.add_mutually_exclusive_group(required=True)
    side.add_argument("--baseline", type=Path, help="another tree holding rmqdump/ (side A); side B is this checkout")
    side.add_argument("--env", action="append", help="NAME=VALUE set on side B only (both sides run this checkout)")
    ap.add_argument("--pairs", type=int, default=7)
    ap.add_argument("--pipe", action="store_true", help="stdout into cat > /dev/null")
    ap.add_argument("--out", help="an output path removed before each run; {out} in the arguments")
    ap.add_argument("args", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    args = a.args[1:] if a.args[:1] == ["--"] else a.args
    if a.baseline is not None and not (a.baseline / "rmqdump" / "__init__.py").exists():
        raise SystemExit(f"{a.baseline}: no rmqdump/ package there")
    sides = {
        "A": (a.baseline or ROOT, {}),
        "B": (ROOT, dict(kv.split("=", 1) for kv in a.env or [])),
    }
    for package, extra in sides.values():  # warm-up: the page cache, each tree's bytecode
        one(args, package, extra, a.pipe, a.out)
    runs: dict[str, list[tuple[float, float, int]]] = {"A": [], "B": []}
    for i in range(a.pairs):
        for name in ("A", "B") if i % 2 == 0 else ("B", "A"):
            runs[name].append(one(args, *sides[name], a.pipe, a.out))
    if a.out:
        shutil.rmtree(a.out, ignore_errors=True)
    label = {"A": str(a.baseline or "this tree"), "B": "this tree" + (f" with {' '.join(a.env)}" if a.env else "")}
    print(f"`rmqdump {' '.join(args)}`{' into a pipe' if a.pipe else ''}, {a.pairs} pairs")
    print("| side | median wall s | median CPU s | peak RSS MiB | walls |\n|---|---:|---:|---:|---|")
    for name, rs in runs.items():
        walls = ", ".join(f"{w:.2f}" for w, _, _ in rs)
        print(f"| {name}: {label[name]} | {statistics.median(w for w, _, _ in rs):.3f} | {statistics.median(c for _, c, _ in rs):.3f} | {max(r for _, _, r in rs)} | {walls} |")
    wall = statistics.median(b[0] / x[0] for x, b in zip(runs["A"], runs["B"], strict=True))
    cpu = statistics.median(b[1] / x[1] for x, b in zip(runs["A"], runs["B"], strict=True))
    print(f"\nB/A, median of the pairs: wall {wall:.3f}x, CPU {cpu:.3f}x")


if __name__ == "__main__":
    sys.exit(main())
