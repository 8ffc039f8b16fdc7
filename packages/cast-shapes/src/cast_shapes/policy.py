"""The ``shapes`` policy: the pretrained shapes network behind cast's Policy protocol, with a
peft LoRA adapter on FLUX.2's attention and MLP projections.

Guidance is inside :meth:`ShapesPolicy.velocity` (true classifier-free guidance against the
empty prompt, as Qwen-Image does), so the policy *is* the guided velocity field. The adapter
starts as a no-op (B = 0); :meth:`reference` disables it for the KL term.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from pathlib import Path
from typing import Iterator, Sequence

import torch

from cast_shapes.checkpoint_io import DEFAULT_WEIGHTS, load_net
from cast_shapes.model import WordTokenizer, unpatchify
from cast_shapes.sampling_ode import guided_velocity

#: LoRA targets: FLUX.2's attention projections (double and single stream) and MLPs — the
#: same module names as the full-size FLUX.2 transformer, as a full-match regex for peft.
LORA_TARGETS = (
    r".*(attn\.(to_q|to_k|to_v|to_out\.0|add_q_proj|add_k_proj|add_v_proj|to_add_out|to_qkv_mlp_proj)"
    r"|single_transformer_blocks\.\d+\.attn\.to_out|ff(_context)?\.linear_(in|out))$"
)
ADAPTER_FILE = "pytorch_lora_weights.safetensors"  # diffusers' file name for LoRA weights
ADAPTER_CONFIG = "adapter_config.json"


def _checked_lora_rank(transformer: torch.nn.Module, rank) -> int:
    """A whole rank from 1 to the narrowest adapted layer's width, refused in one line before peft
    allocates: 0 is a traceback inside peft, and a rank above every layer's width adds nothing
    but memory (100000 would take minutes to allocate)."""
    import re

    from cast_core.errors import ConfigError

    widths = [
        min(m.in_features, m.out_features)
        for name, m in transformer.named_modules()
        if isinstance(m, torch.nn.Linear) and re.fullmatch(LORA_TARGETS, name)
    ]
    whole = isinstance(rank, int) and not isinstance(rank, bool)
    if not whole or not 1 <= rank <= min(widths):
        raise ConfigError(
            f"policy_kwargs.lora_rank = {rank!r}: the shapes policy's LoRA rank is a whole number from 1 to "
            f"{min(widths)} (its narrowest adapted layer's width; a larger rank adds nothing)"
        )
    return rank


class ShapesPolicy:
    def __init__(
        self,
        weights: str | Path | None = None,
        *,
        guidance: float = 2.0,
        lora_rank: int = 8,
        lora_alpha: float | None = None,
        device: str = "cpu",
        torch_dtype: str | torch.dtype = torch.float32,
    ):
        from peft import LoraConfig

        self.weights = Path(weights) if weights else DEFAULT_WEIGHTS
        self.net, self.metadata = load_net(self.weights)
        lora_rank = _checked_lora_rank(self.net.transformer, lora_rank)
        self.net.requires_grad_(False)
        self.net.to(device)
        self.cfg = self.net.cfg
        self.guidance = float(guidance)
        self.device = torch.device(device)
        self.default_image_size = (self.cfg.image_size, self.cfg.image_size)
        self.tokenizer = WordTokenizer(self.cfg.vocabulary, self.cfg.max_tokens)
        self.lora = {"r": lora_rank, "lora_alpha": lora_alpha or 2 * lora_rank, "target_modules": LORA_TARGETS}
        dtype = getattr(torch, torch_dtype) if isinstance(torch_dtype, str) else torch_dtype
        self.net.to(dtype)  # frozen base weights (bfloat16 halves them); the adapter stays float32
        self.net.transformer.add_adapter(LoraConfig(init_lora_weights="gaussian", **self.lora))
        for p in self.trainable_parameters():
            p.data = p.data.float()
        with torch.no_grad():
            self.uncond = self.net.text(self.tokenizer([""]).to(self.device))
        digest = hashlib.sha256(self.weights.read_bytes()).hexdigest()[:16]
        self.identity = f"shapes:{digest}:g{self.guidance}"

    # -- Policy protocol ------------------------------------------------------------------------
    def encode(self, prompts: Sequence[str], image_size=None) -> torch.Tensor:
        with torch.no_grad():  # the text encoder is frozen: only the transformer gets LoRA
            return self.net.text(self.tokenizer(list(prompts)).to(self.device))

    def sigmas(self, num_steps: int, image_size=None) -> torch.Tensor:
        self._check_size(image_size)
        if num_steps < 1:
            raise ValueError(f"num_steps must be >= 1, got {num_steps}")
        return torch.linspace(1.0, 0.0, num_steps + 1, dtype=torch.float32)

    def latent_grid(self, image_size=None) -> tuple[int, int]:
        self._check_size(image_size)
        return self.cfg.grid, self.cfg.grid

    def initial_noise(self, n: int, image_size=None, generator: torch.Generator | None = None) -> torch.Tensor:
        self._check_size(image_size)
        x = torch.randn(n, self.cfg.grid * self.cfg.grid, self.cfg.channels, generator=generator)
        return x.to(self.device)

    def velocity(self, latents: torch.Tensor, sigma, cond: torch.Tensor, image_size=None) -> torch.Tensor:
        self._check_size(image_size)
        return guided_velocity(self.net, latents, sigma, cond, self.uncond, self.guidance)

    def enable_gradient_checkpointing(self) -> None:
        """diffusers' own activation checkpointing of the FLUX.2 blocks."""
        self.net.transformer.enable_gradient_checkpointing()

    def decode(self, latents: torch.Tensor, image_size=None) -> torch.Tensor:
        self._check_size(image_size)
        return unpatchify(latents.float(), self.cfg.patch, self.cfg.image_size)

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        return [p for n, p in self.net.transformer.named_parameters() if "lora_" in n and p.requires_grad]

    @contextlib.contextmanager
    def reference(self) -> Iterator[None]:
        self.net.transformer.disable_adapters()
        try:
            yield
        finally:
            self.net.transformer.enable_adapters()

    @contextlib.contextmanager
    def inference(self) -> Iterator[None]:
        """Gradient-free forward passes at the bare network's speed, for evaluation and grids.

        peft's LoRA path costs a third of a sampling step on CPU here (two small matmuls, a cast
        and an add per targeted layer): folding the adapter into the base weights (``W + s·B·A``)
        and switching the path off samples about 1.45x faster. The base weights are *copied back*
        on exit, not un-merged by subtraction, which would leave rounding drift in the frozen
        model. A zero adapter (the base model) is not folded at all, so base evaluations are bit
        for bit those of :meth:`velocity`; a trained one differs from it by float rounding only.
        That is why training never samples under it: the update must recompute exactly the
        sampled log-probs. Inside :meth:`reference` (adapter already off) it changes nothing."""
        transformer = self.net.transformer
        layers = [m for m in transformer.modules() if hasattr(m, "get_delta_weight") and hasattr(m, "base_layer")]
        if not layers or any(getattr(m, "disable_adapters", False) for m in layers):
            yield
            return
        saved: list[tuple[torch.nn.Module, torch.Tensor]] = []
        try:
            with torch.no_grad():
                for m in layers:
                    delta = sum(m.get_delta_weight(name) for name in m.active_adapters if name in m.lora_A)
                    if isinstance(delta, torch.Tensor) and torch.count_nonzero(delta):
                        weight = m.base_layer.weight
                        saved.append((m, weight.detach().clone()))
                        weight.add_(delta.to(weight.dtype))
            transformer.disable_adapters()
            yield
        finally:
            transformer.enable_adapters()
            with torch.no_grad():
                for m, weight in saved:
                    m.base_layer.weight.copy_(weight)

    def save_adapter(self, directory: str | Path) -> None:
        from peft.utils import get_peft_model_state_dict
        from safetensors.torch import save_file

        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        state = get_peft_model_state_dict(self.net.transformer)
        save_file(
            {f"transformer.{k}": v.detach().contiguous().cpu() for k, v in state.items()}, str(directory / ADAPTER_FILE)
        )
        (directory / ADAPTER_CONFIG).write_text(json.dumps({**self.lora, "base": self.identity}, indent=2))

    def load_adapter(self, directory: str | Path) -> None:
        from peft.utils import get_peft_model_state_dict, set_peft_model_state_dict
        from safetensors.torch import load_file

        path = Path(directory) / ADAPTER_FILE
        if not path.is_file():
            raise FileNotFoundError(f"no LoRA weights at {path}; expected a directory written by save_adapter")
        state = {k.removeprefix("transformer."): v for k, v in load_file(str(path)).items()}
        expected = {k: tuple(v.shape) for k, v in get_peft_model_state_dict(self.net.transformer).items()}
        found = {k: tuple(v.shape) for k, v in state.items()}
        if found != expected:
            bad = sorted(set(found.items()) ^ set(expected.items()))
            raise ValueError(
                f"{path} does not match this policy's LoRA (rank/targets differ): "
                f"{len(bad)} mismatched tensors, e.g. {bad[0][0]}"
            )
        result = set_peft_model_state_dict(self.net.transformer, state)
        if getattr(result, "unexpected_keys", None):
            raise ValueError(f"{path}: unexpected LoRA tensors {result.unexpected_keys[:3]}")

    # -- extras -----------------------------------------------------------------------------------
    def check_prompts(self, prompts: Sequence[str]) -> None:
        """Refuse a prompt longer than the text encoder reads (cast_core's ``ChecksPrompts``),
        when the run starts rather than at the first step that encodes it."""
        from cast_core.errors import ConfigError

        limit = self.tokenizer.max_tokens
        for prompt in prompts:
            n = len(self.tokenizer.words(prompt))  # one token per word or comma
            if n > limit:
                shown = prompt if len(prompt) <= 80 else prompt[:77] + "..."
                raise ConfigError(
                    f"prompt {shown!r} has {n} tokens; the shapes policy reads at most {limit} "
                    "(words and commas each count one); shorten it or remove it from prompts"
                )

    #: What `cast window --policy shapes` measures with unless told otherwise: the oracle's scene
    #: as discrete facts and the settle rule — the pair whose formation point agrees with the
    #: oracle ground truth (docs/results.md, "Window validation"); the shapes *recipe* keeps its own
    #: window settings (cast_shapes.plugin).
    window_defaults = {"embedder": "shapes-scene", "method": "settle", "level": 0.9}

    @property
    def calibration_prompts(self) -> list[str]:
        """Prompts for window calibration: training prompts of every atom count (never held out)."""
        from cast_shapes.suites import suite

        return [p for k in range(3, 9) for p in suite(f"atoms-{k}")[:4]]

    def _check_size(self, image_size) -> None:
        if image_size is not None and tuple(image_size) != self.default_image_size:
            raise ValueError(f"the shapes policy draws {self.default_image_size} images, asked for {tuple(image_size)}")
