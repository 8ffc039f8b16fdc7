"""Sampling a batch with the SDE inside the window and the ODE outside it, keeping what the
policy-gradient step needs.

Outside the window every step is the deterministic Euler step (η = 0), so those steps carry no
log-probability and are never trained on; inside it, :func:`cast_core.sde.sde_step` adds
exploration noise and we keep the state before and after each step plus the per-position
log-probability of the move. With ``window=None`` this is exactly the policy's own ODE sampler.
"""

from __future__ import annotations

import contextlib
from typing import Collection, Sequence

import torch

from cast_core.protocols import Policy
from cast_core.sde import euler_step, reduce_per_position, sde_step, tweedie_x0
from cast_core.types import Rollout, Window


def select_rows(obj, index):
    """Rows ``index`` of a conditioning object: tensors are indexed on dim 0 (conditioning is
    per sample — keep shared parts such as a negative prompt on the policy); tuples, lists and
    dicts are handled element-wise; other objects pass through unchanged."""
    if isinstance(obj, torch.Tensor):
        return obj[index]
    if isinstance(obj, (tuple, list)):
        return type(obj)(select_rows(o, index) for o in obj)
    if isinstance(obj, dict):
        return {k: select_rows(v, index) for k, v in obj.items()}
    return obj


def concat_rollouts(parts: list[Rollout]) -> Rollout:
    """One rollout from rollouts of consecutive chunks of a batch (same schedule and window)."""
    if len(parts) == 1:
        return parts[0]
    cat = lambda name: None if getattr(parts[0], name) is None else torch.cat([getattr(p, name) for p in parts])  # noqa: E731
    first = parts[0]
    return Rollout(
        prompts=[p for r in parts for p in r.prompts], images=cat("images"), sigmas=first.sigmas,
        step_indices=first.step_indices, latents=cat("latents"), next_latents=cat("next_latents"),
        log_probs=cat("log_probs"), conditioning=_cat_cond([r.conditioning for r in parts]),
        window=first.window, x0=cat("x0"), final_latents=cat("final_latents"),
    )


def _cat_cond(conds: list):
    c0 = conds[0]
    if isinstance(c0, torch.Tensor):
        return torch.cat(conds)
    if isinstance(c0, (tuple, list)):
        return type(c0)(_cat_cond([c[i] for c in conds]) for i in range(len(c0)))
    if isinstance(c0, dict):
        return {k: _cat_cond([c[k] for c in conds]) for k in c0}
    return c0


@torch.no_grad()
def sample(
    policy: Policy,
    prompts: Sequence[str],
    *,
    num_steps: int,
    image_size: tuple[int, int] | None = None,
    window: Window | None = None,
    eta: float = 0.7,
    generator: torch.Generator | None = None,
    keep_x0: bool | Collection[int] = False,
    initial_noise: torch.Tensor | None = None,
    noise_block: int = 1,
) -> Rollout:
    """Generate images for ``prompts`` and record the window steps.

    ``latents``/``next_latents`` are ``[B, T, N, C]`` for the T window steps, ``log_probs`` the
    per-position log-densities ``[B, T, N]`` (float32), ``x0`` (if ``keep_x0``) the Tweedie
    estimate at every step ``[B, num_steps, N, C]`` — or, when ``keep_x0`` is a collection of step
    indices, at those steps only, in step order ``[B, len(keep_x0), N, C]`` (a trainer that needs
    one step's estimate should not hold all of them for a large model). Noise for the initial
    latents and for every SDE step comes from ``generator`` in a fixed order, so a seed reproduces the rollout.
    ``noise_block`` restricts the window's exploration to block-constant directions
    (:func:`cast_core.sde.sde_step`).
    """
    prompts = list(prompts)
    if window is not None:
        window.check_fits(num_steps)
    sigmas = policy.sigmas(num_steps, image_size).float()
    cond = policy.encode(prompts)
    x = policy.initial_noise(len(prompts), image_size, generator) if initial_noise is None else initial_noise.clone()
    sigma_max = sigmas[1]
    states, nexts, log_probs, x0s = [], [], [], []
    x0_steps = range(num_steps) if keep_x0 is True else (keep_x0 or ())
    for i in range(num_steps):
        sigma, sigma_next = sigmas[i], sigmas[i + 1]
        v = policy.velocity(x, sigma, cond)
        if i in x0_steps:
            x0s.append(tweedie_x0(x.float(), v.float(), sigma))
        if window is not None and i in window:
            step = sde_step(v, x, sigma, sigma_next, eta, sigma_max=sigma_max, generator=generator,
                            noise_block=noise_block)
            nxt = step.prev_sample.to(x.dtype)
            if nxt.dtype != step.prev_sample.dtype:  # score the sample training will see, not its fp32 twin
                step = sde_step(v, x, sigma, sigma_next, eta, sigma_max=sigma_max, prev_sample=nxt,
                                noise_block=noise_block)
            states.append(x)
            nexts.append(nxt)
            log_probs.append(reduce_per_position(step.log_prob))
            x = nxt
        else:
            x = euler_step(v, x, sigma, sigma_next).to(x.dtype)
    images = policy.decode(x, image_size)
    stack = lambda xs: torch.stack(xs, dim=1) if xs else None  # noqa: E731
    return Rollout(
        prompts=prompts,
        images=images,
        sigmas=sigmas,
        step_indices=list(window.steps) if window is not None else [],
        latents=stack(states),
        next_latents=stack(nexts),
        log_probs=stack(log_probs),
        conditioning=cond,
        window=window,
        x0=stack(x0s),
        final_latents=x,
    )


def ode_images(policy: Policy, prompts: Sequence[str], *, num_steps: int, generator: torch.Generator | None = None,
               image_size: tuple[int, int] | None = None) -> torch.Tensor:
    """The policy's deterministic ODE images for ``prompts``: what evaluation, grids and
    ``cast sample`` look at. It runs inside the policy's optional ``inference()`` context (a
    LoRA policy folds its adapter into the weights there, ~1.45x faster on the shapes policy);
    nothing here is trained on, so rounding-level differences from :meth:`Policy.velocity`
    cost nothing — which is why :func:`sample` itself, whose window log-probs the update must
    recompute exactly, never uses it."""
    context = getattr(policy, "inference", None)
    with context() if context is not None else contextlib.nullcontext():
        return sample(policy, prompts, num_steps=num_steps, image_size=image_size, generator=generator).images
