"""Where a command's results go: checked before the work, written so a finished result is never
lost.

Why: ``cast eval`` and ``cast sample`` spend minutes (hours on a large policy) before they
write anything. An output path in a missing read-only directory, a directory given as a file or
an image suffix PIL cannot write must be refused before that work (:func:`check_output`), and a
write that still fails at the end (disk full, permissions changed meanwhile) saves the result
next to the working directory or in the temp directory, says where and exits 1
(:func:`save_result`): a script must not take the missing file for success.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from cast_core.errors import CastError


def _nearest_existing(path: Path) -> Path:
    for parent in (path, *path.parents):
        if parent.exists():
            return parent
    return Path(".")


def _probe_write(folder: Path) -> str | None:
    """Why nothing can be created in ``folder``, found by creating (and removing) a file there:
    ``os.access`` says yes to root on a read-only mount, and to anyone under /proc."""
    try:
        fd, name = tempfile.mkstemp(prefix=".cast-write-check-", dir=folder)
    except OSError as err:
        return err.strerror or str(err)
    os.close(fd)
    os.unlink(name)
    return None


def check_output(path: str | None, option: str, image: bool = False) -> None:
    """Refuse ``path`` for ``option`` now (a usage error, one line) if it cannot be written later."""
    import click

    if not path:
        return
    p = Path(path)
    if p.is_dir():
        raise click.BadParameter(
            f"{path} is a directory; give a file name (e.g. {p / ('out.png' if image else 'out.json')})",
            param_hint=option,
        )
    if image:
        from PIL import Image

        if p.suffix.lower() not in Image.registered_extensions():
            raise click.BadParameter(
                f"{path}: cannot write images with suffix {p.suffix or '(none)'!r}; use .png or .jpg", param_hint=option
            )
    where = _nearest_existing(p.parent)
    if not where.is_dir():
        raise click.BadParameter(f"{path}: {where} is a file, not a directory", param_hint=option)
    why = "not writable" if not os.access(where, os.W_OK) else _probe_write(where)
    if why:
        raise click.BadParameter(f"{path} cannot be written ({where}: {why}); choose another path", param_hint=option)


def _fallback(path: Path) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for folder in (Path.cwd(), Path(tempfile.gettempdir())):
        if os.access(folder, os.W_OK):
            return folder / f"cast-{stamp}-{path.name}"
    return Path(tempfile.gettempdir()) / f"cast-{stamp}-{path.name}"


class ResultNotWritten(CastError):
    """A finished result could not be written where it was asked (disk full, read-only, gone):
    it is saved elsewhere, the message says where, and the command exits 1 so that a script does
    not take the missing file for success."""


def _why(err: Exception) -> str:
    from cast_core.run_dir import WriteError

    if isinstance(err, WriteError):  # "cannot write PATH: no space left ... (needs ..., ... free)"
        return str(err).split(": ", 1)[-1]
    return getattr(err, "strerror", None) or str(err).splitlines()[0][:160]


def save_result(path: str, write: Callable[[Path], None]) -> Path:
    """``write(target)`` to ``path`` (parents created; via a temporary file, so a crash or a full
    disk leaves no empty or half file), or, if that fails, to a fallback path — then
    :class:`ResultNotWritten` naming both. Callers with more to print first use :class:`Outputs`."""
    from cast_core.run_dir import WriteError, write_atomic

    target = Path(path)
    try:
        return write_atomic(target, write)
    except (OSError, WriteError) as err:
        why = _why(err)
    spare = _fallback(target)
    try:
        write_atomic(spare, write)
    except (OSError, WriteError) as err:
        raise ResultNotWritten(f"could not write {target} ({why}), nor the copy {spare} ({_why(err)})") from None
    raise ResultNotWritten(f"could not write {target} ({why}); the result is saved at {spare}")


class Outputs:
    """Saves a command's results with :func:`save_result` and holds back any
    :class:`ResultNotWritten` until :meth:`finish` — so the command still prints its results
    (and writes its other files) before it exits 1 naming where the moved ones are."""

    def __init__(self) -> None:
        self.moved: list[ResultNotWritten] = []

    def save(self, path: str, write: Callable[[Path], None]) -> None:
        try:
            save_result(path, write)
        except ResultNotWritten as err:
            self.moved.append(err)

    def finish(self) -> None:
        if self.moved:
            raise ResultNotWritten("; ".join(str(e) for e in self.moved))


def emit_json(result: dict[str, Any], out: str | None, as_json: bool, outputs: Outputs | None = None) -> bool:
    """Print ``result`` if ``as_json`` and write it to ``out`` if given (printed first: stdout
    keeps the result even when the file cannot be written); True when printed, so the caller
    skips its human-readable lines (stdout must parse as JSON)."""
    import click

    if as_json:
        click.echo(json.dumps(result, indent=2))
    if out:
        text = json.dumps(result, indent=2)
        (outputs.save if outputs else save_result)(out, lambda p: p.write_text(text))
    return as_json
