"""The kernels' eight-bytes-a-step searches (rmqdump.scan.words) and the properties split built on them
(rmqdump.text.kernel._props), against models written here in plain Python over the same bytes.

The searches must find exactly the first byte a byte loop finds, never read at or past the end they are given, and the
split must leave to Python exactly the properties a byte loop left (an escaped byte, a bad item, bytes that are not
UTF-8), wherever in a word such a byte falls. The bytes past the range are filled with what would change the answer
if read (quotes, separators, bytes that are not UTF-8).
"""

from __future__ import annotations

import ctypes
import mmap

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from rmqdump.scan.native import configure

configure()
from rmqdump.scan import words as W  # noqa: E402  (numba set up first)
from rmqdump.text import kernel as K  # noqa: E402
from rmqdump.text.spelling import MAX_ITEMS  # noqa: E402

NV, PROP = 1, 2
POISON = b'"\x02\x01\\\xff\x00"\x02\x01\\\xff\x00\x02\x02\x02\x01'  # after the range: any read of it changes an answer
# bytes the properties hold: letters, both separators, what JSON escapes, UTF-8 (é, 中) and bytes that are not UTF-8
ALPHABET = [b"a", b"Z", b"7", b"-", b" ", b"\x01", b"\x02", b'"', b"\\", b"\x1f", b"\x00", b"\xc3\xa9", b"\xe4\xb8\xad", b"\xff", b"\x80", b"\xc3"]


def _placed(body: bytes, lead: int) -> tuple[np.ndarray, int, int]:
    """`body` at offset `lead` of an array, junk before it and POISON after: (array, start, end)."""
    junk = (b'"\x00\xff' * 8)[:lead]
    buf = np.frombuffer(junk + body + POISON, dtype=np.uint8).copy()
    return buf, lead, lead + len(body)


def _stop(b: int) -> bool:
    return b < 0x20 or b in (0x22, 0x5C)


@settings(max_examples=400, deadline=None)
@given(body=st.binary(max_size=40), lead=st.integers(0, 9), c=st.sampled_from([0x01, 0x02, 0x20, 0x80, 0xFF, 0x00, 0x41]))
@example(body=b"\x00\x01", lead=0, c=0x01)  # a zero byte below the one looked for (the borrow runs upwards only)
@example(body=b"abcdefg\x02", lead=0, c=0x02)  # the last byte of the first word
@example(body=b"abcdefgh\x02", lead=0, c=0x02)  # the first byte after it
@example(body=b"abcdefgh", lead=3, c=0x02)  # absent: the end, with POISON's separators right after
@example(body=b"\x81\x81\x81\x80", lead=0, c=0x80)
def test_find_is_the_first_match_inside_the_range(body, lead, c):
    buf, s, e = _placed(body, lead)
    want = body.find(bytes([c]))
    assert W.find(buf, s, e, c) == (s + want if want >= 0 else e)


@settings(max_examples=400, deadline=None)
@given(word=st.binary(min_size=8, max_size=8) | st.lists(st.sampled_from([0x00, 0x1F, 0x20, 0x21, 0x22, 0x5B, 0x5C, 0x5D, 0x7F, 0x80, 0x9F, 0xA2, 0xDC, 0xFF]), min_size=8, max_size=8).map(bytes))
@example(word=b"\xff\xff\xff\xff\xff\xff\xff\xff")  # no stop: high bytes are not below 0x20
@example(word=b"\xa2\xdc\x9f\x80\xff\xff\xff\x22")  # high bytes whose low seven bits are '"', '\\', a control
@example(word=b"\x00\x00\x00\x00\x00\x00\x00\x00")
@example(word=b"abcdefg\\")
def test_json_stops_flags_the_first_byte_json_escapes(word):
    stops = int(W.json_stops(np.uint64(int.from_bytes(word, "little"))))
    first = next((i for i, b in enumerate(word) if _stop(b)), None)
    if first is None:
        assert stops == 0
    else:
        assert stops != 0 and int(W.lowest(np.uint64(stops))) == first


def _props_model(p: bytes) -> int | list[tuple[int, int, int]]:
    """What the byte loop decided: -1 (Python decides), else each item's (name start, separator, end) in p."""
    if any((b < 0x20 and b not in (NV, PROP)) or b in (0x22, 0x5C) for b in p):
        return -1
    items, i = [], 0
    for part in p.split(bytes([PROP])):
        if part:
            if part.count(NV) != 1 or len(items) >= MAX_ITEMS:
                return -1
            items.append((i, i + part.index(NV), i + len(part)))
        i += len(part) + 1
    names = [p[a:k] for a, k, _ in items]
    if len(set(names)) != len(names):
        return -1
    try:
        p.decode("utf-8")
    except UnicodeDecodeError:
        return -1
    return items


@settings(max_examples=500, deadline=None)
@given(parts=st.lists(st.sampled_from(ALPHABET), max_size=48), lead=st.integers(0, 9))
@example(parts=[b"K", b"\x01", *[b"\xff"] * 9, b"\x02"], lead=0)  # not UTF-8, inside a word the split skips whole
@example(parts=[b"KEYS\x01abcdefghijklmno", b"\xc3", b"pqrstuvw\x02"], lead=1)  # a cut UTF-8 sequence mid-word
@example(parts=[b"UNIQ_KEY\x01C000020242F9295A485C05265BD40000\x02KEYS\x01order-1 user_2\x02", b'"'], lead=0)  # a quote as the last byte
@example(parts=[b"abcdefg\x01", b"\\", b"x"], lead=0)
@example(parts=[b"A\x01", b"\xe4\xb8\xad" * 5, b"\x02B\x01x"], lead=7)  # valid UTF-8 across words
@example(parts=[b"A\x01x\x02A\x01y"], lead=0)  # a name twice
@example(parts=[b"A\x01x\x01y"], lead=0)  # two separators in one item
def test_props_leaves_to_python_what_the_byte_loop_did(parts, lead):
    p = b"".join(parts)
    buf, s, _ = _placed(p, lead)
    its, itk, ite = (np.full(MAX_ITEMS, -7, dtype=np.int64) for _ in range(3))
    m = int(K._props(buf, s, len(p), its, itk, ite))
    want = _props_model(p)
    if want == -1:
        assert m == -1
    else:
        assert m == len(want)
        got = [(int(its[j]) - s, int(itk[j]) - s, int(ite[j]) - s) for j in range(m)]
        assert got == want


def test_the_models_see_what_they_must():
    """The models themselves, on cases read by eye."""
    assert _props_model(b"A\x01x\x02B\x01y") == [(0, 1, 3), (4, 5, 7)]
    assert _props_model(b"A\x01\xff") == -1 and _props_model(b'A\x01"') == -1 and _props_model(b"A\x01\x1f") == -1
    assert _props_model(b"\x02\x02A\x01\xc3\xa9\x02") == [(2, 3, 6)]
    assert _stop(0x22) and _stop(0x5C) and _stop(0x00) and not _stop(0x80) and not _stop(0x20)


PAGE = mmap.PAGESIZE
PROT_NONE = 0  # POSIX's value; Python's mmap module does not name it
_KEEP: list = []


def _at_page_end(data: bytes) -> np.ndarray:
    """`data` as the last bytes before a page that may not be read (PROT_NONE): a read past them stops the process."""
    m = mmap.mmap(-1, 2 * PAGE)
    whole = np.frombuffer(m, dtype=np.uint8)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    assert libc.mprotect(whole.ctypes.data + PAGE, PAGE, PROT_NONE) == 0, ctypes.get_errno()
    _KEEP.append(m)  # the mapping outlives the test's arrays
    arr = whole[PAGE - len(data) : PAGE]
    arr[:] = np.frombuffer(data, dtype=np.uint8)
    return arr


@pytest.mark.parametrize("n", range(0, 20))
def test_nothing_is_read_past_the_range_at_a_mapping_end(n):
    """The end of a mapped file: a range that ends where readable memory ends is searched and split without a read
    past it (a word load there would fault)."""
    body = (b"A\x01bcdefgh\x02" * 3)[:n]
    arr = _at_page_end(body)
    assert W.find(arr, 0, n, 0x7E) == n
    its, itk, ite = (np.zeros(MAX_ITEMS, dtype=np.int64) for _ in range(3))
    want = _props_model(body)
    assert int(K._props(arr, 0, n, its, itk, ite)) == (-1 if want == -1 else len(want))
