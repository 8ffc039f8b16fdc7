"""What the diffusers policies share: holding a pipeline, the LoRA adapter, devices and dtypes,
the noise schedule, sharding, and text-encoder offload.

A subclass says only what differs between model families — how prompts are encoded, how the
transformer is called (and guided), how latents are packed and decoded, and how the schedule's
shift ``mu`` is computed. Everything a subclass does is checked against the family's own
diffusers pipeline: same components and seed give the same noise, sigmas and images
(tests/test_pipeline_parity.py).

Three choices that keep a 32B model trainable:

* no second copy of the weights anywhere: the reference policy (KL) is the same transformer
  with its adapter switched off, and there is no ``inference()`` that folds the adapter into
  cloned base weights;
* the frozen base may be bfloat16 (``torch_dtype``) while the adapter stays float32;
* the text encoder (Mistral-24B, Qwen2.5-VL-7B) can leave the accelerator once the trainer has
  encoded every training prompt (:meth:`offload_text_encoder`).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import warnings
from pathlib import Path
from typing import Any, ClassVar, Iterator, Sequence

import torch

from cast_backbones.checks import ModelPathError, check_lora_rank, check_pipeline_dir
from cast_backbones.loading import draw_lora_seed, init_lora_, load_transformer_sharded
from cast_backbones.lora import add_lora, load_lora, lora_parameters, save_lora
from cast_core.conditioning import PromptEmbeds
from cast_core.cpu_overrides import require_device
from cast_core.sharding import fully_shard_module

__all__ = ["DiffusersPolicy", "resolve_dtype", "resolve_device"]


def _source(path: str | Path) -> str:
    """A local directory as its absolute path; anything else (a hub id) as given."""
    local = Path(str(path)).expanduser()
    return str(local.resolve()) if local.exists() else str(path)


def resolve_device(value: "str | torch.device") -> torch.device:
    """``"cuda"`` means this process's GPU (``LOCAL_RANK`` under torchrun / accelerate), so that
    eight processes given the same options do not all load onto GPU 0."""
    device = torch.device(value)
    if device.type == "cuda" and device.index is None and "LOCAL_RANK" in os.environ:
        return torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    return device


def _component(source: Path, index: dict, name: str, dtype: torch.dtype, device: torch.device) -> Any:
    """One pipeline component by its own class (``model_index.json`` names it), placed on a GPU
    as it is read (``device_map``) rather than copied there from host memory afterwards."""
    library, class_name = index[name]
    component_class = getattr(importlib.import_module(library), class_name)
    kwargs: dict[str, Any] = {"torch_dtype": dtype}
    if device.type != "cpu":
        kwargs["device_map"] = {"": str(device)}
    return component_class.from_pretrained(str(source / name), **kwargs)


def _process_count() -> int:
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def resolve_dtype(value: "str | torch.dtype | None") -> "torch.dtype | None":
    if value is None or isinstance(value, torch.dtype):
        return value
    dtype = getattr(torch, str(value), None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"torch_dtype {value!r} is not a torch dtype; use 'float32' or 'bfloat16'")
    return dtype


def set_attention_backend(transformer: Any, backend: str) -> None:
    """diffusers' attention dispatcher backend for ``transformer`` (``native``, ``flash``, ``sage``
    …), refused in one line naming the choices when the installed diffusers lacks the dispatcher or
    the backend: a typo must not surface as an error inside the first forward pass."""
    import diffusers

    try:
        from diffusers.models.attention_dispatch import AttentionBackendName
    except ImportError:  # an older diffusers: no dispatcher
        AttentionBackendName = None
    if AttentionBackendName is None or not hasattr(transformer, "set_attention_backend"):
        raise ValueError(
            f"attention_backend={backend!r}: diffusers {diffusers.__version__} has no attention dispatcher; "
            "upgrade diffusers or leave attention_backend unset"
        )
    choices = sorted(b.value for b in AttentionBackendName if not b.value.startswith("_"))
    if backend not in {b.value for b in AttentionBackendName}:
        raise ValueError(
            f"attention_backend={backend!r} is not a diffusers backend; choose one of {', '.join(choices)}"
        )
    try:
        transformer.set_attention_backend(backend)
    except (RuntimeError, ImportError, ValueError) as err:  # the backend's package or hardware is missing
        raise ValueError(f"attention_backend={backend!r} cannot run here: {err}") from None


class DiffusersPolicy:
    """Base of the FLUX.2 and Qwen-Image policies. Give exactly one of ``path`` (a local
    directory saved by ``save_pretrained``, or a hub id on a machine with network) and
    ``pipeline`` (an already built pipeline, which the policy then owns)."""

    #: registry name, diffusers pipeline class name, and the transformer block lists FSDP2 shards
    name: ClassVar[str]
    pipeline_class_name: ClassVar[str]
    block_lists: ClassVar[tuple[str, ...]] = ("transformer_blocks",)
    #: what `cast window --policy ...` measures with: CLIP sees natural images' structure
    window_defaults: ClassVar[dict] = {"embedder": "clip"}
    #: what `cast train --cpu` / `cast sample --cpu` set (cast_core.cpu_overrides): the recipes put
    #: the text encoder on "cuda"; a GPU sampling line sets device and bf16 weights (slow on a CPU)
    cpu_settings: ClassVar[dict] = {
        "policy_kwargs.device": "cpu",
        "policy_kwargs.text_encoder_device": "cpu",
        "policy_kwargs.torch_dtype": "float32",
    }

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        pipeline: Any = None,
        torch_dtype: Any = None,
        device: str | torch.device = "cpu",
        text_encoder_device: str | torch.device | None = None,
        lora_rank: int = 64,
        lora_alpha: float | None = None,
        lora_targets: Sequence[str] | str | None = None,
        image_size: Sequence[int] | None = None,
        max_sequence_length: int = 512,
        compile: bool = False,
        attention_backend: str | None = None,
        load_sharded: bool = False,
    ):
        if path is not None and pipeline is not None:
            raise ValueError(
                f"{type(self).__name__}: give exactly one of path= (a local pipeline directory or hub id) "
                "and pipeline= (a built diffusers pipeline)"
            )
        dtype = resolve_dtype(torch_dtype)
        # a device this machine lacks: one line naming the key, before minutes of loading
        self.device = resolve_device(require_device(device, "policy_kwargs.device"))
        if text_encoder_device is not None:
            require_device(text_encoder_device, "policy_kwargs.text_encoder_device")
        lora_rank = check_lora_rank(lora_rank)
        lora_seed = draw_lora_seed()  # the one draw from the global stream, made by every path
        self.sharded_at_load = bool(load_sharded) and path is not None and _process_count() > 1
        if self.sharded_at_load:
            pipeline = self._load_sharded(
                path,
                dtype,
                self.device,
                resolve_device(text_encoder_device) if text_encoder_device is not None else self.device,
                lambda t: add_lora(t, **self._lora_options(t, lora_rank, lora_alpha, lora_targets)),
                lora_seed,
            )
        elif pipeline is None:
            pipeline = self._load(path, dtype)
        elif dtype is not None:
            for component in (pipeline.transformer, pipeline.text_encoder, pipeline.vae):
                component.to(dtype)
        expected = self.pipeline_class()
        if not isinstance(pipeline, expected):
            raise TypeError(f"{type(self).__name__} needs a {expected.__name__}, got {type(pipeline).__name__}")
        self.pipe = pipeline
        self.transformer = pipeline.transformer
        if not self.sharded_at_load:  # the sharded loader froze the base before adding the adapter
            self.transformer.requires_grad_(False)
        # the frozen base's dtype, read once: diffusers' ModelMixin.dtype walks every module, which
        # cost ~5% of a tiny model's sampling step when read per forward pass
        self.dtype = self.transformer.dtype
        pipeline.vae.requires_grad_(False)
        pipeline.text_encoder.requires_grad_(False)
        self.text_encoder_device = (
            resolve_device(text_encoder_device) if text_encoder_device is not None else self.device
        )
        if not self.sharded_at_load:  # the sharded transformer is already on its device
            self.transformer.to(self.device)
        pipeline.vae.to(self.device)
        pipeline.text_encoder.to(self.text_encoder_device)
        self.max_sequence_length = int(max_sequence_length)
        self.vae_scale = int(pipeline.vae_scale_factor) * 2  # pixels per latent token (8x VAE x 2x2 packing)
        size = (
            tuple(int(s) for s in image_size)
            if image_size is not None
            else (pipeline.default_sample_size * pipeline.vae_scale_factor,) * 2
        )
        self.default_image_size = self._check_size(size)
        self.lora = self._lora_options(self.transformer, lora_rank, lora_alpha, lora_targets)
        if not self.sharded_at_load:  # the sharded path added and drew its adapter while loading
            with torch.random.fork_rng(devices=[]):  # peft's own draws must not move the global stream
                add_lora(self.transformer, **self.lora)
            init_lora_(self.transformer, lora_seed)
        if attention_backend:
            set_attention_backend(self.transformer, attention_backend)
        self.compiled = bool(compile)
        if compile:  # after the adapter exists: the compiled blocks include its LoRA layers
            for block in self.blocks():
                block.compile()
        self._forward = self.transformer  # what runs the transformer: DDP's wrapper after prepare()
        self._schedules: dict[tuple, torch.Tensor] = {}
        self._negative: PromptEmbeds | None = None
        # what window caches key on: the model's location (None for a pipeline built in memory,
        # which cast_windows then identifies by class and options)
        self._path = None if path is None else _source(path)

    def blocks(self) -> list[torch.nn.Module]:
        """The transformer's repeated blocks: what FSDP2 shards one by one and ``compile`` compiles
        one by one (regional compilation: one compiled graph reused by every block of a kind, so
        compiling costs seconds, not the minutes of a whole-model graph)."""
        return [b for name in self.block_lists for b in getattr(self.transformer, name)]

    @property
    def identity(self) -> str | None:
        """What window caches key on: the model's location and every option that changes the
        trajectories (guidance, negative prompt, dtype, text length and layers); None for a
        pipeline built in memory, which cast_windows then identifies by class and options."""
        if self._path is None:
            return None
        options = ",".join(f"{k}={v}" for k, v in sorted(self.identity_options().items()))
        return f"{self.name}:{self._path}:{options}"

    def identity_options(self) -> dict:
        return {"dtype": str(self.dtype).removeprefix("torch."), "max_sequence_length": self.max_sequence_length}

    # -- construction ---------------------------------------------------------------------------
    @classmethod
    def pipeline_class(cls):
        import diffusers

        return getattr(diffusers, cls.pipeline_class_name)

    @classmethod
    def from_pipeline(cls, pipeline: Any, **options: Any) -> "DiffusersPolicy":
        return cls(pipeline=pipeline, **options)

    @classmethod
    def from_pretrained(cls, path: str | Path, torch_dtype: Any = None, **options: Any) -> "DiffusersPolicy":
        return cls(path, torch_dtype=torch_dtype, **options)

    @classmethod
    def _checked_source(cls, path: str | Path) -> str:
        return check_pipeline_dir(cls.__name__, cls.pipeline_class_name, path)

    @classmethod
    def _load(cls, path: str | Path, dtype: "torch.dtype | None") -> Any:
        source = cls._checked_source(path)
        with (
            warnings.catch_warnings()
        ):  # diffusers >= 0.42 renames torch_dtype to dtype; older ones know only torch_dtype
            warnings.filterwarnings("ignore", message=".*torch_dtype.*deprecated", category=FutureWarning)
            try:
                return cls.pipeline_class().from_pretrained(source, torch_dtype=dtype or torch.float32)
            except OSError as err:  # a component missing or unreadable, or a hub id without network
                first = str(err).splitlines()[0] if str(err) else type(err).__name__
                if Path(source).exists():
                    raise ModelPathError(
                        f"{cls.__name__}: policy_kwargs.path = {path} holds an incomplete or damaged "
                        f"{cls.pipeline_class_name} ({first[:200]})"
                    ) from None
                raise ModelPathError(
                    f"{cls.__name__}: {path} is neither a local pipeline directory nor a hub id "
                    f"that could be loaded here ({first[:200]})"
                ) from None

    @classmethod
    def _lora_options(cls, transformer, rank, alpha, targets) -> dict:
        if isinstance(targets, str):
            targets = [t.strip() for t in targets.split(",") if t.strip()]
        return {
            "rank": int(rank),
            "alpha": float(alpha if alpha is not None else 2 * rank),
            "targets": list(targets) if targets is not None else cls.default_lora_targets(transformer),
        }

    @classmethod
    def _load_sharded(cls, path, dtype, device, text_encoder_device, add_adapter, lora_seed) -> Any:
        """The pipeline with its transformer built on the meta device, sharded, and only this
        process's slice of each weight read (:mod:`cast_backbones.loading`); the text encoder
        and VAE loaded by their own classes, on a GPU straight to it (``device_map``), not
        through a host copy per process."""
        source = Path(cls._checked_source(path))
        index = json.loads((source / "model_index.json").read_text())
        library, class_name = index["transformer"]
        transformer_class = getattr(importlib.import_module(library), class_name)
        transformer = load_transformer_sharded(
            transformer_class,
            source / "transformer",
            dtype=dtype or torch.float32,
            device=device,
            add_adapter=add_adapter,
            blocks=lambda t: [b for name in cls.block_lists for b in getattr(t, name)],
            lora_seed=lora_seed,
        )
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*torch_dtype.*deprecated", category=FutureWarning)
            components = {
                name: _component(source, index, name, dtype or torch.float32, where)
                for name, where in (("text_encoder", text_encoder_device), ("vae", device))
            }
            pipeline = cls.pipeline_class().from_pretrained(
                str(source), transformer=None, **components, torch_dtype=dtype or torch.float32
            )
        pipeline.register_modules(transformer=transformer)
        return pipeline

    @staticmethod
    def default_lora_targets(transformer) -> list[str]:
        raise NotImplementedError

    # -- sizes and schedule ---------------------------------------------------------------------
    def _check_size(self, image_size: Sequence[int] | None) -> tuple[int, int]:
        if image_size is None:
            return self.default_image_size
        h, w = (int(s) for s in image_size)
        if h <= 0 or w <= 0 or h % self.vae_scale or w % self.vae_scale:
            raise ValueError(
                f"{type(self).__name__}: image_size {(h, w)} must be positive multiples of "
                f"{self.vae_scale} (the VAE's downsampling times the 2x2 packing)"
            )
        return h, w

    def latent_grid(self, image_size=None) -> tuple[int, int]:
        """``(H/16, W/16)`` for the real models: one token per 16x16 pixels."""
        h, w = self._check_size(image_size)
        return h // self.vae_scale, w // self.vae_scale

    def schedule_mu(self, image_seq_len: int, num_steps: int) -> float:
        raise NotImplementedError

    def sigmas(self, num_steps: int, image_size=None) -> torch.Tensor:
        """The pipeline's own sigmas: ``linspace(1, 1/N, N)`` shifted by the scheduler with the
        family's ``mu``, then the scheduler's final 0 — computed by a private copy of the
        pipeline's scheduler, so the shift code is diffusers' own."""
        if num_steps < 1:
            raise ValueError(f"num_steps must be >= 1, got {num_steps}")
        h, w = self.latent_grid(image_size)
        key = (num_steps, h, w)
        if key not in self._schedules:
            import numpy as np

            scheduler = type(self.pipe.scheduler).from_config(self.pipe.scheduler.config)
            sigmas = np.linspace(1.0, 1 / num_steps, num_steps)
            if getattr(scheduler.config, "use_flow_sigmas", False):
                sigmas = None
            scheduler.set_timesteps(sigmas=sigmas, mu=self.schedule_mu(h * w, num_steps), device="cpu")
            computed = scheduler.sigmas.detach().to(torch.float32).cpu()
            if not bool(torch.isfinite(computed).all()):
                raise ValueError(
                    f"{type(self).__name__}: the pipeline's scheduler gives non-finite sigmas for "
                    f"{num_steps} step(s): {computed.tolist()} (diffusers' shift_terminal divides by "
                    "zero for a single step); sample with more steps"
                )
            self._schedules[key] = computed
        return self._schedules[key].clone()

    def initial_noise(self, n: int, image_size=None, generator: torch.Generator | None = None) -> torch.Tensor:
        """Noise drawn as the pipeline draws it (``randn_tensor`` of its unpacked latent shape on
        the generator's device, in its dtype), then packed and kept in float32: the same
        generator gives the same start."""
        h, w = self.latent_grid(image_size)
        shape = self.noise_shape(n, h, w)
        device = generator.device if generator is not None else torch.device("cpu")
        # the pipeline draws in its prompt embeddings' dtype (the text encoder's): bf16 draws are
        # other numbers than float32 draws, so draw in that dtype and only then upcast
        x = torch.randn(shape, generator=generator, device=device, dtype=self.pipe.text_encoder.dtype)
        return self.pack(x, h, w).to(self.device, torch.float32)

    def noise_shape(self, n: int, h: int, w: int) -> tuple[int, ...]:
        raise NotImplementedError

    def pack(self, latents: torch.Tensor, h: int, w: int) -> torch.Tensor:
        raise NotImplementedError

    # -- text -------------------------------------------------------------------------------------
    def encode(self, prompts: Sequence[str], image_size=None) -> PromptEmbeds:
        with torch.no_grad():
            embeds = self.encode_prompts(list(prompts), self.text_encoder_device)
        return embeds.to(self.device)

    def encode_prompts(self, prompts: list[str], device: torch.device) -> PromptEmbeds:
        raise NotImplementedError

    def negative(self, n: int) -> PromptEmbeds:
        """The fixed negative prompt's conditioning, encoded once, as ``n`` rows."""
        if self._negative is None or self._negative.embeds.device != self.device:  # encoded or moved once
            self._negative = (
                self.encode([self.negative_prompt]) if self._negative is None else self._negative.to(self.device)
            )
        return self._negative.select([0] * n)

    negative_prompt: ClassVar[str] = ""

    def offload_text_encoder(self) -> None:
        """Move the text encoder to the CPU (encoding still works, slowly): the trainer calls this
        once every training prompt is encoded, so the accelerator holds only the transformer
        and the VAE."""
        if self._negative is None and self.uses_negative:
            self.negative(1)
        was = self.text_encoder_device
        self.pipe.text_encoder.to("cpu")
        self.text_encoder_device = torch.device("cpu")
        if was.type == "cuda":
            torch.cuda.empty_cache()  # hand the encoder's memory back before the transformer arrives

    uses_negative: ClassVar[bool] = False

    # -- training ---------------------------------------------------------------------------------
    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        return lora_parameters(self.transformer)

    def enable_gradient_checkpointing(self) -> None:
        """diffusers' own activation checkpointing of every transformer block."""
        self.transformer.enable_gradient_checkpointing()

    @contextlib.contextmanager
    def reference(self) -> Iterator[None]:
        """The base model: the adapter switched off, no second copy of the weights."""
        self.transformer.disable_adapters()
        try:
            yield
        finally:
            self.transformer.enable_adapters()

    def prepare(self, accelerator: Any, sharding: str = "accelerate") -> torch.nn.Module:
        """The transformer and VAE onto ``accelerator.device``, the transformer wrapped by
        ``accelerator.prepare`` (DDP across processes) or sharded block by block with FSDP2
        (``sharding="fsdp2"``: frozen bf16 base and float32 adapter alike). The text encoder
        stays on ``text_encoder_device``: the trainer encodes and offloads it before this."""
        self.device = torch.device(accelerator.device)
        if self.sharded_at_load:
            if sharding != "fsdp2":
                raise ValueError(
                    f"{type(self).__name__} was loaded sharded (load_sharded=True), so it trains only with "
                    f'sharding = "fsdp2"; set policy_kwargs.load_sharded = false for sharding = "{sharding}"'
                )
            self.transformer.to(self.device)  # a no-op when loaded there (the trainer loads it on its device)
            self.pipe.vae.to(self.device)
            self._forward = self.transformer
            return self._forward
        self.transformer.to(self.device)
        self.pipe.vae.to(self.device)
        if sharding == "fsdp2":
            blocks = self.blocks()
            self._forward = fully_shard_module(self.transformer, blocks)
        elif sharding == "accelerate":
            self._forward = accelerator.prepare(self.transformer)
        else:
            raise ValueError(
                f"{type(self).__name__}.prepare: unknown sharding {sharding!r}; use 'accelerate' or 'fsdp2'"
            )
        return self._forward

    def save_adapter(self, directory: str | Path) -> None:
        """``pytorch_lora_weights.safetensors`` that ``pipe.load_lora_weights(directory)`` loads."""
        save_lora(self.pipeline_class(), self.transformer, directory)

    def load_adapter(self, directory: str | Path) -> None:
        load_lora(self.transformer, directory)

    # -- sampling -------------------------------------------------------------------------------
    def _timestep(self, sigma: Any, n: int, dtype: torch.dtype) -> torch.Tensor:
        """``sigma`` as the ``[n]`` timestep the pipeline feeds: its ``t = 1000·σ`` cast to the
        latents' dtype, then divided by 1000 (in bf16 that rounding differs from casting σ)."""
        t = torch.as_tensor(sigma, dtype=torch.float32, device=self.device) * 1000
        return (t.expand(n) if t.ndim == 0 else t.reshape(n)).to(dtype) / 1000

    @torch.no_grad()
    def decode(self, latents: torch.Tensor, image_size=None) -> torch.Tensor:
        h, w = self.latent_grid(image_size)
        image = self.decode_latents(latents.to(self.device), h, w)
        return self.pipe.image_processor.postprocess(image, output_type="pt").float()

    def decode_latents(self, latents: torch.Tensor, h: int, w: int) -> torch.Tensor:
        raise NotImplementedError
