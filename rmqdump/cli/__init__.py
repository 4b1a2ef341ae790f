"""The `rmqdump` command line: typer commands rendering results with rich, JSON Lines or CSV."""
