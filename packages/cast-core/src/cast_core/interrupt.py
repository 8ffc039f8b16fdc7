"""Ctrl-C that keeps the work: the first one finishes the current step and writes a checkpoint,
the second aborts at once.

Why not just catch ``KeyboardInterrupt``: it can land inside the optimizer step, with half the
parameters updated, and a checkpoint written then would hold weights no step produced. So the
first SIGINT only raises a flag that the training loop reads between steps; a second SIGINT
restores Python's default handler and raises ``KeyboardInterrupt`` immediately (checkpoints are
written under a temporary name and renamed, so even that never leaves a broken one).
"""

from __future__ import annotations

import signal
import threading
from typing import Callable


class GracefulInterrupt:
    """``with GracefulInterrupt(log) as stop: ... if stop.requested: ...``. Outside the main
    thread (where signals cannot be handled) it does nothing and ``requested`` stays False."""

    def __init__(self, log: Callable[[str], None]):
        self.log = log
        self.requested = False
        self._previous = None

    def _handle(self, signum, frame) -> None:
        if self.requested:
            signal.signal(signal.SIGINT, signal.default_int_handler)
            raise KeyboardInterrupt
        self.requested = True
        self.log("interrupted: finishing this step and writing a checkpoint (press Ctrl-C again to abort at once)")

    def __enter__(self) -> "GracefulInterrupt":
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc) -> bool:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
            self._previous = None
        return False
