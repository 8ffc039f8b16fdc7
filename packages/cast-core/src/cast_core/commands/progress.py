"""A progress bar on stderr for long commands that report ``progress(done, total)``.

Why stderr: ``--json`` output on stdout stays parseable while the bar runs. Off a terminal,
click draws no bar (only the label), so logs and CI output stay clean.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Callable, Iterator

import click


@contextlib.contextmanager
def progress_bar(label: str, total: int) -> Iterator[Callable[[int, int], None]]:
    """Yield a ``progress(done, total)`` callback that advances a bar of ``total`` units."""
    with click.progressbar(length=total, label=label, file=sys.stderr,
                           show_eta=True, show_pos=True) as bar:
        def advance(done: int, _total: int) -> None:
            bar.update(max(0, done - bar.pos))

        yield advance
