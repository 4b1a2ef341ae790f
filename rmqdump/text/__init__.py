"""Records as text: how the compiled kernels spell JSON Lines, table cells and CSV, a batch per call."""
