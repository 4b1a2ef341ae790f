"""The README's set-up commands are the ones CI runs, and every command it documents exists."""

from __future__ import annotations

import re

from conftest import ROOT, run_proc


def _bash_blocks() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return re.findall(r"```bash\n(.*?)\n```", text, flags=re.S)


def test_two_setup_commands_and_ci_uses_the_test_command():
    blocks = _bash_blocks()
    install, tests = blocks[0], blocks[1]
    assert "pip install" in install and "rmqdump " in install and "fixtures/" in install
    assert "pytest" in tests
    assert tests in (ROOT / ".ci" / "run").read_text(encoding="utf-8")


def test_every_command_has_help_with_an_example():
    top = run_proc("--help")
    assert top.returncode == 0
    import typer.main

    from rmqdump.cli.app import app

    group = typer.main.get_command(app)
    names = []
    for name, cmd in group.commands.items():
        if hasattr(cmd, "commands"):
            names += [(name, sub) for sub in cmd.commands]
        else:
            names.append((name,))
    assert names
    for parts in names:
        r = run_proc(*parts, "--help")
        assert r.returncode == 0, parts
        assert "Example" in r.stdout, f"`rmqdump {' '.join(parts)} --help` has no Example"
