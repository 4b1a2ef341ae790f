"""The ahead-of-time scan kernel where the install did not build it: built once in the background, then loaded
without numba, giving what the broker wrote, exactly as the JIT kernel does.

The build is real (numba's ahead-of-time compiler, a C toolchain) and takes tens of seconds, so it runs once, in a
cache directory of the module's own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import REAL, manifest, store_root, unpack_store

from rmqdump.readers.commitlog import CommitLog, commitlog_path
from rmqdump.readers.mapped import MappedFile
from rmqdump.scan import layout as L
from rmqdump.scan.aot import MODULE

ROOT = Path(__file__).resolve().parent.parent
BUILD_TIMEOUT = 600


def _env(cache: Path, **extra) -> dict:
    """A fresh cache directory, and the module this install built left aside (RMQDUMP_AOT=cache): the way a wheel
    built elsewhere, or an install without a C compiler, starts."""
    env = {**os.environ, "RMQDUMP_CACHE_DIR": str(cache), "RMQDUMP_AOT": "cache", **extra}
    env.pop("NUMBA_CACHE_DIR", None)
    return env


def _probe(env: dict, *args: str) -> dict:
    """A command run in a fresh process, and whether that process imported numba and which kernel it loaded."""
    code = (
        "import sys, json; from typer.testing import CliRunner; from rmqdump.cli.app import app;"
        f"r = CliRunner().invoke(app, {list(map(str, args))!r});"
        "from rmqdump.scan.aot import SCAN, load;"
        "print(json.dumps({'code': r.exit_code, 'out': r.stdout, 'numba': 'numba' in sys.modules,"
        " 'kernel': load(SCAN).__name__}))"
    )
    p = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """A cache directory whose kernel a first (JIT) run started building in the background, the build finished."""
    cache = tmp_path_factory.mktemp("aot-cache")
    first = _probe(_env(cache), "info", "-s", store_root("rmq4-basic"), "-f", "jsonl")
    assert first["kernel"] == "rmqdump.scan.kernel" and first["numba"]  # nothing built yet: the JIT kernel serves
    locks = lambda: list(cache.rglob("aot-*.lock"))  # noqa: E731
    assert locks(), "the first run started no build"
    deadline = time.time() + BUILD_TIMEOUT
    while locks() and time.time() < deadline:
        time.sleep(1)
    assert not locks(), "the build did not finish"
    assert list(cache.rglob(MODULE + "*.so")), "the build left no module"
    return cache


def test_a_later_run_loads_the_built_kernel_without_numba(built):
    """After the build, a scanning command imports no numba and still finds every message the broker wrote."""
    for name in ("rmq4-basic", "rmq53-v2"):
        r = _probe(_env(built), "cq", "verify", "-s", store_root(name), "-f", "jsonl")
        assert r["kernel"] == MODULE and not r["numba"], r
        assert r["code"] == 0
        summary = [json.loads(line) for line in r["out"].splitlines() if line.strip()][-1]
        assert summary["messages"] == len(manifest(name))
    one = _probe(_env(built), "cq", "verify", "-s", store_root("rmq4-crash"), "-f", "jsonl", "-j", "1")
    two = _probe(_env(built), "cq", "verify", "-s", store_root("rmq4-crash"), "-f", "jsonl", "-j", "2")
    assert one["kernel"] == MODULE and not one["numba"]
    assert two["kernel"] == MODULE and not two["numba"]  # threads too: its entry points release Python's lock
    assert two["out"] == one["out"] and two["code"] == one["code"]
    r = _probe(_env(built, RMQDUMP_AOT="off"), "info", "-s", store_root("rmq4-basic"))
    assert r["kernel"] == "rmqdump.scan.kernel" and r["numba"]  # RMQDUMP_AOT=off keeps to the JIT kernel


def _load(cache: Path):
    """The built module, loaded in this process as aot.load loads it."""
    code = "from rmqdump.scan import aot; print(aot.load(aot.SCAN).__file__)"
    p = subprocess.run([sys.executable, "-c", code], env=_env(cache), cwd=ROOT, capture_output=True, text=True, check=True)
    path = p.stdout.strip()
    import ctypes
    import importlib.util

    from rmqdump.scan.native import crc_library

    lib = crc_library()[1]
    if lib:
        ctypes.CDLL(lib, mode=ctypes.RTLD_GLOBAL)
    spec = importlib.util.spec_from_file_location(MODULE, path)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def _stores(tmp: Path) -> list[Path]:
    """Every fixture store root, the packed ones (DLedger: records framed by entry headers) unpacked."""
    return sorted(p.parent for p in REAL.glob("*/store/commitlog")) + [unpack_store(p.parent.name, tmp / p.parent.name) for p in sorted(REAL.glob("*/store.tar.gz"))]


def test_every_entry_point_gives_the_jit_kernels_answer_on_every_fixture_file(built, tmp_path):
    """scan (plain and DLedger-framed), properties_columns, pack_bytes, holds_zero, join_offsets and index_put,
    side by side with the JIT kernel on every CommitLog file of every fixture store, batch after batch;
    distinct_codes and spell_rows of both against models written here."""
    from rmqdump.scan import kernel as jit
    from rmqdump.scan.native import configure

    configure()
    aot = _load(built)
    files = 0
    framed = 0
    for store in _stores(tmp_path):
        for f in CommitLog.open(commitlog_path(str(store))).files:
            framed += f.frame > 0
            files += 1
            with MappedFile(f.path) as mf:
                p, runs = 0, 0
                while p < mf.size and runs < 64:
                    res = []
                    for k in (aot, jit):
                        out = np.zeros((len(L.COLUMNS), 4096), np.int64)
                        keys = np.zeros((len(L.KEY_COLUMNS), 4096 * 4), np.int64)
                        n, nk, q, code, reps = k.scan(mf.data, mf.size, p, mf.size, True, True, out, keys, f.frame, f.base)
                        res.append((n, nk, q, code, reps.tolist(), out[:, :n].copy(), keys[:, :nk].copy()))
                    a, b = res
                    assert a[:5] == b[:5], (f.path, p)
                    assert np.array_equal(a[5], b[5]) and np.array_equal(a[6], b[6]), (f.path, p)
                    n, cols = a[0], a[5]
                    if n:
                        pos = np.ascontiguousarray(cols[L.COL["properties_pos"]])
                        length = np.ascontiguousarray(cols[L.COL["properties_length"]])
                        for name in ("properties_columns", "pack_bytes", "holds_zero"):
                            x, y = getattr(aot, name)(mf.data, pos, length), getattr(jit, name)(mf.data, pos, length)
                            x, y = (x, y) if isinstance(x, tuple) else ((x,), (y,))
                            assert len(x) == len(y) and all(np.array_equal(u, v) for u, v in zip(x, y, strict=True)), (name, f.path, p)
                    if a[2] <= p:
                        break
                    p, runs = a[2], runs + 1
    assert files > 20 and framed > 0
    rng = np.random.default_rng(7)
    phys = np.unique(rng.integers(0, 1 << 40, 5000)).astype(np.int64)
    offs = np.concatenate([rng.choice(phys, 300), rng.integers(0, 1 << 40, 300)]).astype(np.int64)
    got = []
    for k in (aot, jit):
        rows = np.zeros(len(offs), np.int64)
        got.append((k.join_offsets(phys, offs, rows), rows))
    assert np.array_equal(got[0][0], got[1][0]) and np.array_equal(got[0][1], got[1][1])
    slots = rng.integers(0, 64, 500).astype(np.int32)
    got = []
    for k in (aot, jit):
        table, prev = np.zeros(64, np.int32), np.zeros(500, np.int32)
        got.append((k.index_put(table, slots, 1, prev), table, prev))
    assert got[0][0] == got[1][0] and np.array_equal(got[0][1], got[1][1]) and np.array_equal(got[0][2], got[1][2])
    # distinct_codes against the model: distinct keys in the order first met, each key's index among them (runs,
    # keys met again after others, values that share their low or high bits, the largest uint64)
    many = rng.integers(0, 1 << 63, 3000) << 1  # met again later in another order: keys found after a probe
    keys = np.concatenate([rng.integers(0, 6, 3000), many, np.repeat(rng.integers(0, 40, 50), 7), rng.permutation(many), [2**64 - 1, 0]]).astype(np.uint64)
    keys = np.concatenate([keys, keys[::3] << np.uint64(32)])
    first_met = list(dict.fromkeys(keys.tolist()))
    for k in (aot, jit):
        uniq, codes = k.distinct_codes(keys)
        assert uniq.tolist() == first_met and codes.dtype == np.int32
        assert [first_met[c] for c in codes.tolist()] == keys.tolist()
        assert [a.tolist() for a in k.distinct_codes(np.zeros(0, np.uint64))] == [[], []]
    # word_codes against the model: the eight bytes at each position (clipped into the data) as a little-endian word,
    # distinct in the order first met; positions at any alignment, past either end, fewer than the prefetch distance
    data = np.frombuffer(bytes(rng.integers(0, 4, 700).astype(np.uint8)), np.uint8)
    for pos in (rng.integers(-20, 720, 2000), np.array([3, -1, 699]), np.zeros(0, np.int64)):
        pos = pos.astype(np.int64)
        model = [int.from_bytes(data[min(max(p, 0), len(data) - 8) :][:8].tobytes(), "little") for p in pos.tolist()]
        first_met = list(dict.fromkeys(model))
        for k in (aot, jit):
            uniq, codes = k.word_codes(data, pos)
            assert uniq.tolist() == first_met and [first_met[c] for c in codes.tolist()] == model
            assert [a.tolist() for a in k.word_codes(data[:7], pos)] == ([[0], [0] * len(pos)] if len(pos) else [[], []])
    # spell_rows against the model: each row's head (by code) then its tail, two characters a byte from the table
    pairs = np.frombuffer("".join(f"{i:02X}" for i in range(256)).encode(), dtype="<u2")
    heads_list = [bytes(rng.integers(0, 256, w).astype(np.uint8)) for w in (4, 16, 0, 8)]
    head_offs = np.concatenate([[0], np.cumsum([len(h) for h in heads_list])]).astype(np.int64)
    heads = np.frombuffer(b"".join(heads_list), np.uint8)
    code = rng.integers(0, len(heads_list), 700).astype(np.int32)
    tails = rng.integers(0, 256, (700, 8)).astype(np.uint8)
    want = [(heads_list[c] + bytes(t)).hex().upper() for c, t in zip(code.tolist(), tails, strict=True)]
    for k in (aot, jit):
        offs, text = k.spell_rows(heads, head_offs, code, tails, pairs)
        raw = text.tobytes().decode()
        assert [raw[a:b] for a, b in zip(offs[:-1].tolist(), offs[1:].tolist(), strict=True)] == want and offs.dtype == np.int32


def test_a_machine_that_cannot_build_it_keeps_the_jit_kernel_and_tries_once(tmp_path):
    """No C compiler (CC names none): the build fails once, leaves its reason, and later runs neither retry nor fail."""
    cache = tmp_path / "cache"
    env = _env(cache, CC="/nonexistent/cc")
    first = _probe(env, "cq", "verify", "-s", store_root("rmq4-basic"), "-f", "jsonl")
    assert first["code"] == 0 and first["kernel"] == "rmqdump.scan.kernel"
    deadline = time.time() + BUILD_TIMEOUT
    while list(cache.rglob("aot-*.lock")) and time.time() < deadline:
        time.sleep(1)
    failed = list(cache.rglob("aot-*.failed"))
    assert len(failed) == 1 and failed[0].read_text().strip() and not list(cache.rglob(MODULE + "*.so"))
    again = _probe(env, "cq", "verify", "-s", store_root("rmq4-basic"), "-f", "jsonl")
    assert again["code"] == 0 and again["kernel"] == "rmqdump.scan.kernel"
    assert not list(cache.rglob("aot-*.lock"))  # no second build started
    assert again["out"] == first["out"]


def test_its_entry_points_let_other_threads_run(built):
    """Threads sharing a scan run side by side on the module: while one thread is inside an entry point (a long
    holds_zero), the main thread keeps running Python, never stopped for the whole call."""
    import threading

    k = _load(built)
    data = np.ones(16 << 20, np.uint8)
    data.flags.writeable = False
    pos, length = np.zeros(64, np.int64), np.full(64, len(data), np.int64)
    t0 = time.perf_counter()
    k.holds_zero(data, pos, length)
    alone = time.perf_counter() - t0
    stood = []
    for _ in range(3):  # a kernel holding the lock stops the main thread for each whole call; a busy machine, once
        t = threading.Thread(target=k.holds_zero, args=(data, pos, length))
        longest, last = 0.0, time.perf_counter()
        t.start()
        while t.is_alive():
            now = time.perf_counter()
            longest, last = max(longest, now - last), now
        t.join()
        stood.append(longest)
    assert min(stood) < alone / 3, f"the main thread stood still {stood} s of a {alone:.3f} s call: the kernel held Python's lock"
