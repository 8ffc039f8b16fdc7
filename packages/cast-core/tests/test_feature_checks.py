"""The optional-feature protocols and their checks (cast_core.protocols, cast_core.testing.features):
each check passes the built-in components and fails a component that breaks the feature's contract."""

from __future__ import annotations

import contextlib

import pytest
import torch

from cast_core.protocols import (
    CalibrationPrompts,
    DecompositionStats,
    FastInference,
    GradientCheckpointing,
    HeatmapNeeds,
    OffloadsTextEncoder,
    PerStepWindow,
    Plannable,
    Preparable,
    self_shards,
)
from cast_core.registry import get_advantage_projector, get_policy
from cast_core.testing.fakes import FakePolicy, simple_graph
from cast_core.testing.features import check_features, features_of
from cast_core.types import Window

PROMPTS = ("a red circle", "two blue squares")


def test_the_fake_policy_declares_and_passes_its_features():
    policy = FakePolicy()
    assert features_of("policy", policy) == [Preparable, OffloadsTextEncoder, GradientCheckpointing, Plannable]
    assert self_shards(policy)
    assert check_features("policy", policy, make_policy=FakePolicy, prompts=PROMPTS) == [
        "Preparable",
        "OffloadsTextEncoder",
        "GradientCheckpointing",
        "Plannable",
    ]


class LeakyInference(FakePolicy):
    """inference() that folds a rounding-sized change into the weights and forgets to undo it."""

    @contextlib.contextmanager
    def inference(self):
        with torch.no_grad():
            next(iter(self.trainable_parameters())).add_(1e-6)
        yield


class SlowInference(FakePolicy):
    """inference() that restores the weights but computes something else inside."""

    @contextlib.contextmanager
    def inference(self):
        params = next(iter(self.trainable_parameters()))
        with torch.no_grad():
            params.add_(0.5)
        try:
            yield
        finally:
            with torch.no_grad():
                params.sub_(0.5)


def _perturbed(cls):
    def make():
        policy = cls()
        with torch.no_grad():
            for i, p in enumerate(policy.trainable_parameters()):  # a non-zero adapter, so a change shows
                p.add_(0.3 * torch.randn(p.shape, generator=torch.Generator().manual_seed(i)))
        return policy

    return make


@pytest.mark.parametrize("cls, message", [(LeakyInference, "exactly what it was"), (SlowInference, "up to rounding")])
def test_an_inference_context_that_changes_the_policy_fails(cls, message):
    make = _perturbed(cls)
    assert isinstance(make(), FastInference)
    with pytest.raises(AssertionError, match=message):
        check_features("policy", make(), make_policy=make, prompts=PROMPTS)


class OffloadBreaks(FakePolicy):
    def offload_text_encoder(self) -> None:
        with torch.no_grad():
            for p in self.trainable_parameters():
                p.mul_(2.0)


def test_an_offload_that_changes_the_velocity_fails():
    make = _perturbed(OffloadBreaks)
    with pytest.raises(AssertionError, match="offloading the text encoder changed"):
        check_features("policy", make(), make_policy=make, prompts=PROMPTS)


class CountingWindow:
    """A per-step window that depends on how often it was asked, not on (seed, step)."""

    def __init__(self):
        self.calls = 0

    def select(self, policy, prompts, num_steps):
        return Window(0, 1)

    def select_for_step(self, policy, prompts, num_steps, *, step, seed):
        self.calls += 1
        return Window(self.calls % num_steps, 1)


class OverrunWindow(CountingWindow):
    def select_for_step(self, policy, prompts, num_steps, *, step, seed):
        return Window(step % 3, 2)  # runs past the end of a 1- or 2-step schedule


@pytest.mark.parametrize("cls, message", [(CountingWindow, "pure function"), (OverrunWindow, "does not fit")])
def test_a_per_step_window_that_is_not_a_pure_fitting_function_fails(cls, message):
    sel = cls()
    assert isinstance(sel, PerStepWindow)
    with pytest.raises(AssertionError, match=message):
        check_features("window_selector", sel, policy=FakePolicy(), prompts=PROMPTS, step_counts=(6,))


class NoCalibration:
    def select(self, policy, prompts, num_steps):
        return Window(0, 1)

    def prompts_for(self, policy, prompts):
        return []


def test_prompts_for_must_name_prompts():
    assert isinstance(NoCalibration(), CalibrationPrompts)
    with pytest.raises(AssertionError, match="prompts_for"):
        check_features("window_selector", NoCalibration(), policy=FakePolicy(), prompts=PROMPTS, step_counts=(6,))


class ForgetfulDecomposer:
    def __init__(self):
        from cast_core.testing.fakes import FakeDecomposer

        self.inner = FakeDecomposer()

    def decompose(self, prompt):
        return self.inner.decompose(prompt)

    def stats(self):
        return {"template": 1}

    def path_of(self, prompt):
        return None


def test_decomposition_stats_must_say_the_path():
    assert isinstance(ForgetfulDecomposer(), DecompositionStats)
    with pytest.raises(AssertionError, match="path_of"):
        check_features("atom_decomposer", ForgetfulDecomposer(), prompts=PROMPTS)


class ClaimsNoHeatmaps:
    needs_heatmaps = False

    def project(self, scores, heatmaps, graph, latent_grid):
        return get_advantage_projector("spatial").project(scores, heatmaps.float(), graph, latent_grid)


def test_a_projector_that_says_it_needs_no_heatmaps_must_work_without():
    graph = simple_graph()
    scores = torch.rand(4, len(graph.atoms), generator=torch.Generator().manual_seed(0))
    assert check_features(
        "advantage_projector", get_advantage_projector("scalar"), inputs=(scores, None, graph), latent_grid=(4, 4)
    ) == ["HeatmapNeeds"]
    assert isinstance(ClaimsNoHeatmaps(), HeatmapNeeds)
    with pytest.raises(AttributeError):
        check_features("advantage_projector", ClaimsNoHeatmaps(), inputs=(scores, None, graph), latent_grid=(4, 4))


def test_a_policy_without_the_feature_is_refused_in_one_line(tmp_path):
    """The trainer asks the protocol, not getattr: a policy without enable_gradient_checkpointing()
    is a ConfigError naming the key."""
    from cast_core.config import ConfigError, TrainConfig
    from cast_core.trainer import Trainer

    plain = get_policy("fake")
    assert not isinstance(object(), GradientCheckpointing) and isinstance(plain, GradientCheckpointing)
    cfg = TrainConfig(
        policy="fake",
        scorer="left-brightness",
        decomposer="fake",
        projector="spatial",
        window=None,
        window_start=0,
        window_size=2,
        num_steps=4,
        prompts=list(PROMPTS),
        prompts_per_step=2,
        group_size=2,
        sharding="fsdp2",
    )
    with pytest.raises(ConfigError, match="sharding"):
        Trainer(cfg, tmp_path / "run", log=lambda m: None)


class PlansOnTheCpu(FakePolicy):
    """build_for_plan that forgets the meta device: planning would allocate the model."""

    @classmethod
    def build_for_plan(cls, architecture=None, **kwargs):
        subject = FakePolicy.build_for_plan(architecture, **kwargs)
        subject.policy.field.to_empty(device="cpu")
        return subject


class PlansWithoutTheAdapter(FakePolicy):
    """A planned velocity that never reaches the adapter: no gradient would ever be traced."""

    @classmethod
    def build_for_plan(cls, architecture=None, **kwargs):
        subject = FakePolicy.build_for_plan(architecture, **kwargs)
        subject.policy._adapter_on = False
        return subject


class PlansNothing(FakePolicy):
    @classmethod
    def build_for_plan(cls, architecture=None, **kwargs):
        return {"modules": {}}


@pytest.mark.parametrize(
    "cls, message",
    [
        (PlansOnTheCpu, "must build on the meta device"),
        (PlansWithoutTheAdapter, "does not reach its trainable parameters"),
        (PlansNothing, "must return a PlanSubject"),
    ],
)
def test_a_plannable_policy_that_breaks_the_contract_fails(cls, message):
    assert isinstance(cls(), Plannable)
    with pytest.raises(AssertionError, match=message):
        check_features("policy", cls(), make_policy=cls, prompts=PROMPTS)
