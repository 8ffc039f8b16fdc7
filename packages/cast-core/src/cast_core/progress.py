"""Progress on stderr: a bar for long commands that report ``progress(done, total)``
(:func:`progress_bar`), and the training loop's bar or log lines (:class:`TrainingProgress`).

Why stderr: ``--json`` output on stdout stays parseable while the bar runs. Off a terminal, no
bar is drawn (only a label, or one log line a step), so logs and CI output stay clean.
"""

from __future__ import annotations

import contextlib
import math
import sys
import time
from typing import Callable, Iterator

import click


@contextlib.contextmanager
def progress_bar(label: str, total: int) -> Iterator[Callable[[int, int], None]]:
    """Yield a ``progress(done, total)`` callback that advances a bar of ``total`` units."""
    with click.progressbar(length=total, label=label, file=sys.stderr, show_eta=True, show_pos=True) as bar:

        def advance(done: int, _total: int) -> None:
            bar.update(max(0, done - bar.pos))

        yield advance


class TrainingProgress:
    """A rich progress bar on a terminal; plain log lines otherwise (CI, files, pipes)."""

    def __init__(self, total: int, done: int, log: Callable[[str], None], minutes: float = 0.0, enabled: bool = True):
        self.total, self.done, self.log = total, done, log
        self.tty = sys.stderr.isatty() and enabled
        self.minutes, self.t0 = minutes, time.monotonic()

    def expected_total(self, step: int) -> int:
        """The step the run will stop at: ``total``, or fewer when the time budget ends it first
        (projected from the pace so far). Why: a budgeted run (``make demo``) has a huge step cap,
        and "step 12/100000" says nothing about when it ends."""
        if not self.minutes or step <= self.done:
            return self.total
        per_step = (time.monotonic() - self.t0) / (step - self.done)
        left = max(0.0, 60 * self.minutes - (time.monotonic() - self.t0))
        return min(self.total, step + math.ceil(left / per_step))

    def __enter__(self):
        if self.tty:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self.bar = Progress(
                TextColumn("train"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeRemainingColumn(),
                TextColumn("{task.fields[info]}"),
                transient=False,
            )
            self.bar.start()
            self.task = self.bar.add_task("train", total=self.total, completed=self.done, info="")
        return self

    def update(self, step: int, m: dict) -> None:
        info = (
            f"GM {m.get('reward_gm', float('nan')):.3f} AM {m.get('reward_am', float('nan')):.3f} "
            f"loss {m.get('loss', float('nan')):.4g} {m.get('images_per_s', 0):.1f} img/s"
        )
        total = self.expected_total(step)
        if self.minutes:
            info += f" {(time.monotonic() - self.t0) / 60:.1f}/{self.minutes:g} min"
        elif not self.tty and step > self.done:  # the bar shows its own time left
            left = (time.monotonic() - self.t0) / (step - self.done) * (total - step)
            info += f" ETA {int(left // 60)}m{int(left % 60):02d}s"
        if self.tty:
            self.bar.update(self.task, total=total, completed=step, info=info)
        else:
            self.log(f"step {step}/{total} {info}" + (f" skipped: {m['skipped']}" if "skipped" in m else ""))

    def __exit__(self, *exc):
        if self.tty:
            self.bar.stop()
        return False
