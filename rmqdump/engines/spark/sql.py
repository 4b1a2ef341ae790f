"""`rmqdump sql --engine spark`: the same tables as temporary views, the query run by Spark SQL.

The query is planned first with the local engine's planner (rmqdump.sql.query.plan_of,
DuckDB's parser) so that only the tables and columns it names are built and decoded;
a query DuckDB cannot parse (Spark's own dialect) gets every table with every column.
The result comes back to the driver as Arrow batches, a partition at a time, for the
local writers (table, JSON Lines, CSV, Parquet); an --out URI is written by Spark itself.
"""

from __future__ import annotations

import itertools
import logging

import pyarrow as pa

from rmqdump.common.problems import InputError
from rmqdump.engines.spark import api
from rmqdump.scan.splits import StoreRef
from rmqdump.sql import query as Q

RESULT_BATCH_ROWS = Q.RESULT_BATCH_ROWS
_ERROR_LOGGERS = ("SQLQueryContextLogger", "DataFrameQueryContextLogger")


def query_frame(spark, stores: list[StoreRef], query: str):
    """The query's result as a DataFrame over the stores' tables; InputError(bad_query) when Spark rejects it."""
    from pyspark.errors import AnalysisException, ParseException

    try:
        columns = Q.plan_of(query).columns
    except InputError:
        columns = None
    api.register(spark, stores, columns)
    quiet = [logging.getLogger(n) for n in _ERROR_LOGGERS]
    before = [lg.disabled for lg in quiet]
    for lg in quiet:  # PySpark logs the error it raises to stderr as JSON; the one line below says it
        lg.disabled = True
    try:
        try:
            return spark.sql(query)
        except AnalysisException:
            if columns is None:
                raise
            api.register(spark, stores, None)  # again over every column, so that Spark's message names the tables' real columns
            return spark.sql(query)
    except (AnalysisException, ParseException) as e:
        first = (str(e).strip().splitlines() or ["bad query"])[0]
        raise InputError(Q.BAD_QUERY, "query", first.removesuffix(";")) from None
    finally:
        for lg, was in zip(quiet, before, strict=True):
            lg.disabled = was


def arrow_reader(df) -> pa.RecordBatchReader:
    """The DataFrame's rows brought to the driver partition by partition, as Arrow batches of its schema."""
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = to_arrow_schema(df.schema)

    def batches():
        rows = df.toLocalIterator()
        while chunk := list(itertools.islice(rows, RESULT_BATCH_ROWS)):
            cols = [pa.array([_plain(r[i]) for r in chunk], f.type) for i, f in enumerate(schema)]
            yield pa.RecordBatch.from_arrays(cols, schema=schema)

    return pa.RecordBatchReader.from_batches(schema, batches())


def _plain(v):
    """A Spark value as pyarrow takes it: Rows (structs) as dicts, maps as (key, value) lists."""
    if isinstance(v, dict):
        return [(k, _plain(x)) for k, x in v.items()]
    if isinstance(v, list):
        return [_plain(x) for x in v]
    if hasattr(v, "asDict"):
        return {k: _plain(x) for k, x in v.asDict().items()}
    return v


def write_uri(df, out: str, fmt: str, force: bool) -> None:
    """A result written by Spark's own writers to a URI (s3a://, hdfs://, file://): a directory of part files."""
    w = df.write.mode("overwrite" if force else "errorifexists")
    if fmt == "parquet":
        w.parquet(out)
    elif fmt == "csv":  # CSV holds no lists or maps: those as JSON text, as the local writer does
        from pyspark.sql import functions as F
        from pyspark.sql.types import ArrayType, MapType, StructType

        nested = (ArrayType, MapType, StructType)
        df = df.select(*[F.to_json(F.col(f"`{f.name}`")).alias(f.name) if isinstance(f.dataType, nested) else F.col(f"`{f.name}`") for f in df.schema])
        # quotes doubled inside quoted fields, as RFC 4180 and the local writer have them (Spark's default escapes with a backslash)
        df.write.mode("overwrite" if force else "errorifexists").option("header", "true").option("escape", '"').csv(out)
    else:
        w.json(out)
