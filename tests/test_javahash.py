"""Java String.hashCode and the index hash, against values Java itself produced."""

from __future__ import annotations

import numpy as np
from conftest import HEALTHY, manifest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmqdump.common.javahash import INT_MIN, index_hash, index_hash_many, java_hash, java_hash_many


def reference_hash(s: str) -> int:
    """The JDK definition, spelled out: s[0]*31^(n-1) + ... over UTF-16 code units, as a 32-bit int."""
    units = []
    for ch in s:
        cp = ord(ch)
        if cp > 0xFFFF:
            cp -= 0x10000
            units += [0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF)]
        else:
            units.append(cp)
    h = 0
    for u in units:
        h = (h * 31 + u) % (1 << 32)
    return h - (1 << 32) if h >= 1 << 31 else h


# Values printed by a JVM (String.hashCode), well known from the JDK documentation and folklore.
KNOWN = {
    "": 0,
    "a": 97,
    "abc": 96354,
    "hello": 99162322,
    "Aa": 2112,
    "BB": 2112,
    "polygenelubricants": INT_MIN,  # the classic string whose hash is Integer.MIN_VALUE
    "中": 20013,  # one BMP code unit: its own value
    "中文": 646394,
    "😀": 1772899,  # U+1F600 = surrogates D83D DE00: 0xD83D * 31 + 0xDE00
}


def test_known_java_values():
    for s, want in KNOWN.items():
        assert java_hash(s) == want, s
        assert reference_hash(s) == want, s
    assert list(java_hash_many(list(KNOWN))) == list(KNOWN.values())


def test_min_value_maps_to_zero_in_the_index():
    assert index_hash(java_hash("polygenelubricants")) == 0
    assert index_hash(-5) == 5 and index_hash(7) == 7
    assert list(index_hash_many(np.array([INT_MIN, -5, 7, 0], dtype=np.int32))) == [0, 5, 7, 0]


def test_non_bmp_counts_as_two_code_units():
    # An emoji is two UTF-16 units: the hash equals that of the two surrogates written out.
    assert java_hash("x😀y") == reference_hash("x😀y")
    assert java_hash("😀") == 0xD83D * 31 + 0xDE00


def test_tags_codes_written_by_java():
    """tagsCodeSetByCaller in the manifests is Java's hashCode of TAGS (CJK and punctuation included)."""
    seen = {}
    for store in HEALTHY:
        for m in manifest(store):
            if m.get("tags") and "tagsCodeSetByCaller" in m:
                seen[m["tags"]] = m["tagsCodeSetByCaller"]
    assert "订单创建" in seen and "PAY-OK" in seen
    for tags, code in seen.items():
        assert java_hash(tags) == code, tags
    assert list(java_hash_many(list(seen))) == list(seen.values())


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(max_size=40), max_size=30))
def test_vectorized_equals_scalar(strings):
    want = [reference_hash(s) for s in strings]
    assert [java_hash(s) for s in strings] == want
    assert list(java_hash_many(strings)) == want
    assert list(index_hash_many(java_hash_many(strings))) == [index_hash(h) for h in want]
