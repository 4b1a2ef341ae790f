"""The schema-derived layouts, and the scan's columns, agree with construct's parse on every real record."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import STORES, store_root

from rmqdump.readers.commitlog import CommitLog
from rmqdump.readers.fastpath import field_offset, numpy_dtype, struct_format
from rmqdump.scan import scanner
from rmqdump.schemas import ConsumeQueueUnit, IndexEntry, MessageRecord, RecordPrefix, message_header


def test_dtypes_follow_the_schemas():
    assert numpy_dtype(ConsumeQueueUnit).itemsize == ConsumeQueueUnit.sizeof() == 20
    assert numpy_dtype(IndexEntry).itemsize == IndexEntry.sizeof() == 20
    assert numpy_dtype(message_header()).itemsize == message_header().sizeof()
    assert struct_format(RecordPrefix).size == RecordPrefix.sizeof() == 8
    assert field_offset(message_header(), "phys_offset") == 28
    raw = bytes(range(20))
    parsed = ConsumeQueueUnit.parse(raw)
    arr = np.frombuffer(raw, dtype=numpy_dtype(ConsumeQueueUnit))
    assert [int(arr[n][0]) for n in ("commit_log_offset", "size", "tags_code")] == [parsed.commit_log_offset, parsed.size, parsed.tags_code]


@pytest.mark.parametrize("name", STORES)
def test_scan_columns_equal_construct(name):
    cl = CommitLog.open(store_root(name) / "commitlog")
    checked = 0
    for b in scanner.batches(cl):
        raw_view = b.mf.view
        for i in range(len(b)):
            pos, end = int(b.cols["_pos"][i]), int(b.cols["_end"][i])
            rec = MessageRecord.parse(bytes(raw_view[pos:end]))
            for f in (
                "total_size",
                "magic",
                "body_crc",
                "queue_id",
                "flag",
                "queue_offset",
                "phys_offset",
                "sys_flag",
                "born_timestamp",
                "store_timestamp",
                "reconsume_times",
                "prepared_transaction_offset",
                "body_length",
                "topic_length",
                "properties_length",
            ):
                assert int(b.cols[f][i]) == rec[f], (name, pos, f)
            assert b.body(i) == rec.body
            assert b.raw(int(b.cols["topic_pos"][i]), int(b.cols["topic_length"][i])) == rec.topic
            assert b.properties_bytes(i) == rec.properties
            for host in ("born_host", "store_host"):
                addr, port, _ = b._host_at(int(b.cols[host + "_pos"][i]), bool(b.cols[host + "_then"][i]))
                assert (addr, port) == (rec[host].address, rec[host].port)
            checked += 1
    assert checked > 0


def test_scan_stops_at_a_length_that_overruns_its_record(tmp_path):
    """A body length past the record's end stops the batch at that record (diagnosed, never read out of bounds)."""
    import shutil

    from conftest import patch

    src = store_root("rmq4-basic") / "commitlog"
    shutil.copytree(src, tmp_path / "commitlog")
    first = next(scanner.batches(CommitLog.open(tmp_path / "commitlog")))
    starts = first.cols["_pos"][:3].tolist()
    patch(Path(first.seg.path), starts[1] + field_offset(message_header(), "body_length"), (10**9).to_bytes(4, "big"))
    b = next(scanner.batches(CommitLog.open(tmp_path / "commitlog")))
    assert b.cols["_pos"].tolist() == starts[:1]
    assert [e.code for e in b.events] == ["size_mismatch"]
