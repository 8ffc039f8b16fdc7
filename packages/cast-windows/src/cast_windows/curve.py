"""Measuring the similarity curve: how much each step's Tweedie estimate already looks like the
final image.

For every calibration prompt and seed we run the policy's own deterministic sampler
(:func:`cast_core.sampling.sample` with ``window=None``, i.e. the ODE, ``keep_x0=True``), decode
``x̂0`` at every step with ``policy.decode``, embed it, and take its cosine similarity to the
embedding of the final image. The ODE is used — not the training SDE — because the window is a
property of the model's trajectory, and the ODE trajectory is the one a seed determines uniquely.

Per sample this gives ``s_i, i = 0..T-1``; the curve is their mean and standard deviation over the
calibration set. At the last step ``x̂0`` equals the final Euler step's result, so ``s_{T-1}`` is 1
(up to the decoder's rounding).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import torch

from cast_core.sampling import sample


@dataclass
class SimilarityCurve:
    """``mean``/``std`` per step over ``samples`` sampled images; ``sigmas`` the noise level each
    step starts from; ``per_sample`` the full ``[samples, T]`` matrix (kept for plots and checks)."""

    mean: list[float]
    std: list[float]
    sigmas: list[float]
    samples: int
    per_sample: list[list[float]] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "mean": self.mean,
            "std": self.std,
            "sigmas": self.sigmas,
            "samples": self.samples,
            "per_sample": self.per_sample,
        }

    @classmethod
    def from_dict(cls, data: dict) -> "SimilarityCurve":
        return cls(
            list(data["mean"]),
            list(data["std"]),
            list(data["sigmas"]),
            int(data["samples"]),
            [list(r) for r in data.get("per_sample", [])],
        )


@torch.no_grad()
def similarity_rows(
    policy: Any,
    prompts: Sequence[str],
    embedder: Any,
    *,
    num_steps: int,
    image_size: tuple[int, int] | None,
    generator: torch.Generator,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``cos(embed(x̂0_i), embed(final))`` as ``[len(prompts), num_steps]``, and the sigmas."""
    rollout = sample(
        policy,
        list(prompts),
        num_steps=num_steps,
        image_size=image_size,
        window=None,
        keep_x0=True,
        generator=generator,
    )
    final = embedder.embed(rollout.images).float()
    sims = []
    for i in range(num_steps):
        x0 = rollout.x0[:, i].to(rollout.final_latents.dtype)
        emb = embedder.embed(policy.decode(x0, image_size)).float()
        sims.append(torch.nn.functional.cosine_similarity(emb, final, dim=-1))
    return torch.stack(sims, dim=1), rollout.sigmas[:num_steps]


def measure_curve(
    policy: Any,
    prompts: Sequence[str],
    embedder: Any,
    *,
    num_steps: int,
    seeds: Sequence[int] = (0,),
    image_size: tuple[int, int] | None = None,
    batch_size: int = 8,
) -> SimilarityCurve:
    """The mean/std similarity curve over ``prompts × seeds``.

    Each seed drives one generator through the prompts in chunks of ``batch_size`` (chunking
    bounds memory for large models; the result depends only on the seeds, prompts and batch size).
    """
    prompts = list(prompts)
    if not prompts:
        raise ValueError("no calibration prompts to measure the similarity curve on")
    if num_steps < 1:
        raise ValueError(f"num_steps must be >= 1, got {num_steps}")
    rows, sigmas = [], None
    for seed in seeds:
        gen = torch.Generator().manual_seed(int(seed))
        for start in range(0, len(prompts), batch_size):
            r, sigmas = similarity_rows(
                policy,
                prompts[start : start + batch_size],
                embedder,
                num_steps=num_steps,
                image_size=image_size,
                generator=gen,
            )
            rows.append(r)
    sims = torch.cat(rows).double()
    if not torch.isfinite(sims).all():
        raise ValueError("the similarity curve has non-finite values (the embedder returned NaN/inf)")
    std = sims.std(dim=0, unbiased=False)
    return SimilarityCurve(
        mean=sims.mean(dim=0).tolist(),
        std=std.tolist(),
        sigmas=[float(s) for s in sigmas],
        samples=int(sims.shape[0]),
        per_sample=sims.tolist(),
    )
