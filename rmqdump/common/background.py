"""One consumer thread fed in order: the scan goes on while a builder writes or a pipe drains.

The one mechanism for "do these calls, in this order, on a thread of its own"
(rebuild's IndexFile builder beside the ConsumeQueues, the listing's writer to
stdout). At most `ahead` items wait; an error in the thread is kept and raised
in the caller's thread by its next put() or by close(), never lost; after an
error the remaining items are dropped.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

_STOP = object()


class Background:
    """handle(item) for every item put, in order, on one thread; close() runs finish() last and returns its result."""

    def __init__(self, handle: Callable[[Any], None], finish: Callable[[], Any] | None = None, *, ahead: int = 4, name: str = "rmqdump-background"):
        self.handle, self.finish = handle, finish
        self.error: BaseException | None = None
        self.result: Any = None
        self.queue: queue.Queue = queue.Queue(maxsize=ahead)
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while (item := self.queue.get()) is not _STOP:
            if self.error is None:
                try:
                    self.handle(item)
                except BaseException as e:  # raised in the caller's thread
                    self.error = e
        if self.error is None and self.finish is not None:
            try:
                self.result = self.finish()
            except BaseException as e:
                self.error = e

    def put(self, item: Any) -> None:
        self.check()
        self.queue.put(item)

    def check(self) -> None:
        """Raise what handling an earlier item raised, if anything (once)."""
        self._raise()

    def close(self, quiet: bool = False) -> Any:
        """Wait until every item put has been handled and finish() has run; raise what they raised (unless quiet), else return finish()'s result."""
        if self.thread.is_alive():
            self.queue.put(_STOP)
            self.thread.join()
        if not quiet:
            self._raise()
        return self.result

    def _raise(self) -> None:
        if self.error is not None:
            e, self.error = self.error, None
            raise e
