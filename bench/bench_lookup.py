"""Benchmark `index lookup` on full-size index files (5,000,000 slots, 20,000,000 entries, 420 MB each).

    python bench/gen_store.py bench/data/lookup-1g --size 1GiB --seed 7     # the CommitLog
    python bench/bench_lookup.py build bench/data/lookup-1g                   # two full-size index files
    python bench/bench_lookup.py run bench/data/lookup-1g --keys 1000         # p50/p99, peak RSS
    python bench/bench_lookup.py build-real bench/data/lookup-1g bench/data/lookup-1g-real
    /usr/bin/time -v rmqdump index verify -s bench/data/lookup-1g-real -f jsonl   # verify on a big index

`build` indexes every key of the CommitLog the way IndexService does (topic#UNIQ_KEY,
topic#each key, in put order) and fills the rest of the files' 20,000,000 entries
with synthetic keys (random hashes pointing at real records), so slot chains are
as long as in a full broker file (4 entries per slot on average). Layouts come
from the schemas (IndexHeader.build, numpy dtypes from IndexSlot/IndexEntry).
It also writes bench-keys.json: a random sample of real keys with the offsets of
their messages, which `run` checks every answer against.

`run` opens the store once (as the CLI does per call) and times Index.lookup per
key, topic-scoped and unscoped; then a few end-to-end CLI calls. Peak RSS is the
process's ru_maxrss (resident pages of the mapped files included).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import time
from datetime import datetime, timezone

import numpy as np

from rmqdump.common.javahash import index_hash_many
from rmqdump.query.lookup import Index
from rmqdump.readers.commitlog import CommitLog
from rmqdump.readers.indexfile import ENTRY_DTYPE, SLOT_DTYPE
from rmqdump.scan import scanner
from rmqdump.scan.dispatch import DelayLevels, dispatch_columns
from rmqdump.schemas import IndexHeader
from rmqdump.schemas import constants as C

# The CLI as an operator runs it, reporting its own peak RSS on the last stderr line (ru_maxrss of
# RUSAGE_CHILDREN would count the parent's pages copied by fork before exec).
_CHILD = (
    "import atexit, resource, sys, runpy\n"
    "sys.argv = ['rmqdump', *sys.argv[1:]]\n"
    "atexit.register(lambda: print('peak_rss_mb', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, file=sys.stderr, flush=True))\n"
    "runpy.run_module('rmqdump', run_name='__main__')\n"
)

SLOTS = 5_000_000
ENTRIES = 20_000_000


def collect_keys(store: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
    """(phys, store timestamp, hash, "topic#key") of every index key, in put order."""
    phys, ts, hashes, names = [], [], [], []
    cl = CommitLog.open(os.path.join(store, "commitlog"))
    delays = DelayLevels.parse()
    for b in scanner.batches(cl, check_crc=False):
        d = dispatch_columns(b, delays)
        rec = d.key_rec
        if not len(rec):
            continue
        phys.append(d.phys[rec].astype(np.int64))
        ts.append(np.asarray(d.store_timestamp, dtype=np.int64)[rec])
        hashes.append(index_hash_many(d.key_hash).astype(np.int64))
        # the key texts, at the kernel's key offsets (found in put order; ROLLBACK records have none, as in key_rec)
        f, view = b.found, b.mf.view
        indexed = (d.sys_flag[f["key_rec"]] & C.TRANSACTION_MASK) != C.TRANSACTION_ROLLBACK
        for r, a, n in zip(f["key_rec"][indexed].tolist(), f["key_pos"][indexed].tolist(), f["key_len"][indexed].tolist(), strict=True):
            names.append(f"{d.topics[d.topic_id[r]]}#{bytes(view[a : a + n]).decode('utf-8', errors='replace')}")
    return np.concatenate(phys), np.concatenate(ts), np.concatenate(hashes), names


def write_index_file(path: str, phys: np.ndarray, ts: np.ndarray, kh: np.ndarray, count: int) -> None:
    """One index file whose entries 1..count-1 are the given keys, chained per slot as putKey chains them."""
    n = len(phys)
    assert n == count - 1 <= ENTRIES - 1
    ent = np.zeros(ENTRIES, dtype=ENTRY_DTYPE)
    k = np.arange(1, count, dtype=np.int64)
    ent["key_hash"][1:count] = kh
    ent["phys_offset"][1:count] = phys
    begin = int(ts[0])
    ent["time_diff"][1:count] = np.clip((ts - begin) // 1000, 0, 2**31 - 1)
    slot = kh % SLOTS
    order = np.argsort(slot, kind="stable")
    ss = slot[order]
    same = np.r_[False, ss[1:] == ss[:-1]]
    prev_sorted = np.where(same, np.r_[0, k[order][:-1]], 0)
    prev = np.zeros(n, dtype=np.int64)
    prev[order] = prev_sorted
    ent["prev_index"][1:count] = prev
    slots = np.zeros(SLOTS, dtype=SLOT_DTYPE)
    last = np.r_[ss[1:] != ss[:-1], True]
    slots["entry"][ss[last]] = k[order][last]
    header = IndexHeader.build(
        {
            "begin_timestamp": begin,
            "end_timestamp": int(ts[-1]),
            "begin_phy_offset": int(phys[0]),
            "end_phy_offset": int(phys[-1]),
            "hash_slot_count": int(last.sum()),
            "index_count": count,
        }
    )
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(header)
        slots.tofile(f)
        ent.tofile(f)
    os.replace(tmp, path)


def build(store: str, sample: int, seed: int) -> None:
    t0 = time.time()
    phys, ts, kh, names = collect_keys(store)
    print(f"{len(names)} keys of the CommitLog collected in {time.time() - t0:.1f} s", flush=True)
    rng = np.random.default_rng(seed)
    real = len(names)
    # File A full (20M entries), file B with the rest plus filler to 12M entries.
    counts = [ENTRIES, 12_000_000]
    split = real * 6 // 10
    parts = [(0, split), (split, real)]
    os.makedirs(os.path.join(store, "index"), exist_ok=True)
    base = datetime(2026, 11, 22, 3, 0, 0, tzinfo=timezone.utc)
    for i, ((lo, hi), count) in enumerate(zip(parts, counts, strict=True)):
        n_real = hi - lo
        total = count - 1
        pos = np.sort(rng.choice(total, size=n_real, replace=False))  # where the real keys sit, in put order
        is_real = np.zeros(total, dtype=bool)
        is_real[pos] = True
        p = np.empty(total, dtype=np.int64)
        t = np.empty(total, dtype=np.int64)
        h = np.empty(total, dtype=np.int64)
        p[pos], t[pos], h[pos] = phys[lo:hi], ts[lo:hi], kh[lo:hi]
        filler = ~is_real
        nearest = np.clip(np.searchsorted(pos, np.flatnonzero(filler)), 0, n_real - 1)
        p[filler] = phys[lo:hi][nearest]
        t[filler] = ts[lo:hi][nearest]
        h[filler] = rng.integers(0, 2**31 - 1, size=int(filler.sum()))
        name = (base.replace(minute=i)).strftime("%Y%m%d%H%M%S") + "000"
        t1 = time.time()
        write_index_file(os.path.join(store, "index", name), p, t, h, count)
        print(f"index/{name}: {count - 1} entries ({n_real} real) written in {time.time() - t1:.1f} s", flush=True)
    # A broker keeps its topics in config/topics.json; unscoped lookups take their topics from there.
    topics = sorted({n.partition("#")[0] for n in set(names)})
    os.makedirs(os.path.join(store, "config"), exist_ok=True)
    with open(os.path.join(store, "config", "topics.json"), "w") as f:
        json.dump({"topicConfigTable": {t: {"topicName": t, "readQueueNums": 4, "writeQueueNums": 4} for t in topics}}, f, indent=1)
    pick = random.Random(seed).sample(range(real), sample)
    want: dict[str, set[int]] = {}
    for j in range(real):
        want.setdefault(names[j], set()).add(int(phys[j]))
    keys = [{"index_key": names[j], "phys": sorted(want[names[j]])} for j in pick]
    with open(os.path.join(store, "bench-keys.json"), "w") as f:
        json.dump(keys, f)
    print(f"built in {time.time() - t0:.1f} s", flush=True)


def build_real_only(store: str, out: str) -> None:
    """A second store sharing STORE's CommitLog (symlinked) whose one full-size index file holds exactly
    the CommitLog's keys, as a broker would have written them: the input for timing `index verify`."""
    phys, ts, kh, _names = collect_keys(store)
    os.makedirs(os.path.join(out, "index"), exist_ok=True)
    link = os.path.join(out, "commitlog")
    if not os.path.exists(link):
        os.symlink(os.path.abspath(os.path.join(store, "commitlog")), link)
    t = time.time()
    write_index_file(os.path.join(out, "index", "20261122030000000"), phys, ts, kh, len(phys) + 1)
    print(f"{len(phys)} entries written in {time.time() - t:.1f} s", flush=True)


def _pct(xs: list[float], q: float) -> float:
    return float(np.percentile(np.array(xs) * 1000, q))


def run(store: str, nkeys: int, cli: int) -> dict:
    with open(os.path.join(store, "bench-keys.json")) as f:
        keys = json.load(f)[:nkeys]
    t0 = time.perf_counter()
    idx = Index(store)
    open_s = time.perf_counter() - t0
    sizes = [f.mf.size for f in idx.files]
    scoped, unscoped = [], []
    walked = []
    for k in keys:
        topic, _, key = k["index_key"].partition("#")
        t = time.perf_counter()
        r = idx.lookup(key, [topic])
        scoped.append(time.perf_counter() - t)
        walked.append(sum(w.steps for w in r.walks))
        assert sorted(m.phys_offset for m in r.messages) == k["phys"], k
    idx.close()
    idx = Index(store)  # a fresh one: no records kept from the scoped pass
    for k in keys:
        topic, _, key = k["index_key"].partition("#")
        t = time.perf_counter()
        r = idx.lookup(key)
        unscoped.append(time.perf_counter() - t)
        assert k["phys"][0] in {m.phys_offset for m in r.messages}, k
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    idx.close()
    e2e: list[float] = []
    child_rss = 0.0
    for k in keys[:cli]:
        topic, _, key = k["index_key"].partition("#")
        t = time.perf_counter()
        p = subprocess.run([sys.executable, "-c", _CHILD, "index", "lookup", key, "-s", store, "-t", topic, "-f", "jsonl"], capture_output=True, text=True)
        e2e.append(time.perf_counter() - t)
        assert p.returncode == 0, p.stderr
        child_rss = max(child_rss, float(p.stderr.strip().splitlines()[-1].split()[-1]))
    startup = []
    for _ in range(min(cli, 5)):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "rmqdump", "--help"], capture_output=True, check=True)
        startup.append(time.perf_counter() - t)
    cl_bytes = sum(s.size for s in CommitLog.open(os.path.join(store, "commitlog")).files)
    return {
        "index_files": len(sizes),
        "index_file_bytes": sizes,
        "commitlog_bytes": cl_bytes,
        "keys": len(keys),
        "open_ms": round(open_s * 1000, 1),
        "scoped_p50_ms": round(_pct(scoped, 50), 3),
        "scoped_p99_ms": round(_pct(scoped, 99), 3),
        "scoped_max_ms": round(max(scoped) * 1000, 3),
        "chain_entries_per_lookup": round(float(np.mean(walked)), 2),  # over both files
        "unscoped_p50_ms": round(_pct(unscoped, 50), 3),
        "unscoped_p99_ms": round(_pct(unscoped, 99), 3),
        "peak_rss_mb": round(rss_mb, 1),
        "cli_calls": len(e2e),
        "cli_p50_ms": round(_pct(e2e, 50), 1) if e2e else None,
        "cli_max_ms": round(max(e2e) * 1000, 1) if e2e else None,
        "cli_peak_rss_mb": round(child_rss, 1),
        "cli_startup_p50_ms": round(_pct(startup, 50), 1) if startup else None,  # `rmqdump --help`: interpreter and imports
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="write two full-size index files for STORE/commitlog")
    b.add_argument("store")
    b.add_argument("--sample", type=int, default=1000, help="keys to save for `run`")
    b.add_argument("--seed", type=int, default=1)
    br = sub.add_parser("build-real", help="a store sharing STORE's CommitLog whose index holds exactly its keys (for index verify)")
    br.add_argument("store")
    br.add_argument("out")
    r = sub.add_parser("run", help="time lookups")
    r.add_argument("store")
    r.add_argument("--keys", type=int, default=1000)
    r.add_argument("--cli", type=int, default=20, help="also time this many end-to-end CLI calls")
    a = ap.parse_args(argv)
    if a.cmd == "build":
        build(a.store, a.sample, a.seed)
    elif a.cmd == "build-real":
        build_real_only(a.store, a.out)
    else:
        print(json.dumps(run(a.store, a.keys, a.cli), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
