"""The built-in fakes pass the kits, and the kits catch broken components (they can fail)."""

import pytest
import torch

from cast_core import AtomScores, Window
from cast_core.testing import (
    AdvantageProjectorConformance,
    AtomDecomposerConformance,
    AtomScorerConformance,
    ConstantScorer,
    FakePolicy,
    PolicyConformance,
    WindowSelectorConformance,
)
from helpers import HalfWindow, MeanProjector, WordsDecomposer


class TestFakePolicy(PolicyConformance):
    def make_policy(self):
        return FakePolicy()


class TestConstantScorer(AtomScorerConformance):
    def make_scorer(self):
        return ConstantScorer(0.3)


class TestWordsDecomposer(AtomDecomposerConformance):
    def make_decomposer(self):
        return WordsDecomposer()


class TestHalfWindow(WindowSelectorConformance):
    def make_selector(self):
        return HalfWindow()


class TestMeanProjector(AdvantageProjectorConformance):
    def make_projector(self):
        return MeanProjector()


# --- the kits must fail on components that break the contract --------------------------------


class LeakyAdapterPolicy(FakePolicy):
    """reference() forgets to switch the adapter off."""

    def reference(self):
        import contextlib

        return contextlib.nullcontext()


class OverconfidentScorer(ConstantScorer):
    def score(self, images, graphs, heatmaps=False):
        out = super().score(images, graphs, heatmaps)
        return AtomScores(out.graphs, [s + 1.0 for s in out.scores], out.heatmaps)


class TooLongWindow:
    def select(self, policy, prompts, num_steps):
        return Window(num_steps - 1, 3)


class SignFlipProjector(MeanProjector):
    def project(self, scores, heatmaps, graph, latent_grid):
        out = super().project(scores, heatmaps, graph, latent_grid)
        out.values = -out.values
        return out


@pytest.mark.parametrize(
    "kit, maker, broken, test_name",
    [
        (PolicyConformance, "make_policy", LeakyAdapterPolicy, "test_reference_switches_the_adapter_off"),
        (
            AtomScorerConformance,
            "make_scorer",
            OverconfidentScorer,
            "test_scores_align_with_atoms_and_lie_in_unit_range",
        ),
        (WindowSelectorConformance, "make_selector", TooLongWindow, "test_window_fits_the_schedule"),
        (AdvantageProjectorConformance, "make_projector", SignFlipProjector, "test_better_image_gets_higher_advantage"),
    ],
)
def test_kit_rejects_a_broken_component(kit, maker, broken, test_name):
    instance = type("Probe", (kit,), {maker: lambda self: broken()})()
    with pytest.raises(AssertionError):
        getattr(instance, test_name)()


def test_fake_policy_velocity_is_the_documented_linear_field():
    policy = FakePolicy(seed=1)
    x = policy.initial_noise(2, None, torch.Generator().manual_seed(0))
    cond = policy.encode(["a red circle", "a blue square"])
    sigma = torch.tensor([0.25, 0.75])
    expected = x @ policy.weight.T + (1 + sigma)[:, None, None] * cond[:, None, :] + policy.position_bias
    torch.testing.assert_close(policy.velocity(x, sigma, cond), expected)


def test_fake_policy_encoding_is_stable_across_processes():
    import subprocess
    import sys

    code = "from cast_core.testing import FakePolicy; print(float(FakePolicy().encode(['a red circle']).sum()))"
    runs = {
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
        for _ in range(2)
    }
    assert len(runs) == 1


def test_fake_policy_decode_inverts_patchify():
    policy = FakePolicy(image_size=(8, 8), patch=4)
    img = torch.rand(1, 3, 8, 8)
    latents = (img * 2 - 1).reshape(1, 3, 2, 4, 2, 4).permute(0, 2, 4, 1, 3, 5).reshape(1, 4, 48)
    torch.testing.assert_close(policy.decode(latents), img)


def test_fake_policy_load_adapter_errors_are_specific(tmp_path):
    with pytest.raises(FileNotFoundError, match="adapter.safetensors"):
        FakePolicy().load_adapter(tmp_path)
    FakePolicy(rank=3).save_adapter(tmp_path)
    with pytest.raises(ValueError, match="lora_A"):
        FakePolicy(rank=2).load_adapter(tmp_path)
