"""Keep pandas out of a local command's process: pyarrow imports it, when installed, on its first array conversion.

pyarrow probes for pandas the first time `pa.array()` converts anything, and
its C++ sequence converter imports it too (a probe that failed once does not
stop that one): with the `spark` extra (or any data-science environment) that is
0.2-0.3 s of CPU at the start of every `export`, `salvage`, `sql` or `report`,
for a library no local command uses (pandas is not a dependency; the commands
run without it). A run that names Spark needs pandas on the driver and is left
alone.
"""

from __future__ import annotations

import sys


class _NoPandas:
    """A meta path finder that makes `import pandas` fail as if it were not installed."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name == "pandas" or name.startswith("pandas."):
            raise ImportError("pandas is kept out of local rmqdump commands (rmqdump.cli.nopandas)")
        return None


def names_spark(argv: list[str]) -> bool:
    """Whether a command line may run Spark (`--engine spark`, `--master URL`); a false yes only costs the start-up time."""
    return any(a.lower() == "spark" or a.lower().endswith("=spark") or a.startswith("--master") for a in argv)


def keep_out(argv: list[str]) -> bool:
    """Install the finder for this process unless the command may run Spark or pandas is already loaded; whether it was."""
    if "pandas" in sys.modules or names_spark(argv):
        return False
    sys.meta_path.insert(0, _NoPandas)
    return True
