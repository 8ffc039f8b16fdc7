"""The objectives' edges that the main tests never reach: the optional advantage clamp on both
sides, the strictness of the clip fraction, shape errors that would otherwise broadcast, and the
KL term's dtype. Each test here was written against a surviving mutant of ``loss.py``
(docs/testing.md, "Mutation testing")."""

from __future__ import annotations

import pytest
import torch

from cast_core.loss import clipped_objective, flow_grpo_objective, kl_penalty, ratio_diagnostics


def test_clipped_objective_clamps_advantages_on_both_sides_when_asked():
    lp = torch.zeros(2, 3)  # r = 1: loss = -mean(A)
    adv = torch.tensor([[10.0, -10.0, 0.5], [-0.5, 3.0, -3.0]])
    loss, _ = clipped_objective(lp, lp, adv, 0.2, adv_clip=2.0)
    expected = -torch.tensor([[2.0, -2.0, 0.5], [-0.5, 2.0, -2.0]]).mean()
    assert float(loss) == pytest.approx(float(expected), abs=1e-7)
    loss_neg, _ = clipped_objective(lp, lp, -adv.abs(), 0.2, adv_clip=2.0)
    assert float(loss_neg) == pytest.approx(float(torch.tensor([2.0, 2.0, 0.5, 0.5, 2.0, 2.0]).mean()), abs=1e-7)
    unclamped, _ = clipped_objective(lp, lp, adv, 0.2)
    assert float(unclamped) == pytest.approx(float(-adv.mean()), abs=1e-7), "no clamp by default"


def test_ratio_exactly_at_the_clip_is_not_counted():
    delta = torch.tensor([0.2, 0.0])
    edge = float(torch.exp(delta[0]) - 1.0)  # |r - 1| of the first ratio, computed as the code does
    assert ratio_diagnostics(delta, torch.zeros(2), edge)["clip_fraction"] == 0.0
    assert ratio_diagnostics(delta, torch.zeros(2), edge * 0.999)["clip_fraction"] == 0.5


def test_flow_grpo_shape_errors():
    with pytest.raises(
        ValueError, match=r"flow-grpo log-probs must both be \[B\] \(or \[B, T\]\); got \(2,\) and \(3,\)"
    ):
        flow_grpo_objective(torch.zeros(2), torch.zeros(3), torch.zeros(2), 0.2)
    with pytest.raises(ValueError, match=r"advantages \(3,\) do not match log-probs \(2,\)"):
        flow_grpo_objective(torch.zeros(2), torch.zeros(2), torch.zeros(3), 0.2)


def test_clipped_objective_shape_errors():
    with pytest.raises(ValueError, match=r"log-probs must both be \[B, N\] or \[B, T, N\]; got \(2, 4\) and \(2, 5\)"):
        clipped_objective(torch.zeros(2, 4), torch.zeros(2, 5), torch.zeros(2, 4), 0.2)
    with pytest.raises(ValueError, match=r"advantages \(3, 4\) do not match log-probs \(2, 4\)"):
        clipped_objective(torch.zeros(2, 4), torch.zeros(2, 4), torch.zeros(3, 4), 0.2)


def test_kl_penalty_is_float32_for_a_float64_std():
    mean, ref = torch.ones(2, 3), torch.zeros(2, 3)
    kl = kl_penalty(mean, ref, torch.tensor([0.5, 0.5], dtype=torch.float64))
    assert kl.dtype == torch.float32 and float(kl) == pytest.approx(2.0)
    assert kl_penalty(mean, ref, 0.5).dtype == torch.float32
