"""One denoising step of a rectified-flow sampler, deterministic (ODE) or stochastic (SDE), with
the Gaussian log-density RL needs (docs/design.md §4).

Convention: ``x_σ = (1-σ)·x0 + σ·ε``, ``σ = 1`` is pure noise and the model predicts
``v = ε - x0``. Going from ``σ`` to ``σ' < σ`` the ODE step is ``x' = x + (σ'-σ)·v``.

The SDE step is Flow-GRPO's ``sde_step_with_logprob`` (``sde_type="sde"``), re-derived here so
that cast agrees with Flow-GRPO to float32 precision on the same numbers:

* ``dt = σ' - σ`` (negative);
* ``std_dev_t = η·sqrt(σ / (1 - σ))``, with ``σ = 1`` replaced by ``sigma_max`` (the schedule's
  *second* sigma, Flow-GRPO's ``sigmas[1]``) in the denominator only, so the first step of a
  schedule starting at 1 does not divide by zero;
* ``mean = x + [v + std_dev_t²/(2σ)·(x + (1-σ)·v)]·dt`` — the reverse-time SDE whose marginals
  match the ODE's; the extra drift is the score term ``-(x - (1-σ)·x̂0)/σ²`` rewritten with ``v``;
* ``x' = mean + std_dev_t·sqrt(-dt)·ξ`` with ``ξ ~ N(0, I)``;
* ``log_prob`` is the per-element Gaussian log-density of ``x'`` under that step, *including*
  the ``-log(std)`` and ``-log sqrt(2π)`` constants (they cancel in ratios but Flow-GRPO keeps
  them, and keeping them makes the numbers comparable).

Everything is computed in float32 whatever the input dtype: Flow-GRPO notes that bf16 overflows
here, and log-prob *differences* of order 1e-4 (the clip range) are below bf16 resolution.

**Block noise** (``noise_block = k > 1``, a cast extension, off by default): the same SDE
restricted to the directions that are constant over each run of ``k`` consecutive channels of a
position (for the shapes policy, ``k = p²`` is one value per patch and colour channel). Writing
``P`` for the projector that replaces each block by its mean, the step is
``mean = x + [v + std_dev_t²/(2σ)·P(x + (1-σ)·v)]·dt`` and ``x' = mean + std·P(ξ)``: along
block-constant directions exactly Flow-GRPO's step (same variance, same marginal-preserving
drift), along the others the ODE. Its density lives on the ``C/k`` block coordinates
``z_b = sqrt(k)·P(x' - mean)/std ~ N(0, 1)``; each element carries its block's log-density,
so per-element means are per-dimension means as in Flow-GRPO and clip ranges keep their scale.
Why: the reward of a layout depends on coarse structure, while white noise spends most of its
dimensions on pixel detail the denoiser removes again — and every explored dimension adds
variance to the policy gradient. Under a new mean only the block-mean part of the move is
scored; the remaining part is treated as deterministic, as the ODE steps outside a window are.
The KL term (:func:`cast_core.loss.kl_penalty`) still compares the whole means, so with β > 0
the unexplored directions stay anchored to the reference too.

``η = 0`` returns the Euler step bit for bit (same float32 operations as diffusers'
``FlowMatchEulerDiscreteScheduler.step``), so the window-free sampler *is* the ODE sampler.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import torch

__all__ = [
    "SDEStep",
    "sde_step",
    "euler_step",
    "tweedie_x0",
    "reduce_per_sample",
    "reduce_per_position",
    "SDE_KINDS",
    "block_mean",
]

SDE_KINDS = ("sde", "cps")
_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


@dataclass
class SDEStep:
    """Result of :func:`sde_step`; every tensor is float32.

    * ``prev_sample`` – ``x'``, the state at ``σ'`` (shape of ``sample``);
    * ``log_prob`` – per-element log-density of ``prev_sample`` (shape of ``sample``); zeros
      wherever the step is deterministic (std 0), where a density does not exist;
    * ``mean`` – the step's Gaussian mean (shape of ``sample``; carries gradients to ``velocity``);
    * ``std_dev`` – the **step** standard deviation, i.e. the std of ``prev_sample`` given
      ``sample``: ``std_dev_t·sqrt(-dt)`` for ``"sde"``, ``σ'·sin(η·π/2)`` for ``"cps"``;
      broadcastable to ``sample`` (``[]`` or ``[B, 1, …]``);
    * ``std_dev_t`` – what Flow-GRPO returns as ``std_dev_t`` and divides by in its KL term:
      the per-unit-time ``η·sqrt(σ/(1-σ))`` for ``"sde"``; for ``"cps"`` the step std (there the
      two coincide). Pass this one to :func:`cast_core.loss.kl_penalty`.
    """

    prev_sample: torch.Tensor
    log_prob: torch.Tensor
    mean: torch.Tensor
    std_dev: torch.Tensor
    std_dev_t: torch.Tensor


def check_schedule(sigmas: torch.Tensor, num_steps: int, who: str = "the policy") -> torch.Tensor:
    """The contract of a noise schedule, checked before any sampling: ``num_steps + 1`` values,
    strictly descending, ending in exactly 0, starting at most at 1 — and a first sigma that
    reaches 1 must *be* 1, the one value the SDE's ``σ = 1`` guard replaces (a 1.0000001 from a
    shifted schedule would give ``sqrt(σ/(1−σ))`` of a negative number: NaN noise)."""
    s = torch.as_tensor(sigmas)
    if s.ndim != 1 or s.numel() != num_steps + 1:
        raise ValueError(f"{who}: sigmas({num_steps}) has shape {tuple(s.shape)}; expected ({num_steps + 1},)")
    values = s.double()
    if not bool(torch.isfinite(values).all()):
        raise ValueError(f"{who}: sigmas hold non-finite values: {s.tolist()}")
    if not bool((values[1:] < values[:-1]).all()):
        raise ValueError(f"{who}: sigmas must strictly decrease, got {s.tolist()}")
    if float(values[-1]) != 0.0:
        raise ValueError(f"{who}: the last sigma must be exactly 0, got {float(values[-1])!r}")
    first = float(s[0])
    if first > 1.0:
        raise ValueError(
            f"{who}: the first sigma is {first!r}: a schedule must start at most at 1, and at "
            f"exactly 1.0 when it reaches 1 (clamp it: sigmas[0] = 1.0)"
        )
    return sigmas


def _sigma(value: float | torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``value`` as float32 on ``like``'s device, shaped to broadcast over ``like``: a python
    float or 0-d tensor stays 0-d; a per-sample ``[B]`` (or ``[B, 1, …]``) tensor becomes
    ``[B, 1, …, 1]``."""
    t = torch.as_tensor(value, dtype=torch.float32, device=like.device)
    if t.ndim == 0:
        return t
    if t.numel() != like.shape[0]:
        raise ValueError(
            f"per-sample sigma has {t.numel()} values for a batch of {like.shape[0]} "
            f"(sample shape {tuple(like.shape)}); pass a scalar or one sigma per sample"
        )
    return t.reshape(-1, *([1] * (like.ndim - 1)))


def euler_step(
    velocity: torch.Tensor, sample: torch.Tensor, sigma: float | torch.Tensor, sigma_next: float | torch.Tensor
) -> torch.Tensor:
    """The ODE step ``x + (σ'-σ)·v`` in float32.

    The operations are diffusers' (``dt = σ' - σ`` in float32, then ``x + dt·v``), so with float32
    inputs the result equals ``FlowMatchEulerDiscreteScheduler.step`` exactly. Unlike diffusers we
    also upcast ``velocity`` (diffusers multiplies a bf16 velocity by ``dt`` in bf16).
    """
    x = sample.float()
    dt = _sigma(sigma_next, x) - _sigma(sigma, x)
    return x + dt * velocity.float()


def tweedie_x0(sample: torch.Tensor, velocity: torch.Tensor, sigma: float | torch.Tensor) -> torch.Tensor:
    """The posterior-mean estimate of the clean latent, ``x̂0 = x - σ·v`` (float32)."""
    x = sample.float()
    return x - _sigma(sigma, x) * velocity.float()


def _noise(shape: torch.Size, like: torch.Tensor, generator) -> torch.Tensor:
    """``ξ`` from one generator, or row ``b`` from ``generator[b]`` when given one per sample (so
    a sample's noise does not depend on the batch it is drawn in). A CPU generator with CUDA
    tensors (the usual way to seed reproducibly) draws on the CPU."""
    if isinstance(generator, (list, tuple)):
        if len(generator) != shape[0]:
            raise ValueError(f"{len(generator)} generators for a batch of {shape[0]}; pass one per sample")
        rows = [torch.randn(shape[1:], generator=g, device=g.device, dtype=torch.float32) for g in generator]
        return torch.stack(rows).to(like.device)
    device = generator.device if generator is not None else like.device
    return torch.randn(shape, generator=generator, device=device, dtype=torch.float32).to(like.device)


def block_mean(t: torch.Tensor, k: int) -> torch.Tensor:
    """``P(t)``: each run of ``k`` consecutive last-dim elements replaced by its mean (same shape)."""
    if k == 1:
        return t
    c = t.shape[-1]
    if c % k:
        raise ValueError(
            f"noise_block {k} does not divide the latent channel count {c}; "
            f"choose a divisor of {c} (1 is Flow-GRPO's white noise)"
        )
    m = t.reshape(*t.shape[:-1], c // k, k).mean(-1, keepdim=True)
    return m.expand(*t.shape[:-1], c // k, k).reshape(t.shape)


def _gaussian_log_prob(x: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """Per-element ``log N(x; mean, std²)``; 0 where ``std == 0`` (a deterministic step has no
    density). ``x`` is detached, as in Flow-GRPO: gradients flow only through ``mean``. The
    std is made safe *before* dividing so that masked entries cannot leak NaN gradients."""
    positive = std > 0
    safe = torch.where(positive, std, torch.ones_like(std))
    lp = -((x.detach() - mean) ** 2) / (2 * safe**2) - torch.log(safe) - _LOG_SQRT_2PI
    return torch.where(positive, lp, torch.zeros_like(lp))


def sde_step(
    velocity: torch.Tensor,
    sample: torch.Tensor,
    sigma: float | torch.Tensor,
    sigma_next: float | torch.Tensor,
    eta: float,
    *,
    sigma_max: float | torch.Tensor,
    prev_sample: torch.Tensor | None = None,
    generator: "torch.Generator | Sequence[torch.Generator] | None" = None,
    kind: str = "sde",
    noise_block: int = 1,
) -> SDEStep:
    """One stochastic step from ``σ`` to ``σ'`` and the log-density of its outcome.

    ``velocity`` and ``sample`` are ``[B, …]`` (cast uses packed ``[B, N, C]``); ``sigma`` and
    ``sigma_next`` are python floats, 0-d tensors or per-sample ``[B]`` tensors. ``eta`` is the
    noise level (Flow-GRPO's ``noise_level``). ``sigma_max`` replaces ``σ = 1`` in the std's
    denominator (pass the schedule's ``sigmas[1]``).

    With ``prev_sample`` given (training: re-scoring a stored transition) no noise is drawn and
    ``log_prob`` is that sample's density under the *current* mean; otherwise ``ξ`` comes from
    ``generator`` (one generator, or a list with one per sample).

    ``kind="cps"`` is Flow-GRPO's coefficients-preserving sampler: ``std = σ'·sin(η·π/2)``,
    ``mean = x̂0·(1-σ') + x̂1·sqrt(σ'² - std²)`` with ``x̂1 = x + (1-σ)·v``, and — as in Flow-GRPO —
    ``log_prob = -(x'-mean)²`` with the Gaussian's scale and constants dropped.

    ``eta = 0`` (either kind) is the Euler ODE step exactly: ``mean == prev_sample ==
    euler_step(...)``, ``std_dev == 0`` and ``log_prob`` is all zeros (not meaningful).

    ``noise_block = k > 1`` explores only block-constant directions (module docstring; ``"sde"``
    only); ``k = 1`` is Flow-GRPO's step bit for bit.
    """
    if kind not in SDE_KINDS:
        raise ValueError(f"unknown SDE kind {kind!r}; choose one of {', '.join(SDE_KINDS)}")
    eta = float(eta)
    if eta < 0:
        raise ValueError(f"eta (noise level) must be >= 0, got {eta}")
    if velocity.shape != sample.shape:
        raise ValueError(f"velocity {tuple(velocity.shape)} and sample {tuple(sample.shape)} differ in shape")
    noise_block = int(noise_block)
    if noise_block < 1:
        raise ValueError(f"noise_block must be >= 1, got {noise_block}")
    if noise_block > 1 and kind != "sde":
        raise ValueError(f"noise_block {noise_block} is defined for kind='sde' only; use noise_block=1 with {kind!r}")
    x, v = sample.float(), velocity.float()
    s, s_next = _sigma(sigma, x), _sigma(sigma_next, x)
    dt = s_next - s

    if eta == 0.0:
        # The ODE, bit for bit; also avoids 0/0 at σ = 0 in the SDE coefficients.
        mean = x + dt * v
        zero = torch.zeros_like(dt)
        prev = mean if prev_sample is None else prev_sample.float()
        return SDEStep(prev, torch.zeros_like(mean), mean, zero, zero)

    if kind == "sde":
        s_max = torch.as_tensor(sigma_max, dtype=torch.float32, device=x.device)
        if bool((s_max >= 1).any()):
            raise ValueError(f"sigma_max must be < 1 (the schedule's second sigma), got {float(s_max)}")
        if bool((s > 1).any()):
            raise ValueError(f"sigma must be <= 1 (exactly 1 at the start of a schedule), got {s.max().item()!r}")
        std_dev_t = torch.sqrt(s / (1 - torch.where(s == 1, s_max, s))) * eta
        # std²/(2σ) is 0/0 when σ = 0; the drift correction vanishes there.
        safe_s = torch.where(s > 0, s, torch.ones_like(s))
        coef = torch.where(std_dev_t > 0, std_dev_t**2 / (2 * safe_s), torch.zeros_like(s))
        std = std_dev_t * torch.sqrt(-dt)
        k = noise_block  # block_mean(·, 1) is the identity: k = 1 is Flow-GRPO's step unchanged
        mean = x + (v + coef * block_mean(x + (1 - s) * v, k)) * dt
        prev = mean + std * block_mean(_noise(x.shape, x, generator), k) if prev_sample is None else prev_sample.float()
        if k == 1:
            log_prob = _gaussian_log_prob(prev, mean, std)
        else:  # the block coordinate sqrt(k)·P(x'-mean) is a unit-variance Gaussian per block
            scale = math.sqrt(k)
            log_prob = _gaussian_log_prob(scale * block_mean(prev.detach(), k), scale * block_mean(mean, k), std)
        return SDEStep(prev, log_prob, mean, std, std_dev_t)

    # cps
    std = s_next * math.sin(eta * math.pi / 2)
    x0_hat = x - s * v
    x1_hat = x + (1 - s) * v
    mean = x0_hat * (1 - s_next) + x1_hat * torch.sqrt((s_next**2 - std**2).clamp_min(0))
    prev = mean + std * _noise(x.shape, x, generator) if prev_sample is None else prev_sample.float()
    log_prob = -((prev.detach() - mean) ** 2)
    return SDEStep(prev, log_prob, mean, std, std)


def reduce_per_sample(log_prob: torch.Tensor) -> torch.Tensor:
    """``[B, …] -> [B]``: the mean over every non-batch element — Flow-GRPO's reduction. A mean,
    not a sum, which is why clip ranges of 1e-4 are sensible."""
    return log_prob.float().flatten(1).mean(1)


def reduce_per_position(log_prob: torch.Tensor) -> torch.Tensor:
    """``[B, N, C] -> [B, N]``: the mean over channels at each latent position — CAST's
    per-position log-prob, on the same scale as Flow-GRPO's (its mean over ``N`` is
    :func:`reduce_per_sample`)."""
    if log_prob.ndim != 3:
        raise ValueError(f"expected packed log-probs [B, N, C], got shape {tuple(log_prob.shape)}")
    return log_prob.float().mean(-1)
