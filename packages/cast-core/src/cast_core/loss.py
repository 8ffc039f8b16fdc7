"""The PPO-style clipped objective and the KL term (docs/design.md §4, "Objective").

Two forms of the same surrogate ``-min(r·A, clip(r, 1-ε, 1+ε)·A)`` with ``r = exp(ℓθ - ℓold)``:

* :func:`clipped_objective` — CAST's per-position form: one ratio per latent position (the
  channel-mean log-prob of :func:`cast_core.sde.reduce_per_position`) weighted by the advantage
  map at that position, averaged over positions, window steps and samples;
* :func:`flow_grpo_objective` — Flow-GRPO's sample-level form: one ratio per sample (element-mean
  log-prob) and a scalar advantage, written exactly as Flow-GRPO's ``train_*.py`` writes it.

At ``r = 1`` (the first inner epoch, on-policy) both reduce to the plain policy gradient
``-A·∇ℓ``; the clip only acts on later epochs. Diagnostics follow Flow-GRPO's logging:
``clip_fraction = mean(|r - 1| > ε)``, ``approx_kl = ½·mean((ℓθ - ℓold)²)``.
"""

from __future__ import annotations

import torch

__all__ = ["clipped_objective", "flow_grpo_objective", "kl_penalty", "ratio_diagnostics"]


def ratio_diagnostics(log_prob: torch.Tensor, old_log_prob: torch.Tensor, clip_range: float) -> dict[str, float]:
    """Detached floats: ``clip_fraction``, ``approx_kl``, ``ratio_mean``, ``ratio_min``,
    ``ratio_max``, over every ratio in the batch."""
    with torch.no_grad():
        delta = (log_prob.float() - old_log_prob.float()).detach()
        ratio = torch.exp(delta)
        return {
            "clip_fraction": float((torch.abs(ratio - 1.0) > clip_range).float().mean()),
            "approx_kl": float(0.5 * (delta**2).mean()),
            "ratio_mean": float(ratio.mean()),
            "ratio_min": float(ratio.min()),
            "ratio_max": float(ratio.max()),
        }


def _check_clip_range(clip_range: float) -> float:
    clip_range = float(clip_range)
    if not clip_range > 0:
        raise ValueError(f"clip_range must be > 0, got {clip_range}")
    return clip_range


def _surrogate(ratio: torch.Tensor, advantages: torch.Tensor, clip_range: float) -> torch.Tensor:
    """Elementwise ``max(-A·r, -A·clip(r, 1-ε, 1+ε))`` (= ``-min(...)``), Flow-GRPO's spelling."""
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip_range, 1.0 + clip_range)
    return torch.maximum(unclipped, clipped)


def flow_grpo_objective(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    clip_range: float,
    *,
    adv_clip: float | None = 5.0,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Flow-GRPO's policy loss on one window step: ``log_prob``/``old_log_prob`` ``[B]`` (the
    element-mean log-prob of :func:`cast_core.sde.reduce_per_sample`) and ``advantages`` ``[B]``.

    As in Flow-GRPO the advantages are first clamped to ``±adv_clip`` (its
    ``train.adv_clip_max = 5``; ``None`` disables), then
    ``loss = mean(max(-A·r, -A·clamp(r, 1-ε, 1+ε)))``. ``[B, T]`` log-probs (several steps at
    once) are accepted with ``[B]`` or ``[B, T]`` advantages; the mean over ``T`` equals
    Flow-GRPO's accumulation of one backward per step.
    """
    clip_range = _check_clip_range(clip_range)
    if log_prob.shape != old_log_prob.shape or log_prob.ndim not in (1, 2):
        raise ValueError(
            f"flow-grpo log-probs must both be [B] (or [B, T]); got {tuple(log_prob.shape)} "
            f"and {tuple(old_log_prob.shape)}"
        )
    adv = advantages.float()
    if adv.ndim == 1 and log_prob.ndim == 2:
        adv = adv[:, None]
    if adv.shape[0] != log_prob.shape[0] or adv.ndim != log_prob.ndim:
        raise ValueError(f"advantages {tuple(advantages.shape)} do not match log-probs {tuple(log_prob.shape)}")
    if adv_clip is not None:
        adv = torch.clamp(adv, -float(adv_clip), float(adv_clip))
    ratio = torch.exp(log_prob.float() - old_log_prob.float())
    loss = torch.mean(_surrogate(ratio, adv, clip_range))
    return loss, ratio_diagnostics(log_prob, old_log_prob, clip_range)


def clipped_objective(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    clip_range: float,
    *,
    adv_clip: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """CAST's per-position clipped objective and its diagnostics.

    ``log_prob``/``old_log_prob`` are ``[B, N]`` (one window step) or ``[B, T, N]`` (T steps);
    ``advantages`` is the flattened advantage map ``[B, N]`` (broadcast over ``T``) or
    ``[B, T, N]``. ``L = -mean over samples, steps, positions of min(r·A, clip(r)·A)``.

    ``[B]`` log-probs with ``[B]`` advantages are Flow-GRPO's sample-level variant and are
    handed to :func:`flow_grpo_objective`. Advantages are clamped to ``±adv_clip`` only when it
    is given: projectors already clip their maps.
    """
    if log_prob.ndim == 1:
        return flow_grpo_objective(log_prob, old_log_prob, advantages, clip_range, adv_clip=adv_clip)
    clip_range = _check_clip_range(clip_range)
    if log_prob.shape != old_log_prob.shape or log_prob.ndim not in (2, 3):
        raise ValueError(
            f"log-probs must both be [B, N] or [B, T, N]; got {tuple(log_prob.shape)} and {tuple(old_log_prob.shape)}"
        )
    adv = advantages.float()
    if log_prob.ndim == 3 and adv.ndim == 2:
        adv = adv[:, None, :]
    if adv.ndim != log_prob.ndim or adv.shape[0] != log_prob.shape[0] or adv.shape[-1] != log_prob.shape[-1]:
        raise ValueError(
            f"advantages {tuple(advantages.shape)} do not match log-probs {tuple(log_prob.shape)}; "
            f"pass the advantage map flattened to [B, N] (AdvantageMap.values.flatten(1))"
        )
    if adv_clip is not None:
        adv = torch.clamp(adv, -float(adv_clip), float(adv_clip))
    ratio = torch.exp(log_prob.float() - old_log_prob.float())
    loss = torch.mean(_surrogate(ratio, adv, clip_range))
    return loss, ratio_diagnostics(log_prob, old_log_prob, clip_range)


def kl_penalty(mean: torch.Tensor, ref_mean: torch.Tensor, std: float | torch.Tensor) -> torch.Tensor:
    """Flow-GRPO's KL term: ``mean_b[ mean_elements((μθ - μref)²) / (2·std²) ]``.

    ``mean``/``ref_mean`` are the step means ``[B, …]`` under the policy and the adapter-free
    reference; ``std`` is a float, 0-d, per-sample ``[B]`` or broadcastable ``[B, 1, …]`` tensor.
    Flow-GRPO divides by ``std_dev_t²`` — the per-unit-time std ``η·sqrt(σ/(1-σ))``
    (:attr:`cast_core.sde.SDEStep.std_dev_t`), **not** the step std ``std_dev_t·sqrt(-dt)`` —
    so this is the true Gaussian KL of the two steps times ``-dt``, per element. We match it so
    Flow-GRPO's β values transfer unchanged.
    """
    diff2 = (mean.float() - ref_mean.float()) ** 2
    per_sample = diff2.flatten(1).mean(1)  # [B]
    s = torch.as_tensor(std, dtype=torch.float32, device=per_sample.device)
    if s.numel() == 1:
        s = s.reshape(())
    else:
        if s.numel() != per_sample.shape[0]:
            raise ValueError(f"std has {s.numel()} values for a batch of {per_sample.shape[0]}")
        s = s.reshape(-1)
    return (per_sample / (2 * s**2)).mean()
