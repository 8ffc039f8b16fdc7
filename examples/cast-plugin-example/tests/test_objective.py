"""The example objective passes cast's objective conformance kit (a short run with scalar and
per-position credit, micro-batching, SIGKILL + resume, two processes)."""

import pytest
import torch

from cast_core.testing import ObjectiveConformance
from cast_plugin_example.objective import RewardRankedMatching


class TestRewardRanked(ObjectiveConformance):
    objective = "reward-ranked"
    objective_kwargs = {"temperature": 0.5}

    # the kit's two launches of `cast train` (~20 s each) run with `make test-slow`
    @pytest.mark.slow
    def test_sigkill_then_resume_is_bit_identical(self, tmp_path):
        super().test_sigkill_then_resume_is_bit_identical(tmp_path)

    @pytest.mark.slow
    def test_two_processes_train_as_one(self, tmp_path):
        super().test_two_processes_train_as_one(tmp_path)


def test_only_better_than_group_samples_are_imitated():
    """The loss's gradient reaches the velocity only where the advantage is positive."""

    class Update:
        class config:
            seed, ratio_mode = 0, "position"

        image_size = None

        class policy:
            @staticmethod
            def initial_noise(n, image_size, generator):
                return torch.randn(n, 4, 2, generator=generator)

        def velocity(self, x, sigma, cond):
            return x * self.scale

    from cast_core.types import PassBatch, Rollout

    update = Update()
    update.scale = torch.tensor(1.0, requires_grad=True)
    rollout = Rollout(prompts=["a"] * 2, images=None, sigmas=torch.tensor([1.0, 0.5, 0.0]), step_indices=[])
    rollout.final_latents = torch.randn(2, 4, 2, generator=torch.Generator().manual_seed(1))
    adv = torch.tensor([[1.0, -1.0, 0.0, 2.0], [-1.0, -1.0, -1.0, -1.0]])
    batch = PassBatch(rollout, torch.tensor([0, 1]), [(0, 0), (0, 1)], adv, None, 0)
    terms = RewardRankedMatching().loss(update, batch)
    assert terms.diagnostics["imitated"] == 2 / 8
    terms.loss.backward()
    assert update.scale.grad is not None and float(update.scale.grad) != 0.0
