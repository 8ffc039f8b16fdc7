"""``sde-clipped``: the PPO-style clipped ratio of the SDE window's log-probs — Flow-GRPO's
objective with one ratio per sample, CAST's with one per latent position (:mod:`cast_core.loss`).

This is the objective cast trained with before objectives became components, moved here
unchanged: one pass per window step, the step's transition recomputed under the current policy
(:meth:`cast_core.update.PolicyUpdate.sde_log_prob`), the KL of Flow-GRPO's step means against
the adapter-free reference when ``beta > 0``.
"""

from __future__ import annotations

from typing import Any

import torch

from cast_core.loss import clipped_objective, flow_grpo_objective, kl_penalty
from cast_core.sde import reduce_per_position
from cast_core.types import ObjectiveTerms, PassBatch, Rollout

__all__ = ["SDEClipped"]


class SDEClipped:
    """Flow-GRPO (``ratio_mode = "sample"``) or CAST (``"position"``); settings from the run's
    config: ``clip_range``, ``adv_clip``, ``eta``, ``noise_block``."""

    uses_window = True

    def passes(self, rollout: Rollout) -> int:
        return len(rollout.step_indices)

    def ratio_loss(self, config: Any, log_prob: torch.Tensor, old: torch.Tensor, adv: torch.Tensor):
        """The clipped objective of one window step from per-element log-probs ``[n, N, C]``
        (or per-position ``[n, N]``), the sampled per-position log-probs and the advantage map."""
        if config.ratio_mode == "position":
            return clipped_objective(reduce_per_position(log_prob), old, adv, config.clip_range)
        return flow_grpo_objective(
            reduce_per_position(log_prob).mean(1), old.mean(1), adv.mean(1), config.clip_range, adv_clip=config.adv_clip
        )

    def loss(self, update: Any, batch: PassBatch) -> ObjectiveTerms:
        cfg, rollout, rows, t = update.config, batch.rollout, batch.rows, batch.t
        sig = rollout.sigmas
        si = rollout.step_indices[t]
        sigma, sigma_next = sig[si], sig[si + 1]
        x, x_next = rollout.latents[rows, t], rollout.next_latents[rows, t]
        cur = update.sde_log_prob(x, x_next, sigma, sigma_next, batch.conditioning, sig[1])
        loss, diag = self.ratio_loss(cfg, cur.log_prob, rollout.log_probs[rows, t], batch.advantages)
        kl = torch.zeros((), device=loss.device)
        if cfg.beta > 0:
            with torch.no_grad(), update.policy.reference():
                ref = update.sde_log_prob(x, x_next, sigma, sigma_next, batch.conditioning, sig[1])
            kl = kl_penalty(cur.mean, ref.mean, cur.std_dev_t)
        return ObjectiveTerms(loss, kl, diag)
