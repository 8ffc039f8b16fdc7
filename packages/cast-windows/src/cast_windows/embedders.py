"""Image embedders for window selection: ``pixels`` (always available) and ``clip`` (open_clip).

The window selector only ever compares an embedding with another one by cosine similarity, so an
embedder's job is to put "the same picture" close together and different pictures apart. CLIP
does that for real images (what a viewer would call the same content); downsampled pixels do it
crudely but need nothing, which is what tests, the fake policy and machines without CLIP weights
get. Every embedder here L2-normalises its output, so cosine similarity is a dot product.

Each embedder has an ``identity`` string naming what it computes; the window cache keys on it.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from cast_core.errors import CastError

#: CLIP's (OpenAI) image normalisation, used when the model does not carry its own.
OPENAI_MEAN = (0.48145466, 0.4578275, 0.40821073)
OPENAI_STD = (0.26862954, 0.26130258, 0.27577711)


class MissingExtraError(CastError, ImportError):
    """An optional dependency is not installed; the message names the pip extra."""


def l2_normalise(x: torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
    """Rows of ``x`` scaled to unit length (an all-zero row stays zero instead of becoming NaN)."""
    return x / x.norm(dim=-1, keepdim=True).clamp_min(eps)


def _check_images(images: torch.Tensor) -> torch.Tensor:
    if images.ndim != 4 or images.shape[1] != 3:
        raise ValueError(f"expected images [B, 3, H, W] in [0, 1], got shape {tuple(images.shape)}")
    return images.float()


class PixelsEmbedder:
    """Downsampled pixels: area-average to ``size × size``, subtract the image's mean, flatten,
    L2-normalise.

    Area averaging is the honest downsample (every pixel counts once), and a coarse grid keeps the
    comparison about layout and colour blobs, not pixel-exact detail. Subtracting the per-image mean
    makes the cosine a correlation: a shared bright background (white in the shapes world) would
    otherwise make every pair of images look alike and flatten the curve.
    """

    def __init__(self, size: int = 16, center: bool = True):
        if size < 1:
            raise ValueError(f"pixels embedder size must be >= 1, got {size}")
        self.size, self.center = int(size), bool(center)

    @property
    def identity(self) -> str:
        return f"pixels:size={self.size},center={self.center}"

    @torch.no_grad()
    def embed(self, images: torch.Tensor) -> torch.Tensor:
        x = F.adaptive_avg_pool2d(_check_images(images), (self.size, self.size)).flatten(1)
        if self.center:
            x = x - x.mean(dim=1, keepdim=True)
        return l2_normalise(x)


def _import_open_clip():
    try:
        import open_clip
    except ImportError as err:
        raise MissingExtraError(
            "the 'clip' embedder needs open_clip, which is not installed: "
            "pip install 'cast-windows[clip]' (or pip install open_clip_torch), "
            f"or use --embedder pixels ({err})"
        ) from None
    return open_clip


def _digest(model: Any) -> str:
    """A short hash of a model's weights: the cache identity of a CLIP model passed in directly
    (it has no name or tag to go by)."""
    import hashlib

    h = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(tensor.detach().float().cpu().contiguous().numpy().tobytes())
    return "sha256-" + h.hexdigest()[:16]


class ClipEmbedder:
    """CLIP image embeddings via open_clip (ViT-L-14 by default, as in docs/design.md §4).

    ``pretrained`` is an open_clip pretrained tag (e.g. ``"openai"``, fetched once into
    open_clip's cache on the user's machine) or a path to a local checkpoint file — pass a path to
    stay offline. ``model`` skips loading altogether and uses an open_clip ``CLIP`` model you built
    (the tests pass a tiny randomly initialised one). Images are resized (bicubic, antialiased) so
    the short side matches the model's input size, centre-cropped and normalised with the model's
    mean/std — the same geometry as open_clip's own eval transform, done on tensors so a batch of
    decoded images never round-trips through PIL.
    """

    def __init__(
        self,
        model_name: str = "ViT-L-14",
        pretrained: str | None = "openai",
        *,
        model: Any = None,
        device: str | torch.device | None = None,
        batch_size: int = 32,
        cache_dir: str | None = None,
    ):
        self.batch_size = int(batch_size)
        self.device = (
            torch.device(device) if device is not None else torch.device("cuda" if torch.cuda.is_available() else "cpu")
        )
        if model is None:
            if not pretrained:
                raise CastError(
                    f"the 'clip' embedder needs weights: pretrained=<open_clip tag such as 'openai'> or "
                    f"pretrained=<path to a checkpoint>; a randomly initialised {model_name} measures nothing"
                )
            open_clip = _import_open_clip()
            model = open_clip.create_model(model_name, pretrained=pretrained, device=self.device, cache_dir=cache_dir)
            self.model_name, self.pretrained = model_name, str(pretrained)
        else:
            self.model_name, self.pretrained = f"custom-{type(model).__name__}", None
            model = model.to(self.device)
        self.model = model.eval()
        visual = model.visual
        size = getattr(visual, "image_size", 224)
        self.input_size = tuple(size) if isinstance(size, (tuple, list)) else (int(size), int(size))
        cfg = getattr(visual, "preprocess_cfg", None) or {}
        self.mean = torch.tensor(cfg.get("mean", OPENAI_MEAN), dtype=torch.float32).view(1, 3, 1, 1)
        self.std = torch.tensor(cfg.get("std", OPENAI_STD), dtype=torch.float32).view(1, 3, 1, 1)

    @property
    def identity(self) -> str:
        weights = self.pretrained if self.pretrained is not None else _digest(self.model)
        return f"clip:{self.model_name}:{weights}:{self.input_size[0]}x{self.input_size[1]}"

    def preprocess(self, images: torch.Tensor) -> torch.Tensor:
        """Resize the short side to the model's input size, centre-crop, normalise."""
        x = _check_images(images).to(self.device)
        th, tw = self.input_size
        h, w = x.shape[-2:]
        scale = max(th / h, tw / w)
        nh, nw = max(th, round(h * scale)), max(tw, round(w * scale))
        if (nh, nw) != (h, w):
            x = F.interpolate(x, size=(nh, nw), mode="bicubic", align_corners=False, antialias=True)
        top, left = (nh - th) // 2, (nw - tw) // 2
        x = x[..., top : top + th, left : left + tw].clamp(0, 1)
        return (x - self.mean.to(x.device)) / self.std.to(x.device)

    @torch.no_grad()
    def embed(self, images: torch.Tensor) -> torch.Tensor:
        out = []
        for i in range(0, images.shape[0], self.batch_size):
            x = self.preprocess(images[i : i + self.batch_size])
            dtype = next(self.model.parameters()).dtype
            out.append(self.model.encode_image(x.to(dtype)).float().cpu())
        return l2_normalise(torch.cat(out)) if out else torch.empty(0, 0)
