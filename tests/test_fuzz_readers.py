"""Every reader fuzzed through the CLI with a fixed seed: 500 cases each (tests/fuzz.py has the
targets, their oracles and the entry point for long runs)."""

from __future__ import annotations

import pytest
from fuzz import TARGETS, run_target, zstd_rle_bomb

CI_CASES = 500


@pytest.mark.parametrize("reader", sorted(TARGETS))
def test_reader_fuzzed_through_the_cli(reader, tmp_path):
    r = run_target(reader, CI_CASES, seed=0, workspace=tmp_path)
    assert r["cases"] >= CI_CASES
    assert r["peak_case_rss_mb"] < 500


def test_decompression_is_bounded():
    """A zstd frame of RLE blocks that would expand to 250 MiB is refused, not expanded."""
    from rmqdump.readers.message import DECOMPRESSED_LIMIT, decompress
    from rmqdump.schemas import constants as C

    flag = C.FLAG_COMPRESSED | (2 << C.COMPRESSION_SHIFT)
    assert C.COMPRESSION_NAMES[2] == "zstd"
    with pytest.raises(ValueError, match="expands past"):
        decompress(zstd_rle_bomb(2000), flag)
    assert decompress(zstd_rle_bomb(8), flag) == bytes(8 * 131072)
    assert DECOMPRESSED_LIMIT > 8 * 131072


def test_offsets_that_are_not_longs_are_named_not_listed(tmp_path):
    """Found by the long fuzz run: an offset that reads as 1e999 (a flipped byte) was an OverflowError traceback; then
    such entries were left out without a word. Each is now a bad_config problem naming its key (exit 1)."""
    from fuzz import invoke, offsets_setup

    ctx = offsets_setup(tmp_path)
    ctx["file"].write_text('{"offsetTable":{"orders@g":{0:1e999,1:2.5,2:true,3:7,4:-1}}}', encoding="utf-8")
    o = invoke("offsets", "-s", str(ctx["store"]), "-f", "jsonl")
    assert o.code == 1
    assert [(r["group"], r["topic"], r["queue_id"], r["committed"]) for r in o.rows("offset")] == [("g", "orders", 3, 7), ("g", "orders", 4, -1)]
    named = [p for p in o.rows("problem") if p["code"] == "bad_config"]
    assert [p["file"] for p in named] == [str(ctx["file"])] * 3
    assert [p["detail"].split("]")[1] for p in named] == ["['0'", "['1'", "['2'"]


def test_negative_ext_bitmap_size_is_no_bitmap(tmp_path):
    """Found by the fuzz run: an ext unit whose bitMapSize reads negative was an internal_error; CqExtUnit.read takes a
    bitMapSize < 1 as no bitmap."""
    from fuzz import EXT_UNIT, cqext_setup, invoke

    ctx = cqext_setup(tmp_path)
    ext = bytearray(ctx["origs"][1])
    ext[EXT_UNIT.size - 2 : EXT_UNIT.size] = b"\xff\xff"  # the first ext unit's bitMapSize: -1
    ctx["files"][1].write_bytes(bytes(ext))
    o = invoke("cq", "dump", "-s", str(ctx["store"]), "--topic", "ExtTopicA", "--queue", "0", "-f", "jsonl")
    first = next(r for r in o.rows("unit") if r.get("ext_file_offset") == 0)
    assert o.code == 0 and first["filter_bitmap"] == "" and first["tags_code"] == EXT_UNIT.unpack_from(ext, 0)[1]
