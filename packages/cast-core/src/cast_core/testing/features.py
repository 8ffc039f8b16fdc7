"""Checks of the optional features (:data:`cast_core.protocols.OPTIONAL_FEATURES`) a component has.

Optional must not mean unchecked: a policy whose ``inference()`` leaves its LoRA folded in, or a
per-step window that depends on more than ``(seed, step)``, breaks a run as surely as a wrong
velocity. Each conformance kit calls :func:`check_features` on its component, which checks the
contract of every feature the component has and ignores the others. Torch only, like the kits.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Sequence

import torch

from cast_core.protocols import (
    OPTIONAL_FEATURES,
    Calibrated,
    CalibrationPrompts,
    DecompositionStats,
    FastInference,
    GradientCheckpointing,
    HeatmapNeeds,
    Identified,
    OffloadsTextEncoder,
    PerStepWindow,
    Plannable,
    Preparable,
    WindowHints,
    self_shards,
)
from cast_core.errors import CastError
from cast_core.types import Window

__all__ = ["features_of", "check_features"]

WINDOW_HINT_KEYS = frozenset({"embedder", "method", "level"})


def features_of(kind: str, component: Any) -> list[type]:
    """The optional features of ``kind`` that ``component`` has."""
    return [f for f in OPTIONAL_FEATURES[kind] if isinstance(component, f)]


def _velocity(policy: Any, prompts: Sequence[str]) -> torch.Tensor:
    x = policy.initial_noise(len(prompts), None, torch.Generator().manual_seed(0))
    with torch.no_grad():
        return policy.velocity(x, torch.tensor(0.5), policy.encode(list(prompts)))


def _check_plannable(policy: Any, architecture: str | None) -> None:
    """``build_for_plan`` works on the class, builds on the meta device, and the tracer runs its
    three phases with byte counts that add up: the weights it sees are the frozen tensors'
    bytes, the adapter with AdamW's two moments is three times the trainable bytes, and the
    second micro-step of a minibatch holds the first one's gradients too. Traced at ``architecture`` (the kit's
    ``plan_architecture``: a small one when the policy's default is large)."""
    from cast_core.memory_trace import RunShape, Tracer, tensor_bytes
    from cast_core.types import PlanSubject

    name = "Plannable"
    subject = type(policy).build_for_plan(architecture)
    assert isinstance(subject, PlanSubject), f"{name}: build_for_plan must return a PlanSubject, got {type(subject)}"
    assert subject.modules, f"{name}: the plan subject names no modules"
    tensors = [t for m in subject.modules.values() for t in [*m.parameters(), *m.buffers()]]
    off_meta = [tuple(t.shape) for t in tensors if t.device.type != "meta"]
    assert not off_meta, f"{name}: build_for_plan must build on the meta device; tensors {off_meta[:3]} hold memory"
    trainable = {id(p) for p in subject.policy.trainable_parameters()}
    assert trainable, f"{name}: the planned policy has no trainable parameters"
    frozen = sum(tensor_bytes(t) for t in {id(t): t for t in tensors}.values() if id(t) not in trainable)
    adapter = sum(tensor_bytes(p) for p in subject.policy.trainable_parameters())
    shape = RunShape(
        image_size=tuple(subject.policy.default_image_size), samples=2, passes=2, precision="no",
        gradient_checkpointing=False,
    )  # fmt: skip
    try:
        with Tracer(subject, shape) as tracer:
            peaks = {phase: tracer.trace(phase, 1) for phase in ("sample", "decode", "train")}
    except ValueError as err:  # the tracer's own refusals name what is wrong
        raise AssertionError(f"{name}: {err}") from err
    for phase, peak in peaks.items():
        assert peak.bytes["weights"] == frozen, (
            f"{name}: {phase} traced {peak.bytes['weights']} bytes of weights, the modules hold {frozen}"
        )
    assert peaks["sample"].bytes["adapter"] == 3 * adapter, (
        f"{name}: while sampling, the adapter and AdamW's moments should be 3 x {adapter} bytes, "
        f"traced {peaks['sample'].bytes['adapter']}"
    )
    assert peaks["train"].bytes["adapter"] >= 4 * adapter, (
        f"{name}: a micro-step after another must hold the adapter's gradients (4 x {adapter} bytes with the "
        f"parameters and moments), traced {peaks['train'].bytes['adapter']}: does velocity() reach the adapter?"
    )


def _check_policy(feature: type, make_policy: Callable[[], Any], prompts: Sequence[str], **context: Any) -> None:
    name = feature.__name__
    policy = make_policy()
    if feature is Plannable:
        _check_plannable(policy, context.get("plan_architecture"))
    elif feature is Preparable:
        try:
            inspect.signature(policy.prepare).bind(object())
        except TypeError as err:
            raise AssertionError(f"{name}: prepare(accelerator) must take the accelerator alone: {err}") from None
        if "sharding" in inspect.signature(policy.prepare).parameters:
            assert self_shards(policy)
            default = inspect.signature(policy.prepare).parameters["sharding"].default
            assert default == "accelerate", f"{name}: prepare's sharding must default to 'accelerate', not {default!r}"
    elif feature is OffloadsTextEncoder:
        x = policy.initial_noise(len(prompts), None, torch.Generator().manual_seed(0))
        cond = policy.encode(list(prompts))
        with torch.no_grad():
            before = policy.velocity(x, torch.tensor(0.5), cond)
            policy.offload_text_encoder()
            after = policy.velocity(x, torch.tensor(0.5), cond)
        torch.testing.assert_close(
            after,
            before,
            msg=f"{name}: offloading the text encoder changed the velocity of conditioning encoded before it",
        )
    elif feature is GradientCheckpointing:
        before = _velocity(policy, prompts)
        policy.enable_gradient_checkpointing()
        torch.testing.assert_close(
            _velocity(policy, prompts), before, atol=1e-5, rtol=1e-5, msg=f"{name}: checkpointing changed the velocity"
        )
    elif feature is FastInference:
        before = _velocity(policy, prompts)
        with policy.inference():
            fast = _velocity(policy, prompts)
        torch.testing.assert_close(
            fast, before, atol=1e-3, rtol=1e-3, msg=f"{name}: inference() must give the same velocity up to rounding"
        )
        assert torch.equal(_velocity(policy, prompts), before), (
            f"{name}: after inference() the policy must be exactly what it was (e.g. a folded LoRA unfolded)"
        )
    elif feature is Identified:
        ident = policy.identity
        assert ident is None or (isinstance(ident, str) and ident), f"{name}: identity must be a non-empty str or None"
        assert make_policy().identity == ident, f"{name}: two identical policies must have the same identity"
    elif feature is Calibrated:
        source = policy.calibration_prompts
        if source is not None and not isinstance(source, str):  # a str is a prompt spec (suite:NAME, a file)
            assert len(source) > 0 and all(isinstance(p, str) and p.strip() for p in source), (
                f"{name}: calibration_prompts must be non-empty prompts, got {source!r}"
            )
    elif feature is WindowHints:
        hints = policy.window_defaults
        assert isinstance(hints, dict) and set(hints) <= WINDOW_HINT_KEYS, (
            f"{name}: window_defaults must be a dict of {sorted(WINDOW_HINT_KEYS)}, got {hints!r}"
        )


def _check_selector(
    feature: type, selector: Any, policy: Any, prompts: Sequence[str], step_counts: Sequence[int]
) -> None:
    name = feature.__name__
    if feature is PerStepWindow:
        for n in sorted(set(step_counts) | {1, 2, 3, 4}):
            try:
                selector.select(policy, list(prompts), n)
            except (ValueError, CastError):  # a schedule the selector refuses: every step must refuse it too
                for s in range(3):
                    try:
                        w = selector.select_for_step(policy, list(prompts), n, step=s, seed=0)
                    except (ValueError, CastError):
                        continue
                    raise AssertionError(f"{name}: select() refuses {n} steps but step {s} gets window {w}")
                continue
            windows = [selector.select_for_step(policy, list(prompts), n, step=s, seed=0) for s in range(12)]
            for s, w in enumerate(windows):
                assert isinstance(w, Window) and w.size >= 1 and w.end <= n, (
                    f"{name}: step {s}'s window {w} does not fit {n} steps"
                )
            backwards = [
                selector.select_for_step(policy, list(prompts), n, step=s, seed=0) for s in reversed(range(12))
            ]
            assert windows == backwards[::-1], f"{name}: select_for_step must be a pure function of (seed, step)"
    elif feature is CalibrationPrompts:
        chosen = selector.prompts_for(policy, list(prompts))
        assert isinstance(chosen, list) and chosen and all(isinstance(p, str) and p for p in chosen), (
            f"{name}: prompts_for must return a non-empty list of prompts, got {chosen!r}"
        )


def check_features(kind: str, component: Any, **context: Any) -> list[str]:
    """Check every optional feature of ``kind`` that ``component`` has; the names checked.

    ``context`` carries what a check needs: for a policy ``make_policy`` (each feature is tried on a
    fresh one: offloading or checkpointing changes a policy), ``prompts`` and, for a Plannable one,
    ``plan_architecture`` (what its plan is traced at; None = the policy's default); for a window selector
    ``policy``, ``prompts`` and ``step_counts``; for a decomposer ``prompts``; for a projector
    ``inputs`` (``scores, heatmaps, graph``) and ``latent_grid``."""
    checked = []
    for feature in features_of(kind, component):
        if kind == "policy":
            extra = {k: v for k, v in context.items() if k not in ("make_policy", "prompts")}
            _check_policy(feature, context["make_policy"], context["prompts"], **extra)
        elif kind == "window_selector":
            _check_selector(feature, component, context["policy"], context["prompts"], context["step_counts"])
        elif feature is DecompositionStats:
            prompt = context["prompts"][0]
            component.decompose(prompt)
            stats = component.stats()
            assert (
                all(isinstance(k, str) and isinstance(v, int) for k, v in stats.items()) and sum(stats.values()) >= 1
            ), f"DecompositionStats: stats() must count the prompts decomposed by path, got {stats!r}"
            path = component.path_of(prompt)
            assert isinstance(path, str) and path in stats, f"DecompositionStats: path_of({prompt!r}) = {path!r}"
        elif feature is HeatmapNeeds:
            assert isinstance(component.needs_heatmaps, bool), "HeatmapNeeds: needs_heatmaps must be a bool"
            if not component.needs_heatmaps:
                scores, _, graph = context["inputs"]
                out = component.project(scores, None, graph, context["latent_grid"])
                assert torch.isfinite(out.values).all(), "needs_heatmaps = False, yet project() fails without them"
        elif feature is Identified:  # an embedder
            ident = component.identity
            assert isinstance(ident, str) and ident, "Identified: an embedder's identity must be a non-empty str"
        checked.append(feature.__name__)
    return checked
