"""A query result (a stream of Arrow batches) as JSON Lines, CSV or Parquet, written as it streams."""

from __future__ import annotations

import base64
import csv
import decimal
import json
from collections.abc import Iterator
from typing import Any, TextIO

import pyarrow as pa
import pyarrow.parquet as pq

FORMATS = ("table", "jsonl", "csv", "parquet")
_ENCODE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=str).encode


def _plain(v: Any, t: pa.DataType) -> Any:
    """A value as JSON can hold it: bytes in base64, maps as objects, lists element by element."""
    if v is None:
        return None
    if pa.types.is_map(t):
        return {k: _plain(x, t.item_type) for k, x in v}
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return [_plain(x, t.value_type) for x in v]
    if pa.types.is_struct(t):
        return {f.name: _plain(v.get(f.name), f.type) for f in t}
    if isinstance(v, (bytes, bytearray)):
        return base64.b64encode(v).decode()
    if isinstance(v, decimal.Decimal):  # DuckDB's sum of integers is a 128-bit integer, a decimal in Arrow
        return int(v) if v == v.to_integral_value() else float(v)
    return v


def rows(reader: pa.RecordBatchReader) -> Iterator[dict[str, Any]]:
    """The result's rows as plain dicts (bytes in base64), batch by batch."""
    types = {f.name: f.type for f in reader.schema}
    for rb in reader:
        for r in rb.to_pylist():
            yield {k: _plain(v, types[k]) for k, v in r.items()}


def write_jsonl(reader: pa.RecordBatchReader, f: TextIO) -> int:
    n = 0
    for r in rows(reader):
        f.write(_ENCODE(r) + "\n")
        n += 1
    return n


def write_csv(reader: pa.RecordBatchReader, f: TextIO) -> int:
    """CSV with a header; lists and maps as JSON text, bytes in base64."""
    w = csv.writer(f, lineterminator="\n")
    w.writerow(reader.schema.names)
    n = 0
    for r in rows(reader):
        w.writerow([_ENCODE(v) if isinstance(v, (dict, list)) else v for v in r.values()])
        n += 1
    return n


def write_parquet(reader: pa.RecordBatchReader, path: str) -> int:
    n = 0
    with pq.ParquetWriter(path, reader.schema, compression="snappy") as w:
        for rb in reader:
            w.write_batch(rb)
            n += rb.num_rows
    return n
