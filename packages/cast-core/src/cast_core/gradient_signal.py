"""Where does the reward signal live? Per-step policy-gradient agreement across independent batches.

A window is worth training on only if the noise injected at its steps changes the reward: only
then does the policy gradient of those steps point somewhere. This measures that directly, with
the run's own policy, scorer, projector and objective, independent of any embedder or curve:

1. for ``batches`` independent batches (prompts and noise drawn as training steps would draw
   them), sample with SDE exploration on **every** step, score and project advantages;
2. for each sampling step ``t`` alone, take the gradient of the step-``t`` objective;
3. per step, the mean pairwise cosine between the batches' gradients.

Gradients that carry signal share a direction across batches (cosine > 0); gradients that are
noise do not (cosine ≈ 0, within about ``1/sqrt(#parameters)``). The cosine also reads as a
signal-to-noise ratio: with gradient ``g`` and per-batch noise ``n``, ``cos ≈ |g|² / (|g|² +
|n|²)``, so a cosine of 0.02 means one batch's gradient is ~98 % noise — a reason to keep the
learning rate small and the window on the steps that have signal.

Why SDE on every step: each step's noise is then an action whose effect on the reward the
gradient can see; a training window changes only which steps explore, not where signal is.
With ``heatmap_source = "x0"`` step ``t``'s advantage map is scored on x̂0 at step ``t``, the
state before that step's action, as training would for a window starting at ``t``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from cast_core.conditioning import select_rows
from cast_core.types import Window

__all__ = ["StepSignal", "pairwise_cosine", "step_signal", "signal_steps", "window_signal"]


@dataclass
class StepSignal:
    """Per sampling step: mean pairwise cosine of batch gradients, its spread, the mean
    gradient norm; ``noise_floor`` is ``1/sqrt(#parameters)``, the cosine's spread for
    unrelated directions."""

    cosine: list[float]
    cosine_sem: list[float]
    grad_norm: list[float]
    noise_floor: float
    batches: int
    images_per_batch: int
    reward_gm: list[float] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "cosine": self.cosine,
            "cosine_sem": self.cosine_sem,
            "grad_norm": self.grad_norm,
            "noise_floor": self.noise_floor,
            "batches": self.batches,
            "images_per_batch": self.images_per_batch,
            "reward_gm": self.reward_gm,
            "signal_steps": signal_steps(self),
        }


def pairwise_cosine(vectors: list[torch.Tensor]) -> tuple[float, float]:
    """Mean and standard error of the cosine over all pairs. The standard error is a jackknife
    over vectors (pairs that share a vector are not independent)."""
    n = len(vectors)
    if n < 2:
        raise ValueError("pairwise cosine needs at least two vectors")
    unit = [v.double() / v.double().norm().clamp_min(1e-300) for v in vectors]
    c = torch.stack(unit) @ torch.stack(unit).T
    iu = torch.triu_indices(n, n, 1)
    mean = float(c[iu[0], iu[1]].mean())
    if n < 3:
        return mean, float("nan")
    leave_one_out = []
    for i in range(n):
        keep = [j for j in range(n) if j != i]
        sub = c[keep][:, keep]
        ju = torch.triu_indices(n - 1, n - 1, 1)
        leave_one_out.append(float(sub[ju[0], ju[1]].mean()))
    m = sum(leave_one_out) / n
    var = (n - 1) / n * sum((x - m) ** 2 for x in leave_one_out)
    return mean, math.sqrt(var)


def signal_steps(signal: StepSignal, z: float = 3.0) -> list[int]:
    """Steps whose cosine exceeds ``z`` standard errors (and ``z`` noise floors) above zero."""
    out = []
    for t, (c, se) in enumerate(zip(signal.cosine, signal.cosine_sem)):
        spread = max(se if math.isfinite(se) else 0.0, signal.noise_floor)
        if c > z * spread:
            out.append(t)
    return out


def _draw_batch(trainer: Any, step: int, window: Window, x0_steps: tuple[int, ...] | None):
    """One batch as training step ``step`` would draw it: rollout, verdicts, the rows of the kept
    groups, their advantages, GM."""
    from cast_core.judging import reward_stats

    prompts = trainer.pick_prompts(step)
    rollout = trainer.rollout(prompts, window, step, x0_steps=x0_steps)
    verdicts = trainer.verdicts(prompts, rollout)
    scored = trainer.advantages(verdicts, rollout)
    if not scored.rows:
        raise RuntimeError(f"step {step}: the scorer could not judge any group")
    return rollout, verdicts, scored.rows, scored.advantages, float(reward_stats(verdicts)["reward_gm"])


def _needs_a_window(trainer: Any) -> None:
    """The signal is per SDE step: an objective without a window has none to measure."""
    if not trainer.objective.uses_window:
        from cast_core.config import ConfigError

        raise ConfigError(
            f"cast signal measures the gradient of each SDE step, and objective {trainer.config.objective!r} "
            "samples with the plain ODE (no window steps); measure it with benchmarks/credit_gradient.py, "
            'or set objective = "sde-clipped"'
        )


def _step_loss(trainer: Any, rollout, rows: torch.Tensor, cond, t: int, adv: torch.Tensor) -> torch.Tensor:
    from cast_core.types import PassBatch

    ids = [rollout.sample_ids[int(r)] for r in rows] if rollout.sample_ids else [(0, int(r)) for r in rows]
    return trainer.updater._loss(PassBatch(rollout, rows, ids, adv, cond, t, 0, trainer.step)).loss


def _flat_grad(trainer: Any) -> torch.Tensor:
    g = torch.cat(
        [(p.grad if p.grad is not None else torch.zeros_like(p)).detach().flatten().cpu() for p in trainer.params]
    )
    for p in trainer.params:
        p.grad = None
    return g


def step_signal(
    trainer: Any, batches: int = 8, *, first_step: int = 10**6, progress: Callable[[int, int], None] | None = None
) -> StepSignal:
    """Measure the per-step gradient signal with a built :class:`cast_core.trainer.Trainer`.

    Batches are drawn as the trainer's steps ``first_step, first_step + 1, ...`` would draw them
    (far past any real run by default, so the prompts are not the first steps of training). The
    trainer's parameters are not changed.
    """
    if batches < 2:
        raise ValueError(f"batches must be >= 2, got {batches}")
    _needs_a_window(trainer)
    cfg = trainer.config
    n_steps = cfg.num_steps
    per_step: list[list[torch.Tensor]] = [[] for _ in range(n_steps)]
    gms: list[float] = []
    images = cfg.prompts_per_step * cfg.group_size
    # x̂0 heatmaps must precede the step they weight: step t's map is scored on x̂0 at t
    per_step_maps = trainer.maps_from_x0
    for b in range(batches):
        rollout, judged, kept_rows, adv, gm = _draw_batch(
            trainer, first_step + b, Window(0, n_steps), tuple(range(n_steps)) if per_step_maps else None
        )
        gms.append(gm)
        rows = torch.tensor(kept_rows)
        cond = select_rows(rollout.conditioning, rows)
        for p in trainer.params:
            p.grad = None
        for t in range(len(rollout.step_indices)):
            if per_step_maps and t > 0:  # verdicts once; only the maps change per step
                scored = trainer.advantages(judged, rollout, x0_index=t)
                adv = scored.advantages
                if scored.rows != kept_rows:
                    raise RuntimeError(f"batch {b}: the scorer judged different groups at step {t}")
            _step_loss(trainer, rollout, rows, cond, t, adv).backward()
            per_step[t].append(_flat_grad(trainer))
        if progress:
            progress(b + 1, batches)
    cos, sem, norms = [], [], []
    for grads in per_step:
        m, se = pairwise_cosine(grads)
        cos.append(m)
        sem.append(se)
        norms.append(float(sum(float(g.norm()) for g in grads) / len(grads)))
    n_params = sum(p.numel() for p in trainer.params)
    return StepSignal(cos, sem, norms, 1.0 / math.sqrt(n_params), batches, images, gms)


def window_signal(
    trainer: Any,
    window: Window,
    batches: int = 8,
    *,
    first_step: int = 10**6,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """The gradient a training step would take — SDE only inside ``window``, the run's own
    starting noise (``group_noise``), exploration noise (``noise_block``) and heatmap source —
    compared across independent batches: the mean pairwise cosine of whole-window gradients.

    :func:`step_signal` asks which steps *can* carry signal; this asks how much signal the
    configuration as trained actually has, e.g. whether shared starts or block noise help.
    """
    _needs_a_window(trainer)
    if batches < 2:
        raise ValueError(f"batches must be >= 2, got {batches}")
    window.check_fits(trainer.config.num_steps)
    grads, gms = [], []
    for b in range(batches):
        rollout, _, kept_rows, adv, gm = _draw_batch(trainer, first_step + b, window, None)
        gms.append(gm)
        rows = torch.tensor(kept_rows)
        cond = select_rows(rollout.conditioning, rows)
        for p in trainer.params:
            p.grad = None
        T = len(rollout.step_indices)
        for t in range(T):
            (_step_loss(trainer, rollout, rows, cond, t, adv) / T).backward()
        grads.append(_flat_grad(trainer))
        if progress:
            progress(b + 1, batches)
    m, se = pairwise_cosine(grads)
    n_params = sum(p.numel() for p in trainer.params)
    return {
        "window": [window.start, window.size],
        "cosine": m,
        "cosine_sem": se,
        "grad_norm": float(sum(float(g.norm()) for g in grads) / len(grads)),
        "noise_floor": 1.0 / math.sqrt(n_params),
        "batches": batches,
        "images_per_batch": trainer.config.prompts_per_step * trainer.config.group_size,
        "reward_gm": gms,
    }
