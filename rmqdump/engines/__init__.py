"""Engines that map the same range -> result functions: Spark (engines.spark); the local pool lives with each job."""
