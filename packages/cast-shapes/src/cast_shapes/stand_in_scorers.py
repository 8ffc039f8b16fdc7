"""Two prompt-level scorers for the shapes world, stand-ins for the rewards real runs add beside a
compositional judge (docs/rewards.md, "Several scorers" and "The monitor"):

* ``shapes-quality`` — how cleanly the image is drawn: the share of pixels that are (close to)
  the background or a palette colour. A render scores 1; blur, smears and off-palette noise score
  less. It plays the aesthetic / quality reward (pickscore on a real model): it knows nothing of
  the prompt's atoms.
* ``shapes-colour`` — how much of the image is one colour (``colour``, default red), whatever the
  prompt asks for. A deliberately **hackable** reward: a policy trained on it paints that colour
  over everything and stops drawing what the prompt says, the reward-hacking case the monitor must
  catch by watching the oracle on held-out prompts.

Both score every pixel by its closeness ``exp(-(d/τ)²)`` to a target set of colours (``d`` the
Euclidean RGB distance in [0, 1] units), so their scores move smoothly as a policy drifts — a
reward that only counted exact pixels would give a group of near-identical samples no spread.
"""

from __future__ import annotations

from typing import Sequence

import torch

from cast_core.errors import ConfigError
from cast_core.scene_graph import SceneGraph
from cast_core.types import AtomScores

from cast_shapes.world import BACKGROUND, PALETTE

__all__ = ["ShapesQualityScorer", "ShapesColourScorer", "closeness"]


def closeness(images: torch.Tensor, colours: torch.Tensor, tau: float) -> torch.Tensor:
    """``[B, 3, H, W]`` images in [0, 1] → ``[B, H, W]``: each pixel's ``exp(-(d/τ)²)`` to the
    nearest of ``colours`` (``[C, 3]`` in [0, 1])."""
    pixels = images.float().clamp(0, 1).permute(0, 2, 3, 1)[..., None, :]  # [B, H, W, 1, 3]
    d = (pixels - colours.to(pixels.device)).norm(dim=-1).amin(-1)  # [B, H, W]
    return torch.exp(-((d / tau) ** 2))


def _check_tau(tau: float, who: str) -> float:
    if isinstance(tau, bool) or not isinstance(tau, (int, float)) or not 0 < tau <= 2:
        raise ConfigError(f"{who}: tau {tau!r} must be a distance in (0, 2] (RGB in [0, 1] units)")
    return float(tau)


def _answer(per_pixel: torch.Tensor, images: torch.Tensor, graphs: Sequence[SceneGraph], heatmaps: bool) -> AtomScores:
    if len(images) != len(graphs):
        raise ValueError(f"got {len(images)} images but {len(graphs)} scene graphs")
    score = per_pixel.mean(dim=(1, 2)).clamp(0, 1)
    scores = [score[i].expand(len(g.atoms)).clone().cpu() for i, g in enumerate(graphs)]
    maps = [per_pixel[i].expand(len(g.atoms), *per_pixel.shape[1:]).clone().cpu() for i, g in enumerate(graphs)]
    return AtomScores(graphs=list(graphs), scores=scores, heatmaps=maps if heatmaps else None)


class ShapesQualityScorer:
    """The share of cleanly drawn pixels (background or palette within ``tau``)."""

    prompt_level = True

    def __init__(self, tau: float = 0.15):
        self.tau = _check_tau(tau, "shapes-quality")
        self.colours = torch.tensor([BACKGROUND, *PALETTE.values()], dtype=torch.float32) / 255.0

    def score(self, images: torch.Tensor, graphs: Sequence[SceneGraph], heatmaps: bool = False) -> AtomScores:
        return _answer(closeness(images, self.colours, self.tau), images, graphs, heatmaps)


class ShapesColourScorer:
    """The share of pixels of ``colour`` (within ``tau``), whatever the prompt asks: hackable on
    purpose. Its heatmaps are where the colour is."""

    prompt_level = True

    def __init__(self, colour: str = "red", tau: float = 0.3):
        if colour not in PALETTE:
            raise ConfigError(
                f"shapes-colour: colour {colour!r} is not in the world; choose one of {', '.join(PALETTE)}"
            )
        self.colour = colour
        self.tau = _check_tau(tau, "shapes-colour")
        self.colours = torch.tensor([PALETTE[colour]], dtype=torch.float32) / 255.0

    def score(self, images: torch.Tensor, graphs: Sequence[SceneGraph], heatmaps: bool = False) -> AtomScores:
        return _answer(closeness(images, self.colours, self.tau), images, graphs, heatmaps)
