"""The five component kinds every plugin implements, as runtime-checkable Protocols.

They are deliberately architecture-neutral: core never learns about UNets, VAEs or tokenizers, so
a new backbone or judge is one plugin away. ``isinstance(obj, AtomScorer)`` only checks that the
members exist; the behavioural contract is enforced by the conformance kits in
:mod:`cast_core.testing`, which a plugin's tests subclass.

The data types the protocols exchange are re-exported here so a plugin author needs one import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ContextManager, Iterable, Protocol, Sequence, runtime_checkable

from cast_core.scene_graph import ATOM_KINDS, RELATION_SKILLS, Atom, Entity, SceneGraph
from cast_core.types import AdvantageMap, AtomScores, Recipe, Rollout, Window

if TYPE_CHECKING:  # pragma: no cover
    from pathlib import Path

    import torch

__all__ = [
    "Policy", "WindowSelector", "AtomDecomposer", "AtomScorer", "AdvantageProjector",
    "Embedder", "PROTOCOLS", "Atom", "Entity", "SceneGraph", "AtomScores", "Window", "Rollout",
    "AdvantageMap", "Recipe", "ATOM_KINDS", "RELATION_SKILLS",
]


@runtime_checkable
class Policy(Protocol):
    """A flow-matching text-to-image model seen as a velocity field ``v = ε − x0``.

    Latents are packed sequences ``[B, N, C]`` (N = h*w of :meth:`latent_grid`); guidance
    (distilled or true CFG) happens inside :meth:`velocity`, so the policy *is* the guided field.
    Trainable parameters are the adapter (e.g. LoRA); :meth:`reference` switches it off.

    Optional extras, read with ``getattr`` where used: ``identity`` (a string for caches),
    ``calibration_prompts`` (what window measurement samples) and ``window_defaults`` (a dict of
    ``embedder`` / ``method`` / ``level`` for ``cast window``: a policy knows which embedder sees
    its images' structure — CLIP for natural images, ``shapes-scene`` for the shapes world),
    ``inference()`` (a context for gradient-free sampling that may trade bit-exactness for
    speed, e.g. by folding a LoRA adapter into the weights; used by
    :func:`cast_core.sampling.ode_images`, never by training's sampler), and for training at
    scale (docs/distributed.md):

    * ``prepare(accelerator) -> torch.nn.Module | None`` — move to ``accelerator.device`` and
      wrap the trainable module for the run's strategy (``accelerator.prepare`` gives DDP or
      FSDP2); return the wrapped module so the trainer can skip gradient syncs between
      micro-batches (``no_sync``). Called before the optimizer is built. A policy without it
      is trained multi-process by averaging its adapter's gradients explicitly. A policy that
      accepts ``prepare(accelerator, sharding="fsdp2")`` shards itself with
      :func:`cast_core.sharding.fully_shard_module` (``sharding = "fsdp2"``, any launcher, CPU
      too); then ``save_adapter`` is called on every process and must gather its tensors
      (:func:`cast_core.sharding.full_tensor`) and write only where
      :func:`cast_core.sharding.is_writer`, and ``load_adapter`` loads full tensors into its
      slices (:func:`cast_core.sharding.copy_full_`).
    * ``offload_text_encoder()`` — release the text encoder once the trainer has encoded
      every training prompt (``offload_text_encoder = true``): a 7–24B text encoder does not
      belong on the training GPU.
    * ``enable_gradient_checkpointing()`` — recompute activations in the backward pass
      (``gradient_checkpointing = true``).
    * a ``torch_dtype`` factory argument — the dtype of the frozen base weights
      (``base_dtype = "bfloat16"``); trainable adapter parameters stay float32.

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
        """The prompt's scene graph (DESIGN §3.1); raise ``SceneGraphError`` on bad input."""


@runtime_checkable
class AtomScorer(Protocol):
    """Scores every atom of every image on its own, in ``[0, 1]``, optionally with heatmaps."""

    def score(
        self, images: "torch.Tensor", graphs: Sequence[SceneGraph], heatmaps: bool = False
    ) -> AtomScores:
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


#: kind name (as used by the registry, CLI and JSON) -> protocol
PROTOCOLS: dict[str, type] = {
    "policy": Policy,
    "window_selector": WindowSelector,
    "atom_decomposer": AtomDecomposer,
    "atom_scorer": AtomScorer,
    "advantage_projector": AdvantageProjector,
    "embedder": Embedder,
}
