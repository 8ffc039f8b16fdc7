"""Sampling a batch with the SDE inside the window and the ODE outside it, keeping what the
policy-gradient step needs.

Outside the window every step is the deterministic Euler step (η = 0), so those steps carry no
log-probability and are never trained on; inside it, :func:`cast_core.sde.sde_step` adds
exploration noise and we keep the state before and after each step plus the per-position
log-probability of the move. With ``window=None`` this is exactly the policy's own ODE sampler.
"""

from __future__ import annotations

import contextlib
from typing import Any, Collection, Sequence

import torch

from cast_core.conditioning import check_conditioning, concat_rows, num_rows, select_rows
from cast_core.protocols import Policy
from cast_core.sde import check_schedule, euler_step, reduce_per_position, sde_step, tweedie_x0
from cast_core.types import Rollout, Window


def concat_rollouts(parts: list[Rollout]) -> Rollout:
    """One rollout from rollouts of consecutive chunks of a batch (same schedule and window)."""
    if len(parts) == 1:
        return parts[0]
    cat = lambda name: None if getattr(parts[0], name) is None else torch.cat([getattr(p, name) for p in parts])  # noqa: E731
    first = parts[0]
    return Rollout(
        prompts=[p for r in parts for p in r.prompts],
        images=cat("images"),
        sigmas=first.sigmas,
        step_indices=first.step_indices,
        latents=cat("latents"),
        next_latents=cat("next_latents"),
        log_probs=cat("log_probs"),
        conditioning=concat_rows([r.conditioning for r in parts]),
        window=first.window,
        x0=cat("x0"),
        final_latents=cat("final_latents"),
        sample_ids=None if first.sample_ids is None else [s for r in parts for s in r.sample_ids],
    )


def sample_in_chunks(
    policy: Policy,
    prompts: Sequence[str],
    *,
    chunk: int,
    generators: Sequence["torch.Generator"],
    conditioning: Any,
    initial_noise: torch.Tensor | None = None,
    on_chunk: Any = None,
    **options: Any,
) -> Rollout:
    """:func:`sample` ``chunk`` prompts at a time (0 = all at once), each with its own generator
    and its rows of ``conditioning`` / ``initial_noise``, as one rollout: what fits memory, with the
    images a single call would give. ``on_chunk(parts, sampled)`` hears each chunk as it is done
    (the trainer's ``async_scoring`` judges it then); ``options`` go to :func:`sample`."""
    prompts = list(prompts)
    chunk = chunk or len(prompts)
    parts: list[Rollout] = []
    for i in range(0, len(prompts), chunk):
        end = min(i + chunk, len(prompts))
        parts.append(
            sample(
                policy,
                prompts[i:end],
                generator=list(generators[i:end]),
                conditioning=select_rows(conditioning, list(range(i, end))),
                initial_noise=None if initial_noise is None else initial_noise[i:end],
                **options,
            )
        )
        if on_chunk is not None:
            on_chunk(parts, end)
    return concat_rollouts(parts)


def decode_images(
    policy: Policy, latents: torch.Tensor, image_size: tuple[int, int] | None = None, batch_size: int = 0
) -> torch.Tensor:
    """``policy.decode`` ``batch_size`` latents at a time (0 = all at once): a real VAE decoding
    a step's 32 images at 1024² at once needs tens of GB of activations; chunks of a few do not."""
    if not batch_size or len(latents) <= batch_size:
        return policy.decode(latents, image_size)
    return torch.cat(
        [policy.decode(latents[i : i + batch_size], image_size) for i in range(0, len(latents), batch_size)]
    )


def starting_noise(
    policy: Policy,
    n: int,
    image_size: tuple[int, int] | None,
    generator: "torch.Generator | Sequence[torch.Generator] | None",
) -> torch.Tensor:
    """``n`` starting latents from one generator, or one per sample from a list of generators."""
    if isinstance(generator, (list, tuple)):
        if len(generator) != n:
            raise ValueError(f"{len(generator)} generators for {n} samples; pass one per sample")
        return torch.cat([policy.initial_noise(1, image_size, g) for g in generator])
    return policy.initial_noise(n, image_size, generator)


@torch.no_grad()
def sample(
    policy: Policy,
    prompts: Sequence[str],
    *,
    num_steps: int,
    image_size: tuple[int, int] | None = None,
    window: Window | None = None,
    eta: float = 0.7,
    generator: "torch.Generator | Sequence[torch.Generator] | None" = None,
    keep_x0: bool | Collection[int] = False,
    initial_noise: torch.Tensor | None = None,
    noise_block: int = 1,
    conditioning: Any = None,
    decode_batch_size: int = 0,
) -> Rollout:
    """Generate images for ``prompts`` and record the window steps.

    ``latents``/``next_latents`` are ``[B, T, N, C]`` for the T window steps, ``log_probs`` the
    per-position log-densities ``[B, T, N]`` (float32), ``x0`` (if ``keep_x0``) the Tweedie
    estimate at every step ``[B, num_steps, N, C]`` — or, when ``keep_x0`` is a collection of step
    indices, at those steps only, in step order ``[B, len(keep_x0), N, C]`` (a trainer that needs
    one step's estimate should not hold all of them for a large model). Noise for the initial
    latents and for every SDE step comes from ``generator`` in a fixed order, so a seed reproduces the rollout;
    with a list of generators (one per prompt) each sample draws only from its own, so its image
    does not depend on the batch it is sampled in (the trainer's per-sample noise).
    ``noise_block`` restricts the window's exploration to block-constant directions
    (:func:`cast_core.sde.sde_step`). ``conditioning`` (rows aligned with ``prompts``) skips
    ``policy.encode`` — the trainer passes cached prompt embeddings. ``image_size`` reaches
    ``encode``, ``velocity`` and ``decode``.
    """
    prompts = list(prompts)
    if window is not None:
        window.check_fits(num_steps)
    sigmas = check_schedule(policy.sigmas(num_steps, image_size), num_steps, type(policy).__name__).float()
    if conditioning is None:
        conditioning = check_conditioning(policy.encode(prompts, image_size=image_size), type(policy).__name__)
    cond = conditioning
    if num_rows(cond) != len(prompts):
        raise ValueError(f"conditioning has {num_rows(cond)} rows for {len(prompts)} prompts")
    x = starting_noise(policy, len(prompts), image_size, generator) if initial_noise is None else initial_noise.clone()
    sigma_max = sigmas[1]
    states, nexts, log_probs, x0s = [], [], [], []
    x0_steps = range(num_steps) if keep_x0 is True else (keep_x0 or ())
    for i in range(num_steps):
        sigma, sigma_next = sigmas[i], sigmas[i + 1]
        v = policy.velocity(x, sigma, cond, image_size=image_size)
        if i in x0_steps:
            x0s.append(tweedie_x0(x.float(), v.float(), sigma))
        if window is not None and i in window:
            step = sde_step(
                v, x, sigma, sigma_next, eta, sigma_max=sigma_max, generator=generator, noise_block=noise_block
            )
            nxt = step.prev_sample.to(x.dtype)
            if nxt.dtype != step.prev_sample.dtype:  # score the sample training will see, not its fp32 twin
                step = sde_step(
                    v, x, sigma, sigma_next, eta, sigma_max=sigma_max, prev_sample=nxt, noise_block=noise_block
                )
            states.append(x)
            nexts.append(nxt)
            log_probs.append(reduce_per_position(step.log_prob))
            x = nxt
        else:
            x = euler_step(v, x, sigma, sigma_next).to(x.dtype)
    images = decode_images(policy, x, image_size, decode_batch_size)
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


def ode_images(
    policy: Policy,
    prompts: Sequence[str],
    *,
    num_steps: int,
    generator: torch.Generator | None = None,
    image_size: tuple[int, int] | None = None,
) -> torch.Tensor:
    """The policy's deterministic ODE images for ``prompts``: what evaluation, grids and
    ``cast sample`` look at. It runs inside the policy's optional ``inference()`` context (a
    LoRA policy folds its adapter into the weights there, ~1.45x faster on the shapes policy);
    nothing here is trained on, so rounding-level differences from :meth:`Policy.velocity`
    cost nothing — which is why :func:`sample` itself, whose window log-probs the update must
    recompute exactly, never uses it."""
    from cast_core.protocols import FastInference

    with policy.inference() if isinstance(policy, FastInference) else contextlib.nullcontext():
        return sample(policy, prompts, num_steps=num_steps, image_size=image_size, generator=generator).images
