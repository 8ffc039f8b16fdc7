"""Small, real components for tests and examples (registered as the built-ins ``fake`` and
``constant``). They are tiny, not pretend: the fake policy is a genuine linear velocity field
with a low-rank adapter, so samplers, losses and trainers can be tested against it exactly.
"""

from __future__ import annotations

import contextlib
import hashlib
from pathlib import Path
from typing import Any, Iterator, Sequence

import torch
from safetensors.torch import load_file, save_file

from cast_core.scene_graph import Atom, Entity, SceneGraph
from cast_core.sharding import copy_full_, full_tensor, fully_shard_module, is_writer
from cast_core.types import AtomScores, PlanSubject

ADAPTER_FILE = "adapter.safetensors"


def _word_vector(word: str, dim: int, seed: int) -> torch.Tensor:
    # md5, not hash(): Python's str hash is salted per process, and conditioning must be stable.
    digest = hashlib.md5(f"{seed}:{word}".encode()).digest()
    gen = torch.Generator().manual_seed(int.from_bytes(digest[:8], "little"))
    return torch.randn(dim, generator=gen)


class _LinearField(torch.nn.Module):
    """The fake policy's velocity field as a module, so that it can be wrapped like a real
    backbone's transformer (DDP / FSDP2 through ``accelerator.prepare``)."""

    def __init__(self, weight: torch.Tensor, position_bias: torch.Tensor, lora_A: torch.Tensor):
        super().__init__()
        # frozen parameters, not buffers: FSDP2 shards them next to the float32 adapter, as it
        # shards a backbone's bf16 base weights
        self.weight = torch.nn.Parameter(weight, requires_grad=False)
        self.position_bias = torch.nn.Parameter(position_bias, requires_grad=False)
        self.lora_A = torch.nn.Parameter(lora_A)
        self.lora_B = torch.nn.Parameter(torch.zeros(weight.shape[0], lora_A.shape[0]))
        self.position_delta = torch.nn.Parameter(torch.zeros_like(position_bias, dtype=torch.float32))
        self.checkpointing = False

    def forward(
        self, latents: torch.Tensor, sigma: torch.Tensor, cond: torch.Tensor, adapter_on: bool = True
    ) -> torch.Tensor:
        if self.checkpointing and torch.is_grad_enabled():
            from torch.utils.checkpoint import checkpoint

            return checkpoint(self._velocity, latents, sigma, cond, adapter_on, use_reentrant=False)
        return self._velocity(latents, sigma, cond, adapter_on)

    def _velocity(self, latents, sigma, cond, adapter_on: bool) -> torch.Tensor:
        sigma = torch.as_tensor(sigma, dtype=latents.dtype, device=latents.device).reshape(-1, 1, 1)
        weight = self.weight.to(latents.dtype)
        bias = self.position_bias.to(latents.dtype)
        if adapter_on:
            weight = weight + self.lora_B @ self.lora_A
            bias = bias + self.position_delta
        return latents @ weight.T + (1.0 + sigma) * cond[:, None, :] + bias


class FakePolicy:
    """A linear velocity field on patchified pixels.

    ``v(x, σ, c) = x·(M + B·A)ᵀ + (1 + σ)·c + P + ΔP`` where ``x`` is ``[B, N, C]`` (``N`` patches
    of ``patch×patch`` RGB pixels, ``C = 3·patch²``), ``c`` a bag-of-words text vector, ``M`` and
    the position bias ``P`` are frozen random, and the adapter is a rank-``rank`` update ``B·A``
    (``B`` starts at zero) plus a per-position bias ``ΔP`` (starts at zero) so an RL signal that
    differs across the image can be learned.

    It implements every optional member of the protocol a large backbone needs — ``prepare``
    (DDP / FSDP2 wrapping of its field module), ``enable_gradient_checkpointing``,
    ``offload_text_encoder`` and frozen weights in ``torch_dtype`` with a float32 adapter — so the
    engine's paths for them are tested on it exactly.
    """

    target_modules = ("velocity_proj",)

    def __init__(
        self,
        image_size: tuple[int, int] = (16, 16),
        patch: int = 4,
        rank: int = 2,
        seed: int = 0,
        device: str = "cpu",
        torch_dtype: str | torch.dtype = torch.float32,
    ):
        h, w = image_size
        if h % patch or w % patch:
            raise ValueError(f"image_size {image_size} must be divisible by patch={patch}")
        self.default_image_size = (h, w)
        self.patch, self.seed = patch, seed
        self.channels = 3 * patch * patch
        n = (h // patch) * (w // patch)
        gen = torch.Generator().manual_seed(seed)
        c = self.channels
        dtype = getattr(torch, torch_dtype) if isinstance(torch_dtype, str) else torch_dtype
        weight = (0.1 * torch.randn(c, c, generator=gen) / c**0.5).to(dtype)
        position_bias = (0.1 * torch.randn(n, c, generator=gen)).to(dtype)
        self.field = _LinearField(weight, position_bias, 0.1 * torch.randn(rank, c, generator=gen))
        self.device = torch.device(device)
        self.field.to(self.device)
        self._forward = self.field  # the wrapped module after prepare()
        self._adapter_on = True
        self.text_encoder_loaded = True

    # the adapter, by its historical attribute names
    lora_A = property(lambda self: self.field.lora_A)
    lora_B = property(lambda self: self.field.lora_B)
    position_delta = property(lambda self: self.field.position_delta)
    weight = property(lambda self: self.field.weight)
    position_bias = property(lambda self: self.field.position_bias)

    # -- Policy protocol ---------------------------------------------------------------------
    def encode(self, prompts: Sequence[str], image_size: tuple[int, int] | None = None) -> torch.Tensor:
        if not self.text_encoder_loaded:
            raise RuntimeError("FakePolicy: the text encoder was offloaded; prompts must be encoded before")
        vecs = []
        for prompt in prompts:
            words = prompt.lower().split() or [""]
            vecs.append(torch.stack([_word_vector(wd, self.channels, self.seed) for wd in words]).mean(0))
        return torch.stack(vecs).to(self.device)

    def sigmas(self, num_steps: int, image_size: tuple[int, int] | None = None) -> torch.Tensor:
        if num_steps < 1:
            raise ValueError(f"num_steps must be >= 1, got {num_steps}")
        return torch.linspace(1.0, 0.0, num_steps + 1, dtype=torch.float32)

    def latent_grid(self, image_size: tuple[int, int] | None = None) -> tuple[int, int]:
        h, w = self._size(image_size)
        return h // self.patch, w // self.patch

    def initial_noise(self, n: int, image_size=None, generator: torch.Generator | None = None) -> torch.Tensor:
        gh, gw = self.latent_grid(image_size)
        return torch.randn(n, gh * gw, self.channels, generator=generator).to(self.device)

    def velocity(
        self,
        latents: torch.Tensor,
        sigma: torch.Tensor | float,
        cond: torch.Tensor,
        image_size: tuple[int, int] | None = None,
    ) -> torch.Tensor:
        self._size(image_size)
        return self._forward(latents, torch.as_tensor(sigma), cond, adapter_on=self._adapter_on)

    def decode(self, latents: torch.Tensor, image_size: tuple[int, int] | None = None) -> torch.Tensor:
        h, w = self._size(image_size)
        b, p = latents.shape[0], self.patch
        x = latents.float().reshape(b, h // p, w // p, 3, p, p).permute(0, 3, 1, 4, 2, 5).reshape(b, 3, h, w)
        return ((x + 1.0) / 2.0).clamp(0.0, 1.0)

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        return [self.lora_A, self.lora_B, self.position_delta]

    @contextlib.contextmanager
    def reference(self) -> Iterator[None]:
        previous, self._adapter_on = self._adapter_on, False
        try:
            yield
        finally:
            self._adapter_on = previous

    # -- optional members for training at scale ------------------------------------------------
    def prepare(self, accelerator, sharding: str = "accelerate") -> torch.nn.Module:
        """Onto the accelerator's device, the field wrapped by ``accelerator.prepare`` (DDP when
        several processes run), or sharded with FSDP2 (``sharding="fsdp2"``: every weight,
        frozen or trainable, becomes a slice per process). The optimizer is built after this,
        on :meth:`trainable_parameters`, which then returns the live (possibly sharded) ones."""
        self.device = torch.device(accelerator.device)
        self.field.to(self.device)
        if sharding == "fsdp2":
            self._forward = fully_shard_module(self.field)
        elif sharding == "accelerate":
            self._forward = accelerator.prepare(self.field)
        else:
            raise ValueError(f"FakePolicy.prepare: unknown sharding {sharding!r}; use 'accelerate' or 'fsdp2'")
        return self._forward

    def enable_gradient_checkpointing(self) -> None:
        self.field.checkpointing = True

    @classmethod
    def build_for_plan(cls, architecture: str | None = None, **policy_kwargs: Any) -> PlanSubject:
        """The fake policy on the meta device for ``cast plan`` (the Plannable feature): it has one
        architecture, ``"fake"``, whose size follows ``image_size``, ``patch`` and ``rank``."""
        if architecture not in (None, "fake"):
            raise ValueError(f"FakePolicy has one architecture, 'fake'; got {architecture!r}")
        options = {k: v for k, v in policy_kwargs.items() if k not in ("path", "device")}
        policy = cls(device="meta", **options)

        def place(device: torch.device) -> None:
            policy.device = torch.device(device)

        return PlanSubject(
            policy=policy,
            modules={"field": policy.field},
            conditioning=lambda n: torch.zeros(n, policy.channels),
            place=place,
            shard_units=[],
            shard_root=policy.field,
            architecture="fake",
            notes=["the fake policy: a linear velocity field with a rank-r adapter (tests)"],
        )

    def offload_text_encoder(self) -> None:
        self.text_encoder_loaded = False

    def save_adapter(self, directory: str | Path) -> None:
        # gathered on every process when sharded (a collective), written by one
        tensors = {name: full_tensor(p.detach()).contiguous().cpu() for name, p in self._adapter().items()}
        if not is_writer():
            return
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        save_file(tensors, str(directory / ADAPTER_FILE), metadata={"policy": "fake"})

    def load_adapter(self, directory: str | Path) -> None:
        path = Path(directory) / ADAPTER_FILE
        if not path.is_file():
            raise FileNotFoundError(f"no adapter at {path}; expected a directory written by save_adapter")
        tensors = load_file(str(path))
        for name, param in self._adapter().items():
            if name not in tensors or tensors[name].shape != param.shape:
                raise ValueError(
                    f"{path}: tensor {name!r} missing or shaped {tuple(tensors.get(name, torch.empty(0)).shape)}, "
                    f"expected {tuple(param.shape)} — was it saved by a FakePolicy of another size?"
                )
            copy_full_(param, tensors[name])

    # -- helpers -----------------------------------------------------------------------------
    def _adapter(self) -> dict[str, torch.nn.Parameter]:
        return {"lora_A": self.lora_A, "lora_B": self.lora_B, "position_delta": self.position_delta}

    def _size(self, image_size: tuple[int, int] | None) -> tuple[int, int]:
        if image_size is not None and tuple(image_size) != self.default_image_size:
            raise ValueError(f"FakePolicy was built for {self.default_image_size}, asked for {tuple(image_size)}")
        return self.default_image_size


class ConstantScorer:
    """Gives every atom the same score and a flat heatmap: a scorer with no opinion, useful to
    check that the rest of the pipeline yields zero advantages when nothing differs."""

    def __init__(self, value: float = 0.5):
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"ConstantScorer value must be in [0, 1], got {value}")
        self.value = float(value)

    def score(self, images: torch.Tensor, graphs: Sequence[SceneGraph], heatmaps: bool = False) -> AtomScores:
        if len(images) != len(graphs):
            raise ValueError(f"got {len(images)} images but {len(graphs)} scene graphs")
        h, w = images.shape[-2:]
        scores = [torch.full((len(g.atoms),), self.value) for g in graphs]
        maps = [torch.ones(len(g.atoms), h, w) for g in graphs] if heatmaps else None
        return AtomScores(graphs=list(graphs), scores=scores, heatmaps=maps)


class MeanBrightnessScorer:
    """A prompt-level fake judge: one score per image, its mean brightness (tests of runs with
    several scorers: a second reward on another scale, without heatmaps)."""

    prompt_level = True

    def score(self, images: torch.Tensor, graphs: Sequence[SceneGraph], heatmaps: bool = False) -> AtomScores:
        if len(images) != len(graphs):
            raise ValueError(f"got {len(images)} images but {len(graphs)} scene graphs")
        h, w = images.shape[-2:]
        mean = images.float().mean(dim=(1, 2, 3)).clamp(0, 1)
        scores = [mean[i].expand(len(g.atoms)).clone() for i, g in enumerate(graphs)]
        maps = [torch.ones(len(g.atoms), h, w) for g in graphs] if heatmaps else None
        return AtomScores(graphs=list(graphs), scores=scores, heatmaps=maps)


class SleepingScorer:
    """``left-brightness``'s verdicts after sleeping ``seconds`` per call plus ``per_image``
    seconds per image: a judge as slow as a VLM without its weights, for the timing of
    ``async_scoring`` (benchmarks/async_scoring.py). The sleep releases the GIL, as a GPU judge or
    a remote service leaves the CPU to the sampler."""

    def __init__(self, seconds: float = 0.0, per_image: float = 0.0):
        if seconds < 0 or per_image < 0:
            raise ValueError(f"sleeping scorer: seconds and per_image must be >= 0, got {seconds}, {per_image}")
        self.seconds, self.per_image = float(seconds), float(per_image)
        self.inner = LeftBrightnessScorer()

    def score(self, images: torch.Tensor, graphs: Sequence[SceneGraph], heatmaps: bool = False) -> AtomScores:
        import time

        time.sleep(self.seconds + self.per_image * len(images))
        return self.inner.score(images, graphs, heatmaps)


def simple_graph(
    prompt: str = "a red circle", noun: str = "circle", colour: str | None = "red", count: int = 1
) -> SceneGraph:
    """A one-entity graph (object, count and optionally colour atoms) for tests."""
    atoms = [Atom("a1", "object", "e1"), Atom("a2", "count", "e1", ("a1",), value=count)]
    if colour:
        atoms.append(Atom("a3", "attribute", "e1", ("a1",), value=colour))
    return SceneGraph(prompt, (Entity("e1", noun, count),), tuple(atoms)).validate()


class FakeDecomposer:
    """One entity per prompt — its last word — with an object and a count atom. Enough structure
    for the trainer's plumbing; real prompts need a real decomposer (e.g. ``template``)."""

    def decompose(self, prompt: str) -> SceneGraph:
        words = prompt.lower().split()
        if not words:
            from cast_core.errors import SceneGraphError

            raise SceneGraphError("cannot decompose an empty prompt")
        return simple_graph(prompt, noun=words[-1], colour=None)


class LeftBrightnessScorer:
    """A spatial fake judge: every atom scores the mean brightness of the image's left half,
    and its heatmap is the left half. A policy trained against it should brighten the left half
    — the end-to-end check that spatial advantages reach the right latent positions."""

    def score(self, images: torch.Tensor, graphs: Sequence[SceneGraph], heatmaps: bool = False) -> AtomScores:
        if len(images) != len(graphs):
            raise ValueError(f"got {len(images)} images but {len(graphs)} scene graphs")
        h, w = images.shape[-2:]
        left = images[..., : w // 2].float().mean(dim=(1, 2, 3))
        mask = torch.zeros(h, w)
        mask[:, : w // 2] = 1.0
        scores = [left[i].clamp(0, 1).expand(len(g.atoms)).clone() for i, g in enumerate(graphs)]
        maps = [mask.expand(len(g.atoms), h, w).clone() for g in graphs] if heatmaps else None
        return AtomScores(graphs=list(graphs), scores=scores, heatmaps=maps)


#: ``cast train`` components of a small run on the fake policy (every part built in, no plugin)
FAKE_RUN_COMPONENTS = (
    "--recipe", "cast", "--window", "none", "--policy", "fake", "--scorer", "left-brightness",
    "--decomposer", "fake", "--projector", "spatial",
)  # fmt: skip


def fake_run_args(**settings: Any) -> list[str]:
    """``cast train`` arguments of a small run on the fake policy: :data:`FAKE_RUN_COMPONENTS` and
    one ``--set KEY=VALUE`` (a TOML value) per setting. Tests of whole runs (resume, Ctrl-C,
    several processes, bad input) start from the same command line, written once."""
    from cast_core.config import toml_value

    args = list(FAKE_RUN_COMPONENTS)
    for key, value in settings.items():
        args += ["--set", f"{key}={toml_value(value)}"]
    return args
