"""The clipped objectives against Flow-GRPO's formula, the on-policy gradient, diagnostics, KL."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from cast_core.loss import clipped_objective, flow_grpo_objective, kl_penalty
from cast_core.sde import reduce_per_position, reduce_per_sample, sde_step


def _flow_grpo_reference(log_prob, old_log_prob, advantages, clip_range, adv_clip_max=5.0):
    """Flow-GRPO's train_*.py policy loss, re-typed in numpy from its published form."""
    adv = np.clip(advantages, -adv_clip_max, adv_clip_max)
    ratio = np.exp(log_prob - old_log_prob)
    unclipped_loss = -adv * ratio
    clipped_loss = -adv * np.clip(ratio, 1.0 - clip_range, 1.0 + clip_range)
    return float(np.mean(np.maximum(unclipped_loss, clipped_loss)))


@pytest.mark.parametrize("clip_range", [0.2, 1e-4])
def test_flow_grpo_objective_equals_flow_grpo_formula(clip_range):
    rng = np.random.default_rng(0)
    old = rng.normal(size=16).astype(np.float32)
    new = (old + rng.normal(scale=0.3, size=16)).astype(np.float32)
    adv = rng.normal(scale=4.0, size=16).astype(np.float32)  # some beyond ±5: clamped first
    assert (np.abs(adv) > 5).any()
    loss, _ = flow_grpo_objective(torch.from_numpy(new), torch.from_numpy(old), torch.from_numpy(adv), clip_range)
    assert float(loss) == pytest.approx(_flow_grpo_reference(new, old, adv, clip_range), rel=1e-6, abs=1e-7)
    # several steps at once = mean of the per-step losses (Flow-GRPO accumulates one per step)
    olds = rng.normal(size=(16, 3)).astype(np.float32)
    news = (olds + rng.normal(scale=0.3, size=(16, 3))).astype(np.float32)
    loss_t, _ = flow_grpo_objective(torch.from_numpy(news), torch.from_numpy(olds), torch.from_numpy(adv), clip_range)
    per_step = [_flow_grpo_reference(news[:, j], olds[:, j], adv, clip_range) for j in range(3)]
    assert float(loss_t) == pytest.approx(np.mean(per_step), rel=1e-6, abs=1e-7)


def test_per_position_objective_equals_direct_computation():
    gen = torch.Generator().manual_seed(0)
    old = torch.randn(2, 3, 5, generator=gen)
    new = old + 0.3 * torch.randn(2, 3, 5, generator=gen)
    adv = torch.randn(2, 5, generator=gen)
    loss, _ = clipped_objective(new, old, adv, 0.2)
    r = torch.exp(new - old)
    a = adv[:, None, :].expand_as(r)
    expected = -torch.minimum(r * a, r.clamp(0.8, 1.2) * a).mean()
    torch.testing.assert_close(loss, expected)
    # one window step [B, N]
    loss1, _ = clipped_objective(new[:, 0], old[:, 0], adv, 0.2)
    torch.testing.assert_close(loss1, -torch.minimum(r[:, 0] * adv, r[:, 0].clamp(0.8, 1.2) * adv).mean())
    # [B] inputs are the Flow-GRPO variant: -min(r·A, clamp(r, .8, 1.2)·A), with A clamped to ±adv_clip
    # only when adv_clip is given (clipped_objective's default is None, unlike Flow-GRPO's 5)
    rb, ab = r[:, 0, 0], 9 * adv[:, 0]
    assert (ab.abs() > 5).any() and ((rb - 1).abs() > 0.2).any()  # both clamps matter here
    lb, _ = clipped_objective(new[:, 0, 0], old[:, 0, 0], ab, 0.2)
    torch.testing.assert_close(lb, -torch.minimum(rb * ab, rb.clamp(0.8, 1.2) * ab).mean())
    lc, _ = clipped_objective(new[:, 0, 0], old[:, 0, 0], ab, 0.2, adv_clip=5.0)
    ac = ab.clamp(-5.0, 5.0)
    torch.testing.assert_close(lc, -torch.minimum(rb * ac, rb.clamp(0.8, 1.2) * ac).mean())
    with pytest.raises(ValueError, match="advantages"):
        clipped_objective(new, old, torch.randn(2, 4), 0.2)


@pytest.mark.parametrize("shape", [(4, 6), (4, 3, 6)])
def test_on_policy_gradient_is_the_plain_policy_gradient_per_position(shape):
    gen = torch.Generator().manual_seed(1)
    old = torch.randn(shape, generator=gen)
    adv = torch.randn(4, 6, generator=gen)
    lp = old.clone().requires_grad_()
    loss, diag = clipped_objective(lp, old, adv, 1e-4)
    loss.backward()
    a = adv if len(shape) == 2 else adv[:, None, :].expand(shape)
    torch.testing.assert_close(lp.grad, -a / lp.numel(), rtol=1e-6, atol=0)
    assert diag["ratio_mean"] == diag["ratio_min"] == diag["ratio_max"] == 1.0
    assert diag["clip_fraction"] == 0.0 and diag["approx_kl"] == 0.0
    assert float(loss.detach()) == pytest.approx(-float(a.mean()), abs=1e-6)


def test_on_policy_gradient_is_the_plain_policy_gradient_flow_grpo():
    old = torch.randn(8, generator=torch.Generator().manual_seed(2))
    adv = torch.tensor([-7.0, -1.0, 0.0, 0.5, 2.0, 4.9, 6.0, 1.0])
    lp = old.clone().requires_grad_()
    loss, _ = flow_grpo_objective(lp, old, adv, 1e-4)
    loss.backward()
    torch.testing.assert_close(lp.grad, -adv.clamp(-5, 5) / 8, rtol=1e-6, atol=0)


def test_ratio_is_exactly_one_when_rescoring_sampled_transitions():
    """Flow-GRPO's README check: sampling then re-scoring with the same model gives ratio 1."""
    gen = torch.Generator().manual_seed(3)
    x, v = torch.randn(2, 4, 3, generator=gen), torch.randn(2, 4, 3, generator=gen)
    s = sde_step(v, x, torch.tensor([0.9, 0.8]), torch.tensor([0.7, 0.6]), 0.7, sigma_max=0.9, generator=gen)
    again = sde_step(
        v, x, torch.tensor([0.9, 0.8]), torch.tensor([0.7, 0.6]), 0.7, sigma_max=0.9, prev_sample=s.prev_sample
    )
    _, diag = clipped_objective(
        reduce_per_position(again.log_prob), reduce_per_position(s.log_prob), torch.ones(2, 4), 1e-4
    )
    _, diag_fg = flow_grpo_objective(
        reduce_per_sample(again.log_prob), reduce_per_sample(s.log_prob), torch.ones(2), 1e-4
    )
    for d in (diag, diag_fg):
        assert d["ratio_min"] == d["ratio_max"] == 1.0


def test_clipped_ratios_stop_the_gradient_in_the_clipped_direction():
    old = torch.zeros(2, 2)
    lp = torch.tensor([[0.5, -0.5], [0.5, -0.5]], requires_grad=True)
    adv = torch.tensor([[1.0, -1.0], [-1.0, 1.0]])
    loss, diag = clipped_objective(lp, old, adv, 0.2)
    loss.backward()
    # r>1+ε with A>0 and r<1-ε with A<0: clipped, no gradient; the other two still push back
    assert lp.grad[0, 0] == 0 and lp.grad[0, 1] == 0
    assert lp.grad[1, 0] != 0 and lp.grad[1, 1] != 0
    assert diag["clip_fraction"] == 1.0


def test_diagnostics_on_a_small_example():
    old = torch.zeros(1, 4)
    lp = torch.tensor([[0.0, 0.1, -0.1, 0.3]])
    _, diag = clipped_objective(lp, old, torch.ones(1, 4), 0.1)
    r = [1.0, math.exp(0.1), math.exp(-0.1), math.exp(0.3)]  # |r-1| = 0, .105, .095, .35 vs ε = .1
    assert diag["clip_fraction"] == pytest.approx(0.5)
    assert diag["approx_kl"] == pytest.approx(0.5 * (0.01 + 0.01 + 0.09) / 4)
    assert diag["ratio_mean"] == pytest.approx(sum(r) / 4, rel=1e-6)
    assert diag["ratio_min"] == pytest.approx(math.exp(-0.1), rel=1e-6)
    assert diag["ratio_max"] == pytest.approx(math.exp(0.3), rel=1e-6)
    assert all(isinstance(v, float) for v in diag.values())


def test_kl_penalty_against_hand_computation():
    mean = torch.tensor([[[1.0, 2.0], [3.0, 4.0]], [[0.0, 0.0], [0.0, 1.0]]])
    ref = torch.tensor([[[1.0, 1.0], [3.0, 2.0]], [[0.0, 0.0], [2.0, 1.0]]])
    # per-sample mean squared difference: (0 + 1 + 0 + 4)/4 = 1.25 and (0 + 0 + 4 + 0)/4 = 1.0
    std = torch.tensor([0.5, 2.0])
    expected = (1.25 / (2 * 0.25) + 1.0 / (2 * 4.0)) / 2
    assert float(kl_penalty(mean, ref, std)) == pytest.approx(expected)
    assert float(kl_penalty(mean, ref, std.reshape(2, 1, 1))) == pytest.approx(expected)
    assert float(kl_penalty(mean, ref, 0.5)) == pytest.approx((1.25 + 1.0) / 2 / 0.5)
    assert float(kl_penalty(mean, mean, std)) == 0.0
    # what Flow-GRPO feeds it: the sde step's std_dev_t, per sample
    gen = torch.Generator().manual_seed(4)
    x, v = torch.randn(2, 3, 2, generator=gen), torch.randn(2, 3, 2, generator=gen)
    step = sde_step(v, x, torch.tensor([0.9, 0.5]), torch.tensor([0.8, 0.4]), 0.7, sigma_max=0.9)
    ref_step = sde_step(v + 0.1, x, torch.tensor([0.9, 0.5]), torch.tensor([0.8, 0.4]), 0.7, sigma_max=0.9)
    by_hand = ((step.mean - ref_step.mean) ** 2).mean(dim=(1, 2), keepdim=True) / (2 * step.std_dev_t**2)
    torch.testing.assert_close(kl_penalty(step.mean, ref_step.mean, step.std_dev_t), by_hand.mean())
