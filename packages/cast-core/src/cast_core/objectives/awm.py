"""``awm``: Advantage Weighted Matching (Xue et al., arXiv 2509.25050).

AWM keeps the pretraining loss and weights it by the advantage. The log-likelihood of a policy
gradient is replaced by the negative flow-matching error at a forward-process point,

    ℓθ = −w(σ)·mean‖vθ(x_t, σ) − (ε − x0)‖²,      x_t = (1 − σ)·x0 + σ·ε,

and trained with the clipped ratio of Flow-GRPO, ``−min(ρ·Â, clip(ρ, 1 ± ε)·Â)`` with
``ρ = exp(ℓθ − sg(ℓθ))``: the published configuration is on-policy with one inner epoch, so
``ρ = 1`` at every pass and the gradient is ``−Â·∇ℓθ`` — lower the matching error of good
samples, raise it on bad ones. ``Â = clip(A, ±c)/c·advantage_max``. Two penalties, as in
``train_sd3_awm.py``: the run's ``beta`` times ``mean‖vθ − v_ref‖²`` (``kl_weight =
'Uniform'``) and ``ema_beta`` times ``mean‖vθ − v_ema‖²`` against a KL-EMA of the trained
adapter whose decay grows as ``min(0.001·steps, 0.3)``.

Weightings ``w`` (``weighting``): ``uniform`` (−mse), ``t`` (−σ·mse), ``t2`` (−σ²·mse),
``huber`` (−(√(mse + 1e-10) − 1e-5)·σ) and ``ghuber``, the published one:
``−((mse + 1e-10)^p − (1e-10)^p)·σ/p`` with ``p = ghuber_power``.

Timesteps (``discrete_wo_init``): ``train_timesteps`` sampler steps, stratified over steps
``1 … ⌊num_steps·timestep_fraction⌋``, one draw per training step and epoch shared by the batch.

**CAST's credit.** With a per-position advantage map (``ratio_mode = "position"``) the matching
error is taken per latent position (channel mean), each position gets its own ratio and its own
advantage, and the surrogate is averaged over positions — AWM's per-sample loss when the map is
constant and the weighting linear (``uniform``, ``t``, ``t2``); with ``ghuber`` the per-position
error goes through the concave weighting before the mean, so the two differ by design.

Defaults: ``geneval_sd3_no_cfg_1node`` of ``config/dgx_awm.py``.
"""

from __future__ import annotations

from typing import Any

import torch

from cast_core.loss import ratio_diagnostics
from cast_core.objectives.forward import forward_noise, noised, per_sample_advantages
from cast_core.objectives.old_policy import OldPolicy, TrailsAnOldPolicy
from cast_core.seeding import generator_for
from cast_core.types import ObjectiveTerms, PassBatch, Rollout

__all__ = ["AWM", "awm_log_likelihood", "awm_timestep_indices", "WEIGHTINGS"]

WEIGHTINGS = ("uniform", "t", "t2", "huber", "ghuber")


def awm_log_likelihood(
    v: torch.Tensor,
    noise: torch.Tensor,
    x0: torch.Tensor,
    sigma: torch.Tensor,
    *,
    weighting: str = "ghuber",
    ghuber_power: float = 0.25,
    per_position: bool = False,
) -> torch.Tensor:
    """AWM's ``log_prob``: ``[n]`` (the error averaged over every element, as published) or
    ``[n, N]`` with ``per_position`` (averaged over channels only)."""
    err = (v - (noise - x0)) ** 2
    mse = err.mean(dim=-1) if per_position else err.flatten(1).mean(1)
    s = sigma.to(mse.dtype).view(-1, *([1] * (mse.ndim - 1)))
    if weighting == "uniform":
        return -mse
    if weighting == "t":
        return -mse * s
    if weighting == "t2":
        return -mse * s**2
    if weighting == "huber":
        return -(torch.sqrt(mse + 1e-10) - 1e-5) * s
    if weighting == "ghuber":
        p = float(ghuber_power)
        floor = torch.tensor(1e-10, dtype=mse.dtype, device=mse.device) ** p
        return -(torch.pow(mse + 1e-10, p) - floor) * s / p
    raise ValueError(f"unknown AWM weighting {weighting!r}; choose one of {', '.join(WEIGHTINGS)}")


def awm_timestep_indices(num_steps: int, train_timesteps: int, timestep_fraction: float, u: torch.Tensor) -> list[int]:
    """``discrete_wo_init``: stratum ``k`` of ``linspace(1, ⌊num_steps·fraction⌋, K + 1)`` (its
    bounds truncated to integers) gives ``lower + ⌊u_k·(upper − lower)⌋``; ``u`` ``[K]`` uniform."""
    top = int(num_steps * timestep_fraction)
    bounds = torch.linspace(1, top, steps=train_timesteps + 1)
    lower, upper = bounds[:-1].long(), bounds[1:].long()
    idx = lower + (u * (upper - lower)).long()
    return [min(max(int(i), 0), num_steps - 1) for i in idx]


class AWM(TrailsAnOldPolicy):
    """AWM as a cast objective; see the module docstring for each option. ``adv_clip`` is the
    run's unless given."""

    uses_window = False
    trailing_name = "kl-ema"

    def __init__(
        self,
        weighting: str = "ghuber",
        ghuber_power: float = 0.25,
        train_timesteps: int = 6,
        timestep_fraction: float = 0.9,
        advantage_max: float = 1.0,
        adv_clip: float = 5.0,
        clip_range: float = 1.0,
        ema_beta: float = 1.0,
        ema_flat: int = 0,
        ema_rate: float = 0.001,
        ema_cap: float = 0.3,
    ):
        if weighting not in WEIGHTINGS:
            raise ValueError(f"objective 'awm': unknown weighting {weighting!r}; choose one of {', '.join(WEIGHTINGS)}")
        if train_timesteps < 1:
            raise ValueError(f"objective 'awm': train_timesteps must be >= 1, got {train_timesteps}")
        if not 0.0 < timestep_fraction <= 1.0:
            raise ValueError(f"objective 'awm': timestep_fraction must be in (0, 1], got {timestep_fraction}")
        if not clip_range > 0 or not adv_clip > 0 or ema_beta < 0:
            raise ValueError("objective 'awm': clip_range and adv_clip must be > 0 and ema_beta >= 0")
        self.weighting, self.ghuber_power = weighting, float(ghuber_power)
        self.train_timesteps, self.timestep_fraction = int(train_timesteps), float(timestep_fraction)
        self.advantage_max, self.adv_clip, self.clip_range = float(advantage_max), float(adv_clip), float(clip_range)
        self.ema_beta = float(ema_beta)
        self.ema = self.trailing = OldPolicy(flat=ema_flat, rate=ema_rate, cap=ema_cap)
        self.params: list[torch.nn.Parameter] = []

    # -- what the trainer calls --------------------------------------------------------------------
    def passes(self, rollout: Rollout) -> int:
        return self.train_timesteps

    # -- one pass ----------------------------------------------------------------------------------
    def timestep_index(self, update: Any, batch: PassBatch) -> int:
        num_steps = len(batch.rollout.sigmas) - 1
        u = torch.rand(
            self.train_timesteps, generator=generator_for(update.config.seed, batch.step, "awm-timesteps", batch.epoch)
        )
        return awm_timestep_indices(num_steps, self.train_timesteps, self.timestep_fraction, u)[batch.t]

    def loss(self, update: Any, batch: PassBatch) -> ObjectiveTerms:
        cfg, rollout = update.config, batch.rollout
        x0 = rollout.final_latents[batch.rows]
        sigma = rollout.sigmas[self.timestep_index(update, batch)].to(x0.device).expand(len(batch.ids)).clone()
        noise = forward_noise(update, batch.ids, "awm-noise", batch.step, batch.epoch, batch.t).to(x0.device)
        x_in = noised(x0.float(), noise.float(), sigma).to(x0.dtype)
        v_ema = None
        if self.ema_beta > 0:
            with torch.no_grad(), self.ema.active(self.params):  # before the graph: the swap is in place
                v_ema = update.velocity(x_in, sigma, batch.conditioning).float()
        v = update.velocity(x_in, sigma, batch.conditioning).float()
        adv = per_sample_advantages(cfg, batch.advantages)  # [n, 1] or [n, N]
        per_position = cfg.ratio_mode == "position"
        ll = awm_log_likelihood(
            v,
            noise.float(),
            x0.float(),
            sigma.float(),
            weighting=self.weighting,
            ghuber_power=self.ghuber_power,
            per_position=per_position,
        )
        loss, diag = awm_policy_loss(
            ll, adv if per_position else adv[:, 0], self.adv_clip, self.advantage_max, self.clip_range
        )
        diag["fm_error"] = float(((v.detach() - (noise.float() - x0.float())) ** 2).mean())
        if v_ema is not None:
            ema_kl = ((v - v_ema) ** 2).mean()
            loss = loss + self.ema_beta * ema_kl
            diag["ema_kl"], diag["ema_decay"] = float(ema_kl.detach()), self.ema.decay
        kl = torch.zeros((), device=loss.device)
        if cfg.beta > 0:
            v_ref = update.reference_velocity(x_in, sigma, batch.conditioning).float()
            kl = ((v - v_ref) ** 2).mean()
        return ObjectiveTerms(loss, kl, diag)


def awm_policy_loss(
    log_likelihood: torch.Tensor, advantages: torch.Tensor, adv_clip: float, advantage_max: float, clip_range: float
) -> tuple[torch.Tensor, dict[str, float]]:
    """AWM's ``exp_first`` surrogate on-policy: ``ρ = exp(ℓ − sg(ℓ))``, ``Â = clip(A, ±c)/c·a_max``,
    ``mean(max(−Â·ρ, −Â·clip(ρ, 1 ± ε)))``; ``log_likelihood`` and ``advantages`` both ``[n]``
    or both ``[n, N]``."""
    adv = torch.clamp(advantages.to(log_likelihood.dtype), -adv_clip, adv_clip) / adv_clip * advantage_max
    ratio = torch.exp(log_likelihood - log_likelihood.detach())
    unclipped = -adv * ratio
    clipped = -adv * torch.clamp(ratio, 1.0 - clip_range, 1.0 + clip_range)
    loss = torch.maximum(unclipped, clipped).mean()
    return loss, ratio_diagnostics(log_likelihood, log_likelihood.detach(), clip_range)
