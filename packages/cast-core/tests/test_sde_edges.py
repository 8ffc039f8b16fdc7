"""The SDE step's edges that the main tests never reach: float32 whatever torch's default
dtype, the η = 0 branch with a stored transition, the bounds on ``sigma_max``, and the words of
every error. Each test here was written against a surviving mutant of ``sde.py``
(docs/testing.md, "Mutation testing")."""

from __future__ import annotations

import pytest
import torch

from cast_core.sde import check_schedule, reduce_per_position, sde_step


def tensors(b: int = 2, n: int = 3, c: int = 4, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(b, n, c, generator=gen), torch.randn(b, n, c, generator=gen)


@pytest.fixture
def float64_default():
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(old)


@pytest.mark.parametrize("per_sample_generators", [False, True])
@pytest.mark.parametrize("kind", ["sde", "cps"])
def test_float32_under_a_float64_default(float64_default, kind, per_sample_generators):
    v, x = tensors()
    v, x = v.float(), x.float()
    gen = (
        [torch.Generator().manual_seed(i) for i in range(2)]
        if per_sample_generators
        else torch.Generator().manual_seed(0)
    )
    step = sde_step(v, x, 1.0, 0.8, 0.7, sigma_max=0.9, generator=gen, kind=kind)
    for name in ("prev_sample", "log_prob", "mean", "std_dev", "std_dev_t"):
        assert getattr(step, name).dtype == torch.float32, name


@pytest.mark.parametrize("kind", ["sde", "cps"])
def test_float64_sigmas_give_the_float32_step_bit_for_bit(kind):
    v, x = tensors()
    as_floats = sde_step(v, x, 1.0, 0.8, 0.7, sigma_max=0.9, generator=torch.Generator().manual_seed(0), kind=kind)
    f64 = lambda value: torch.tensor(value, dtype=torch.float64)  # noqa: E731
    as_f64 = sde_step(
        v, x, f64(1.0), f64(0.8), 0.7, sigma_max=f64(0.9), generator=torch.Generator().manual_seed(0), kind=kind
    )
    for name in ("prev_sample", "log_prob", "mean", "std_dev", "std_dev_t"):
        a, b = getattr(as_floats, name), getattr(as_f64, name)
        assert b.dtype == torch.float32 and torch.equal(a, b), name


def test_cps_step_is_mean_plus_std_times_the_generators_noise():
    v, x = tensors()
    step = sde_step(v, x, 0.6, 0.4, 0.7, sigma_max=0.9, generator=torch.Generator().manual_seed(5), kind="cps")
    xi = torch.randn(x.shape, generator=torch.Generator().manual_seed(5))
    assert torch.equal(step.prev_sample, step.mean + step.std_dev * xi)
    assert torch.equal(step.std_dev_t, step.std_dev), "for cps the two stds coincide"


def test_eta_zero_rescoring_keeps_the_stored_sample():
    v, x = tensors()
    stored = x + 1.0
    step = sde_step(v, x, 0.6, 0.4, 0.0, sigma_max=0.9, prev_sample=stored)
    assert torch.equal(step.prev_sample, stored), "the stored transition, not the ODE mean"
    assert torch.equal(step.mean, x + (torch.tensor(0.4) - torch.tensor(0.6)) * v)
    assert float(step.std_dev) == 0.0 and float(step.std_dev_t) == 0.0


@pytest.mark.parametrize("bad", [1.0, 1.5])
def test_sigma_max_must_be_below_one(bad):
    v, x = tensors()
    with pytest.raises(ValueError, match=rf"sigma_max must be < 1 \(the schedule's second sigma\), got {bad}"):
        sde_step(v, x, 1.0, 0.8, 0.7, sigma_max=bad)


def test_error_messages():
    v, x = tensors()
    with pytest.raises(ValueError, match="per-sample sigma has 3 values for a batch of 2"):
        sde_step(v, x, torch.tensor([1.0, 1.0, 1.0]), 0.8, 0.7, sigma_max=0.9)
    with pytest.raises(ValueError, match="unknown SDE kind 'ddim'; choose one of sde, cps"):
        sde_step(v, x, 1.0, 0.8, 0.7, sigma_max=0.9, kind="ddim")
    gens = [torch.Generator().manual_seed(i) for i in range(3)]
    with pytest.raises(ValueError, match="3 generators for a batch of 2; pass one per sample"):
        sde_step(v, x, 1.0, 0.8, 0.7, sigma_max=0.9, generator=gens)
    with pytest.raises(ValueError, match=r"^the policy: the last sigma must be exactly 0, got 0\.1$"):
        check_schedule(torch.tensor([1.0, 0.5, 0.1], dtype=torch.float64), 2)
    with pytest.raises(ValueError, match=r"^the policy: the first sigma is 1\.5"):
        check_schedule(torch.tensor([1.5, 0.5, 0.0]), 2)


@pytest.mark.parametrize("shape", [(2, 3), (2, 1, 3, 4)])
def test_reduce_per_position_wants_packed_latents(shape):
    with pytest.raises(ValueError, match=rf"expected packed log-probs \[B, N, C\], got shape \({shape[0]}, "):
        reduce_per_position(torch.zeros(shape))
