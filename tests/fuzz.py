"""Every reader fuzzed as a user meets it: through the commands, on damaged copies of a real store.

Each target damages one kind of file of a copy of a real store (rmq4-flags, rmq4-basic for the consumer
offsets; the 5.x stores for batch ConsumeQueues, ConsumeQueue ext, LMQ queues, the RocksDB ConsumeQueue,
the timer log, wheel and timercheck, DLedger entries and their index), runs a command in-process, and checks:
- the exit code is 0, 1 or 2, and nothing escaped as a traceback (nor as `internal_error`);
- the command finished within a time limit (no hang);
- the process's peak RSS stayed under 500 MB (whatever a size field says);
- what it listed is exactly what the damaged bytes hold, read here with struct (or the library that wrote
  them): no intact record, unit or entry lost, none invented; what it verified names each damaged unit.

CI runs a fixed-seed share of this (tests/test_fuzz_readers.py). For a long run:

    python tests/fuzz.py --cases 100000            # spread over every reader
    python tests/fuzz.py --reader index --cases 20000 --seed 7
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import resource
import shutil
import signal
import struct
import sys
import tempfile
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from rmqdump.schemas import Checkpoint, ConsumeQueueUnit, IndexEntry, IndexHeader, IndexSlot, SparseConsumeQueueUnit, message_header  # noqa: E402
from rmqdump.schemas import constants as C  # noqa: E402

REAL = ROOT / "fixtures" / "real"
RSS_LIMIT = 500 << 20
CASE_SECONDS = 20.0  # a case that runs longer than this is a hang (the slowest command here takes well under 1 s)


class Hang(BaseException):
    """Raised by the per-case alarm; a BaseException so the CLI's error guard does not turn it into a message."""


class FuzzFailure(AssertionError):
    pass


@dataclass
class Outcome:
    code: int
    stdout: str
    stderr: str

    def rows(self, kind: str | None = None) -> list[dict]:
        out = [json.loads(x) for x in self.stdout.splitlines() if x.startswith("{")]
        return out if kind is None else [r for r in out if r.get("kind") == kind]


_RUNNER = None


def _runner():
    """typer's CliRunner, with the click command built once: typer rebuilds it on every invoke (~100 ms)."""
    global _RUNNER
    if _RUNNER is None:
        import typer.testing

        from rmqdump.cli.app import app

        built = typer.testing._get_command(app)
        original = typer.testing._get_command
        typer.testing._get_command = lambda a: built if a is app else original(a)
        _RUNNER = (typer.testing.CliRunner(), app)
    return _RUNNER


def _on_alarm(signum, frame):
    raise Hang()


def peak_rss() -> int:
    """This process's peak RSS since the last reset_peak_rss() (VmHWM), else since it started."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def current_rss() -> int:
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


_BASELINE: list[int] = []
MAX_GROWTH = [0]  # RSS before the first command: the interpreter and libraries, as a fresh rmqdump has them

_FRESH_PEAK = """
import atexit, resource, runpy, sys


def peak():  # at exit, which rmqdump's own exit path runs too
    sys.stdout.flush()
    hwm = [line for line in open("/proc/self/status") if line.startswith("VmHWM:")]  # ru_maxrss would count the forking parent
    sys.stderr.write("%d\\n" % (int(hwm[0].split()[1]) * 1024 if hwm else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024))
    sys.stderr.flush()


atexit.register(peak)
sys.argv = ["rmqdump", "commitlog", sys.argv[1], "-f", "jsonl", "-n", "1"]
runpy.run_module("rmqdump", run_name="__main__")
"""


def fresh_baseline() -> int:
    """Peak RSS of a fresh rmqdump process that scanned a record (interpreter, libraries, compiled kernels).

    The fuzzing process itself may have grown far beyond that (under pytest, after other tests), so its own RSS
    is not what a user's process starts from."""
    import subprocess

    store = ROOT / "fixtures" / "real" / "rmq4-flags" / "store"
    peaks = []
    for _ in range(2):  # the first run may compile the kernels into the cache; a user's later runs start from the second
        r = subprocess.run([sys.executable, "-c", _FRESH_PEAK, str(store)], capture_output=True, text=True, timeout=600)
        peaks.append(int(r.stderr.strip().splitlines()[-1]))
    return peaks[-1]


def reset_peak_rss() -> None:
    """Start a new peak (Linux: writing 5 to clear_refs resets VmHWM), so each case is measured on its own."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
            f.write("5")
    except OSError:
        pass


def invoke(*args: str) -> Outcome:
    """Run one command in-process under the time limit, and check the properties every command owes."""
    runner, app = _runner()
    if not _BASELINE:
        _BASELINE.append(fresh_baseline())
    reset_peak_rss()
    before = current_rss()
    old = signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, CASE_SECONDS)
    try:
        r = runner.invoke(app, [str(a) for a in args], catch_exceptions=True)
    except Hang:
        raise FuzzFailure(f"hang: rmqdump {' '.join(map(str, args))} ran over {CASE_SECONDS} s") from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    if isinstance(r.exception, Hang):
        raise FuzzFailure(f"hang: rmqdump {' '.join(map(str, args))} ran over {CASE_SECONDS} s")
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        import traceback

        tb = "".join(traceback.format_exception(r.exception))
        raise FuzzFailure(f"traceback from rmqdump {' '.join(map(str, args))}:\n{tb}")
    out, err = r.stdout, r.stderr
    if r.exit_code not in (0, 1, 2):
        raise FuzzFailure(f"exit {r.exit_code} from rmqdump {' '.join(map(str, args))}: {err[-2000:]}")
    if "Traceback" in err or "internal_error" in err:
        raise FuzzFailure(f"rmqdump {' '.join(map(str, args))}: {err[-3000:]}")
    if r.exit_code == 2 and len([x for x in err.splitlines() if x.strip()]) != 1:
        raise FuzzFailure(f"exit 2 without exactly one error line from rmqdump {' '.join(map(str, args))}: {err[-2000:]}")
    # What this command added to the process, on top of a fresh process's baseline: the long-lived
    # fuzzing process keeps freed heap (glibc does not give it all back), which is not the command's.
    grown = peak_rss() - before
    MAX_GROWTH[0] = max(MAX_GROWTH[0], grown)
    if _BASELINE[0] + grown > RSS_LIMIT:
        raise FuzzFailure(f"peak RSS {(_BASELINE[0] + grown) >> 20} MiB (baseline {_BASELINE[0] >> 20} + {grown >> 20}) in rmqdump {' '.join(map(str, args))}")
    return Outcome(r.exit_code, out, err)


# --- damage --------------------------------------------------------------------------------------


def damage(size: int, tail: int = 64) -> st.SearchStrategy:
    """A list of edits to a file of `size` bytes: overwrite, zero, flip, truncate, extend."""
    pos = st.integers(0, size + tail)
    edit = st.one_of(
        st.tuples(st.just("write"), pos, st.binary(min_size=1, max_size=24)),
        st.tuples(st.just("zero"), pos, st.integers(1, max(1, size // 4))),
        st.tuples(st.just("fill"), pos, st.integers(1, 64), st.sampled_from([0xFF, 0x7F, 0x80])),
        st.tuples(st.just("flip"), pos, st.integers(1, 255)),
        st.tuples(st.just("truncate"), st.integers(0, size)),
        st.tuples(st.just("extend"), st.binary(min_size=1, max_size=64)),
    )
    return st.lists(edit, min_size=0, max_size=4)


def apply(data: bytes, edits) -> bytes:
    b = bytearray(data)
    for e in edits:
        op = e[0]
        if op == "write":
            p, x = e[1], e[2]
            if p > len(b):
                b.extend(bytes(p - len(b)))
            b[p : p + len(x)] = x
        elif op == "zero":
            p, n = e[1], e[2]
            if p < len(b):
                b[p : p + n] = bytes(min(n, len(b) - p))
        elif op == "fill":
            p, n, v = e[1], e[2], e[3]
            if p < len(b):
                b[p : p + n] = bytes([v]) * min(n, len(b) - p)
        elif op == "flip":
            p, m = e[1], e[2]
            if p < len(b):
                b[p] ^= m
        elif op == "truncate":
            del b[e[1] :]
        elif op == "extend":
            b.extend(e[1])
    return bytes(b)


def write(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)


# --- targets -------------------------------------------------------------------------------------


@dataclass
class Target:
    name: str
    setup: Callable[[Path], dict]
    strategy: Callable[[dict], st.SearchStrategy]
    case: Callable[[dict, object], None]


def _copy_store(name: str, ws: Path, parts: tuple[str, ...] | None = None) -> Path:
    src = REAL / name / "store"
    dst = ws / name / "store"
    if parts is None:
        shutil.copytree(src, dst)
    else:
        dst.mkdir(parents=True)
        for p in parts:
            if (src / p).is_dir():
                shutil.copytree(src / p, dst / p)
            elif (src / p).exists():
                shutil.copy2(src / p, dst / p)
    return dst


# ConsumeQueue: `cq dump` lists every complete 20-byte unit of the queue's files up to the queue's end (its
# last valid unit, where ConsumeQueue.recover ends it), then one line counting the units after it; `--all`
# lists those too. `cq verify` reports every unit whose bytes changed, at that unit; `cq seek` answers what
# a binary search over the damaged units, with each record's store time from the manifest, answers.

CQ_TOPIC, CQ_QUEUE = "FlagTopic", 0
CQ_UNIT = ConsumeQueueUnit.sizeof()
CQ_STRUCT = struct.Struct(">qiq")  # commitLogOffset, size, tagsCode
CQ_FILLER = (0, 0x7FFFFFFF, 0)  # what the broker writes before a queue's first unit when its min offset is corrected


def _manifest(name: str) -> list[dict]:
    return [json.loads(x) for x in (REAL / name / "manifest.jsonl").read_text(encoding="utf-8").splitlines()]


def cq_setup(ws: Path) -> dict:
    store = _copy_store("rmq4-flags", ws, ("commitlog", "consumequeue"))
    qdir = store / "consumequeue" / CQ_TOPIC / str(CQ_QUEUE)
    f = qdir / ("0" * 20)
    assert [p.name for p in qdir.iterdir()] == [f.name], "the fuzzed queue has one file"
    stamps = {m["wroteOffset"]: m["storeTimestamp"] for m in _manifest("rmq4-flags")}
    return {"store": store, "qdir": qdir, "file": f, "orig": f.read_bytes(), "stamps": stamps}


def cq_strategy(ctx: dict) -> st.SearchStrategy:
    n = len(ctx["orig"])
    times = sorted(ctx["stamps"].values())
    return st.tuples(
        damage(n, tail=3 * CQ_UNIT),
        st.sampled_from(["dump", "dump", "all", "window", "verify", "seek"]),
        st.integers(0, n // CQ_UNIT + 2),
        st.integers(1, 50),
        st.one_of(st.integers(0, 1 << 42), st.sampled_from(times), st.sampled_from(times).map(lambda t: t + 1)),
    )


def _cq_units(data: bytes) -> list[tuple[int, int, int]]:
    return [CQ_STRUCT.unpack_from(data, i) for i in range(0, len(data) - CQ_UNIT + 1, CQ_UNIT)]


def _cq_valid(u: tuple[int, int, int]) -> bool:
    return u[0] >= 0 and u[1] > 0  # ConsumeQueue.recover: offset >= 0 and size > 0


def cq_case(ctx: dict, ex) -> None:
    edits, mode, start, limit, when = ex
    data = apply(ctx["orig"], edits)
    write(ctx["file"], data)
    s = str(ctx["store"])
    q = ["--topic", CQ_TOPIC, "--queue", str(CQ_QUEUE)]
    units = _cq_units(data)
    valid = [i for i, u in enumerate(units) if _cq_valid(u)]
    end = valid[-1] + 1 if valid else 0  # the queue's end: after its last valid unit
    if mode == "verify":
        return _cq_verify_case(ctx, data, units, invoke("cq", "verify", "-s", s, *q, "-f", "jsonl"))
    if mode == "seek":
        return _cq_seek_case(ctx, units, valid, when, invoke("cq", "seek", "-s", s, *q, "--time", str(when), "-f", "jsonl"))
    extra = {"window": ["--from", str(start), "--limit", str(limit)], "all": ["--all"]}.get(mode, [])
    o = invoke("cq", "dump", "-s", s, *q, "-f", "jsonl", *extra)
    shown = units if mode == "all" else units[:end]
    want = [{"unit_index": i, "file_offset": i * CQ_UNIT, "phys_offset": u[0], "size": u[1], "tags_code": u[2]} for i, u in enumerate(shown)]
    if mode == "window":
        want = [w for w in want if w["unit_index"] >= start][:limit]
    got = [{k: r[k] for k in ("unit_index", "file_offset", "phys_offset", "size", "tags_code")} for r in o.rows("unit")]
    if got != want:
        raise FuzzFailure(f"cq dump listed {len(got)} units, the file holds {len(want)} (first difference: {_first_diff(got, want)})")
    tails = [(r["first_unit"], r["units"]) for r in o.rows("unwritten")]
    want_tail = [] if mode == "window" and len(want) >= limit else [(end, len(units) - end)]
    if tails != want_tail or (tails and o.stdout.rstrip("\n").rsplit("\n", 1)[-1].find('"unwritten"') < 0):
        raise FuzzFailure(f"cq dump's closing line: {tails}, the file has {len(units) - end} units after its end at {end}")
    if o.code != (0 if want else 1):
        raise FuzzFailure(f"cq dump exit {o.code} with {len(want)} units")


def _cq_verify_case(ctx: dict, data: bytes, units: list, o: Outcome) -> None:
    """Every unit whose 20 bytes changed (or are gone) is named by a problem at that unit: its index, in its file."""
    if o.code == 2:
        raise FuzzFailure(f"cq verify refused a damaged queue: {o.stderr.strip()}")
    orig = _cq_units(ctx["orig"])
    changed = {i for i in range(max(len(orig), len(units))) if (orig[i] if i < len(orig) else None) != (units[i] if i < len(units) else None)}
    # a unit that stays all zeros past the queue's end, or past both ends, is no unit of the queue
    changed = {i for i in changed if (orig[i] if i < len(orig) else (0, 0, 0)) != (0, 0, 0) or (units[i] if i < len(units) else (0, 0, 0)) != (0, 0, 0)}
    probs = o.rows("problem")
    named = {p["unit_index"] for p in probs if p.get("cq_file") in (str(ctx["file"]), None) and p.get("unit_index") is not None}
    cut = len(data) % CQ_UNIT != 0
    missed = sorted(changed - named)
    if missed:
        raise FuzzFailure(f"cq verify did not name damaged units {missed[:5]} (named {sorted(named)[:10]}; a cut unit: {cut})")
    if changed and o.code != 1:
        raise FuzzFailure(f"cq verify exit {o.code} with damaged units {sorted(changed)[:5]}")


def _cq_seek_case(ctx: dict, units: list, valid: list[int], when: int, o: Outcome) -> None:
    """getOffsetInQueueByTime's binary search (BoundaryType.LOWER) over the damaged units, run here."""
    stamps = ctx["stamps"]
    real = [i for i in valid if units[i] != CQ_FILLER]
    hi = valid[-1] + 1 if valid else 0
    lo = real[0] if real else hi
    if not valid:
        lo = hi = 0

    class Unreadable(Exception):
        pass

    def time_at(i: int) -> int:
        if i >= len(units) or units[i][0] not in stamps:
            raise Unreadable(i)
        return stamps[units[i][0]]

    try:
        a, b = lo, hi
        while a < b:
            mid = (a + b) // 2
            if time_at(mid) >= when:
                b = mid
            else:
                a = mid + 1
        if a < hi:
            time_at(a)
    except Unreadable as e:
        if o.code != 2 or "seek_record_unreadable" not in o.stderr or f"unit {e.args[0]} " not in o.stderr:
            raise FuzzFailure(
                f"cq seek: unit {e.args[0]} points at no record, expected seek_record_unreadable naming it; got exit {o.code}: {o.stderr[-300:]}"
            ) from None
        return
    rows = o.rows("seek")
    if len(rows) != 1 or (rows[0]["queue_offset"], rows[0]["min_offset"], rows[0]["max_offset"]) != (a, lo, hi) or o.code != (0 if a < hi else 1):
        raise FuzzFailure(f"cq seek {when}: got exit {o.code} {rows}, the search over the units gives {a} in [{lo}, {hi})")


def _first_diff(a: list, b: list):
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i, x, y
    return min(len(a), len(b)), a[len(b) :][:1], b[len(a) :][:1]


# IndexFile: `index dump` shows the header, the non-empty slots and entries 1..indexCount-1 of the
# layout it reports, read from the file's bytes; with the sizing flags and an intact header every
# entry is listed.

HEADER = IndexHeader.sizeof()
SLOT = IndexSlot.sizeof()
ENTRY = IndexEntry.sizeof()


def index_setup(ws: Path) -> dict:
    store = _copy_store("rmq4-flags", ws, ("commitlog", "index", "checkpoint"))
    paths = sorted((store / "index").iterdir())
    return {"store": store, "paths": paths, "origs": [p.read_bytes() for p in paths], "slots": 64, "entries": 256}


def index_strategy(ctx: dict) -> st.SearchStrategy:
    n = len(ctx["origs"][0])
    region = st.sampled_from([(0, HEADER), (HEADER, HEADER + 64 * SLOT), (HEADER + 64 * SLOT, n), (0, n)])
    return st.tuples(
        st.integers(0, len(ctx["origs"]) - 1),
        region,
        damage(n, tail=ENTRY * 4),
        st.sampled_from(["infer", "flags", "flags", "window", "verify"]),
        st.integers(0, 300),
        st.integers(1, 40),
    )


def index_case(ctx: dict, ex) -> None:
    which, (lo, hi), edits, mode, start, limit = ex
    orig = ctx["origs"][which]
    # edits are aimed at one region (header, slots or entries) so each part is hit often
    edits = [(e[0], lo + (e[1] % max(1, hi - lo)), *e[2:]) if e[0] in ("write", "zero", "fill", "flip") else e for e in edits]
    data = apply(orig, edits)
    for p, b in zip(ctx["paths"], ctx["origs"], strict=True):
        write(p, data if p == ctx["paths"][which] else b)
    f = str(ctx["paths"][which])
    flags = ["--hash-slots", str(ctx["slots"]), "--index-entries", str(ctx["entries"])]
    if mode == "verify":
        return _index_verify_case(ctx, orig, data, f, invoke("index", "verify", "-s", str(ctx["store"]), "-f", "jsonl"))
    args = ["index", "dump", f, "-f", "jsonl"]
    if mode in ("flags", "window"):
        args += flags
    if mode == "window":
        args += ["--from", str(start), "--limit", str(limit)]
    o = invoke(*args)
    intact_head = len(data) == len(orig) and data[:HEADER] == orig[:HEADER]
    if mode in ("flags", "window") and intact_head and o.code != 0:
        raise FuzzFailure(f"index dump with the sizing flags and an intact header: exit {o.code}: {o.stderr[-500:]}")
    if o.code == 2:
        return
    head = o.rows("header")
    if len(head) != 1:
        raise FuzzFailure(f"index dump printed {len(head)} headers")
    h = head[0]
    hdr = IndexHeader.parse(data[:HEADER])
    for k in ("begin_timestamp", "end_timestamp", "begin_phy_offset", "end_phy_offset", "hash_slot_count", "index_count"):
        if h[k] != hdr[k]:
            raise FuzzFailure(f"header {k}: listed {h[k]}, the file holds {hdr[k]}")
    s, e = h["hash_slots"], h["index_entries"]
    if HEADER + s * SLOT + e * ENTRY > len(data):
        raise FuzzFailure(f"layout {s} slots x {e} entries does not fit a {len(data)}-byte file")
    if mode in ("flags", "window") and (s, e) != (ctx["slots"], ctx["entries"]):
        raise FuzzFailure(f"layout {s}x{e} instead of the flags' {ctx['slots']}x{ctx['entries']}")
    slots = [IndexSlot.parse(data[HEADER + i * SLOT : HEADER + (i + 1) * SLOT]).entry for i in range(s)]
    want_slots = [{"slot": i, "entry": v} for i, v in enumerate(slots) if v != 0]
    got_slots = [{"slot": r["slot"], "entry": r["entry"]} for r in o.rows("slot")]
    if got_slots != want_slots:
        raise FuzzFailure(f"slots: {_first_diff(got_slots, want_slots)}")
    base = HEADER + s * SLOT
    count = max(0, min(hdr.index_count, e))
    lo_e = start if mode == "window" else 1
    hi_e = min(count, start + limit) if mode == "window" else count
    want = []
    for k in range(max(lo_e, 0), hi_e):
        en = IndexEntry.parse(data[base + k * ENTRY : base + (k + 1) * ENTRY])
        want.append({"entry": k, "key_hash": en.key_hash, "phys_offset": en.phys_offset, "time_diff": en.time_diff, "prev_index": en.prev_index})
    got = [{k: r[k] for k in ("entry", "key_hash", "phys_offset", "time_diff", "prev_index")} for r in o.rows("entry")]
    if got != want:
        raise FuzzFailure(f"entries: listed {len(got)}, the file holds {len(want)}: {_first_diff(got, want)}")


IDX_HEADER = struct.Struct(">qqqqii")  # beginTimestamp, endTimestamp, beginPhyOffset, endPhyOffset, hashSlotCount, indexCount
IDX_ENTRY = struct.Struct(">iqii")  # keyHash, phyOffset, timeDiff, prevIndex


def _index_verify_case(ctx: dict, orig: bytes, data: bytes, path: str, o: Outcome) -> None:
    """Damage to a file the broker wrote is found in that file; a changed slot or written entry is named at its number."""
    probs = [p for p in o.rows("problem") if p.get("file") == path or p.get("index_file") == os.path.basename(path)]
    if data == orig:
        return
    if o.code == 2:
        if "index_layout" not in o.stderr:
            raise FuzzFailure(f"index verify refused a damaged file: {o.stderr.strip()}")
        return
    if not probs:
        raise FuzzFailure(f"index verify found nothing in {path}, whose bytes changed")
    s, e = ctx["slots"], ctx["entries"]
    if len(data) != len(orig) or data[: IDX_HEADER.size] != orig[: IDX_HEADER.size]:
        return  # a header or length change: the file is named (above); where depends on what the header now says
    count = IDX_HEADER.unpack_from(orig)[5]
    base = IDX_HEADER.size + 4 * s
    slots = {i for i in range(s) if data[IDX_HEADER.size + 4 * i : IDX_HEADER.size + 4 * i + 4] != orig[IDX_HEADER.size + 4 * i : IDX_HEADER.size + 4 * i + 4]}
    entries = {
        k
        for k in range(1, min(count, e))
        if data[base + k * IDX_ENTRY.size : base + (k + 1) * IDX_ENTRY.size] != orig[base + k * IDX_ENTRY.size : base + (k + 1) * IDX_ENTRY.size]
    }
    named_slots = {p["slot"] for p in probs if p.get("slot") is not None}
    named_entries = {p["entry"] for p in probs if p.get("entry") is not None}
    for k in sorted(entries):  # an entry whose link changed may be reported where the chain breaks: the entry it now reaches
        if k not in named_entries and IDX_ENTRY.unpack_from(data, base + k * IDX_ENTRY.size)[:3] != IDX_ENTRY.unpack_from(orig, base + k * IDX_ENTRY.size)[:3]:
            raise FuzzFailure(f"index verify did not name damaged entry {k} of {path} (named entries {sorted(named_entries)[:10]})")
    if slots and not (named_slots or named_entries):
        raise FuzzFailure(f"index verify named no slot or entry for damaged slots {sorted(slots)[:5]}")


# checkpoint: `info` reports the fields the bytes hold, or says in one line why it cannot.

CHECKPOINT_FIELDS = ("physic_msg_timestamp", "logics_msg_timestamp", "index_msg_timestamp", "master_flushed_offset", "confirm_phy_offset")


def checkpoint_setup(ws: Path) -> dict:
    store = _copy_store("rmq4-flags", ws, ("checkpoint", "config"))  # info reads no CommitLog for it: 10x faster cases
    return {"store": store, "file": store / "checkpoint", "orig": (store / "checkpoint").read_bytes()}


def checkpoint_strategy(ctx: dict) -> st.SearchStrategy:
    return st.tuples(damage(64, tail=16), st.one_of(st.none(), st.integers(0, 80)))


def checkpoint_case(ctx: dict, ex) -> None:
    edits, cut = ex
    data = apply(ctx["orig"], edits)
    if cut is not None:
        data = data[:cut]
    write(ctx["file"], data)
    o = invoke("info", "-s", str(ctx["store"]), "-f", "jsonl", "--no-recovery")
    if o.code == 2:
        if len(data) >= 24:
            raise FuzzFailure(f"info refused a {len(data)}-byte checkpoint: {o.stderr.strip()}")
        return
    cp = o.rows("store")[0]["checkpoint"]
    if len(data) < 24:
        if cp is not None and any(cp.get(k) for k in CHECKPOINT_FIELDS):
            raise FuzzFailure(f"info invented checkpoint values from {len(data)} bytes: {cp}")
        return
    full = (data + bytes(C.CHECKPOINT_SIZE))[: C.CHECKPOINT_SIZE]
    want = Checkpoint.parse(full)
    for k in CHECKPOINT_FIELDS:
        if cp[k] != want[k]:
            raise FuzzFailure(f"checkpoint {k}: listed {cp[k]}, the bytes hold {want[k]}")


# config/*.json as fastjson writes them (unquoted integer keys, tabs), then damaged.


def _fastjson(value, depth: int = 0) -> str:
    """Serialize as fastjson's pretty format does: integer map keys unquoted, tab indents."""
    if isinstance(value, dict):
        if not value:
            return "{}"
        ind = "\t" * (depth + 1)
        items = [f"{ind}{k if isinstance(k, int) else json.dumps(k, ensure_ascii=False)}:{_fastjson(v, depth + 1)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + "\t" * depth + "}"
    if isinstance(value, list):
        return "[" + ",".join(_fastjson(v, depth + 1) for v in value) + "]"
    return json.dumps(value, ensure_ascii=False)


_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
_leaf = st.one_of(st.integers(-(1 << 63), (1 << 63) - 1), _text, st.booleans(), st.none())
_doc = st.recursive(
    _leaf,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.one_of(st.integers(-5, 1 << 40), _text), inner, max_size=4)),
    max_leaves=20,
)
CONFIG_NAMES = ("topics.json", "subscriptionGroup.json", "consumerFilter.json", "delayOffset.json", "delayOffset.json.bak", "consumerOffset.json.bak")


def config_setup(ws: Path) -> dict:
    store = _copy_store("rmq4-flags", ws, ("checkpoint", "config"))
    return {"store": store, "dir": store / "config"}


# fastjson's bare integer keys, quoted here: a string literal is one token (never looked into), `{` or `,` then an integer
# then `:` is a key.
_FJ_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|([{,])(\s*)(-?\d+)([ \t\r\n]*):|.', re.S)


def parse_fastjson(data: bytes):
    """(document, None) for a file as fastjson wrote it, or (None, why not): 'utf8 N' (first bad byte) or 'json'."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        return None, f"utf8 {e.start}"
    if not text.strip():
        return None, "empty"
    quoted = "".join(f'{m[1]}{m[2]}"{m[3]}"{m[4]}:' if m[3] is not None else m[0] for m in _FJ_TOKEN.finditer(text))
    try:
        return json.loads(quoted), None
    except json.JSONDecodeError:
        return None, "json"
    except RecursionError:
        return None, "json"


def _same_json(a, b) -> bool:
    """Equal as fastjson data: integer keys read back as strings."""
    if isinstance(a, dict):
        return isinstance(b, dict) and len(a) == len(b) and all(str(k) in b and _same_json(v, b[str(k)]) for k, v in a.items())
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(_same_json(x, y) for x, y in zip(a, b, strict=True))
    return a == b and type(a) is type(b)


def _utf8_boundary(data: bytes, b: int) -> bool:
    return b == len(data) or (data[b] & 0xC0) != 0x80


def config_strategy(ctx: dict) -> st.SearchStrategy:
    return st.tuples(st.sampled_from(CONFIG_NAMES), st.dictionaries(_text, _doc, max_size=5), st.booleans(), damage(200, tail=8))


def config_case(ctx: dict, ex) -> None:
    name, doc, damaged, edits = ex
    for p in ctx["dir"].iterdir():
        p.unlink()
    raw = _fastjson(doc).encode("utf-8")
    data = apply(raw, edits) if damaged else raw
    path = ctx["dir"] / name
    write(path, data)
    o = invoke("info", "-s", str(ctx["store"]), "-f", "jsonl", "--no-recovery")
    rows = [r for r in o.rows("config") if r["path"].endswith(name)]
    if len(rows) != 1:
        raise FuzzFailure(f"info listed {len(rows)} rows for config/{name}")
    if rows[0]["size"] != len(data):
        raise FuzzFailure(f"config/{name}: size {rows[0]['size']}, the file has {len(data)} bytes")
    _, why = parse_fastjson(data)
    if rows[0]["ok"] != (why is None):
        raise FuzzFailure(f"config/{name}: ok {rows[0]['ok']} ({rows[0]['error']}), parsed here: {why or 'ok'}\n{data[:300]!r}")
    err = rows[0]["error"]
    if why and why.startswith("utf8") and err != f"not UTF-8 at byte {why.split()[1]}":
        raise FuzzFailure(f"config/{name}: {err!r}, the first byte that is not UTF-8 is {why.split()[1]}")
    if why == "json":
        m = re.fullmatch(r"not JSON: .+ at byte (\d+)", err or "")
        b = int(m[1]) if m else -1
        if not 0 <= b <= len(data) or _utf8_boundary(data, b) is False:
            raise FuzzFailure(f"config/{name}: {err!r} names no byte of the {len(data)}-byte file at a character's start")
    if data == raw and not rows[0]["ok"]:
        raise FuzzFailure(f"config/{name} as fastjson writes it was refused: {rows[0]['error']}\n{raw[:300]!r}")
    if data == raw:
        from rmqdump.readers.configfiles import read_config

        got = read_config(str(path)).data
        if not _same_json(doc, got):
            raise FuzzFailure(f"config/{name}: read back {got!r}, written {doc!r}")


# consumer offsets and .bak: `offsets` lists one row per (group, topic, queue) of either file, with the
# values each file holds.

_name = st.text(st.sampled_from("abcXYZ019_-%"), min_size=1, max_size=8)
_table = st.dictionaries(
    st.tuples(st.one_of(st.sampled_from(["TopicTest", "orders"]), _name), _name).map(lambda tg: f"{tg[0]}@{tg[1]}"),
    st.dictionaries(st.integers(-2, 40), st.integers(-(1 << 40), 1 << 40), max_size=5),
    max_size=5,
)


def offsets_setup(ws: Path) -> dict:
    store = _copy_store("rmq4-basic", ws, ("consumequeue", "config"))  # the queues give min/max; no CommitLog needed
    return {"store": store, "file": store / "config" / "consumerOffset.json"}


def offsets_strategy(ctx: dict) -> st.SearchStrategy:
    return st.tuples(_table, st.one_of(st.none(), _table), st.sampled_from(["none", "main", "bak"]), damage(300, tail=8))


def _offset_rows(table: dict | None) -> dict:
    out = {}
    for tg, queues in (table or {}).items():
        topic, _, group = tg.partition("@")
        for q, v in queues.items():
            out[(group, topic, q)] = v
    return out


_JAVA_INT, _JAVA_LONG = 1 << 31, 1 << 63


def _table_entries(doc) -> tuple[dict, bool]:
    """The offsets a parsed consumerOffset.json holds as the broker reads them (offsetTable {"topic@group": {queue id,
    a Java int: offset, a Java long}}), and whether anything else is in it: an entry that must be named, not dropped."""
    out: dict = {}
    if not isinstance(doc, dict):
        return out, True
    if "offsetTable" not in doc:
        return out, False
    table, odd = doc["offsetTable"], False
    if not isinstance(table, dict):
        return out, True
    for tg, queues in table.items():
        topic, sep, group = tg.partition("@")
        if not sep or not isinstance(queues, dict):
            odd = True
            continue
        for q, v in queues.items():
            ok_q = re.fullmatch(r"-?\d+", q.strip()) and -_JAVA_INT <= int(q) < _JAVA_INT
            if ok_q and isinstance(v, int) and not isinstance(v, bool) and -_JAVA_LONG <= v < _JAVA_LONG:
                out[(group, topic, int(q))] = v
            else:
                odd = True
    return out, odd


def _table_rows(doc) -> dict:
    return _table_entries(doc)[0]


def _offsets_damaged(ctx: dict, data: bytes, data_bak: bytes | None, bak_path: Path, o: Outcome) -> None:
    """A damaged file: what still parses is listed exactly; a file that does not is named (bad_config), or exit 2 with no other."""
    parsed = {ctx["file"]: parse_fastjson(data), bak_path: parse_fastjson(data_bak) if data_bak is not None else None}
    bad = [str(p) for p, r in parsed.items() if r is not None and r[1] is not None]
    good = {p: _table_rows(r[0]) for p, r in parsed.items() if r is not None and r[1] is None}
    if not good:
        if o.code != 2 or "bad_config" not in o.stderr:
            raise FuzzFailure(f"offsets with no readable file: exit {o.code}: {o.stderr[-300:]}")
        return
    bad += [str(p) for p, r in parsed.items() if r is not None and r[1] is None and _table_entries(r[0])[1]]  # parsed, odd entries named
    named = sorted({p["file"] for p in o.rows("problem") if p["code"] == "bad_config"})
    if named != sorted(set(bad)):
        raise FuzzFailure(f"offsets named {named} as unreadable, these are: {bad}")
    want_main, want_bak = good.get(ctx["file"], {}), good.get(bak_path, {})
    got = {(r["group"], r["topic"], r["queue_id"]): (r["committed"], r["bak"]) for r in o.rows("offset")}
    want = {k: (want_main.get(k), want_bak.get(k)) for k in set(want_main) | set(want_bak)}
    if got != want:
        wrong = [(k, got.get(k), want.get(k)) for k in set(got) | set(want) if got.get(k) != want.get(k)][:3]
        raise FuzzFailure(f"offsets of damaged files: {wrong}")


def offsets_case(ctx: dict, ex) -> None:
    main, bak, where, edits = ex
    raw = _fastjson({"offsetTable": main}).encode()
    raw_bak = None if bak is None else _fastjson({"offsetTable": bak}).encode()
    data = apply(raw, edits) if where == "main" else raw
    data_bak = apply(raw_bak, edits) if where == "bak" and raw_bak is not None else raw_bak
    write(ctx["file"], data)
    bak_path = ctx["file"].with_name("consumerOffset.json.bak")
    if data_bak is None:
        bak_path.unlink(missing_ok=True)
    else:
        write(bak_path, data_bak)
    o = invoke("offsets", "-s", str(ctx["store"]), "-f", "jsonl")
    if data != raw or data_bak != raw_bak:
        return _offsets_damaged(ctx, data, data_bak, bak_path, o)
    want_main, want_bak = _offset_rows(main), _offset_rows(bak)
    got = {(r["group"], r["topic"], r["queue_id"]): (r["committed"], r["bak"]) for r in o.rows("offset")}
    want = {k: (want_main.get(k), want_bak.get(k)) for k in set(want_main) | set(want_bak)}
    if got != want:
        missing = sorted(set(want) - set(got), key=str)[:3]
        extra = sorted(set(got) - set(want), key=str)[:3]
        wrong = [(k, got[k], want[k]) for k in set(got) & set(want) if got[k] != want[k]][:3]
        raise FuzzFailure(f"offsets rows: missing {missing}, invented {extra}, wrong {wrong}")
    if not want and o.code != 1:
        raise FuzzFailure(f"offsets exit {o.code} with nothing to list")


# Compressed bodies with --decompress: one compressed record's body replaced (same length, CRC
# fixed or not), its compression type changed; every record still listed, the body exactly what
# a bounded decompression gives, or decompress_failed.


def zstd_rle_bomb(blocks: int) -> bytes:
    """A zstd frame of RLE blocks: 4 bytes of input per 128 KiB of output."""
    head = struct.pack("<I", 0xFD2FB528) + bytes([0x00, 0x38])  # no content size; window 128 KiB
    block = ((1 << 1) | (131072 << 3)).to_bytes(3, "little") + b"\0"
    last = (1 | (1 << 1) | (131072 << 3)).to_bytes(3, "little") + b"\0"
    return head + block * (blocks - 1) + last


def decompress_setup(ws: Path) -> dict:
    store = _copy_store("rmq4-flags", ws, ("commitlog",))
    man = [json.loads(x) for x in (REAL / "rmq4-flags" / "manifest.jsonl").read_text().splitlines()]
    comp = [m for m in man if m["sysFlag"] & C.FLAG_COMPRESSED]
    lo = min(m["wroteOffset"] for m in comp)
    hi = max(m["wroteOffset"] + m["wroteBytes"] for m in comp)
    fsize = (REAL / "rmq4-flags" / "store" / "commitlog" / ("0" * 20)).stat().st_size
    assert hi <= fsize, "the compressed records are in the first CommitLog file"
    f = store / "commitlog" / ("0" * 20)
    orig = f.read_bytes()
    head = message_header()
    recs = []
    for m in comp:
        h = head.parse(orig[m["wroteOffset"] : m["wroteOffset"] + head.sizeof()])
        body_pos = m["wroteOffset"] + head.sizeof()
        assert h.body_length == m["body_len"]
        recs.append({"offset": m["wroteOffset"], "body_pos": body_pos, "body_len": h.body_length, "sys_flag": h.sys_flag})
    offsets = [m["wroteOffset"] for m in man if lo <= m["wroteOffset"] < hi]
    return {"store": store, "file": f, "orig": orig, "recs": recs, "lo": lo, "hi": hi, "offsets": offsets, "head": head}


def decompress_strategy(ctx: dict) -> st.SearchStrategy:
    import lz4.frame
    import zstandard

    payload = st.one_of(st.binary(max_size=3000), st.integers(0, 1 << 22).map(bytes))
    types = {"zlib": [0, 3], "lz4": [1], "zstd": [2]}  # the sysFlag compression types each stream is (see reference_body)
    body = st.one_of(
        st.binary(max_size=64).map(lambda b: ([], b)),
        st.tuples(st.sampled_from(["zlib", "lz4", "zstd"]), payload).map(
            lambda kp: (types[kp[0]], {"zlib": zlib.compress, "lz4": lz4.frame.compress, "zstd": zstandard.ZstdCompressor().compress}[kp[0]](kp[1]))
        ),
        st.integers(1, 2000).map(lambda n: ([2], zstd_rle_bomb(n))),
    )
    # the type: one its stream is (most cases), or any of the eight
    pick = st.one_of(st.integers(0, 7), st.integers(0, 1).map(lambda i: -1 - i))
    return st.tuples(st.integers(0, len(ctx["recs"]) - 1), body, pick, st.booleans(), st.one_of(st.just(0), st.integers(0, 64)))


def reference_body(body: bytes, ctype: int, limit: int) -> bytes | None:
    """What the compression libraries themselves make of a stored body, or None when it is no complete stream within `limit`.

    The type is MessageSysFlag's bits 8-10 (CompressionType: 1 LZ4, 2 ZSTD, 3 ZLIB; 0, from producers before
    the bits existed, is zlib); other values are no compression rmqdump can know.
    """
    import lz4.frame
    import zstandard

    try:
        if ctype in (0, 3):
            d = zlib.decompressobj()
            out = d.decompress(body, limit + 1)
            complete = d.eof
        elif ctype == 1:
            d = lz4.frame.LZ4FrameDecompressor()
            out = d.decompress(body, max_length=limit + 1)
            complete = d.eof
        elif ctype == 2:
            out = zstandard.ZstdDecompressor().stream_reader(body, read_across_frames=True).read(limit + 1)
            complete = True
        else:
            return None
    except Exception:
        return None
    return out if complete and len(out) <= limit else None


def java_crc(data: bytes) -> int:
    """UtilAll.crc32: java.util.zip.CRC32 (zlib's polynomial) with the sign bit cleared."""
    return zlib.crc32(data) & 0x7FFFFFFF


def decompress_case(ctx: dict, ex) -> None:
    from rmqdump.readers.message import DECOMPRESSED_LIMIT  # rmqdump's bound on an expanded body (a setting, not an answer)

    which, (fits, new), ctype, fix_crc, cut = ex
    if ctype < 0:
        ctype = fits[(-1 - ctype) % len(fits)] if fits else 0
    rec = ctx["recs"][which]
    n = rec["body_len"]
    new = new[: max(0, len(new) - cut)] if cut < len(new) else new
    new = (new + os.urandom(n))[:n] if len(new) < n else new[:n]
    buf = bytearray(ctx["orig"])
    buf[rec["body_pos"] : rec["body_pos"] + n] = new
    flag = (rec["sys_flag"] & ~C.COMPRESSION_MASK) | (ctype << C.COMPRESSION_SHIFT)
    head = ctx["head"]
    # sysFlag and bodyCRC positions from the schema: parse, edit, rebuild the header
    h = head.parse(bytes(buf[rec["offset"] : rec["offset"] + head.sizeof()]))
    h.sys_flag = flag
    if fix_crc:
        h.body_crc = java_crc(bytes(new))
    crc_ok = h.body_crc == java_crc(bytes(new))
    buf[rec["offset"] : rec["offset"] + head.sizeof()] = head.build(h)
    write(ctx["file"], bytes(buf))
    o = invoke(
        "commitlog", str(ctx["file"].parent), "--decompress", "--body", "base64", "-f", "jsonl", "--from-offset", str(ctx["lo"]), "--to-offset", str(ctx["hi"])
    )
    msgs = o.rows("message")
    got = [r["phys_offset"] for r in msgs]
    if got != ctx["offsets"]:
        raise FuzzFailure(f"listed records {got[:5]}..., the file holds {ctx['offsets'][:5]}...")
    row = next(r for r in msgs if r["phys_offset"] == rec["offset"])
    failed = f"decompress_failed: {ctx['file']}@{rec['body_pos']}" in o.stderr or any(
        r.get("code") == "decompress_failed" and r.get("phys_offset") == rec["offset"] for r in o.rows("problem")
    )
    if row["crc_ok"] is not crc_ok:
        raise FuzzFailure(f"record {rec['offset']}: crc_ok {row['crc_ok']}, the stored CRC {'matches' if crc_ok else 'does not match'} the body's")
    want = reference_body(bytes(new), ctype, DECOMPRESSED_LIMIT)
    if want is None:
        if not failed:
            raise FuzzFailure(f"a body that does not decompress was not reported (record {rec['offset']})")
        if base64.b64decode(row["body"]) != bytes(new):
            raise FuzzFailure("an undecompressable body was not listed as stored")
    else:
        if failed:
            raise FuzzFailure(f"record {rec['offset']}: decompress_failed for a body the library decompresses")
        if base64.b64decode(row["body"]) != want:
            raise FuzzFailure(f"record {rec['offset']}: listed body differs from its decompression")


# Compaction topics: a SparseConsumeQueue file, a compaction-log file or the position checkpoint of a copy of
# fixtures/real/rmq53-compaction, damaged. `compaction view` answers one row per valid unit (offset >= 0, size > 0,
# queue offset >= 0, batchNum > 0), in order, each a message read at the unit's offset or the problem found there;
# a listed message is the record the log bytes hold at that offset; the checkpoint `info` reports is the file's
# (when it is JSON) or, when the broker would fall back to it, the .bak's.

COMPACT_TOPIC, COMPACT_QUEUE, COMPACT_FILE = "CompactKV", 1, "00000000000000601128"
SCQ_UNIT = SparseConsumeQueueUnit.sizeof()
SCQ_FORMAT = ">qiqqqhii"  # SparseConsumeQueueUnit: offset, size, tagsCode, storeTime, queue offset, batchNum, compactedOffset, reserved
assert struct.calcsize(SCQ_FORMAT) == SCQ_UNIT


def compaction_setup(ws: Path) -> dict:
    store = _copy_store("rmq53-compaction", ws, ("commitlog", "compaction"))
    comp = store / "compaction"
    cq_dir = comp / "compactionCq" / COMPACT_TOPIC / str(COMPACT_QUEUE)
    log = comp / "compactionLog" / COMPACT_TOPIC / str(COMPACT_QUEUE) / COMPACT_FILE
    files = {"cq": cq_dir / COMPACT_FILE, "log": log, "checkpoint": comp / "position-checkpoint"}
    return {"store": store, "cq_dir": cq_dir, "log_dir": log.parent, "files": files, "orig": {k: f.read_bytes() for k, f in files.items()}}


def compaction_strategy(ctx: dict) -> st.SearchStrategy:
    return st.one_of(
        st.tuples(st.just("cq"), damage(len(ctx["orig"]["cq"]), tail=2 * SCQ_UNIT)),
        st.tuples(st.just("log"), damage(len(ctx["orig"]["log"]))),
        st.tuples(st.just("checkpoint"), damage(len(ctx["orig"]["checkpoint"]), tail=8)),
    )


def _valid_units(cq_dir: Path) -> list[int]:
    out = []
    for f in sorted(cq_dir.iterdir()):
        if len(f.name) != 20 or not f.name.isdigit():
            continue
        b = f.read_bytes()
        for i in range(0, len(b) - SCQ_UNIT + 1, SCQ_UNIT):
            off, size, _, _, qo, batch, _, _ = struct.unpack_from(SCQ_FORMAT, b, i)
            if off >= 0 and size > 0 and qo >= 0 and batch > 0:
                out.append(off)
    return out


def _queue_key(k: str) -> bool:
    """TOPIC_QID as CompactionPositionMgr writes it: a topic, `_`, the queue id in decimal (no leading zeros, no sign but -)."""
    topic, _, qid = k.rpartition("_")
    try:
        return bool(topic) and qid.isascii() and str(int(qid)) == qid
    except ValueError:
        return False


def compaction_case(ctx: dict, ex) -> None:
    kind, edits = ex
    for k, f in ctx["files"].items():
        write(f, apply(ctx["orig"][k], edits) if k == kind else ctx["orig"][k])
    s = str(ctx["store"])
    if kind == "checkpoint":
        o = invoke("info", "-s", s, "-f", "jsonl", "--no-recovery")
        if o.code == 2:
            raise FuzzFailure(f"info refused a damaged compaction checkpoint: {o.stderr.strip()}")
        (ck,) = o.rows("compaction_checkpoint")
        try:
            data = json.loads(ctx["files"]["checkpoint"].read_bytes().decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            return  # not JSON to us (fastjson may still read it): any answer without a traceback
        table = data.get("queueOffsetMap") if isinstance(data, dict) else None
        if isinstance(table, dict):
            want = {k: v for k, v in table.items() if type(v) is int and _queue_key(k)}
        else:
            want = json.loads(ctx["orig"]["checkpoint"])["queueOffsetMap"]  # the .bak, left as the broker wrote it
        if ck["queue_offsets"] != want:
            raise FuzzFailure(f"checkpoint entries {ck['queue_offsets']}, the bytes hold {want}")
        invoke("compaction", "verify", "-s", s, "-f", "jsonl")
        return
    o = invoke("compaction", "view", "-s", s, "-t", COMPACT_TOPIC, "-q", str(COMPACT_QUEUE), "-f", "jsonl")
    if o.code == 2:
        raise FuzzFailure(f"compaction view refused the store: {o.stderr.strip()}")
    rows = o.rows()
    got = [r["compaction_log_offset"] if r["kind"] == "message" else r["phys_offset"] for r in rows]
    want = _valid_units(ctx["cq_dir"])
    if got != want:
        raise FuzzFailure(f"compaction view answered {len(got)} rows, the queue has {len(want)} valid units (first difference: {_first_diff(got, want)})")
    logs = {int(f.name): f.read_bytes() for f in ctx["log_dir"].iterdir() if len(f.name) == 20 and f.name.isdigit()}
    for r in o.rows("message"):
        base = max(b for b in logs if b <= r["compaction_log_offset"])
        data, pos = logs[base], r["compaction_log_offset"] - base
        size, _, _, qid, _, qo = struct.unpack_from(">iiiiiq", data, pos)
        if (size, qid, qo) != (r["size"], r["queue_id"], r["queue_offset"]):
            raise FuzzFailure(f"listed message at {r['compaction_log_offset']} is not what the log holds there: {(size, qid, qo)}")
    invoke("compaction", "verify", "-s", s, "-f", "jsonl")
# --- the 5.x readers ------------------------------------------------------------------------------
# Each oracle reads the damaged bytes here with struct, by the broker's layouts (store-format.md).


def _unpack_store(name: str, ws: Path) -> Path:
    """A copy of a 5.x store kept as a tar.gz (its sparse files stay sparse)."""
    import subprocess

    dest = ws / name
    dest.mkdir(parents=True)
    subprocess.run(["tar", "-xzf", str(REAL / name / "store.tar.gz"), "-C", str(dest)], check=True)
    return dest / "store"


def _queue_files(qdir: Path) -> list[Path]:
    return sorted(p for p in qdir.iterdir() if len(p.name) == 20 and p.name.isdigit())


def _dump_oracle(o: Outcome, files: list[tuple[int, bytes]], unit: struct.Struct, valid, fields) -> None:
    """`cq dump` of a queue whose files (name offset, bytes) hold fixed-size units: the units up to the last valid one (holes
    included), in order, then one line counting the rest; exit 0 when a unit is listed, else 1."""
    units = []  # (file base, position, unit)
    for base, data in files:
        units += [(base, k * unit.size, unit.unpack_from(data, k * unit.size)) for k in range(len(data) // unit.size)]
    last = max((i for i, (_, _, u) in enumerate(units) if valid(u)), default=-1)
    want = [fields(b, pos, u) for b, pos, u in units[: last + 1]]
    got_rows = o.rows("unit")
    got = [{k: r[k] for k in want[0]} for r in got_rows] if want else [r for r in got_rows]
    if got != want:
        raise FuzzFailure(f"cq dump listed {len(got)} units, the files hold {len(want)} up to the queue's end: {_first_diff(got, want)}")
    tails = [r["units"] for r in o.rows("unwritten")]
    if tails != [len(units) - last - 1] or not o.stdout.rstrip("\n").rsplit("\n", 1)[-1].startswith('{"kind":"unwritten"'):
        raise FuzzFailure(f"cq dump's closing line {tails}: {len(units) - last - 1} units follow the queue's end")
    if o.code != (0 if want else 1):
        raise FuzzFailure(f"cq dump exit {o.code} with {len(want)} units")


BCQ_STRUCT = struct.Struct(">qiqqqhii")  # offset, size, tagsCode, storeTime, msgBaseOffset, batchSize, compactedOffset, reserved
BCQ_TOPIC, BCQ_QUEUE = "BatchTopicBCQ", 0


def batchcq_setup(ws: Path) -> dict:
    store = _copy_store("rmq53-batchcq", ws)
    qdir = store / "batchconsumequeue" / BCQ_TOPIC / str(BCQ_QUEUE)
    files = _queue_files(qdir)
    return {"store": store, "files": files, "origs": [f.read_bytes() for f in files]}


def _multi_strategy(ctx: dict, modes: list[str], tail: int) -> st.SearchStrategy:
    n = max(len(b) for b in ctx["origs"])
    return st.tuples(st.integers(0, len(ctx["files"]) - 1), damage(n, tail=tail), st.sampled_from(modes))


def _apply_one(ctx: dict, which: int, edits) -> list[bytes]:
    """Damage file `which` of ctx["files"] (the others as the broker wrote them); only files that differ on disk are written."""
    datas = [apply(b, edits) if i == which else b for i, b in enumerate(ctx["origs"])]
    dirty = ctx.setdefault("dirty", set(range(len(datas))))  # at first, assume any file may differ
    for i in dirty | {which}:
        write(ctx["files"][i], datas[i])
    ctx["dirty"] = {which} if datas[which] != ctx["origs"][which] else set()
    return datas


def batchcq_strategy(ctx: dict) -> st.SearchStrategy:
    return _multi_strategy(ctx, ["dump", "dump", "verify"], BCQ_STRUCT.size * 2)


def batchcq_case(ctx: dict, ex) -> None:
    which, edits, mode = ex
    datas = _apply_one(ctx, which, edits)
    s = str(ctx["store"])
    if mode == "verify":
        o = invoke("cq", "verify", "-s", s, "--topic", BCQ_TOPIC, "--queue", str(BCQ_QUEUE), "-f", "jsonl", "--no-crc")
        # a changed unit is found, and so is a file whose size changed (the queue's layout problem)
        z = BCQ_STRUCT.size
        changed = [
            (i, k)
            for i, (a, b) in enumerate(zip(datas, ctx["origs"], strict=True))
            for k in range(0, max(len(a), len(b)) // z * z, z)
            if a[k : k + z] != b[k : k + z] and len(a[k : k + z]) == z and (any(a[k : k + z]) or any(b[k : k + z]))
        ]
        if changed and o.code == 0:
            raise FuzzFailure(f"cq verify found nothing in a Batch ConsumeQueue whose units changed: {changed[:3]}")
        resized = [i for i, (a, b) in enumerate(zip(datas, ctx["origs"], strict=True)) if len(a) != len(b)]
        if resized and o.code == 0:
            raise FuzzFailure(f"cq verify found nothing in a Batch ConsumeQueue whose file {resized[0]} changed size")
        return
    o = invoke("cq", "dump", "-s", s, "--topic", BCQ_TOPIC, "--queue", str(BCQ_QUEUE), "-f", "jsonl")
    _dump_oracle(
        o,
        [(int(f.name), d) for f, d in zip(ctx["files"], datas, strict=True)],
        BCQ_STRUCT,
        lambda u: u[0] >= 0 and u[1] > 0 and u[4] >= 0 and u[5] > 0,  # BatchConsumeQueue.recover's test of a unit
        lambda b, pos, u: {
            "file_offset": pos,
            "phys_offset": u[0],
            "size": u[1],
            "tags_code": u[2],
            "store_time": u[3],
            "queue_offset": u[4],
            "batch_size": u[5],
            "compacted_offset": u[6],
        },
    )


LMQ_TOPIC = "%LMQ%order_1"


def lmq_setup(ws: Path) -> dict:
    store = _copy_store("rmq53-lmq", ws)
    files = _queue_files(store / "consumequeue" / LMQ_TOPIC / "0")
    truth = {(m["queueOffset"], m["commitLogOffset"], m["size"]) for m in _manifest("rmq53-lmq") if m["kind"] == "cq_unit" and m["topic"] == LMQ_TOPIC}
    return {"store": store, "files": files, "origs": [f.read_bytes() for f in files], "truth": truth}


def lmq_strategy(ctx: dict) -> st.SearchStrategy:
    return _multi_strategy(ctx, ["dump", "dump", "resolve", "verify"], CQ_UNIT * 3)


def lmq_case(ctx: dict, ex) -> None:
    which, edits, mode = ex
    datas = _apply_one(ctx, which, edits)
    s = str(ctx["store"])
    if mode == "verify":
        o = invoke("cq", "verify", "-s", s, "--topic", LMQ_TOPIC, "--queue", "0", "-f", "jsonl", "--no-crc")
        if (
            datas != ctx["origs"]
            and o.code == 0
            and any(
                a[i : i + CQ_UNIT] != b[i : i + CQ_UNIT] and any(a[i : i + CQ_UNIT] + b[i : i + CQ_UNIT])
                for a, b in zip(datas, ctx["origs"], strict=True)
                for i in range(0, min(len(a), len(b)) - CQ_UNIT + 1, CQ_UNIT)
            )
        ):
            raise FuzzFailure("cq verify found nothing in an LMQ queue whose units changed")
        return
    o = invoke("cq", "dump", "-s", s, "--topic", LMQ_TOPIC, "--queue", "0", "-f", "jsonl", *(["--resolve"] if mode == "resolve" else []))
    if mode == "resolve":
        # a valid unit resolves when it is the unit the broker wrote at that offset (its record names this queue there, same size)
        bad = [r["unit_index"] for r in o.rows("unit") if r["valid"] and (r["unit_index"], r["phys_offset"], r["size"]) not in ctx["truth"]]
        if (o.code == 1) != bool(bad) and o.rows("unit"):
            raise FuzzFailure(f"cq dump --resolve exit {o.code}; units that are not the broker's: {bad[:5]}")
        o = Outcome(0 if o.rows("unit") else 1, o.stdout, o.stderr)  # the listing itself, below
    _dump_oracle(
        o,
        [(int(f.name), d) for f, d in zip(ctx["files"], datas, strict=True)],
        CQ_STRUCT,
        _cq_valid,
        lambda b, pos, u: {"unit_index": (b + pos) // CQ_UNIT, "file_offset": pos, "phys_offset": u[0], "size": u[1], "tags_code": u[2]},
    )


EXT_TOPIC = "ExtTopicA"
EXT_UNIT = struct.Struct(">hqqh")  # size, tagsCode, msgStoreTime, bitMapSize (then the bitmap)


def cqext_setup(ws: Path) -> dict:
    store = _copy_store("rmq53-cqext", ws)
    files = [_queue_files(store / "consumequeue" / EXT_TOPIC / "0")[0], _queue_files(store / "consumequeue_ext" / EXT_TOPIC / "0")[0]]
    return {"store": store, "files": files, "origs": [f.read_bytes() for f in files]}


def cqext_strategy(ctx: dict) -> st.SearchStrategy:
    return _multi_strategy(ctx, ["dump", "dump", "verify"], 32)


def cqext_case(ctx: dict, ex) -> None:
    """The queue's units exactly; an ext address resolved either to the ext unit the ext file holds there, or to nothing."""
    which, edits, mode = ex
    datas = _apply_one(ctx, which, edits)
    s = str(ctx["store"])
    if mode == "verify":
        invoke("cq", "verify", "-s", s, "--topic", EXT_TOPIC, "--queue", "0", "-f", "jsonl", "--no-crc")
        return
    o = invoke("cq", "dump", "-s", s, "--topic", EXT_TOPIC, "--queue", "0", "-f", "jsonl")
    ext = datas[1]
    base = int(ctx["files"][1].name)

    def fields(b, pos, u):
        return {"unit_index": (b + pos) // CQ_UNIT, "file_offset": pos, "phys_offset": u[0], "size": u[1]}

    _dump_oracle(o, [(int(ctx["files"][0].name), datas[0])], CQ_STRUCT, _cq_valid, fields)
    for r in o.rows("unit"):
        a = r.get("ext_address")
        if a is None:
            continue
        if r["tags_code"] is None:
            starts = {u[2] for u in _cq_units(ctx["origs"][0])}  # the ext units' addresses, as the broker wrote them
            if ext == ctx["origs"][1] and a in starts:
                raise FuzzFailure(f"unit {r['unit_index']}: ext address {a} (an ext unit's start) not resolved in an intact ext file")
            continue
        pos = a - C.EXT_ADDRESS_BASE - base
        if not 0 <= pos <= len(ext) - EXT_UNIT.size:
            raise FuzzFailure(f"unit {r['unit_index']}: ext address {a} resolved, but it is outside the ext file")
        # CqExtUnit.read: size (< 1: no unit), tagsCode, msgStoreTime, bitMapSize, then that many bitmap bytes
        size, tags, when, nbits = EXT_UNIT.unpack_from(ext, pos)
        bitmap = ext[pos + EXT_UNIT.size : pos + EXT_UNIT.size + max(0, nbits)]
        if size < 1 or (r["tags_code"], r["store_time"], r["ext_file_offset"]) != (tags, when, pos) or bytes.fromhex(r["filter_bitmap"]) != bitmap:
            raise FuzzFailure(
                f"unit {r['unit_index']}: ext fields {r['tags_code'], r['store_time'], r['ext_file_offset']}, the ext file holds {size, tags, when, pos} there"
            )


TIMER_UNIT = struct.Struct(">iqiqiqiiq")  # size, prevPos, magic, currWriteTimeMs, delayedTimeOffset, offsetPy, sizePy, hashCodeOfRealTopic, reserved
TIMER_MAGICS = {1, 3, 5, 7}  # 1 default, with 2 roll and 4 delete
WHEEL_SLOT = struct.Struct(">qqqii")  # time / precision, firstPos, lastPos, num, magic


def timer_setup(ws: Path) -> dict:
    store = _unpack_store("rmq53-timer", ws)
    files = [*_queue_files(store / "timerlog"), store / "config" / "timercheck"]  # the log's files, then timercheck
    return {"store": store, "files": files, "origs": [f.read_bytes() for f in files]}


def timer_strategy(ctx: dict) -> st.SearchStrategy:
    return _multi_strategy(ctx, ["list", "list", "verify"], TIMER_UNIT.size * 2)


def _timer_log(files: list[tuple[int, bytes]]) -> tuple[list[dict], int, int]:
    """Units in log order as the broker's files hold them (a file's data ends at its first blank marker), the log's end, the unwritten positions after it."""
    units, end, ends = [], files[0][0] if files else 0, []
    for base, data in files:
        n = len(data) // TIMER_UNIT.size
        rows = [TIMER_UNIT.unpack_from(data, k * TIMER_UNIT.size) for k in range(n)]
        stop = next((k for k, u in enumerate(rows) if u[2] == C.TIMER_BLANK_MAGIC), n)
        live = [k for k in range(stop) if any(data[k * TIMER_UNIT.size : (k + 1) * TIMER_UNIT.size])]
        keep = live[-1] + 1 if live else 0
        tail = data[n * TIMER_UNIT.size :]
        blank = stop < n or (len(tail) >= C.TIMER_MIN_BLANK_LEN and struct.unpack_from(">i", tail, 12)[0] == C.TIMER_BLANK_MAGIC)
        data_end = len(data) if blank else keep * TIMER_UNIT.size if keep else None
        if data_end is not None:
            end = base + data_end
        ends.append((base, len(data), n))
        for k in range(keep):
            u = rows[k]
            if u[0] == TIMER_UNIT.size and u[2] in TIMER_MAGICS:
                units.append({"timer_log_offset": base + k * TIMER_UNIT.size, "deliver_ms": u[3] + u[4], "enqueue_ms": u[3], "phys_offset": u[5], "size": u[6]})
    rest = sum(n - max(0, end - base) // TIMER_UNIT.size for base, size, n in ends if base + size > end)
    return units, end, max(0, rest)


def _timer_log_damaged(datas: list[bytes]) -> bool:
    """Whether a timer log file holds, before its blank marker, a written position that is no unit (a size field
    other than the unit's, an unknown magic), or bytes after its last whole unit that are neither zeros nor a blank
    marker: damage `timer list` must report (it may report more, from checks this model does not make)."""
    for data in datas:
        n = len(data) // TIMER_UNIT.size
        rows = [TIMER_UNIT.unpack_from(data, k * TIMER_UNIT.size) for k in range(n)]
        stop = next((k for k, u in enumerate(rows) if u[2] == C.TIMER_BLANK_MAGIC), n)
        live = [k for k in range(stop) if any(data[k * TIMER_UNIT.size : (k + 1) * TIMER_UNIT.size])]
        if any(not (rows[k][0] == TIMER_UNIT.size and rows[k][2] in TIMER_MAGICS) for k in live):
            return True
        tail = data[n * TIMER_UNIT.size :]
        if stop == n and any(tail) and not (len(tail) >= C.TIMER_MIN_BLANK_LEN and struct.unpack_from(">i", tail, 12)[0] == C.TIMER_BLANK_MAGIC):
            return True
    return False


def timer_case(ctx: dict, ex) -> None:
    which, edits, mode = ex
    datas = _apply_one(ctx, which, edits)
    s = str(ctx["store"])
    if mode == "verify":
        o = invoke("timer", "verify", "-s", s, "-f", "jsonl", "--no-crc", "--precision-ms", "1000")
        if datas[:-1] != ctx["origs"][:-1] and o.code == 0:
            changed = [i for i, (a, b) in enumerate(zip(datas[:-1], ctx["origs"][:-1], strict=True)) if a != b]
            if any(len(datas[i]) != len(ctx["origs"][i]) or _timer_log([(0, datas[i])])[0] != _timer_log([(0, ctx["origs"][i])])[0] for i in changed):
                raise FuzzFailure("timer verify found nothing in a timer log whose units changed")
        return
    o = invoke("timer", "list", "-s", s, "-f", "jsonl", "--precision-ms", "1000")
    units, end, rest = _timer_log([(int(f.name), d) for f, d in zip(ctx["files"][:-1], datas[:-1], strict=True)])
    got = [{k: r[k] for k in ("timer_log_offset", "deliver_ms", "enqueue_ms", "phys_offset", "size")} for r in o.rows("timer")]
    if got != units:
        raise FuzzFailure(f"timer list: {len(got)} units, the files hold {len(units)}: {_first_diff(got, units)}")
    check = datas[-1]
    if len(check) >= 56:  # TimerCheckpoint's 56 bytes: lastReadTimeMs first
        last_read = struct.unpack_from(">q", check)[0]
        states = ["pending" if u["deliver_ms"] >= last_read else "fired" for u in units]
    else:
        states = ["pending"] * len(units)  # no timercheck to say what fired
    if [r["state"] for r in o.rows("timer")] != states:
        raise FuzzFailure("timer list: states differ from timercheck's lastReadTimeMs")
    tails = [(r["timer_log_offset"], r["units"]) for r in o.rows("unwritten")]
    if tails != [(end, rest)]:
        raise FuzzFailure(f"timer list's closing line {tails}: the log ends at {end} with {rest} positions after it")
    problems = o.rows("problem")
    if _timer_log_damaged(datas[:-1]) and not (o.code == 1 and problems):
        raise FuzzFailure(f"timer list exit {o.code}, {len(problems)} problems, over a timer log holding a unit that is no unit or a torn tail")
    if o.code != (1 if problems or not units else 0):
        raise FuzzFailure(f"timer list exit {o.code} with {len(units)} units and {len(problems)} problems")


def wheel_setup(ws: Path) -> dict:
    store = _unpack_store("rmq53-timer", ws)
    wheel = store / "timerwheel"
    with open(wheel, "rb") as f:
        orig = f.read()
    import numpy as np

    raw = np.frombuffer(orig, dtype=np.uint8)
    used = np.flatnonzero(raw[: len(orig) // WHEEL_SLOT.size * WHEEL_SLOT.size].reshape(-1, WHEEL_SLOT.size).any(axis=1))
    return {"store": store, "file": wheel, "orig": orig, "used": used.tolist()}


def wheel_strategy(ctx: dict) -> st.SearchStrategy:
    near = st.tuples(st.sampled_from(ctx["used"]), st.integers(-2 * WHEEL_SLOT.size, 2 * WHEEL_SLOT.size)).map(lambda t: max(0, t[0] * WHEEL_SLOT.size + t[1]))
    anywhere = st.integers(0, len(ctx["orig"]) - 1)
    edit = st.one_of(
        st.tuples(st.just("write"), st.one_of(near, anywhere), st.binary(min_size=1, max_size=40)),
        st.tuples(st.just("zero"), near, st.integers(1, 64)),
        st.tuples(st.just("flip"), near, st.integers(1, 255)),
    )
    return st.tuples(st.lists(edit, min_size=1, max_size=4), st.sampled_from(["all", "pending", "fired"]))


def _apply_in_place(buf: bytearray, edits) -> list[tuple[int, bytes]]:
    """Apply write/zero/flip edits to `buf` in place (its length kept); what they overwrote, to undo in reverse."""
    saved = []
    for e in edits:
        lo = e[1]
        saved.append((lo, bytes(buf[lo : lo + 64])))
        if e[0] == "write":
            x = e[2][: max(0, len(buf) - lo)]
            buf[lo : lo + len(x)] = x
        elif e[0] == "zero":
            n = min(e[2], max(0, len(buf) - lo))
            buf[lo : lo + n] = bytes(n)
        elif e[0] == "flip" and lo < len(buf):
            buf[lo] ^= e[2]
    return saved


def wheel_case(ctx: dict, ex) -> None:
    edits, state = ex
    orig = ctx["orig"]
    if "buf" not in ctx:
        ctx["buf"] = bytearray(orig)
    buf = ctx["buf"]  # the damaged bytes, edited in place and restored: the file is 38.7 MB
    saved = _apply_in_place(buf, edits)
    data = buf
    touched = sorted({e[1] for e in edits})
    with open(ctx["file"], "r+b") as f:  # in place: the 38.7 MB file is mostly holes
        for e in edits:
            lo = e[1]
            f.seek(lo)
            f.write(data[lo : lo + 64])
    try:
        args = ["timer", "dump-wheel", "-s", str(ctx["store"]), "-f", "jsonl", "--precision-ms", "1000"]
        o = invoke(*args, *(["--state", state] if state != "all" else []))
        last_read = struct.unpack_from(">q", (ctx["store"] / "config" / "timercheck").read_bytes())[0]
        # only the slots an edit reached can differ from the original's used ones
        slots = set(ctx["used"]) | {k for e in edits for k in range(e[1] // WHEEL_SLOT.size, (e[1] + 64) // WHEEL_SLOT.size + 1)}
        whole = len(data) // WHEEL_SLOT.size
        want = []
        for i in sorted(k for k in slots if k < whole and any(data[k * WHEEL_SLOT.size : (k + 1) * WHEEL_SLOT.size])):
            t, first, lastp, num, magic = WHEEL_SLOT.unpack_from(data, i * WHEEL_SLOT.size)
            st_ = "pending" if t * 1000 >= last_read else "fired"
            if state in ("all", st_):
                want.append(
                    {
                        "slot_index": i,
                        "file_offset": i * WHEEL_SLOT.size,
                        "time_ms": t * 1000,
                        "first_pos": first,
                        "last_pos": lastp,
                        "num": num,
                        "magic": magic,
                        "state": st_,
                    }
                )
        got = [{k: r[k] for k in ("slot_index", "file_offset", "time_ms", "first_pos", "last_pos", "num", "magic", "state")} for r in o.rows("slot")]
        if got != want:
            raise FuzzFailure(f"dump-wheel: {len(got)} slots, the file holds {len(want)}: {_first_diff(got, want)} (edits at {touched[:4]})")
        if o.code != (0 if want else 1):
            raise FuzzFailure(f"dump-wheel exit {o.code} with {len(want)} slots")
    finally:
        for lo, b in reversed(saved):
            buf[lo : lo + len(b)] = b
        with open(ctx["file"], "r+b") as f:
            for e in edits:
                f.seek(e[1])
                f.write(orig[e[1] : e[1] + 64])


ROCKS_FILES = ("000008.sst", "000009.sst", "MANIFEST-000005", "OPTIONS-000007", "CURRENT")


def rocksdb_setup(ws: Path) -> dict:
    store = _copy_store("rmq53-rocksdbcq", ws)
    files = [store / "consumequeue" / n for n in ROCKS_FILES]
    want: dict = {}
    for m in _manifest("rmq53-rocksdbcq"):
        if m["kind"] == "cq_unit":
            want.setdefault((m["topic"], m["queueId"]), []).append((m["queueOffset"], m["commitLogOffset"], m["size"], m["tagsCode"], m["storeTime"]))
    puts = sum(1 for m in _manifest("rmq53-rocksdbcq") if m["kind"] == "put" and m["status"] == "PUT_OK")
    return {"store": store, "files": files, "origs": [f.read_bytes() for f in files], "want": {k: sorted(v) for k, v in want.items()}, "puts": puts}


def rocksdb_strategy(ctx: dict) -> st.SearchStrategy:
    return st.tuples(
        st.integers(0, len(ctx["files"]) - 1),
        damage(max(len(b) for b in ctx["origs"]), tail=16),
        st.sampled_from(sorted(ctx["want"])),
        st.sampled_from(["dump", "verify"]),
    )


def rocksdb_case(ctx: dict, ex) -> None:
    """A RocksDB ConsumeQueue read through RocksDB: what is listed is the broker's units exactly, or the damage is reported."""
    which, edits, (topic, qid), mode = ex
    _apply_one(ctx, which, edits)
    s = str(ctx["store"])
    if mode == "verify":
        rocksdb_verify(ctx, s, topic, qid)
        return
    o = invoke("cq", "dump", "-s", s, "--topic", topic, "--queue", str(qid), "-f", "jsonl")
    got = [(r["queue_offset"], r["phys_offset"], r["size"], r["tags_code"], r["store_time"]) for r in o.rows("unit")]
    if o.code == 0 and got != ctx["want"][(topic, qid)]:
        raise FuzzFailure(
            f"cq dump exit 0 on a damaged RocksDB with {len(got)} units, the broker wrote {len(ctx['want'][(topic, qid)])}: {_first_diff(got, ctx['want'][(topic, qid)])}"
        )


def rocksdb_verify(ctx: dict, s: str, topic: str, qid: int) -> None:
    """cq verify on a damaged RocksDB ConsumeQueue (the CommitLog intact): exit 0 only when every queue the broker wrote
    reads back whole (the sampled one unit for unit); exit 1 names the damage and never counts a unit or message the
    broker did not write; exit 2 names a file of the RocksDB. invoke() holds exit 0/1/2, no traceback, one error line."""
    o = invoke("cq", "verify", "-s", s, "-f", "jsonl", "--no-crc")
    want = ctx["want"]
    if o.code == 2:
        if "consumequeue" not in o.stderr:
            raise FuzzFailure(f"cq verify exit 2 on a damaged RocksDB without naming its files: {o.stderr.strip()}")
        return
    summary = o.rows("summary")
    if len(summary) != 1:
        raise FuzzFailure(f"cq verify exit {o.code} without one summary line: {o.stdout[-2000:]}")
    sm = summary[0]
    units = sum(len(v) for v in want.values())
    if sm["messages"] != ctx["puts"]:  # the CommitLog is intact: every message the broker stored is read
        raise FuzzFailure(f"cq verify read {sm['messages']} messages of an intact CommitLog holding {ctx['puts']}")
    if sm["units"] > units or sm["queues"] > len(want):
        raise FuzzFailure(f"cq verify counted {sm['units']} units in {sm['queues']} queues; the broker wrote {units} in {len(want)}")
    if o.code == 1:
        if not o.rows("problem") or sm["problems"] == 0:
            raise FuzzFailure(f"cq verify exit 1 on a damaged RocksDB naming no problem: {o.stdout[-2000:]}")
        return
    # exit 0: damage RocksDB does not read (a block no key needs, an OPTIONS comment): the store must be whole
    if (sm["units"], sm["queues"], sm["problems"]) != (units, len(want), 0):
        raise FuzzFailure(f"cq verify exit 0 with {sm['units']} units in {sm['queues']} queues; the broker wrote {units} in {len(want)}")
    d = invoke("cq", "dump", "-s", s, "--topic", topic, "--queue", str(qid), "-f", "jsonl")
    got = [(r["queue_offset"], r["phys_offset"], r["size"], r["tags_code"], r["store_time"]) for r in d.rows("unit")]
    if got != want[(topic, qid)]:
        raise FuzzFailure(f"cq verify exit 0, yet {topic}/{qid} dumps {len(got)} units, the broker wrote {len(want[(topic, qid)])}: {_first_diff(got, want[(topic, qid)])}")


DL_ENTRY = struct.Struct(">iiqqqi")  # magic, size, index, term, pos, channel (+ chain crc, body crc: 48 bytes in all)
DL_UNIT = struct.Struct(">iqiqq")  # magic, pos, size, index, term (32 bytes)


def dledger_setup(ws: Path) -> dict:
    store = _unpack_store("rmq53-dledger", ws)
    data = _queue_files(store / "dledger-n0" / "data")
    index = store / "dledger-n0" / "index" / ("0" * 20)
    puts = sorted((m for m in _manifest("rmq53-dledger") if m["kind"] == "put"), key=lambda m: m["wroteOffset"])
    n = len(puts)
    with open(index, "rb") as f:
        orig_index = f.read(n * DL_UNIT.size)
    return {
        "store": store,
        "files": data,
        "origs": [f.read_bytes() for f in data],
        "index": index,
        "orig_index": orig_index,
        "puts": puts,
        "put_offsets": {m["wroteOffset"] for m in puts},
    }


def _changed_bytes(a: bytes, b: bytes):
    """Positions where two byte strings differ, a position past the shorter one counting as changed."""
    import numpy as np

    n = min(len(a), len(b))
    x, y = np.frombuffer(a, np.uint8, n), np.frombuffer(b, np.uint8, n)
    return np.concatenate((np.flatnonzero(x != y), np.arange(n, max(len(a), len(b)))))


def dledger_strategy(ctx: dict) -> st.SearchStrategy:
    return st.one_of(
        st.tuples(st.just("data"), st.integers(0, len(ctx["files"]) - 1), damage(len(ctx["origs"][0]), tail=64)),
        st.tuples(
            st.just("index"),
            st.just(0),
            st.lists(st.tuples(st.integers(0, len(ctx["orig_index"]) - 1), st.binary(min_size=1, max_size=8)), min_size=1, max_size=3),
        ),
    )


def dledger_case(ctx: dict, ex) -> None:
    part, which, edits = ex
    s = str(ctx["store"])
    if part == "index":
        _apply_one(ctx, 0, [])  # the entries as the broker wrote them
        idx = bytearray(ctx["orig_index"])
        for pos, b in edits:
            idx[pos : pos + len(b)] = b
        idx = bytes(idx[: len(ctx["orig_index"])])
        with open(ctx["index"], "r+b") as f:
            f.write(idx)
        try:
            o = invoke("info", "-s", s, "-f", "jsonl", "--no-recovery")
        finally:
            with open(ctx["index"], "r+b") as f:
                f.write(ctx["orig_index"])
        changed = {
            k
            for k in range(len(idx) // DL_UNIT.size)
            if idx[k * DL_UNIT.size : (k + 1) * DL_UNIT.size] != ctx["orig_index"][k * DL_UNIT.size : (k + 1) * DL_UNIT.size]
        }
        named = {p.get("dledger_index") for p in o.rows("problem") if p.get("file") == str(ctx["index"])}
        if changed - named:
            raise FuzzFailure(f"info did not name damaged index units {sorted(changed - named)[:5]} (named {sorted(x for x in named if x is not None)[:5]})")
        return
    datas = _apply_one(ctx, which, edits)
    o = invoke("commitlog", s, "-f", "jsonl")
    # every entry whose bytes (its 48-byte header and message) the damage left alone is listed exactly; nothing else is
    fsize = len(ctx["origs"][0])
    base = int(ctx["files"][which].name)
    diff = _changed_bytes(datas[which], ctx["origs"][which])
    lo, hi = (base + int(diff[0]), base + int(diff[-1]) + 1) if len(diff) else (0, 0)
    if len(datas[which]) < fsize:
        hi = max(hi, base + fsize)  # a cut file: all after the cut is gone
    got = {r["phys_offset"]: r for r in o.rows("message")}
    for m in ctx["puts"]:
        start = m["wroteOffset"] - 48
        if start < hi and lo < m["wroteOffset"] + m["wroteBytes"]:
            continue
        r = got.get(m["wroteOffset"])
        if r is None or (r["total_size"], r["topic"], r["queue_id"], r["queue_offset"], r["body_crc"], r["dledger_index"]) != (
            m["wroteBytes"],
            m["topic"],
            m["queueId"],
            m["queueOffset"],
            m["bodyCRC"],
            m["seq"],
        ):
            raise FuzzFailure(f"entry {m['seq']} at {m['wroteOffset']}, untouched by the damage at {lo}..{hi}, listed as {r}")
    extra = [p for p in got if p not in ctx["put_offsets"] and not (lo - 48 <= p < hi)]
    if extra:
        raise FuzzFailure(f"listed records the store does not hold: {extra[:5]}")


TARGETS: dict[str, Target] = {
    t.name: t
    for t in (
        Target("cq", cq_setup, cq_strategy, cq_case),
        Target("index", index_setup, index_strategy, index_case),
        Target("checkpoint", checkpoint_setup, checkpoint_strategy, checkpoint_case),
        Target("config", config_setup, config_strategy, config_case),
        Target("offsets", offsets_setup, offsets_strategy, offsets_case),
        Target("decompress", decompress_setup, decompress_strategy, decompress_case),
        Target("compaction", compaction_setup, compaction_strategy, compaction_case),
        Target("batchcq", batchcq_setup, batchcq_strategy, batchcq_case),
        Target("lmq", lmq_setup, lmq_strategy, lmq_case),
        Target("cqext", cqext_setup, cqext_strategy, cqext_case),
        Target("timerlog", timer_setup, timer_strategy, timer_case),
        Target("timerwheel", wheel_setup, wheel_strategy, wheel_case),
        Target("rocksdb", rocksdb_setup, rocksdb_strategy, rocksdb_case),
        Target("dledger", dledger_setup, dledger_strategy, dledger_case),
    )
}


def run_target(name: str, cases: int, seed: int | None = 0, workspace: Path | None = None) -> dict:
    """Run `cases` generated cases of one target; raise on the first failing (shrunk) case."""
    t = TARGETS[name]
    own = workspace is None
    ws = Path(tempfile.mkdtemp(prefix=f"rmqdump-fuzz-{name}-")) if own else workspace
    try:
        ctx = t.setup(ws)
        count = [0]

        @settings(
            max_examples=cases,
            deadline=None,
            database=None,
            derandomize=seed is not None and seed == 0,
            suppress_health_check=list(HealthCheck),
            phases=[Phase.generate, Phase.shrink],
            print_blob=False,
        )
        @given(t.strategy(ctx))
        def check(ex):
            count[0] += 1
            t.case(ctx, ex)

        if seed:
            from hypothesis import seed as hseed

            check = hseed(seed)(check)
        t0 = time.perf_counter()
        check()
        return {"reader": name, "cases": count[0], "seconds": round(time.perf_counter() - t0, 2), "peak_case_rss_mb": (_BASELINE[0] + MAX_GROWTH[0]) >> 20}
    finally:
        if own:
            shutil.rmtree(ws, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=1000, help="total cases, shared equally by the readers run")
    ap.add_argument("--reader", action="append", choices=sorted(TARGETS), help="only this reader (repeatable)")
    ap.add_argument("--seed", type=int, default=0, help="0: the fixed CI sequence; another number: another sequence")
    a = ap.parse_args(argv)
    names = a.reader or list(TARGETS)
    per = max(1, a.cases // len(names))
    t0 = time.perf_counter()
    total, failures = 0, 0
    for n in names:
        try:
            r = run_target(n, per, seed=a.seed)
        except Exception as e:  # report the (shrunk) failing case and go on with the other readers
            failures += 1
            notes = "\n".join(getattr(e, "__notes__", []))
            print(json.dumps({"reader": n, "failure": f"{type(e).__name__}: {e}"[:4000], "case": notes[:4000]}), flush=True)
            continue
        total += r["cases"]
        print(json.dumps(r), flush=True)
    print(
        json.dumps(
            {"cases": total, "seconds": round(time.perf_counter() - t0, 1), "peak_case_rss_mb": (_BASELINE[0] + MAX_GROWTH[0]) >> 20, "failures": failures}
        ),
        flush=True,
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
