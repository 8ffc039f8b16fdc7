"""What ``--resume`` refuses before it builds anything: a ``config.toml`` edited after the run's
checkpoints were trained, and a run whose every checkpoint is gone.

Why: a resumed run reads its configuration from ``RUN/config.toml``, a plain file anyone can
edit. An edited ``group_size`` would silently train on with other maths; an edited ``lr`` would
be ignored (the optimizer state restores the old one) while the file claims the new one. So each
checkpoint carries the configuration it was trained with (``state.json`` ``config``, written by
:meth:`cast_core.trainer.Trainer.save`) and the file must agree with it. And a run directory
whose steps were logged but whose checkpoints are all gone would otherwise restart from step 0
and rewrite ``metrics.jsonl``: that loses data, so it is refused too.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Iterable

from cast_core.errors import CastError
from cast_core.run_dir import read_metrics

__all__ = ["finished_work", "no_checkpoint_left", "edited_keys", "check_resume"]


def finished_work(run_dir: str | Path) -> str:
    """What a run directory holds of finished steps (logged metrics, sample grids), in words;
    empty when nothing (a run killed before its first step may start again from 0)."""
    run_dir = Path(run_dir)
    rows = read_metrics(run_dir / "metrics.jsonl")
    if rows:
        return f"metrics.jsonl logs {len(rows)} step(s), up to step {rows[-1].get('step', '?')}"
    grids = sorted((run_dir / "samples").glob("step-*.png")) if (run_dir / "samples").is_dir() else []
    if grids:
        return f"samples/ holds {len(grids)} grid(s), up to {grids[-1].stem}"
    return ""


def no_checkpoint_left(run_dir: str | Path, finished: str) -> str:
    return (
        f"{run_dir} has no checkpoint left ({finished}, but checkpoints/ holds none): a resume would "
        "restart from step 0 and overwrite them. Restore its checkpoints, or start a new run with --out"
    )


def _plain(value: Any) -> Any:
    """A value as JSON gives it back (tuples as lists), so that a value read from config.toml
    and the same value read from state.json compare equal."""
    return json.loads(json.dumps(value, default=str))


def _short(value: Any, limit: int = 60) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def edited_keys(in_file: dict, trained: dict, may_change: Iterable[str]) -> list[tuple[str, Any, Any]]:
    """``(key, trained value, file value)`` for each key that differs, leaving out the keys a
    resume may change (``--set`` writes them to config.toml) and keys only one side knows (a
    field added or removed by another cast version)."""
    skip = set(may_change)
    out = []
    for key in sorted(set(in_file) & set(trained)):
        if key in skip:
            continue
        old, new = _plain(trained[key]), _plain(in_file[key])
        if old != new:
            out.append((key, old, new))
    return out


def check_resume(run_dir: str | Path, in_file: dict, may_change: Iterable[str], warn: Callable[[str], None]) -> None:
    """Refuse a resume whose config.toml (``in_file``, its values as loaded) differs from what
    the newest intact checkpoint was trained with, or whose checkpoints are all gone after
    steps were logged. Checkpoints from before the record existed: one warning, then as before."""
    from cast_core.checkpoints import find_intact_checkpoint

    run_dir = Path(run_dir)
    ckpt, _ = find_intact_checkpoint(run_dir)
    if ckpt is None:
        finished = finished_work(run_dir)
        if finished:
            raise CastError(no_checkpoint_left(run_dir, finished))
        return  # damaged checkpoints: the trainer names each; none at all: a run that never stepped
    trained = json.loads((ckpt / "state.json").read_text()).get("config")
    if not isinstance(trained, dict):
        warn(
            f"warning: checkpoint {ckpt.name} does not record the configuration it was trained with "
            f"(written by an older cast); resuming with {run_dir}/config.toml as it is"
        )
        return
    may_change = sorted(may_change)
    edits = edited_keys(in_file, trained, may_change)
    if edits:
        changed = ", ".join(f"{key} {_short(old)} → {_short(new)}" for key, old, new in edits)
        raise CastError(
            f"{run_dir}/config.toml was edited after checkpoint {ckpt.name} was trained: {changed}. "
            "A resumed run continues as it was trained: restore the file (or start a new run with --out); "
            f"on resume only --set KEY=VALUE of {', '.join(may_change)} may change"
        )
