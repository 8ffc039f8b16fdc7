"""An example third-party objective: reward-ranked matching (RAFT-style fine-tuning on the good
samples), written from docs/plugins.md alone.

Each clean latent is noised again at a random level of the sampler's schedule and the flow-
matching error of the current velocity is weighted by the positive part of the advantage:
``L = mean[max(A, 0)·‖v(x_t, σ) − (ε − x0)‖²]``. Samples better than their group are imitated,
worse ones are ignored. With CAST's per-position maps the weight and the error are taken per
latent position, so only the parts of an image that earned credit are imitated.
"""

from __future__ import annotations

import torch

from cast_core.seeding import generator_for
from cast_core.types import ObjectiveTerms


class RewardRankedMatching:
    """``temperature`` scales the advantage before its positive part is taken."""

    uses_window = False  # ODE samples; only the final clean latents are kept

    def __init__(self, temperature: float = 1.0):
        if not temperature > 0:
            raise ValueError(f"objective 'reward-ranked': temperature must be > 0, got {temperature}")
        self.temperature = float(temperature)

    def passes(self, rollout) -> int:
        return 1

    def loss(self, update, batch) -> ObjectiveTerms:
        rollout, cfg = batch.rollout, update.config
        x0 = rollout.final_latents[batch.rows].float()
        num_steps = len(rollout.sigmas) - 1
        levels, noise = [], []
        for p, g in batch.ids:  # keyed draws: the same for any micro-batching or process count
            gen = generator_for(cfg.seed, batch.step, "reward-ranked", batch.epoch, batch.t, p, g)
            levels.append(int(torch.randint(num_steps, (1,), generator=gen)))
            noise.append(update.policy.initial_noise(1, update.image_size, gen))
        sigma = rollout.sigmas[levels].to(x0.device)
        eps = torch.cat(noise).to(x0.device).float()
        s = sigma.view(-1, 1, 1)
        x_t = ((1 - s) * x0 + s * eps).to(rollout.final_latents.dtype)
        v = update.velocity(x_t, sigma, batch.conditioning).float()
        error = ((v - (eps - x0)) ** 2).mean(dim=-1)  # [n, N]
        adv = batch.advantages.float()
        if cfg.ratio_mode == "sample":
            adv = adv.mean(1, keepdim=True)
        weight = torch.clamp(adv / self.temperature, min=0.0)
        loss = (weight * error).mean()
        return ObjectiveTerms(
            loss, torch.zeros((), device=loss.device), {"imitated": float((weight > 0).float().mean())}
        )
