"""What the forward-process objectives (DiffusionNFT, AWM) share: a clean latent is noised
again at a training timestep, ``x_t = (1 − σ)·x0 + σ·ε``, and the policy's velocity there is
compared with what it would have to be.

The draws are keyed, not streamed: sample ``(p, g)``'s noise at pass ``t`` of inner epoch
``e`` of step ``s`` comes from ``generator_for(seed, s, purpose, e, t, p, g)`` and is drawn by
the policy's own ``initial_noise`` (its latent shape, device and dtype), so a pass sees the
same noise whatever the micro-batch, the rank or a resume.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from cast_core.seeding import generator_for

__all__ = ["forward_noise", "noised", "per_sample_advantages"]


def forward_noise(
    update: Any, ids: Sequence[tuple[int, int]], purpose: str, step: int, epoch: int, t: int
) -> torch.Tensor:
    """``[n, N, C]`` standard-normal noise, one keyed generator per sample id."""
    cfg, policy = update.config, update.policy
    return torch.cat(
        [
            policy.initial_noise(1, update.image_size, generator_for(cfg.seed, step, purpose, epoch, t, int(p), int(g)))
            for p, g in ids
        ]
    )


def noised(x0: torch.Tensor, noise: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
    """``(1 − σ)·x0 + σ·ε`` with one ``σ`` per sample (``sigma`` ``[n]``)."""
    s = sigma.to(x0.dtype).view(-1, *([1] * (x0.ndim - 1)))
    return (1 - s) * x0 + s * noise.to(x0.dtype)


def per_sample_advantages(config: Any, advantages: torch.Tensor) -> torch.Tensor:
    """The advantage map as the objective consumes it: per sample (``ratio_mode = "sample"``:
    the map's mean, ``[n, 1]``) or per position (``[n, N]``)."""
    adv = advantages.float()
    if adv.ndim == 1:
        adv = adv[:, None]
    return adv.mean(1, keepdim=True) if config.ratio_mode == "sample" else adv
