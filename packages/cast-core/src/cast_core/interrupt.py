"""Ctrl-C and SIGTERM that keep the work: the first one finishes the current step and writes a
checkpoint, the second aborts at once.

Why not just catch ``KeyboardInterrupt``: it can land inside the optimizer step, with half the
parameters updated, and a checkpoint written then would hold weights no step produced. So the
first signal only raises a flag that the training loop reads between steps; a second one raises
:class:`Aborted` immediately (checkpoints are written under a temporary name and renamed, so even
that never leaves a broken one).

SIGTERM is what schedulers (Slurm, Kubernetes, torchrun's agent) send before they kill, so it
is treated as the first Ctrl-C. Before the training loop there is nothing to save: there
:func:`abort_on_signals` turns either signal into :class:`Aborted` at once, so that an early
Ctrl-C too ends with one line and the shell's code (130 for SIGINT, 143 for SIGTERM), never with
click's "Aborted!" and exit 1.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Callable, Iterator

__all__ = ["SIGNALS", "Aborted", "GracefulInterrupt", "abort_on_signals", "exit_code", "signal_name"]

#: the signals a run answers by stopping (the first gracefully inside the loop)
SIGNALS = (signal.SIGINT, signal.SIGTERM)


def exit_code(signum: int) -> int:
    """The shell's exit code of a process ended by ``signum``: 130 for SIGINT, 143 for SIGTERM."""
    return 128 + int(signum)


def signal_name(signum: int) -> str:
    return "Ctrl-C (SIGINT)" if signum == signal.SIGINT else signal.Signals(signum).name


class Aborted(KeyboardInterrupt):
    """A signal that ends the process at once: one before the training loop, or a second one.
    A ``KeyboardInterrupt``, so that no ``except Exception`` swallows it."""

    def __init__(self, signum: int):
        super().__init__(signal_name(signum))
        self.signum = int(signum)


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _raise_aborted(signum, frame) -> None:
    raise Aborted(signum)


@contextlib.contextmanager
def abort_on_signals() -> Iterator[None]:
    """SIGINT and SIGTERM raise :class:`Aborted` while inside (outside the main thread: nothing)."""
    if not _in_main_thread():
        yield
        return
    previous = {s: signal.signal(s, _raise_aborted) for s in SIGNALS}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


class GracefulInterrupt:
    """``with GracefulInterrupt(log) as stop: ... if stop.requested: ...``. ``signum`` is the
    first signal heard (SIGINT or SIGTERM), ``None`` before. Outside the main thread (where
    signals cannot be handled) it does nothing and ``requested`` stays False."""

    def __init__(self, log: Callable[[str], None]):
        self.log = log
        self.signum: int | None = None
        self._previous: dict = {}

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def _handle(self, signum, frame) -> None:
        if self.signum is not None:
            raise Aborted(signum)
        self.signum = int(signum)
        self.log(
            f"interrupted ({signal_name(signum)}): finishing this step and writing a checkpoint "
            "(press Ctrl-C again to abort at once)"
        )

    def __enter__(self) -> "GracefulInterrupt":
        if _in_main_thread():
            self._previous = {s: signal.signal(s, self._handle) for s in SIGNALS}
        return self

    def __exit__(self, *exc) -> bool:
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        self._previous = {}
        return False
