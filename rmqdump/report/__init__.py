"""`rmqdump report`: the store's aggregates (collect), drawn (plots) into one self-contained HTML page (page)."""
