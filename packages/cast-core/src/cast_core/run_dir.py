"""The run directory: what a run writes, and what ``--resume`` reads back.

``config.toml`` (the resolved configuration), ``metrics.jsonl`` (one line per logged step),
``window.json`` (the measured window, so a resumed run keeps it), ``samples/`` (image grids)
and ``checkpoints/`` (:mod:`cast_core.checkpoints`). In a multi-process run only the main
process writes; every process reads.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cast_core.config import dump_toml
from cast_core.errors import CastError

__all__ = ["RunDirectory"]


class RunDirectory:
    def __init__(self, path: str | Path, *, writer: bool = True):
        self.path = Path(path)
        self.writer = writer  # False on every process but the main one

    @property
    def metrics_path(self) -> Path:
        return self.path / "metrics.jsonl"

    @property
    def samples(self) -> Path:
        return self.path / "samples"

    @property
    def window_path(self) -> Path:
        return self.path / "window.json"

    def refuse_existing_run(self) -> None:
        """A fresh run must not write into another run's directory."""
        if (self.path / "config.toml").exists():
            raise CastError(
                f"{self.path} already holds a run; continue it with `cast train --resume {self.path}` "
                f"or choose another --out"
            )

    def create(self, config: dict[str, Any]) -> None:
        if not self.writer:
            return
        self.samples.mkdir(parents=True, exist_ok=True)
        (self.path / "config.toml").write_text(dump_toml(config))

    def truncate_metrics(self, step: int) -> None:
        """Drop metric lines written after the checkpoint we resume from (they will be redone)."""
        if self.writer and self.metrics_path.exists():
            keep = [line for line in self.metrics_path.read_text().splitlines()
                    if line and json.loads(line).get("step", 0) <= step]
            self.metrics_path.write_text("".join(line + "\n" for line in keep))

    def open_metrics(self):
        """An append-mode metrics file (a sink that drops lines on non-writers)."""
        return open(self.metrics_path, "a") if self.writer else _NullFile()

    def read_window(self) -> dict | None:
        return json.loads(self.window_path.read_text()) if self.window_path.exists() else None

    def write_window(self, record: dict) -> None:
        if self.writer:
            self.window_path.write_text(json.dumps(record, indent=2))


class _NullFile:
    def write(self, _text: str) -> None:
        pass

    def flush(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> bool:
        return False
