"""Ground truth from atom verdicts: the settled fraction per step and the first settled step."""

import torch

from cast_core.testing import FakeDecomposer, FakePolicy
from cast_core.types import AtomScores
from cast_windows.validation import first_settled_step, verdict_agreement


def test_first_settled_step_needs_agreement_to_the_end():
    assert first_settled_step([0.2, 0.95, 0.5, 0.92, 1.0], 0.9) == 3
    assert first_settled_step([0.9, 0.9, 1.0], 0.9) == 0
    assert first_settled_step([0.1, 0.5], 0.9) is None


class MeanAbove:
    """Passes every atom when the image's mean brightness is above ``level`` — a judge whose
    verdicts flip as the fake policy's x0 estimate drifts."""

    def __init__(self, level):
        self.level = level

    def score(self, images, graphs, heatmaps=False):
        means = images.float().mean(dim=(1, 2, 3))
        return AtomScores(
            list(graphs), [torch.full((len(g.atoms),), float(m > self.level)) for m, g in zip(means, graphs)]
        )


def test_verdict_agreement_on_the_fake_policy():
    prompts = ["a red circle", "two blue squares", "a green triangle", "a purple square"]
    # level 0.4475: seed 0's green triangle has mean ≈ .4472 at step 2 and ≈ .4482 from step 3 on,
    # so its verdict flips once and 1 of the 8 samples disagrees with the final image until step 3
    truth = verdict_agreement(FakePolicy(), prompts, MeanAbove(0.4475), FakeDecomposer(), num_steps=6, seeds=(0, 1))
    assert truth.samples == 8 and len(truth.agreement) == 6
    assert truth.agreement[-1] == 1.0 and truth.atom_agreement[-1] == 1.0
    assert len(truth.pass_agreement) == 6
    assert all(0.0 <= a <= 1.0 for a in truth.agreement) and min(truth.agreement) < 0.9
    # settled = the first step from which agreement stays >= 0.9 to the end (re-typed here)
    a = truth.agreement
    settled = next((s for s in range(len(a)) if all(x >= 0.9 for x in a[s:])), None)
    assert truth.step == settled == 3
    always = verdict_agreement(FakePolicy(), prompts, MeanAbove(-1.0), FakeDecomposer(), num_steps=4)
    assert always.agreement == [1.0] * 4 and always.step == 0


def test_commitment_counts_verdicts_that_survive_sde_noise_from_each_step():
    from cast_windows.validation import commitment

    prompts = ["a red circle", "two blue squares", "a green triangle"]
    # a judge that never changes its mind: every sample is committed from step 0
    steady = commitment(FakePolicy(), prompts, MeanAbove(-1.0), FakeDecomposer(), num_steps=4, seeds=(0, 1))
    assert steady.unchanged == [1.0] * 4 and steady.atom_unchanged == [1.0] * 4 and steady.step == 0
    assert steady.samples == 6
    # with eta 0 the SDE step is the ODE step, so nothing can change whatever the judge
    exact = commitment(FakePolicy(), prompts, MeanAbove(0.5), FakeDecomposer(), num_steps=4, eta=0.0)
    assert exact.unchanged == [1.0] * 4


def test_commitment_sees_noise_that_flips_a_borderline_judge():
    from cast_windows.validation import commitment

    prompts = ["a red circle"] * 8
    policy = FakePolicy()
    from cast_core.sampling import sample

    ode = sample(policy, prompts, num_steps=4, generator=torch.Generator().manual_seed(0))
    level = float(ode.images.float().mean(dim=(1, 2, 3)).median())  # half the samples sit on each side
    c = commitment(policy, prompts, MeanAbove(level), FakeDecomposer(), num_steps=4, eta=3.0, threshold=0.9)
    assert min(c.unchanged) < 1.0  # big noise early flips some verdicts
