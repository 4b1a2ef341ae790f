"""Every message as an Arrow dataset (Parquet or JSON Lines). With build, the only writers."""
