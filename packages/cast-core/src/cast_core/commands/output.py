"""Where a command's results go: checked before the work, written so a finished result is never
lost.

Why: ``cast eval`` and ``cast sample`` spend minutes (hours on a large policy) before they
write anything. An output path in a missing read-only directory, a directory given as a file or
an image suffix PIL cannot write must be refused before that work (:func:`check_output`), and a
write that still fails at the end (disk full, permissions changed meanwhile) saves the result
next to the working directory or in the temp directory and says where (:func:`save_result`).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any, Callable


def _nearest_existing(path: Path) -> Path:
    for parent in (path, *path.parents):
        if parent.exists():
            return parent
    return Path(".")


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
    where = p if p.exists() else _nearest_existing(p.parent)
    if not where.is_dir() and where != p:
        raise click.BadParameter(f"{path}: {where} is a file, not a directory", param_hint=option)
    if not os.access(where, os.W_OK):
        raise click.BadParameter(
            f"{path} cannot be written ({where} is not writable); choose another path", param_hint=option
        )


def _fallback(path: Path) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for folder in (Path.cwd(), Path(tempfile.gettempdir())):
        if os.access(folder, os.W_OK):
            return folder / f"cast-{stamp}-{path.name}"
    return Path(tempfile.gettempdir()) / f"cast-{stamp}-{path.name}"


def save_result(path: str, write: Callable[[Path], None]) -> Path:
    """``write(target)`` to ``path`` (parents created; via a temporary file, so a crash leaves no
    half file), or, if that fails, to a fallback path, with a warning naming both."""
    import click

    target = Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.tmp{target.suffix}")
        write(tmp)
        os.replace(tmp, target)
        return target
    except OSError as err:
        spare = _fallback(target)
        write(spare)
        click.echo(
            f"warning: could not write {target} ({err.strerror or err}); the result is saved at {spare}", err=True
        )
        return spare


def emit_json(result: dict[str, Any], out: str | None, as_json: bool) -> bool:
    """Write ``result`` to ``out`` if given and print it if ``as_json``; True when printed, so the
    caller skips its human-readable lines (stdout must parse as JSON)."""
    import click

    if out:
        save_result(out, lambda p: p.write_text(json.dumps(result, indent=2)))
    if as_json:
        click.echo(json.dumps(result, indent=2))
    return as_json
