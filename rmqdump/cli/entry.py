"""The console script (`rmqdump`, `python -m rmqdump`): the command line, the cyclic garbage collector off while it loads.

Importing the command line and its command's modules makes tens of thousands of
long-lived objects; they set off about seventy collections that free nothing
(10-12 ms, and 20-25 ms of a 0.25 s command on a small store measured whole).
rmqdump.cli.app.main turns the collector back on once the command's modules
are in, with what they made set aside for good (gc.freeze), so a collection
during the run walks only what the run makes.
"""

import gc


def main() -> None:
    gc.disable()
    from rmqdump.cli.app import main as run

    run()
