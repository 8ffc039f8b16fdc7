"""Bad inputs to the core maths stop with one clear error before they can turn into NaNs or a
silently wrong update: a negative noise level, a non-positive clip range, a schedule that
overshoots σ = 1, cyclic parent links under either gating, and mismatched shapes."""

import pytest
import torch

from cast_core.advantages import gate_scores
from cast_core.config import ConfigError
from cast_core.loss import clipped_objective, flow_grpo_objective, kl_penalty
from cast_core.sampling import sample
from cast_core.sde import check_schedule, sde_step
from cast_core.testing import FakePolicy
from cast_core.types import Window

from test_trainer import fake_config

X = torch.zeros(2, 4, 3)


def test_negative_eta_is_refused_by_the_step_and_the_config():
    with pytest.raises(ValueError, match="eta .* must be >= 0, got -0.1"):
        sde_step(X, X, 0.5, 0.4, -0.1, sigma_max=0.9)
    with pytest.raises(ConfigError, match="eta"):
        fake_config(eta=-0.1).validate()


@pytest.mark.parametrize("clip", [0.0, -0.2])
def test_non_positive_clip_range_is_refused(clip):
    lp = torch.zeros(2, 4)
    with pytest.raises(ValueError, match="clip_range must be > 0"):
        clipped_objective(lp, lp, lp, clip)
    with pytest.raises(ValueError, match="clip_range must be > 0"):
        flow_grpo_objective(lp[:, 0], lp[:, 0], lp[:, 0], clip)
    with pytest.raises(ConfigError, match="clip_range"):
        fake_config(clip_range=clip).validate()


class ShiftedPolicy(FakePolicy):
    """A policy whose schedule starts a hair above 1, as a shifted schedule in float64 can."""

    def __init__(self, first: float, **kw):
        super().__init__(**kw)
        self.first = first

    def sigmas(self, num_steps, image_size=None):
        s = torch.linspace(1.0, 0.0, num_steps + 1, dtype=torch.float64)
        s[0] = self.first
        return s


def test_a_schedule_above_one_is_refused_before_sampling():
    with pytest.raises(ValueError, match=r"first sigma is 1.0000001.*exactly 1.0"):
        sample(ShiftedPolicy(1.0000001), ["a red circle"], num_steps=4, window=Window(0, 2), eta=0.7)
    with pytest.raises(ValueError, match="sigma must be <= 1"):
        sde_step(X, X, torch.tensor(1.0000001, dtype=torch.float64), 0.8, 0.7, sigma_max=0.9)
    # exactly 1 is the start the σ = 1 guard is for, and it samples finite images
    rollout = sample(
        ShiftedPolicy(1.0),
        ["a red circle"],
        num_steps=4,
        window=Window(0, 2),
        eta=0.7,
        generator=torch.Generator().manual_seed(0),
    )
    assert bool(torch.isfinite(rollout.log_probs).all()) and bool(torch.isfinite(rollout.images).all())


@pytest.mark.parametrize(
    "sigmas, message",
    [
        ([1.0, 0.5, 0.5, 0.0], "strictly decrease"),
        ([1.0, 0.6, 0.3, 0.01], "last sigma must be exactly 0"),
        ([1.0, 0.5, 0.0], r"has shape \(3,\); expected \(4,\)"),
        ([1.0, float("nan"), 0.2, 0.0], "non-finite"),
    ],
)
def test_schedule_contract(sigmas, message):
    with pytest.raises(ValueError, match=message):
        check_schedule(torch.tensor(sigmas), 3, "P")


@pytest.mark.parametrize("mode", ["soft", "hard"])
def test_cyclic_parent_links_are_refused_under_either_gating(mode):
    scores = torch.full((2, 3), 0.5)
    with pytest.raises(ValueError, match="cycle through atom"):
        gate_scores(scores, [[2], [0], [1]], mode)
    with pytest.raises(ValueError, match="cycle through atom"):
        gate_scores(scores, [[0], [], []], mode)  # an atom that is its own parent


def test_shape_mismatches_name_both_shapes():
    with pytest.raises(ValueError, match=r"velocity \(2, 4, 3\) and sample \(2, 4, 2\) differ"):
        sde_step(X, X[..., :2], 0.5, 0.4, 0.7, sigma_max=0.9)
    lp = torch.zeros(2, 4)
    with pytest.raises(ValueError, match=r"advantages \(2, 5\) do not match log-probs \(2, 4\)"):
        clipped_objective(lp, lp, torch.zeros(2, 5), 0.2)
    with pytest.raises(ValueError, match="std has 3 values for a batch of 2"):
        kl_penalty(X, X, torch.ones(3))
    with pytest.raises(ValueError, match=r"scores must be \[G, K\]"):
        gate_scores(torch.zeros(3), [[], [], []])
