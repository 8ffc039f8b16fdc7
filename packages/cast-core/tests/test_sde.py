"""The SDE/ODE step against its closed form, Flow-GRPO's spelling and diffusers' Euler scheduler."""

from __future__ import annotations

import math

import pytest
import torch

from cast_core.sde import SDEStep, euler_step, reduce_per_position, reduce_per_sample, sde_step, tweedie_x0

B, N, C = 3, 6, 4


def _inputs(seed: int = 0, dtype: torch.dtype = torch.float32):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(B, N, C, generator=gen).to(dtype)
    v = torch.randn(B, N, C, generator=gen).to(dtype)
    sigma = 0.1 + 0.8 * torch.rand(B, generator=gen)
    sigma_next = sigma - 0.05 - 0.1 * torch.rand(B, generator=gen)
    return x, v, sigma, sigma_next


def _closed_form(x, v, sigma, sigma_next, eta, sigma_max):
    """docs/design.md §4 written out in float64, per sample, independently of cast's code."""
    x, v = x.double(), v.double()
    s = sigma.double().reshape(-1, 1, 1)
    sn = sigma_next.double().reshape(-1, 1, 1)
    dt = sn - s
    denom = 1 - torch.where(s == 1, torch.full_like(s, sigma_max), s)
    std_t = eta * torch.sqrt(s / denom)
    mean = x + (v + std_t**2 / (2 * s) * (x + (1 - s) * v)) * dt
    # Flow-GRPO's own spelling of the same mean
    mean_fg = x * (1 + std_t**2 / (2 * s) * dt) + v * (1 + std_t**2 * (1 - s) / (2 * s)) * dt
    torch.testing.assert_close(mean, mean_fg)
    return mean, std_t, std_t * torch.sqrt(-dt)


def test_matches_closed_form_with_given_prev_sample():
    x, v, sigma, sigma_next = _inputs()
    prev = torch.randn(B, N, C, generator=torch.Generator().manual_seed(9))
    out = sde_step(v, x, sigma, sigma_next, 0.7, sigma_max=0.95, prev_sample=prev)
    mean, std_t, std = _closed_form(x, v, sigma, sigma_next, 0.7, 0.95)
    assert isinstance(out, SDEStep)
    torch.testing.assert_close(out.mean, mean.float())
    torch.testing.assert_close(out.std_dev_t, std_t.float())
    torch.testing.assert_close(out.std_dev, std.float())
    assert torch.equal(out.prev_sample, prev)
    expected_lp = torch.distributions.Normal(mean, std.expand_as(mean)).log_prob(prev.double())
    assert out.log_prob.shape == x.shape and out.log_prob.dtype == torch.float32
    torch.testing.assert_close(out.log_prob, expected_lp.float(), rtol=1e-5, atol=1e-5)


def test_sampled_step_uses_generator_noise():
    x, v, sigma, sigma_next = _inputs(1)
    out = sde_step(v, x, sigma, sigma_next, 0.9, sigma_max=0.95, generator=torch.Generator().manual_seed(5))
    noise = torch.randn(B, N, C, generator=torch.Generator().manual_seed(5))
    mean, _, std = _closed_form(x, v, sigma, sigma_next, 0.9, 0.95)
    torch.testing.assert_close(out.prev_sample, (mean + std * noise.double()).float())
    again = sde_step(v, x, sigma, sigma_next, 0.9, sigma_max=0.95, generator=torch.Generator().manual_seed(5))
    assert torch.equal(out.prev_sample, again.prev_sample)
    # re-scoring the sampled transition gives the same log-prob bit for bit (ratio exactly 1)
    rescored = sde_step(v, x, sigma, sigma_next, 0.9, sigma_max=0.95, prev_sample=out.prev_sample)
    assert torch.equal(rescored.log_prob, out.log_prob)


def test_sigma_one_uses_sigma_max_in_the_denominator():
    x, v, _, _ = _inputs(2)
    out = sde_step(v, x, 1.0, 0.9, 0.7, sigma_max=0.9)
    torch.testing.assert_close(out.std_dev_t, torch.tensor(0.7 * math.sqrt(1.0 / (1 - 0.9))))
    mean, _, _ = _closed_form(x, v, torch.ones(B), torch.full((B,), 0.9), 0.7, 0.9)
    torch.testing.assert_close(out.mean, mean.float())
    assert torch.isfinite(out.log_prob).all()


def test_eta_zero_is_the_euler_step_exactly():
    x, v, sigma, sigma_next = _inputs(3)
    out = sde_step(v, x, sigma, sigma_next, 0.0, sigma_max=0.95)
    expected = x + (sigma_next - sigma).reshape(-1, 1, 1) * v
    assert torch.equal(out.prev_sample, expected) and torch.equal(out.mean, expected)
    assert torch.equal(euler_step(v, x, sigma, sigma_next), expected)
    assert float(out.std_dev.abs().max()) == 0.0 and torch.equal(out.log_prob, torch.zeros_like(x))
    cps = sde_step(v, x, sigma, sigma_next, 0.0, sigma_max=0.95, kind="cps")
    assert torch.equal(cps.prev_sample, expected)


@pytest.mark.parametrize("dynamic", [True, False])
def test_eta_zero_matches_diffusers_flow_match_euler_over_a_trajectory(dynamic):
    diffusers = pytest.importorskip("diffusers")
    import numpy as np

    steps, seq_len = 8, 1024
    if dynamic:  # how the FLUX pipelines set the schedule: linear sigmas + resolution shift mu
        sched = diffusers.FlowMatchEulerDiscreteScheduler(
            use_dynamic_shifting=True, base_shift=0.5, max_shift=1.15, base_image_seq_len=256, max_image_seq_len=4096
        )
        m = (1.15 - 0.5) / (4096 - 256)
        mu = seq_len * m + (0.5 - m * 256)
        sched.set_timesteps(sigmas=np.linspace(1.0, 1 / steps, steps), mu=mu)
    else:  # SD3-style static shift
        sched = diffusers.FlowMatchEulerDiscreteScheduler(shift=3.0)
        sched.set_timesteps(steps)
    sigmas = sched.sigmas
    assert sigmas.dtype == torch.float32 and len(sigmas) == steps + 1 and float(sigmas[-1]) == 0.0

    gen = torch.Generator().manual_seed(4)
    cond = torch.randn(2, 1, C, generator=gen)
    x_ref = torch.randn(2, N, C, generator=gen)
    x_euler, x_sde = x_ref.clone(), x_ref.clone()
    for i, t in enumerate(sched.timesteps):
        v = 0.3 * x_ref + cond * (1 + sigmas[i])
        x_ref = sched.step(v, t, x_ref, return_dict=False)[0]
        x_euler = euler_step(v, x_euler, sigmas[i], sigmas[i + 1])
        x_sde = sde_step(v, x_sde, sigmas[i], sigmas[i + 1], 0.0, sigma_max=sigmas[1]).prev_sample
        assert torch.equal(x_euler, x_ref), f"Euler differs from diffusers at step {i}"
        assert torch.equal(x_sde, x_ref), f"sde_step(eta=0) differs from diffusers at step {i}"


def test_per_sample_sigmas_match_a_loop_over_samples():
    x, v, sigma, sigma_next = _inputs(5)
    prev = torch.randn(B, N, C, generator=torch.Generator().manual_seed(1))
    batched = sde_step(v, x, sigma, sigma_next, 0.7, sigma_max=0.95, prev_sample=prev)
    for b in range(B):
        one = sde_step(
            v[b : b + 1],
            x[b : b + 1],
            float(sigma[b]),
            float(sigma_next[b]),
            0.7,
            sigma_max=0.95,
            prev_sample=prev[b : b + 1],
        )
        torch.testing.assert_close(batched.mean[b : b + 1], one.mean)
        torch.testing.assert_close(batched.log_prob[b : b + 1], one.log_prob)
        torch.testing.assert_close(batched.std_dev[b].reshape(()), one.std_dev)
        torch.testing.assert_close(
            euler_step(v, x, sigma, sigma_next)[b : b + 1],
            euler_step(v[b : b + 1], x[b : b + 1], sigma[b], sigma_next[b]),
        )
    with pytest.raises(ValueError, match="per-sample sigma"):
        sde_step(v, x, sigma[:2], sigma_next[:2], 0.7, sigma_max=0.95)


def test_float32_outputs_under_bfloat16_inputs():
    x, v, sigma, sigma_next = _inputs(6, torch.bfloat16)
    out = sde_step(v, x, sigma, sigma_next, 0.7, sigma_max=0.95, generator=torch.Generator().manual_seed(0))
    ref = sde_step(
        v.float(), x.float(), sigma, sigma_next, 0.7, sigma_max=0.95, generator=torch.Generator().manual_seed(0)
    )
    for name in ("prev_sample", "log_prob", "mean", "std_dev", "std_dev_t"):
        got = getattr(out, name)
        assert got.dtype == torch.float32, name
        assert torch.equal(got, getattr(ref, name)), name
    assert euler_step(v, x, sigma, sigma_next).dtype == torch.float32
    assert tweedie_x0(x, v, sigma).dtype == torch.float32


def test_gradients_flow_through_the_mean_only_and_stay_finite_at_zero_std():
    x, v, sigma, sigma_next = _inputs(7)
    sigma, sigma_next = sigma.clone(), sigma_next.clone()
    sigma[0] = sigma_next[0] = 0.0  # a degenerate, deterministic step for sample 0
    v = v.clone().requires_grad_()
    prev = torch.randn(B, N, C, generator=torch.Generator().manual_seed(2)).requires_grad_()
    out = sde_step(v, x, sigma, sigma_next, 0.7, sigma_max=0.95, prev_sample=prev)
    assert torch.equal(out.log_prob[0], torch.zeros_like(out.log_prob[0]))
    out.log_prob.sum().backward()
    assert torch.isfinite(v.grad).all() and v.grad[1:].abs().sum() > 0
    assert prev.grad is None  # the stored sample is a constant, as in Flow-GRPO


def test_cps_closed_form():
    x, v, sigma, sigma_next = _inputs(8)
    prev = torch.randn(B, N, C, generator=torch.Generator().manual_seed(3))
    out = sde_step(v, x, sigma, sigma_next, 0.8, sigma_max=0.95, prev_sample=prev, kind="cps")
    s, sn = sigma.double().reshape(-1, 1, 1), sigma_next.double().reshape(-1, 1, 1)
    std = sn * math.sin(0.8 * math.pi / 2)
    x64, v64 = x.double(), v.double()
    mean = (x64 - s * v64) * (1 - sn) + (x64 + (1 - s) * v64) * torch.sqrt(sn**2 - std**2)
    torch.testing.assert_close(out.mean, mean.float())
    torch.testing.assert_close(out.std_dev, std.float())
    torch.testing.assert_close(out.log_prob, (-((prev.double() - mean) ** 2)).float())
    with pytest.raises(ValueError, match="unknown SDE kind"):
        sde_step(v, x, sigma, sigma_next, 0.8, sigma_max=0.95, kind="ddim")


def test_tweedie_and_reductions():
    x, v, sigma, _ = _inputs(9)
    torch.testing.assert_close(tweedie_x0(x, v, sigma), x - sigma.reshape(-1, 1, 1) * v)
    torch.testing.assert_close(tweedie_x0(x, v, 0.25), x - 0.25 * v)
    lp = torch.arange(B * N * C, dtype=torch.float32).reshape(B, N, C)
    per_pos = reduce_per_position(lp)
    assert per_pos.shape == (B, N)
    torch.testing.assert_close(per_pos[1, 2], lp[1, 2].mean())
    per_sample = reduce_per_sample(lp)
    assert per_sample.shape == (B,)
    torch.testing.assert_close(per_sample, lp.reshape(B, -1).mean(1))
    torch.testing.assert_close(per_sample, per_pos.mean(1))  # same scale: CAST's map averages to Flow-GRPO's number
