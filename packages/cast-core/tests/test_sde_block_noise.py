"""Block noise (``noise_block = k``): Flow-GRPO's SDE restricted to block-constant directions,
checked against its closed form written out in float64, and by its statistics."""

from __future__ import annotations

import math

import pytest
import torch

from cast_core.sde import block_mean, sde_step

B, N, C = 3, 5, 8


def _inputs(seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(B, N, C, generator=gen)
    v = torch.randn(B, N, C, generator=gen)
    sigma = 0.2 + 0.7 * torch.rand(B, generator=gen)
    sigma_next = sigma - 0.05 - 0.1 * torch.rand(B, generator=gen)
    return x, v, sigma, sigma_next


def _blocks(t: torch.Tensor, k: int) -> torch.Tensor:
    """``[B, N, C] -> [B, N, C/k, k]``, independently of cast's helper."""
    return t.reshape(t.shape[0], t.shape[1], t.shape[2] // k, k)


def _closed_form(x, v, sigma, sigma_next, eta, k):
    """mean = x + [v + std_t²/(2σ)·P(x + (1-σ)v)]·dt with P the block average, in float64."""
    x, v = x.double(), v.double()
    s = sigma.double().reshape(-1, 1, 1)
    sn = sigma_next.double().reshape(-1, 1, 1)
    dt = sn - s
    std_t = eta * torch.sqrt(s / (1 - s))
    u = _blocks(x + (1 - s) * v, k)
    pu = u.mean(-1, keepdim=True).expand_as(u).reshape(x.shape)
    mean = x + (v + std_t**2 / (2 * s) * pu) * dt
    return mean, std_t * torch.sqrt(-dt)


def test_block_mean_averages_consecutive_channels():
    t = torch.arange(8.0).reshape(1, 1, 8)
    assert block_mean(t, 4).tolist() == [[[1.5] * 4 + [5.5] * 4]]
    assert block_mean(t, 1) is t
    with pytest.raises(ValueError, match="does not divide the latent channel count 8"):
        block_mean(t, 3)


def test_block_of_one_is_flow_grpo_bit_for_bit():
    x, v, sigma, sigma_next = _inputs(1)
    a = sde_step(v, x, sigma, sigma_next, 0.7, sigma_max=0.9, generator=torch.Generator().manual_seed(3))
    b = sde_step(v, x, sigma, sigma_next, 0.7, sigma_max=0.9, generator=torch.Generator().manual_seed(3), noise_block=1)
    assert torch.equal(a.prev_sample, b.prev_sample) and torch.equal(a.log_prob, b.log_prob)


@pytest.mark.parametrize("k", [2, 4, 8])
def test_sampled_step_matches_the_closed_form(k):
    x, v, sigma, sigma_next = _inputs(2)
    out = sde_step(
        v, x, sigma, sigma_next, 0.8, sigma_max=0.9, generator=torch.Generator().manual_seed(5), noise_block=k
    )
    mean, std = _closed_form(x, v, sigma, sigma_next, 0.8, k)
    torch.testing.assert_close(out.mean, mean.float())
    # the noise is the block average of the white noise the same generator would give
    white = _blocks(torch.randn(B, N, C, generator=torch.Generator().manual_seed(5)).double(), k)
    noise = white.mean(-1, keepdim=True).expand_as(white).reshape(B, N, C)
    torch.testing.assert_close(out.prev_sample, (mean + std * noise).float())
    # density of the C/k block coordinates z = sqrt(k)·mean_block(x' - mean)/std ~ N(0, 1),
    # carried by every element of the block
    z = math.sqrt(k) * _blocks(out.prev_sample.double() - mean, k).mean(-1) / std
    lp_block = -(z**2) / 2 - torch.log(std) - 0.5 * math.log(2 * math.pi)
    expected = lp_block.unsqueeze(-1).expand(B, N, C // k, k).reshape(B, N, C)
    torch.testing.assert_close(out.log_prob, expected.float(), rtol=1e-5, atol=1e-5)
    # re-scoring the stored transition reproduces it bit for bit (ratio exactly 1)
    again = sde_step(v, x, sigma, sigma_next, 0.8, sigma_max=0.9, prev_sample=out.prev_sample, noise_block=k)
    assert torch.equal(again.log_prob, out.log_prob)


def test_moves_are_block_constant_with_unit_variance_block_coordinates():
    k, n = 4, 20000
    x = torch.zeros(n, 1, C)
    v = torch.zeros(n, 1, C)
    out = sde_step(v, x, 0.6, 0.5, 1.0, sigma_max=0.9, generator=torch.Generator().manual_seed(0), noise_block=k)
    move = _blocks(out.prev_sample - out.mean, k)
    assert torch.allclose(move, move[..., :1].expand_as(move), atol=1e-6)
    z = math.sqrt(k) * move[..., 0] / out.std_dev
    assert abs(float(z.var()) - 1.0) < 0.03 and abs(float(z.mean())) < 0.02
    # the per-block variance equals white noise's per-element variance: same exploration along
    # block-constant directions, none along the others
    white = sde_step(v, x, 0.6, 0.5, 1.0, sigma_max=0.9, generator=torch.Generator().manual_seed(0))
    assert torch.equal(white.std_dev, out.std_dev)


def test_gradient_reaches_the_velocity_only_through_block_means():
    x, v, sigma, sigma_next = _inputs(4)
    v = v.clone().requires_grad_(True)
    prev = torch.randn(B, N, C, generator=torch.Generator().manual_seed(8))
    out = sde_step(v, x, sigma, sigma_next, 0.7, sigma_max=0.9, prev_sample=prev, noise_block=4)
    out.log_prob.sum().backward()
    g = _blocks(v.grad, 4)
    torch.testing.assert_close(g, g[..., :1].expand_as(g))
    assert float(g.abs().sum()) > 0


def test_bad_blocks_are_refused_with_the_fix():
    x, v, _, _ = _inputs()
    with pytest.raises(ValueError, match="choose a divisor of 8"):
        sde_step(v, x, 0.5, 0.4, 0.7, sigma_max=0.9, noise_block=3)
    with pytest.raises(ValueError, match="kind='sde' only"):
        sde_step(v, x, 0.5, 0.4, 0.7, sigma_max=0.9, noise_block=2, kind="cps")
    with pytest.raises(ValueError, match=">= 1"):
        sde_step(v, x, 0.5, 0.4, 0.7, sigma_max=0.9, noise_block=0)
