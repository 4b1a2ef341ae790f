"""`commitlog --limit` reads the planner's ranges only as far as its last message: on -j1 not one range past the one
holding it, on -jN at most the ranges the local engine keeps in flight; and prints exactly the manifest's first N
messages, in CommitLog order, whichever range the limit falls in."""

from __future__ import annotations

import pytest
from conftest import jsonl, manifest, run, store_root

from rmqdump.engines.local import LocalMap
from rmqdump.query import listing

STORE = "rmq4-basic"  # 23 CommitLog files of 128 KiB: 23 ranges


@pytest.fixture
def reads(monkeypatch) -> list[int]:
    """The physical offset of every range the listing reads, in the order it starts reading them."""
    seen: list[int] = []
    real = listing.range_batches

    def counted(split, **kw):
        seen.append(split.base + split.start)
        return real(split, **kw)

    monkeypatch.setattr(listing, "range_batches", counted)
    return seen


def _range_of(offset: int, starts: list[int]) -> int:
    return max(s for s in starts if s <= offset)


@pytest.mark.parametrize("n", [1, 5, 1500, 2999])
def test_limit_on_one_worker_reads_no_range_past_its_last_message(reads, n):
    want = sorted(manifest(STORE), key=lambda m: m["wroteOffset"])[:n]
    r = run("commitlog", "-s", store_root(STORE), "-f", "jsonl", "-n", str(n), "-j", "1")
    assert r.exit_code == 0, r.stderr
    rows = jsonl(r.stdout)
    got = [x for x in rows if x["kind"] == "message"]
    assert [(x["phys_offset"], x["topic"], x["uniq_key"], x["body_crc"]) for x in got] == [
        (m["wroteOffset"], m["topic"], m["uniqKey"], m["bodyCRC"]) for m in want
    ]
    # every file before the last message's ends in a BLANK marker (the broker's: the next message did not fit)
    assert rows[-1] == {"kind": "summary", "files": 23, "messages": n, "blanks": want[-1]["wroteOffset"] // 131072, "problems": 0}
    starts = sorted(set(reads))
    last = _range_of(want[-1]["wroteOffset"], starts)
    assert starts[-1] == last, f"read ranges past the one holding message {n}"
    assert starts == [f * 131072 for f in range(last // 131072 + 1)], "a range before the last message not read"
    assert len(reads) <= len(starts) + 1  # the range the limit falls inside read again, up to it, at most


def test_limit_on_two_workers_reads_a_bounded_look_ahead(reads):
    n = 1500
    want = sorted(manifest(STORE), key=lambda m: m["wroteOffset"])[:n]
    r = run("commitlog", "-s", store_root(STORE), "-f", "jsonl", "-n", str(n), "-j", "2")
    assert r.exit_code == 0, r.stderr
    assert [x["phys_offset"] for x in jsonl(r.stdout) if x["kind"] == "message"] == [m["wroteOffset"] for m in want]
    needed = want[-1]["wroteOffset"] // 131072 + 1
    engine = LocalMap(2)
    # every range up to the last message's, and at most the ranges the engine keeps in flight past it; how many of
    # those a worker starts before the limit is reached is the scheduler's (a loaded machine started none)
    assert needed <= len(set(reads)) <= needed + engine.workers + engine.ahead
    assert sorted(set(reads))[:needed] == [f * 131072 for f in range(needed)], "a range before the last message not read"
    assert len(set(reads)) < 23, "the whole store read for a limit"
