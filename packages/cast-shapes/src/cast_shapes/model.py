"""The shapes world's text-to-image network: a word-level text encoder and a tiny
``Flux2Transformer2DModel`` denoising patchified pixels.

Reusing diffusers' FLUX.2 transformer (in a ~2M-parameter config) means the shapes world exercises
the same attention blocks, modulation, RoPE and LoRA target names as the real FLUX.2 backbone, so
what works here is evidence about FLUX.2 rather than about a toy. Latents are the image itself,
cut into ``patch × patch`` pixel patches: ``[B, (32/p)², 3·p²]`` in ``[-1, 1]``, row-major — the
packed layout of cast's Policy protocol.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import torch
from torch import nn

from cast_core.errors import InputError

from cast_shapes.world import COLOURS, IMAGE_SIZE, RELATIONS, SHAPES

SPECIAL = ("<pad>", "<unk>")


def default_vocabulary() -> tuple[str, ...]:
    """Every word (and the comma) a world prompt can contain, plus padding and unknown."""
    words = {"a", "an", "one", "two", "three", "four", "and", ","}
    words |= set(COLOURS) | set(SHAPES) | {s + "s" for s in SHAPES}
    words |= {w for r in RELATIONS for w in r.split()}
    return SPECIAL + tuple(sorted(words))


@dataclass(frozen=True)
class ShapesModelConfig:
    """Everything needed to rebuild the network; stored in the weights file's metadata."""

    image_size: int = IMAGE_SIZE
    patch: int = 4
    width: int = 128  # heads * head_dim, also the text width
    heads: int = 4
    double_layers: int = 2
    single_layers: int = 4
    text_layers: int = 2
    max_tokens: int = 16
    mlp_ratio: float = 3.0
    vocabulary: tuple[str, ...] = field(default_factory=default_vocabulary)

    @property
    def grid(self) -> int:
        return self.image_size // self.patch

    @property
    def channels(self) -> int:
        return 3 * self.patch * self.patch

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "ShapesModelConfig":
        data = dict(data)
        data["vocabulary"] = tuple(data.get("vocabulary", default_vocabulary()))
        return cls(**data)


class PromptTooLong(InputError, ValueError):
    """A user's prompt is longer than the model reads: one line (the prompt cut), not a traceback."""


class WordTokenizer:
    """Lower-cased words and commas -> ids, padded to ``max_tokens``. Unknown words map to
    ``<unk>`` (the model was never trained on them; the policy warns about them)."""

    def __init__(self, vocabulary: tuple[str, ...], max_tokens: int):
        self.vocabulary = vocabulary
        self.index = {w: i for i, w in enumerate(vocabulary)}
        self.max_tokens = max_tokens

    def words(self, prompt: str) -> list[str]:
        return prompt.lower().replace(",", " , ").replace(".", " ").split()

    def unknown_words(self, prompt: str) -> list[str]:
        return [w for w in self.words(prompt) if w not in self.index]

    def __call__(self, prompts: list[str]) -> torch.Tensor:
        ids = torch.zeros(len(prompts), self.max_tokens, dtype=torch.long)
        unk = self.index["<unk>"]
        for i, prompt in enumerate(prompts):
            tokens = [self.index.get(w, unk) for w in self.words(prompt)]
            if len(tokens) > self.max_tokens:
                shown = prompt if len(prompt) <= 120 else f"{prompt[:120]}… ({len(prompt)} characters)"
                raise PromptTooLong(
                    f"prompt {shown!r} has {len(tokens)} tokens; the shapes model reads at most {self.max_tokens}"
                )
            ids[i, : len(tokens)] = torch.tensor(tokens, dtype=torch.long)
        return ids


class TextEncoder(nn.Module):
    """Token + position embeddings and a small pre-norm transformer: enough to bind colours and
    counts to the noun that follows them, which a bag of words cannot."""

    def __init__(self, cfg: ShapesModelConfig):
        super().__init__()
        self.tokens = nn.Embedding(len(cfg.vocabulary), cfg.width)
        self.positions = nn.Parameter(torch.zeros(cfg.max_tokens, cfg.width))
        layer = nn.TransformerEncoderLayer(
            cfg.width, cfg.heads, dim_feedforward=2 * cfg.width, dropout=0.0, batch_first=True, norm_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, cfg.text_layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(cfg.width)
        nn.init.normal_(self.positions, std=0.02)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        pad = ids == 0
        x = self.tokens(ids) + self.positions[: ids.shape[1]]
        # a fully padded row (the empty prompt used for CFG) would make attention NaN: let it see pads
        pad = pad & ~pad.all(dim=1, keepdim=True)
        return self.norm(self.encoder(x, src_key_padding_mask=pad))


def build_transformer(cfg: ShapesModelConfig):
    from diffusers import Flux2Transformer2DModel

    head_dim = cfg.width // cfg.heads
    if head_dim % 4:
        raise ValueError(f"head_dim {head_dim} must be divisible by 4 (four RoPE axes)")
    return Flux2Transformer2DModel(
        patch_size=1,
        in_channels=cfg.channels,
        num_layers=cfg.double_layers,
        num_single_layers=cfg.single_layers,
        attention_head_dim=head_dim,
        num_attention_heads=cfg.heads,
        joint_attention_dim=cfg.width,
        timestep_guidance_channels=64,
        mlp_ratio=cfg.mlp_ratio,
        axes_dims_rope=(head_dim // 4,) * 4,
        guidance_embeds=False,
    )


class ShapesNet(nn.Module):
    """Text encoder + FLUX.2 denoiser; ``forward`` returns the velocity ``ε − x0``."""

    def __init__(self, cfg: ShapesModelConfig):
        super().__init__()
        self.cfg = cfg
        self.text = TextEncoder(cfg)
        self.transformer = build_transformer(cfg)
        g = cfg.grid
        hh, ww = torch.meshgrid(torch.arange(g), torch.arange(g), indexing="ij")
        img_ids = torch.stack([torch.zeros_like(hh), hh, ww, torch.zeros_like(hh)], -1).reshape(-1, 4)
        txt_ids = torch.zeros(cfg.max_tokens, 4, dtype=torch.long)
        txt_ids[:, 3] = torch.arange(cfg.max_tokens)
        self.register_buffer("img_ids", img_ids.float(), persistent=False)
        self.register_buffer("txt_ids", txt_ids.float(), persistent=False)

    def forward(self, latents: torch.Tensor, sigma: torch.Tensor, text: torch.Tensor) -> torch.Tensor:
        sigma = torch.as_tensor(sigma, dtype=latents.dtype, device=latents.device).reshape(-1).expand(latents.shape[0])
        return self.transformer(
            hidden_states=latents,
            encoder_hidden_states=text,
            timestep=sigma,  # diffusers multiplies by 1000 inside
            img_ids=self.img_ids,
            txt_ids=self.txt_ids[: text.shape[1]],
            return_dict=False,
        )[0]


def patchify(images: torch.Tensor, patch: int) -> torch.Tensor:
    """``[B, 3, H, W]`` in [0, 1] -> latents ``[B, N, 3·p²]`` in [-1, 1], row-major patches."""
    b, c, h, w = images.shape
    x = images * 2.0 - 1.0
    x = x.reshape(b, c, h // patch, patch, w // patch, patch).permute(0, 2, 4, 1, 3, 5)
    return x.reshape(b, (h // patch) * (w // patch), c * patch * patch)


def unpatchify(latents: torch.Tensor, patch: int, image_size: int) -> torch.Tensor:
    """Inverse of :func:`patchify`, clamped to [0, 1]."""
    b, g = latents.shape[0], image_size // patch
    x = latents.reshape(b, g, g, 3, patch, patch).permute(0, 3, 1, 4, 2, 5).reshape(b, 3, image_size, image_size)
    return ((x + 1.0) / 2.0).clamp(0.0, 1.0)
