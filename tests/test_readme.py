"""The README's set-up commands are the ones CI runs, every command it documents exists, and its examples are true.

Every ```console block of the README and of docs/*.md is run (each `$ ` line in bash, in a scratch directory that sees `fixtures/`, with
`/tmp/` redirected into it) and its output compared with what the block shows, line for line. Only what
cannot repeat is masked: timings, the checkout's absolute path, and a line `  ...` standing for lines left out.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
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


def _groups() -> list[tuple[list[str], dict]]:
    """(command path, its subcommands) of the top level and of every command group."""
    import typer.main

    from rmqdump.cli.app import app

    top = typer.main.get_command(app)
    return [([], top.commands)] + [([name], cmd.commands) for name, cmd in top.commands.items() if hasattr(cmd, "commands")]


def _first_sentence(doc: str) -> str:
    """A docstring's first sentence, as a reader of the docstring sees it (the model the help list is held to)."""
    words = doc.split("\n\n")[0].split()
    end = next((i for i, w in enumerate(words) if w.endswith(".")), len(words) - 1)
    return " ".join(words[: end + 1]).rstrip(".")


def test_help_lists_each_command_whole_at_80_columns():
    """`rmqdump --help` and each group's --help, at 80 columns: no summary cut with "...", each the command's whole
    first sentence (its docstring's)."""
    env = {**os.environ, "COLUMNS": "80"}
    for path, commands in _groups():
        out = run_proc(*path, "--help", env=env).stdout
        listing = out[out.index("Commands:") :]
        assert "..." not in listing, path
        flat = " ".join(listing.split())
        for name, cmd in commands.items():
            assert f"{name} {_first_sentence(cmd.help)}" in flat, (path, name)


def test_usage_names_the_arguments_as_the_help_text_does():
    """Commands whose help speaks of STOREDIR and NEWDIR/OUTDIR/OUT show those names in their usage and options."""
    env = {**os.environ, "COLUMNS": "200"}
    for cmd, out_name in (("repair", "NEWDIR"), ("rebuild", "OUTDIR"), ("salvage", "OUT")):
        h = run_proc(cmd, "--help", env=env).stdout
        usage = h.splitlines()[0]
        assert usage.endswith(f"rmqdump {cmd} [OPTIONS] [STOREDIR]"), usage
        assert "STOREDIR" in h.split("Options:")[0].split(usage)[1]  # the text speaks of it too
        assert f"-o, --out {out_name}" in h and "-s, --store STOREDIR" in h and out_name in h.split("Arguments:")[0], cmd
    for cmd, names in ((["commitlog"], ["FILE"]), (["diff"], ["A", "B"]), (["msgid"], ["ID"]), (["index", "lookup"], ["KEY"]), (["sql"], ["QUERY"])):
        usage = run_proc(*cmd, "--help", env=env).stdout.splitlines()[0]
        assert [w.strip("[]{}.") for w in usage.split("[OPTIONS]")[1].split()] == names, usage  # as the README's command table
    for cmd in ("repair", "rebuild"):  # the sizes are inferred from the store: no bare broker default as the default
        h = " ".join(run_proc(cmd, "--help", env=env).stdout.split())
        assert "else the store's own ConsumeQueue files" in h and "default 300000" not in h, cmd


DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _console_blocks() -> list[tuple[str, list[tuple[str, list[str]]]]]:
    """(first command, [(command, expected output lines)]) per console block of the README and docs/."""
    text = "\n".join(p.read_text(encoding="utf-8") for p in DOCS)
    out = []
    for block in re.findall(r"```console\n(.*?)\n```", text, flags=re.S):
        steps: list[tuple[str, list[str]]] = []
        for line in block.split("\n"):
            if line.startswith("$ "):
                steps.append((line[2:], []))
            else:
                steps[-1][1].append(line)
        out.append((steps[0][0], steps))
    return out


_TIMING = (re.compile(r"\d+\.\d+ s \(\d+ messages/s\)"), "<seconds> s (<rate> messages/s)")
_ABS_FIXTURES = (re.compile(r"(?<![\w./-])/\S*?/fixtures/real/"), "<checkout>/fixtures/real/")


def _norm(line: str) -> str:
    line = line.rstrip()
    for rx, sub in (_TIMING, _ABS_FIXTURES):
        line = rx.sub(sub, line)
    return line


def _matches(want: list[str], got: list[str]) -> bool:
    """Line for line; a README line that is just `...` (indented or not) stands for any number of lines."""
    if not want:
        return not got
    if want[0].strip() == "...":
        return any(_matches(want[1:], got[i:]) for i in range(len(got) + 1))
    return bool(got) and want[0] == got[0] and _matches(want[1:], got[1:])


BLOCKS = _console_blocks()


def test_the_readme_links_every_page_of_docs_and_every_link_resolves():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    pages = sorted(p.name for p in (ROOT / "docs").glob("*.md"))
    assert pages and [p for p in pages if f"(docs/{p})" not in readme] == []
    for doc in DOCS:
        for target in re.findall(r"\]\(([^)#]+)\)", doc.read_text(encoding="utf-8")):
            if "://" not in target:
                assert (doc.parent / target).exists(), f"{doc.name}: broken link {target}"


def test_the_readme_has_console_examples_for_every_command():
    shown = {cmd.split()[1] for _, steps in BLOCKS for cmd, _ in steps if cmd.startswith("rmqdump ")}
    assert {"commitlog", "info", "cq", "offsets", "index", "msgid", "rebuild", "sql"} <= shown


@pytest.mark.parametrize("steps", [s for _, s in BLOCKS], ids=[first[:60] for first, _ in BLOCKS])
def test_console_example_output_is_what_the_tool_prints(steps, tmp_path):
    (tmp_path / "fixtures").symlink_to(ROOT / "fixtures")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = dict(os.environ, PATH=f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ['PATH']}", COLUMNS="220")
    for cmd, want in steps:
        r = subprocess.run(["bash", "-c", cmd.replace("/tmp/", f"{scratch}/")], cwd=tmp_path, capture_output=True, text=True, env=env, timeout=300)
        got = [_norm(x.replace(f"{scratch}/", "/tmp/")) for x in (r.stdout + r.stderr).rstrip("\n").split("\n")] if r.stdout + r.stderr else []
        want = [_norm(x) for x in want]
        assert _matches(want, got), f"$ {cmd}\n--- README\n" + "\n".join(want) + "\n--- rmqdump\n" + "\n".join(got)
        assert r.returncode == _exit_code(cmd), f"$ {cmd}\nexit {r.returncode}\n" + r.stderr[-2000:]


def _exit_code(cmd: str) -> int:
    """The exit code the README gives a console example: 0, or N where its command line ends with `# exit N`."""
    m = re.search(r"#\s*exit (\d)\s*$", cmd)
    return int(m.group(1)) if m else 0


def test_exit_code_notes_are_read():
    assert (_exit_code("rmqdump cq verify -s x  # exit 1"), _exit_code("rmqdump info -s x")) == (1, 0)
