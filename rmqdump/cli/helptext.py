"""The command lists of `--help`: each command's first sentence whole, wrapped, never cut with "...".

click cuts a command's summary to what fits beside its name on one line; rmqdump's summaries say what a command is
for, so a cut one misleads. Only typer here: importing it must stay cheap (`rmqdump --help`).
"""

from __future__ import annotations

from typer.core import TyperGroup

_NO_LIMIT = 10_000


class WholeSentenceGroup(TyperGroup):
    """A command group whose `--help` lists each command with its whole first sentence (wrapped to the terminal)."""

    def format_commands(self, ctx, formatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                rows.append((name, cmd.get_short_help_str(_NO_LIMIT)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)
