"""The shapes network's own Euler ODE sampler (with classifier-free guidance).

This is the reference "plain pipeline" for the shapes policy: cast's SDE/ODE sampler with an
empty window must reproduce it exactly, and pretraining evaluates with it.
"""

from __future__ import annotations

import torch

from cast_shapes.model import ShapesNet, WordTokenizer, unpatchify


def encode(net: ShapesNet, prompts: list[str]) -> torch.Tensor:
    tok = WordTokenizer(net.cfg.vocabulary, net.cfg.max_tokens)
    return net.text(tok(list(prompts)).to(net.img_ids.device))


def guided_velocity(
    net: ShapesNet,
    x: torch.Tensor,
    sigma: torch.Tensor,
    cond: torch.Tensor,
    uncond: torch.Tensor | None,
    guidance: float,
) -> torch.Tensor:
    """``v_u + g·(v_c − v_u)`` in one batched forward; ``g = 1`` (or no uncond) is the plain velocity."""
    if uncond is None or guidance == 1.0:
        return net(x, sigma, cond)
    sigma = torch.as_tensor(sigma, dtype=x.dtype).reshape(-1).expand(x.shape[0])
    both = net(torch.cat([x, x]), torch.cat([sigma, sigma]), torch.cat([cond, uncond.expand_as(cond)]))
    v_c, v_u = both.chunk(2)
    return v_u + guidance * (v_c - v_u)


@torch.no_grad()
def ode_sample(
    net: ShapesNet, prompts: list[str], *, num_steps: int = 20, guidance: float = 2.0, seed: int = 0
) -> torch.Tensor:
    """Images ``[B, 3, H, W]`` for ``prompts``, Euler steps on ``linspace(1, 0, num_steps+1)``."""
    cfg = net.cfg
    gen = torch.Generator().manual_seed(seed)
    # CPU noise (the same on every device), then onto the net's device
    x = torch.randn(len(prompts), cfg.grid * cfg.grid, cfg.channels, generator=gen).to(net.img_ids.device)
    cond = encode(net, prompts)
    uncond = encode(net, [""]) if guidance != 1.0 else None
    sigmas = torch.linspace(1.0, 0.0, num_steps + 1)
    for i in range(num_steps):
        v = guided_velocity(net, x, sigmas[i], cond, uncond, guidance)
        x = x + (sigmas[i + 1] - sigmas[i]) * v
    return unpatchify(x, cfg.patch, cfg.image_size)
