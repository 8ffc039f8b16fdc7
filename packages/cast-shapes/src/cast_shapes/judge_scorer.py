"""The ``shapes-judge`` scorer: cast-rewards' ``soft-tifa``, unchanged, on the learned shapes
judge shipped in ``weights/shapes-judge/`` (issue 26).

Built through the registry (``get_atom_scorer("soft-tifa", path=...)``), so the judge is read
exactly as a real Qwen3-VL would be. The weights' model card (``weights/shapes-judge/README.md``)
says how they were trained and how well they answer; if the directory is missing (a trimmed
install), this factory says so in one line and how to train and use a judge.
"""

from __future__ import annotations

from pathlib import Path

JUDGE_DIR = Path(__file__).parent / "weights" / "shapes-judge"


def shapes_judge(**kwargs):
    from cast_core.config import ConfigError
    from cast_core.registry import get_atom_scorer

    if not (JUDGE_DIR / "config.json").is_file():
        raise ConfigError(
            f"shapes-judge: no trained shapes judge in {JUDGE_DIR}. Train one "
            "with `cast shapes train-judge --export DIR` and score with --scorer soft-tifa "
            "--set scorer_kwargs.path=DIR"
        )
    return get_atom_scorer("soft-tifa", **{"path": str(JUDGE_DIR), "device": "cpu", "torch_dtype": "float32", **kwargs})
