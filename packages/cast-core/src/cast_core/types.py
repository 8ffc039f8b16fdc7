"""Plain data that flows between components and the loop: windows, atom scores, rollouts,
advantage maps, a step's judged groups.

These are dataclasses, not classes with behaviour, so any plugin can build them without
inheriting from cast. Tensors are ``torch.Tensor``; torch is only imported for type checking so
that importing this module (e.g. from ``cast --help``) stays cheap.

Shape conventions used throughout cast (B = batch of images, K = atoms of the graph,
N = latent positions = h*w of ``Policy.latent_grid``, C = latent channels, T = window steps):

* latents are **packed token sequences** ``[B, N, C]`` in row-major order over the latent grid,
  the layout diffusers' FLUX.2 and Qwen-Image pipelines use;
* images are ``[B, 3, H, W]`` floats in ``[0, 1]``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

from cast_core.scene_graph import SceneGraph

if TYPE_CHECKING:  # pragma: no cover
    import torch


@dataclass(frozen=True)
class Window:
    """The denoising steps where SDE exploration noise is injected: ``start, start+1, ...,
    start+size-1`` (0-based indices into the schedule's steps). ``diagnostics`` carries whatever
    the selector measured (the curve, the knee, the reason) and is excluded from equality."""

    start: int
    size: int
    diagnostics: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.start < 0 or self.size < 0:
            raise ValueError(f"Window(start={self.start}, size={self.size}): both must be >= 0")

    @property
    def end(self) -> int:
        """One past the last step of the window."""
        return self.start + self.size

    @property
    def steps(self) -> range:
        return range(self.start, self.end)

    def __contains__(self, step: object) -> bool:
        return isinstance(step, int) and self.start <= step < self.end

    def check_fits(self, num_steps: int) -> "Window":
        """Raise if the window does not fit a schedule of ``num_steps`` steps."""
        if self.end > num_steps:
            raise ValueError(
                f"window steps {self.start}..{self.end - 1} do not fit a schedule of "
                f"{num_steps} steps (last step is {num_steps - 1})"
            )
        return self


@dataclass
class AtomScores:
    """What an :class:`~cast_core.protocols.AtomScorer` returns for a batch of images.

    ``scores[i]`` is a float tensor ``[K_i]`` in ``[0, 1]`` aligned with ``graphs[i].atoms``;
    ``heatmaps[i]`` (when requested) is ``[K_i, H, W]``, non-negative, on the image grid — where
    the judge looked for each atom. A missing object gets a flat map.
    """

    graphs: list[SceneGraph]
    scores: list["torch.Tensor"]
    heatmaps: list["torch.Tensor"] | None = None

    def __len__(self) -> int:
        return len(self.scores)

    def as_dict(self, i: int) -> dict[str, float]:
        """``{atom_id: score}`` of image ``i`` — handy for logs and reports."""
        return {a.id: float(s) for a, s in zip(self.graphs[i].atoms, self.scores[i])}


@dataclass
class Rollout:
    """Everything a training step needs from sampling a batch.

    Per image: the window-step states ``latents[:, t]`` and their successors
    ``next_latents[:, t]`` (``[B, T, N, C]``), the sampling-time per-position log-probs
    ``log_probs`` (``[B, T, N]``), the sigmas of those steps, the conditioning used, the decoded
    images, and optionally the Tweedie ``x̂0`` at every step (for window selection).
    In training, ``sample_ids[i] = (p, g)`` names row ``i`` as member ``g`` of the group of the
    step's ``p``-th prompt (a rank of a distributed run holds a contiguous share of them).
    """

    prompts: list[str]
    images: "torch.Tensor"
    sigmas: "torch.Tensor"
    step_indices: list[int]
    latents: "torch.Tensor | None" = None
    next_latents: "torch.Tensor | None" = None
    log_probs: "torch.Tensor | None" = None
    conditioning: Any = None
    window: Window | None = None
    x0: "torch.Tensor | None" = None
    final_latents: "torch.Tensor | None" = None
    sample_ids: list[tuple[int, int]] | None = None


@dataclass
class AdvantageMap:
    """Per-image advantages on the policy's latent grid: ``values`` is ``[G, h, w]``;
    ``prompt_advantages`` the scalar ``Âg`` per image (``[G]``); ``stats`` what to log."""

    values: "torch.Tensor"
    prompt_advantages: "torch.Tensor"
    stats: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Recipe:
    """A named bundle of defaults a plugin recommends: which component of each kind to use and
    hyper-parameters (``settings``, flat ``key -> value``, overridable with ``--set key=value``).
    ``None`` means "no recommendation, use the trainer's default"."""

    policy: str | None = None
    scorer: str | None = None
    window: str | None = None
    decomposer: str | None = None
    projector: str | None = None
    settings: Mapping[str, Any] = field(default_factory=dict)
    description: str = ""
    objective: str | None = None


@dataclass
class GroupVerdict:
    """The verdicts of one whole prompt group (all ranks' members, in member order)."""

    index: int  # the prompt's position among the step's prompts
    graph: SceneGraph
    scores: "torch.Tensor"  # [G, K]
    heatmaps: "torch.Tensor | None" = None  # [G, K, H, W] on the scorer's grid, when asked
    # with several scorers (config ``scorers``): each one's verdict by label, on its own graph;
    # the fields above are then the first scorer's. Empty in a one-scorer run.
    by_scorer: dict = field(default_factory=dict)


@dataclass
class ScoredGroups:
    """What judging one step gives the update: this process's ``rows`` of the rollout, their
    sample ``ids`` ``(prompt index, member)``, their advantage maps ``advantages`` ``[n, h·w]``,
    the groups ``kept`` (every process trains on the same ones), the projector's per-group
    ``projector_stats``, ``scorer_failures`` (the errors that dropped groups) and, once the
    trainer has summarised the verdicts, ``reward_stats`` (what metrics.jsonl logs). Named
    because five positional values travelling between the trainer, the judge and
    :mod:`cast_core.gradient_signal` were easy to unpack in the wrong order."""

    rows: list[int]
    ids: list[tuple[int, int]]
    advantages: "torch.Tensor"
    kept: list[GroupVerdict]
    projector_stats: list[dict] = field(default_factory=list)
    scorer_failures: int = 0
    reward_stats: dict = field(default_factory=dict)


@dataclass
class PassBatch:
    """One forward/backward pass of the update, as an :class:`~cast_core.protocols.Objective`
    sees it: ``rows`` of ``rollout`` (a ``[n]`` index tensor; a rank without members in a
    minibatch gets one placeholder row whose loss is weighted zero), their sample ``ids``
    ``(prompt index, member)``, their ``advantages`` ``[n, N]`` (the projector's maps, flattened
    over the latent grid; a scalar credit is a map constant per sample), the rows'
    ``conditioning``, the pass index ``t`` (``0 ≤ t < objective.passes(rollout)``), the inner
    ``epoch`` and the training ``step``. Random draws (forward-process noise, timesteps) must
    come from :func:`cast_core.seeding.generator_for` keyed by ``(step, epoch, t, id)`` so that
    they do not depend on micro-batching or the process count."""

    rollout: Rollout
    rows: "torch.Tensor"
    ids: list[tuple[int, int]]
    advantages: "torch.Tensor"
    conditioning: Any
    t: int
    epoch: int = 0
    step: int = 0


@dataclass
class ObjectiveTerms:
    """What an objective returns for one pass: the policy ``loss`` (a scalar, mean over the
    pass's samples), the ``kl`` term (scalar; the update adds ``config.beta · kl``) and
    ``diagnostics`` (floats; the update logs their sample-weighted means)."""

    loss: "torch.Tensor"
    kl: "torch.Tensor"
    diagnostics: dict = field(default_factory=dict)


@dataclass
class PlanSubject:
    """A policy at real size without weights, as ``cast plan`` traces it (what a
    :class:`~cast_core.protocols.Plannable` policy's ``build_for_plan`` returns).

    Built on PyTorch's meta device: every parameter and buffer of ``modules`` has its real shape
    and dtype and no memory. The tracer (:mod:`cast_core.memory_trace`) turns them into fake
    tensors on the trace device, then calls ``place(device)`` so that the policy computes there
    (its ``device`` attribute, conditioning it caches such as a negative prompt's).

    * ``policy`` — the policy object itself: the plan runs its own ``initial_noise``,
      ``velocity``, ``decode``, ``trainable_parameters`` and ``enable_gradient_checkpointing``;
    * ``modules`` — what sits on the accelerator during training, by name (a backbone's
      transformer and VAE; not a text encoder that has been offloaded);
    * ``conditioning(n)`` — ``n`` rows of conditioning as ``encode`` would return them (the
      plan builds no text encoder); called on the trace device;
    * ``shard_units`` / ``shard_root`` — what FSDP2 wraps one by one, then last (the blocks and
      the transformer, as the policy's ``prepare(sharding="fsdp2")`` does); ``shard_root=None``
      when the policy cannot shard itself;
    * ``text_encoder`` — facts for the start-up and host-RAM lines: ``name``, ``parameters``,
      ``bytes`` (at the run's dtype); empty when the policy has none;
    * ``architecture`` — a label for the output (e.g. ``flux2-dev``); ``notes`` — what the
      builder assumed (the text length, a guidance mode), printed with the plan.
    """

    policy: Any
    modules: Mapping[str, "torch.nn.Module"]
    conditioning: Any  # Callable[[int], conditioning]
    place: Any  # Callable[[torch.device], None]
    shard_units: "list[torch.nn.Module]" = field(default_factory=list)
    shard_root: "torch.nn.Module | None" = None
    text_encoder: Mapping[str, Any] = field(default_factory=dict)
    architecture: str = ""
    notes: list[str] = field(default_factory=list)
