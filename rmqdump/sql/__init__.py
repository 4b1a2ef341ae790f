"""`rmqdump sql`: DuckDB queries over a store's tables, streamed from the store's files (no export step)."""
