"""The context-manager protocol, spelled once, for the objects that hold files, maps or writers and have a close()."""

from __future__ import annotations

from typing import TypeVar

T = TypeVar("T", bound="Closing")


class Closing:
    """A base for a class with close(): `with X(...) as x:` gives x itself and closes it however the block ends."""

    def __enter__(self: T) -> T:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
