"""Experiment trackers (TensorBoard, Weights & Biases, MLflow, ...) through accelerate's tracker
API, so that cast supports whatever accelerate supports without integrations of its own.

``metrics.jsonl`` stays the source of truth: it is what ``--resume`` truncates and ``cast report``
reads. Trackers get the same numeric metrics each logged step, and the resolved configuration
once per ``run()`` (flattened: a tracker's hyperparameter table takes scalars only). Local
trackers write under ``RUN/trackers/<project>/``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from cast_core.config import ConfigError

TRACKER_DIR = "trackers"


def requested(log_with: Any) -> list[str]:
    """``log_with`` as a list of tracker names ("tensorboard" or ["tensorboard", "wandb"])."""
    if not log_with:
        return []
    names = [log_with] if isinstance(log_with, str) else list(log_with)
    if not all(isinstance(n, str) and n for n in names):
        raise ConfigError(
            f"config key 'log_with': {log_with!r} must be a tracker name or a list of them, "
            'e.g. log_with = "tensorboard"'
        )
    return names


def accelerator_kwargs(log_with: Any, run_dir: str | Path) -> dict:
    """The ``Accelerator(...)`` arguments that switch the trackers on."""
    names = requested(log_with)
    return {"log_with": names, "project_dir": str(Path(run_dir) / TRACKER_DIR)} if names else {}


def check_available(accelerator: Any, log_with: Any) -> None:
    """accelerate drops a tracker whose package is missing with a debug message; a run that was
    asked to log to it must say so instead."""
    names = requested(log_with)
    if not names or "all" in names:
        return
    have = {str(getattr(t, "value", t)).lower() for t in (accelerator.log_with or [])}
    missing = [n for n in names if n.lower() not in have]
    if missing:
        raise ConfigError(
            f"config key 'log_with': tracker(s) {', '.join(missing)} not available (the package is not "
            f"installed: pip install {' '.join(missing)}), or drop them from log_with"
        )


def _flat(config: dict) -> dict:
    out = {}
    for key, value in config.items():
        if value is None:
            continue
        out[key] = value if isinstance(value, (bool, int, float, str)) else json.dumps(value)
    return out


def start(accelerator: Any, project: str, config: dict) -> None:
    if accelerator.log_with:
        accelerator.init_trackers(project, config=_flat(config))


def log(accelerator: Any, metrics: dict, step: int) -> None:
    if accelerator.log_with:
        scalars = {
            k: v
            for k, v in metrics.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and k != "step"
        }
        accelerator.log(scalars, step=step)


def finish(accelerator: Any) -> None:
    """Close the trackers (not ``accelerator.end_training()``: that also ends the process group)."""
    for tracker in list(getattr(accelerator, "trackers", []) or []):
        tracker.finish()
    if getattr(accelerator, "trackers", None):
        accelerator.trackers = []
