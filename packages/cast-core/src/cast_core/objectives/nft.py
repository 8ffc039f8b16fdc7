"""``nft``: DiffusionNFT (Zheng et al., arXiv 2509.16117), online RL on the forward process.

No log-probs and no SDE: the images are sampled with the plain ODE by the *old* policy (an EMA
of the trained one, :class:`~cast_core.objectives.old_policy.OldPolicy`), their clean latents
are noised again at the sampler's own timesteps, and the trained velocity ``vθ`` is mixed with
the old one ``v_old`` into an implicit positive and an implicit negative policy:

    v⁺ = β·vθ + (1 − β)·v_old          v⁻ = (1 + β)·v_old − β·vθ

Each is scored by the x0-space error of its prediction ``x̂0 = x_t − σ·v``, divided by its own
detached mean absolute error (the adaptive weighting), and mixed by the optimality probability
``r = clip(clip(A, ±c)/c/2 + 1/2, 0, 1)`` of the group-normalised reward ``A``:

    L = c · mean[ r·ℓ⁺/β + (1 − r)·ℓ⁻/β ]

as the official ``train_nft_sd3.py`` writes it, plus ``beta_kl·mean‖vθ − v_ref‖²`` (the run's
``beta``). A good sample (``r → 1``) pulls ``vθ`` towards the velocity that reproduces it, a
bad one pushes it away.

**CAST's credit.** ``r`` is linear in the advantage, so a per-position advantage map gives a
per-position ``r`` and the error ``ℓ±`` is taken per position (channel mean; the adaptive
weight stays per sample): ``L = c·mean_n[r_n·ℓ⁺_n + (1 − r_n)·ℓ⁻_n]/β``. A map constant per
sample gives the scalar loss exactly.

Defaults are the paper's GenEval configuration (``config/nft.py``): ``β = 1``, ``c = 5`` (the
run's ``adv_clip``), old-policy decay type 1 (``min(0.001·steps, 0.5)``), 99 % of the sampler's
timesteps per sample in a random order, fresh noise at every pass.
"""

from __future__ import annotations

from typing import Any

import torch

from cast_core.objectives.forward import forward_noise, noised, per_sample_advantages
from cast_core.objectives.old_policy import OldPolicy, TrailsAnOldPolicy
from cast_core.seeding import generator_for
from cast_core.types import ObjectiveTerms, PassBatch, Rollout

__all__ = ["NFT", "nft_loss", "optimality"]


def optimality(advantages: torch.Tensor, adv_clip: float) -> torch.Tensor:
    """DiffusionNFT's optimality probability ``r = clip(clip(A, ±c)/c/2 + 1/2, 0, 1)``."""
    c = float(adv_clip)
    return torch.clamp(torch.clamp(advantages, -c, c) / c / 2.0 + 0.5, 0.0, 1.0)


def _x0_error(x0_pred: torch.Tensor, x0: torch.Tensor) -> torch.Tensor:
    """Per-position squared x0 error ``[n, N]`` divided by the sample's detached mean absolute
    error (computed in float64, floored at 1e-5, as the official code does)."""
    with torch.no_grad():
        dims = tuple(range(1, x0.ndim))
        weight = (x0_pred.double() - x0.double()).abs().mean(dim=dims, keepdim=True).clamp(min=1e-5)
    return ((x0_pred - x0) ** 2 / weight.to(x0_pred.dtype)).mean(dim=-1)


def nft_loss(
    v: torch.Tensor,
    v_old: torch.Tensor,
    x_t: torch.Tensor,
    x0: torch.Tensor,
    sigma: torch.Tensor,
    advantages: torch.Tensor,
    *,
    beta: float,
    adv_clip: float,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The NFT policy loss of one pass. ``v``/``v_old``/``x_t``/``x0`` are ``[n, N, C]`` (``v_old``
    is treated as a constant), ``sigma`` the per-sample timestep ``[n]``, ``advantages`` ``[n]``,
    ``[n, 1]`` (scalar credit) or ``[n, N]`` (a per-position map)."""
    if beta <= 0:
        raise ValueError(f"nft beta must be > 0 (it divides the loss), got {beta}")
    v_old = v_old.detach()
    s = sigma.to(v.dtype).view(-1, *([1] * (v.ndim - 1)))
    positive = beta * v + (1.0 - beta) * v_old
    negative = (1.0 + beta) * v_old - beta * v
    pos = _x0_error(x_t - s * positive, x0)  # [n, N]
    neg = _x0_error(x_t - s * negative, x0)
    adv = advantages.to(v.dtype)
    if adv.ndim == 1:
        adv = adv[:, None]
    r = optimality(adv, adv_clip)  # [n, 1] or [n, N]
    per_position = r * pos / beta + (1.0 - r) * neg / beta
    loss = (per_position * float(adv_clip)).mean()
    with torch.no_grad():
        diag = {
            "positive_loss": float(pos.mean()),
            "negative_loss": float(neg.mean()),
            "optimality_mean": float(r.mean()),
            "old_deviate": float(((v.detach() - v_old) ** 2).mean()),
        }
    return loss, diag


class NFT(TrailsAnOldPolicy):
    """DiffusionNFT as a cast objective. ``beta``: the guidance strength mixing ``vθ`` and
    ``v_old`` (DiffusionNFT's ``config.beta``; the KL weight is the run's ``beta``);
    ``timestep_fraction``: the share of the sampler's timesteps each sample trains on;
    ``old_flat``/``old_rate``/``old_cap``: the old policy's decay schedule (type 1 by default);
    ``adv_clip``: ``c`` above (the run's ``adv_clip`` unless given)."""

    uses_window = False

    def __init__(
        self,
        beta: float = 1.0,
        timestep_fraction: float = 0.99,
        adv_clip: float = 5.0,
        old_flat: int = 0,
        old_rate: float = 0.001,
        old_cap: float = 0.5,
    ):
        if not beta > 0:
            raise ValueError(f"objective 'nft': beta must be > 0, got {beta}")
        if not 0.0 < timestep_fraction <= 1.0:
            raise ValueError(f"objective 'nft': timestep_fraction must be in (0, 1], got {timestep_fraction}")
        self.beta, self.timestep_fraction, self.adv_clip = float(beta), float(timestep_fraction), float(adv_clip)
        self.old = self.trailing = OldPolicy(flat=old_flat, rate=old_rate, cap=old_cap)
        self.params: list[torch.nn.Parameter] = []

    # -- what the trainer calls --------------------------------------------------------------------
    def passes(self, rollout: Rollout) -> int:
        return max(1, int((len(rollout.sigmas) - 1) * self.timestep_fraction))

    def sampling(self, params):
        """Images come from the old policy (the official code samples with the "old" adapter)."""
        return self.old.active(params)

    # -- one pass ----------------------------------------------------------------------------------
    def timestep_index(self, update: Any, batch: PassBatch, sample: tuple[int, int]) -> int:
        """The sampler step whose σ sample ``sample`` trains on at pass ``batch.t``: a random
        order of the schedule's steps per sample and epoch, as the official code shuffles them."""
        num_steps = len(batch.rollout.sigmas) - 1
        gen = generator_for(
            update.config.seed, batch.step, "nft-timesteps", batch.epoch, int(sample[0]), int(sample[1])
        )
        return int(torch.randperm(num_steps, generator=gen)[batch.t])

    def loss(self, update: Any, batch: PassBatch) -> ObjectiveTerms:
        rollout = batch.rollout
        x0 = rollout.final_latents[batch.rows]
        sigma = rollout.sigmas[[self.timestep_index(update, batch, s) for s in batch.ids]].to(x0.device)
        noise = forward_noise(update, batch.ids, "nft-noise", batch.step, batch.epoch, batch.t).to(x0.device)
        x_t = noised(x0.float(), noise.float(), sigma)
        x_in = x_t.to(x0.dtype)
        with torch.no_grad(), self.old.active(self.params):  # before the graph: the swap is in place
            v_old = update.velocity(x_in, sigma, batch.conditioning).float()
        v = update.velocity(x_in, sigma, batch.conditioning).float()
        loss, diag = nft_loss(
            v,
            v_old,
            x_t,
            x0.float(),
            sigma.float(),
            per_sample_advantages(update.config, batch.advantages),
            beta=self.beta,
            adv_clip=self.adv_clip,
        )
        kl = torch.zeros((), device=loss.device)
        if update.config.beta > 0:
            v_ref = update.reference_velocity(x_in, sigma, batch.conditioning).float()
            kl = ((v - v_ref) ** 2).mean()
        diag["old_decay"] = self.old.decay
        return ObjectiveTerms(loss, kl, diag)
