"""The check every interrupt test ends with: the interrupted run, resumed, equals a run that was
never interrupted (the adapter bit for bit, the reward of every step)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import torch

from cast_core.run_dir import read_metrics
from test_trainer import adapter


def assert_resume_matches_a_straight_run(tmp_path: Path, run: Path, step: int, code: str, args: list[str]) -> None:
    """Resume ``run`` (stopped after ``step``) for two more steps with ``python -c code train``,
    train the same ``args`` straight to that step in ``tmp_path/ref``, and compare."""
    resumed = subprocess.run(
        [sys.executable, "-c", code, "train", "--resume", str(run), "--steps", str(step + 2)],
        capture_output=True,
        text=True,
    )
    assert resumed.returncode == 0, resumed.stderr
    ref = tmp_path / "ref"
    subprocess.run(
        [sys.executable, "-c", code, "train", *args, "--steps", str(step + 2), "--out", str(ref)],
        check=True,
        capture_output=True,
    )
    a, b = adapter(ref), adapter(run)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert [r["reward_gm"] for r in read_metrics(run / "metrics.jsonl")] == [
        r["reward_gm"] for r in read_metrics(ref / "metrics.jsonl")
    ]
