"""Checks over readers and scan columns: cq verify, index verify, recovery preview, consumer offsets. They return results and never print."""
