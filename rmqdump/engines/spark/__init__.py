"""The Spark engine: the same decoders and checks as the local engine, run by PySpark tasks.

Import pyspark only here and below, so the rest of rmqdump works without it.
"""
