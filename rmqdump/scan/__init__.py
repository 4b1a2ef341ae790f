"""The CommitLog scan as columns: the dispatch values of every record, and the byte ranges work is cut into."""
