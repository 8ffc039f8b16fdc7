"""Where a command's JSON result goes: a file (``--out``), stdout (``--json``), or both."""

from __future__ import annotations

import json
from typing import Any


def emit_json(result: dict[str, Any], out: str | None, as_json: bool) -> bool:
    """Write ``result`` to ``out`` if given and print it if ``as_json``; True when printed, so the
    caller skips its human-readable lines (stdout must parse as JSON)."""
    import click

    if out:
        with open(out, "w") as f:
            json.dump(result, f, indent=2)
    if as_json:
        click.echo(json.dumps(result, indent=2))
    return as_json
