"""The problem codes guard: every code the README documents or the code declares is made by some test of the run.

Each test process records the codes it sees (conftest patches Problem and InputError, and reads the CLI's output).
The suite runs on several processes (pytest-xdist): each hands its codes to the controller when it is done, and the
controller judges the union once, at the end of the run (conftest.pytest_sessionfinish), only when the run collected
every test file and passed. A code no input can produce cannot stay.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

OBSERVED: set[str] = set()  # every code-like word a Problem or InputError was made with, or the CLI printed, in this process
PRODUCED: set[str] = set()  # codes the tests of this process claim to produce (@produces)
_TOKEN = re.compile(r"[a-z][a-z0-9_]*")
_CODE = re.compile(r"^[a-z0-9]+(?:_[a-z0-9]+)+$")

# Constants that look like codes and are not.
NOT_CODES = {"rmqdump_env", "rmqdump_scan_kernel"}  # a venv name; the ahead-of-time kernel module's name


def produces(*codes: str):
    """Declare that the decorated test makes these codes: the guard fails if one of them was never observed."""
    PRODUCED.update(codes)
    return lambda fn: fn


def observe_output(*texts: str | None) -> None:
    """Record the code-like words of a CLI run's output (the guard keeps only the declared codes among them)."""
    for t in texts:
        if t:
            OBSERVED.update(_TOKEN.findall(t))


def readme_codes() -> set[str]:
    """Codes in the code tables (a first column headed `code`) of the README and docs/*.md."""
    out: set[str] = set()
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        in_codes = False
        for line in doc.read_text(encoding="utf-8").splitlines():
            if not line.startswith("|"):
                in_codes = False
                continue
            first = line.split("|")[1].strip()
            if first == "code":
                in_codes = True
            elif in_codes and first.startswith("`"):
                out.update(c for c in re.findall(r"`([a-z0-9_]+)`", first) if _CODE.match(c))
    return out


def declared_codes() -> set[str]:
    """Codes the code declares (the Spark engine's too): `NAME = "code"` constants and the literal first argument of
    Problem(...) / InputError(...). Recovery's normal-recovery modes (NORMAL_...) are not codes."""
    out: set[str] = set()
    for path in (ROOT / "rmqdump").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        for name, value in re.findall(r'^([A-Z][A-Z0-9_]*) = "([a-z0-9_]+)"', text, flags=re.M):
            if _CODE.match(value) and not name.startswith("NORMAL_"):
                out.add(value)
        out.update(c for c in re.findall(r'(?:Problem|InputError)\(\s*"([a-z0-9_]+)"', text) if _CODE.match(c))
    return out - NOT_CODES


@dataclass
class Run:
    """The codes of a whole run, from every process that ran tests."""

    observed: set[str] = field(default_factory=set)
    produced: set[str] = field(default_factory=set)
    whole: bool = False  # the run collected every test file
    processes: int = 0

    def add(self, part: dict | None) -> None:
        if part:
            self.observed.update(part["observed"])
            self.produced.update(part["produced"])
            self.whole = self.whole or part["whole"]
            self.processes += 1

    def failures(self) -> list[str]:
        """What a whole run got wrong, one line each: a claim that did not hold, a code no test made."""
        if not self.whole:
            return []
        out = [f"@produces claimed, never observed: {c}" for c in sorted(self.produced - self.observed)]
        return out + [f"documented or declared, made by no test: {c}" for c in sorted((readme_codes() | declared_codes()) - self.observed)]


def this_process(whole: bool) -> dict:
    """This process's part of the run, as a worker hands it to the controller."""
    return {"observed": sorted(OBSERVED), "produced": sorted(PRODUCED), "whole": whole}
