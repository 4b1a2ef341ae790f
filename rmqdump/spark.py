"""rmqdump's tables as PySpark DataFrames, for your own Spark jobs over a fleet of broker stores.

    from rmqdump.spark import messages, units
    msgs = messages(spark, "brokers/*/store", columns=["broker", "topic", "store_timestamp"])
    msgs.groupBy("broker", "topic").count().show()

messages, units, index_entries, problems, offsets and compacted have the
columns and types of the `rmqdump sql` tables (`rmqdump sql --schema`); see
rmqdump.engines.spark.api for how the rows are made. Needs PySpark.
"""

from rmqdump.engines.spark.api import (
    compacted,
    copies,
    delays,
    evidence,
    index_entries,
    journeys,
    messages,
    offsets,
    pops,
    problems,
    register,
    transactions,
    units,
)

__all__ = ["compacted", "copies", "delays", "evidence", "index_entries", "journeys", "messages", "offsets", "pops", "problems", "register", "transactions", "units"]
