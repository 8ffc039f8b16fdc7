"""The component kinds every plugin implements, as runtime-checkable Protocols.

They are deliberately architecture-neutral: core never learns about UNets, VAEs or tokenizers, so
a new backbone or judge is one plugin away. ``isinstance(obj, AtomScorer)`` only checks that the
members exist; the behavioural contract is enforced by the conformance kits in
:mod:`cast_core.testing`, which a plugin's tests subclass.

The data types the protocols exchange are re-exported here so a plugin author needs one import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ContextManager, Iterable, Mapping, Protocol, Sequence, runtime_checkable

from cast_core.scene_graph import ATOM_KINDS, RELATION_SKILLS, Atom, Entity, SceneGraph
from cast_core.types import AdvantageMap, AtomScores, ObjectiveTerms, PassBatch, PlanSubject, Recipe, Rollout, Window

if TYPE_CHECKING:  # pragma: no cover
    from pathlib import Path

    import torch

__all__ = [
    "Policy",
    "WindowSelector",
    "AtomDecomposer",
    "AtomScorer",
    "AdvantageProjector",
    "Embedder",
    "Objective",
    "PROTOCOLS",
    "OPTIONAL_FEATURES",
    "Preparable",
    "SelfSharding",
    "OffloadsTextEncoder",
    "GradientCheckpointing",
    "ChecksPrompts",
    "Plannable",
    "FastInference",
    "Identified",
    "Calibrated",
    "WindowHints",
    "PerStepWindow",
    "CalibrationPrompts",
    "HeatmapNeeds",
    "DecompositionStats",
    "KeepsState",
    "SamplesWithOwnPolicy",
    "self_shards",
    "Atom",
    "Entity",
    "SceneGraph",
    "AtomScores",
    "Window",
    "Rollout",
    "AdvantageMap",
    "Recipe",
    "PlanSubject",
    "PassBatch",
    "ObjectiveTerms",
    "ATOM_KINDS",
    "RELATION_SKILLS",
]


@runtime_checkable
class Policy(Protocol):
    """A flow-matching text-to-image model seen as a velocity field ``v = ε − x0``.

    Latents are packed sequences ``[B, N, C]`` (N = h*w of :meth:`latent_grid`); guidance
    (distilled or true CFG) happens inside :meth:`velocity`, so the policy *is* the guided field.
    Trainable parameters are the adapter (e.g. LoRA); :meth:`reference` switches it off.

    Optional features are declared as the small protocols below (:data:`OPTIONAL_FEATURES`
    lists them by kind): a policy that has ``prepare`` is a :class:`Preparable`, and so on; the
    conformance kit checks each feature a component has. One more is a factory argument, not a
    member: ``torch_dtype``, the dtype of the frozen base weights (``base_dtype = "bfloat16"``;
    trainable adapter parameters stay float32).

    Conditioning is a tensor with one row per prompt or a
    :class:`~cast_core.conditioning.Conditioning` (select rows, concatenate, move).
    """

    default_image_size: tuple[int, int]

    def encode(self, prompts: Sequence[str], image_size: tuple[int, int] | None = None) -> Any:
        """Text conditioning for ``prompts``: a tensor with one row per prompt or a
        :class:`~cast_core.conditioning.Conditioning`; otherwise opaque to core."""

    def sigmas(self, num_steps: int, image_size: tuple[int, int] | None = None) -> "torch.Tensor":
        """The ``num_steps + 1`` noise levels, descending from ~1 and ending in exactly 0."""

    def initial_noise(
        self, n: int, image_size: tuple[int, int] | None = None, generator: "torch.Generator | None" = None
    ) -> "torch.Tensor":
        """``n`` standard-normal starting latents ``[n, N, C]`` drawn from ``generator``."""

    def velocity(
        self, latents: "torch.Tensor", sigma: "torch.Tensor", cond: Any, image_size: tuple[int, int] | None = None
    ) -> "torch.Tensor":
        """The (guided) velocity at ``latents`` and noise level ``sigma`` (scalar or ``[B]``);
        ``image_size`` ``(H, W)`` is the size being drawn (image position ids depend on it)."""

    def decode(self, latents: "torch.Tensor", image_size: tuple[int, int] | None = None) -> "torch.Tensor":
        """Images ``[B, 3, H, W]`` in ``[0, 1]`` from clean latents."""

    def latent_grid(self, image_size: tuple[int, int] | None = None) -> tuple[int, int]:
        """``(h, w)`` of the latent positions: position ``i`` covers row ``i // w``, column
        ``i % w`` of an even ``h × w`` tiling of the image."""

    def trainable_parameters(self) -> Iterable["torch.nn.Parameter"]:
        """The parameters RL updates (the adapter), all with ``requires_grad``."""

    def reference(self) -> ContextManager[None]:
        """Context in which :meth:`velocity` is the adapter-free reference model (for KL)."""

    def save_adapter(self, directory: "str | Path") -> None:
        """Write the adapter weights (safetensors) into ``directory``."""

    def load_adapter(self, directory: "str | Path") -> None:
        """Load adapter weights written by :meth:`save_adapter`."""


@runtime_checkable
class WindowSelector(Protocol):
    """Chooses the denoising steps that get SDE exploration noise."""

    def select(self, policy: Policy, prompts: Sequence[str], num_steps: int) -> Window:
        """The window for a schedule of ``num_steps`` steps; diagnostics go in
        ``Window.diagnostics``."""


@runtime_checkable
class AtomDecomposer(Protocol):
    """Turns a prompt into a validated :class:`SceneGraph`."""

    def decompose(self, prompt: str) -> SceneGraph:
        """The prompt's scene graph (docs/design.md §3.1); raise ``SceneGraphError`` on bad input."""


@runtime_checkable
class AtomScorer(Protocol):
    """Scores every atom of every image on its own, in ``[0, 1]``, optionally with heatmaps."""

    def score(self, images: "torch.Tensor", graphs: Sequence[SceneGraph], heatmaps: bool = False) -> AtomScores:
        """``images[i]`` is judged against ``graphs[i]``; heatmaps on the image grid if asked."""


@runtime_checkable
class AdvantageProjector(Protocol):
    """Turns one prompt group's atom scores into per-position advantages on the latent grid."""

    def project(
        self,
        scores: "torch.Tensor",
        heatmaps: "torch.Tensor | None",
        graph: SceneGraph,
        latent_grid: tuple[int, int],
    ) -> AdvantageMap:
        """``scores`` is ``[G, K]`` (G images of one prompt, K atoms of ``graph``), ``heatmaps``
        ``[G, K, H, W]`` or None; returns an :class:`AdvantageMap` with values ``[G, h, w]``."""


@runtime_checkable
class Embedder(Protocol):
    """Maps images to vectors whose cosine similarity says "same content" — what window
    selection compares the Tweedie estimates with (CLIP for real models)."""

    def embed(self, images: "torch.Tensor") -> "torch.Tensor":
        """``[B, 3, H, W]`` images in ``[0, 1]`` → ``[B, D]`` float embeddings."""


@runtime_checkable
class Objective(Protocol):
    """How the update turns a step's samples and their advantages into a loss (the clipped SDE
    ratio of Flow-GRPO and CAST, DiffusionNFT, advantage-weighted matching, …).

    ``uses_window`` says what sampling must keep: ``True`` — SDE steps inside a window with
    their log-probs (``Rollout.latents``/``next_latents``/``log_probs``); ``False`` — the plain
    ODE and only the clean final latents (``Rollout.final_latents``): no window is selected and
    no trajectory is kept. The update calls :meth:`loss` ``passes(rollout)`` times per
    micro-batch and averages them (window steps, or timesteps drawn on the forward process).

    ``update`` is the run's :class:`cast_core.update.PolicyUpdate`; an objective uses its
    ``policy``, ``config``, ``image_size``, ``velocity(latents, sigma, cond)`` (the current
    policy under the run's precision, with gradients), ``reference_velocity(...)`` (the
    adapter-free model, no gradients) and ``sde_log_prob(...)``. Advantages arrive as maps
    ``[n, N]`` whatever the projector: an objective must accept a per-position map (CAST's
    credit) as well as a map constant per sample (scalar credit), and ``config.ratio_mode ==
    "sample"`` asks it to average the map per sample first."""

    uses_window: bool

    def passes(self, rollout: Rollout) -> int:
        """How many loss passes one micro-batch of ``rollout`` gets (≥ 1)."""

    def loss(self, update: Any, batch: PassBatch) -> ObjectiveTerms:
        """The loss, KL term and diagnostics of pass ``batch.t`` over ``batch.rows``."""


#: kind name (as used by the registry, CLI and JSON) -> protocol
PROTOCOLS: dict[str, type] = {
    "policy": Policy,
    "window_selector": WindowSelector,
    "atom_decomposer": AtomDecomposer,
    "atom_scorer": AtomScorer,
    "advantage_projector": AdvantageProjector,
    "embedder": Embedder,
    "objective": Objective,
}


# -- optional features ------------------------------------------------------------------------
# Each is one capability a component may have. Core checks ``isinstance(obj, Feature)`` where it
# would use it, and the conformance kits test the contract of every feature a component has, so
# "optional" never means "unchecked".


@runtime_checkable
class Preparable(Protocol):
    """A policy that wraps itself for a multi-process run (docs/distributed.md)."""

    def prepare(self, accelerator: Any) -> "torch.nn.Module | None":
        """Move to ``accelerator.device`` and wrap the trainable module for the run's strategy
        (``accelerator.prepare`` gives DDP or FSDP2); return the wrapped module so the trainer
        can skip gradient syncs between micro-batches (``no_sync``), or ``None``. Called before
        the optimizer is built. A policy without it is trained multi-process by averaging its
        adapter's gradients explicitly."""


@runtime_checkable
class SelfSharding(Preparable, Protocol):
    """A :class:`Preparable` whose ``prepare`` also takes ``sharding="fsdp2"`` and shards itself
    with :func:`cast_core.sharding.fully_shard_module` (any launcher, CPU too). Then
    ``save_adapter`` runs on every process, gathers its tensors
    (:func:`cast_core.sharding.full_tensor`) and writes only where
    :func:`cast_core.sharding.is_writer`; ``load_adapter`` loads full tensors into its slices
    (:func:`cast_core.sharding.copy_full_`). ``isinstance`` cannot see a keyword argument: use
    :func:`self_shards`."""

    def prepare(self, accelerator: Any, sharding: str = "accelerate") -> "torch.nn.Module | None":
        """As :meth:`Preparable.prepare`, sharded as ``sharding`` says."""


def self_shards(policy: Any) -> bool:
    """Whether ``policy.prepare`` takes ``sharding`` (a :class:`SelfSharding` policy)."""
    import inspect

    if not isinstance(policy, Preparable):
        return False
    try:
        return "sharding" in inspect.signature(policy.prepare).parameters
    except (TypeError, ValueError):
        return False


@runtime_checkable
class OffloadsTextEncoder(Protocol):
    """A policy that can release its text encoder once every training prompt is encoded
    (``offload_text_encoder = true``): a 7–24B encoder does not belong on the training GPU."""

    def offload_text_encoder(self) -> None:
        """Free the text encoder's memory on the accelerator; ``encode`` may be slow or fail
        afterwards (the trainer answers from its prompt cache)."""


@runtime_checkable
class GradientCheckpointing(Protocol):
    """A policy that recomputes activations in the backward pass (``gradient_checkpointing``)."""

    def enable_gradient_checkpointing(self) -> None:
        """Switch checkpointing on; velocities and gradients stay what they were."""


@runtime_checkable
class ChecksPrompts(Protocol):
    """A policy that can tell at start-up which prompts it cannot read (too many tokens, say),
    so that ``cast train`` refuses them before it writes anything, instead of failing at the
    first step that encodes one (after the window was measured)."""

    def check_prompts(self, prompts: Sequence[str]) -> None:
        """Raise :class:`~cast_core.errors.ConfigError` naming the first prompt the policy cannot
        encode (cut to ~80 characters), why, and the limit; return None when all are fine.
        Cheap: no model call."""


@runtime_checkable
class Plannable(Protocol):
    """A policy that can be built at real size without weights, so that ``cast plan`` traces
    the memory of a run before launch (and ``cast train`` refuses one that cannot fit).

    ``build_for_plan`` is a classmethod: planning never loads a model. It builds the policy on
    PyTorch's meta device with the factory keyword arguments a run would pass (``torch_dtype``,
    the LoRA options, ``image_size`` …; ``path`` and devices are ignored) and returns a
    :class:`~cast_core.types.PlanSubject`. ``architecture`` names the model to plan (a name the
    policy knows, such as ``flux2-dev``, or a model directory whose configs it reads); ``None``
    means the policy's default. The tracer then runs one sampling batch, one decode and one
    training micro-step through the policy's own ``velocity`` and ``decode`` on fake tensors
    (:mod:`cast_core.memory_plan`)."""

    @classmethod
    def build_for_plan(cls, architecture: str | None = None, **policy_kwargs: Any) -> PlanSubject:
        """The policy at ``architecture``'s real size on the meta device, with the run's options."""


@runtime_checkable
class FastInference(Protocol):
    """A policy with a faster gradient-free mode (:func:`cast_core.sampling.ode_images`, never
    training's sampler)."""

    def inference(self) -> ContextManager[None]:
        """A context for gradient-free sampling that may trade bit-exactness for speed (e.g. a LoRA
        adapter folded into the weights); on exit the policy is exactly what it was."""


@runtime_checkable
class Identified(Protocol):
    """A policy or embedder that names itself for caches (``identity``: a model id plus a
    revision or checkpoint digest); without it, window caches key on the object's settings."""

    identity: Any


@runtime_checkable
class Calibrated(Protocol):
    """A policy that says which prompts a window measurement should sample."""

    calibration_prompts: Sequence[str]


@runtime_checkable
class WindowHints(Protocol):
    """A policy that knows which embedder sees its images' structure: ``window_defaults`` holds
    ``embedder`` / ``method`` / ``level`` for ``cast window`` (CLIP for natural images,
    ``shapes-scene`` for the shapes world)."""

    window_defaults: Mapping[str, Any]


@runtime_checkable
class PerStepWindow(Protocol):
    """A window selector that draws a new window every step (random, sliding) from the run's
    seed and the step, so a resumed run replays it."""

    def select_for_step(
        self, policy: Policy, prompts: Sequence[str], num_steps: int, *, step: int, seed: int
    ) -> Window:
        """The window of training step ``step``: a pure function of ``(seed, step)``."""


@runtime_checkable
class CalibrationPrompts(Protocol):
    """A window selector that samples prompts of its own choosing: the trainer encodes them
    before offloading the text encoder."""

    def prompts_for(self, policy: Policy, prompts: Sequence[str]) -> list[str]:
        """The prompts :meth:`WindowSelector.select` will sample, given the training prompts."""


@runtime_checkable
class HeatmapNeeds(Protocol):
    """A projector that says whether it uses heatmaps (``needs_heatmaps = False`` spares the
    scorer the work); without it, heatmaps are asked for."""

    needs_heatmaps: bool


@runtime_checkable
class PromptLevel(Protocol):
    """A scorer that judges the whole prompt at once (pickscore, clip-score): with several
    scorers in a run it gets one prompt-level atom per prompt, not the decomposer's graph, and
    its credit is its prompt-level advantage, constant over the image (it has no heatmaps)."""

    prompt_level: bool


@runtime_checkable
class DecompositionStats(Protocol):
    """A decomposer that decomposes by several paths and says which (the ``auto`` decomposer:
    template, LLM, refused); the trainer logs the counts as ``decomposed_<path>``, and
    ``cast decompose --stats`` tallies prompts by path."""

    def stats(self) -> Mapping[str, int]:
        """Prompts decomposed so far, by path."""

    def path_of(self, prompt: str) -> str | None:
        """The path that decomposed ``prompt`` (``None`` if it has not been decomposed)."""


@runtime_checkable
class KeepsState(Protocol):
    """An objective with state of its own across steps (DiffusionNFT's and AWM's old policy: an
    EMA of the trained adapter). The trainer calls :meth:`attach` once with the trainable
    parameters, :meth:`after_update` after every step's update, and saves :meth:`state` in each
    checkpoint (tensors laid out like the parameters; sharded ones are gathered) and hands it
    back to :meth:`restore` on resume, so that a resumed run continues bit for bit."""

    def attach(self, params: "list[torch.nn.Parameter]") -> None:
        """Take the run's trainable parameters (called before the first step)."""

    def after_update(self, params: "list[torch.nn.Parameter]", optimizer_steps: int) -> None:
        """After a step's update; ``optimizer_steps`` counts the run's optimizer steps so far."""

    def state(self) -> "tuple[dict, dict[str, torch.Tensor]]":
        """JSON-able values and named tensors (one per parameter, laid out like it)."""

    def restore(self, state: Mapping[str, Any], tensors: "Mapping[str, torch.Tensor]") -> None:
        """Load what :meth:`state` returned (tensors as saved: full, on the CPU)."""


@runtime_checkable
class SamplesWithOwnPolicy(Protocol):
    """An objective that samples with a policy other than the trained one (DiffusionNFT samples
    with its old policy): the trainer samples inside :meth:`sampling`."""

    def sampling(self, params: "list[torch.nn.Parameter]") -> ContextManager[None]:
        """A context in which the policy's trainable ``params`` hold the sampling policy's
        values; on exit they are exactly what they were."""


#: kind -> the optional features a component of that kind may have
OPTIONAL_FEATURES: dict[str, tuple[type, ...]] = {
    "policy": (
        Preparable,
        OffloadsTextEncoder,
        GradientCheckpointing,
        ChecksPrompts,
        Plannable,
        FastInference,
        Identified,
        Calibrated,
        WindowHints,
    ),
    "window_selector": (PerStepWindow, CalibrationPrompts),
    "atom_decomposer": (DecompositionStats,),
    "atom_scorer": (),
    "advantage_projector": (HeatmapNeeds,),
    "embedder": (Identified,),
    "objective": (KeepsState, SamplesWithOwnPolicy),
}
