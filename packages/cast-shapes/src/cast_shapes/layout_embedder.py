"""``shapes-layout``: an embedder that sees what the shapes oracle cares about — which colour is
where — for selecting the SDE window on the shapes world.

CLIP knows nothing about 32-pixel synthetic shapes, and raw pixels weigh a one-pixel shift of an
edge like a moved object. This embedder keeps only the layout: every pixel is classified to the
nearest world colour (the palette or the white background, Euclidean RGB — the same decision the
oracle makes), each palette colour's mask is area-averaged to an ``8 × 8`` occupancy grid (the
fraction of each cell that colour covers), the six grids are concatenated (``6·64 = 384`` values)
and L2-normalised. Two images then have cosine ≈ 1 when the same colours occupy the same regions,
whatever the pixel noise, and lower as objects appear, vanish, move or change colour. The
background is left out: it is the complement of the rest and would only add a constant.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from cast_shapes.world import BACKGROUND, PALETTE


class LayoutEmbedder:
    """Per-colour occupancy maps of the shapes world (see the module docstring)."""

    def __init__(self, grid: int = 8):
        if grid < 1:
            raise ValueError(f"grid must be >= 1, got {grid}")
        self.grid = int(grid)
        self.colours = tuple(PALETTE)
        # row 0: background, rows 1..: palette colours in PALETTE order
        self._centres = torch.tensor([BACKGROUND, *PALETTE.values()], dtype=torch.float32) / 255.0

    @property
    def identity(self) -> str:
        return f"shapes-layout:grid={self.grid}"

    def classify(self, images: torch.Tensor) -> torch.Tensor:
        """Index of the nearest world colour per pixel ``[B, H, W]`` (0 = background,
        ``1 + i`` = the i-th palette colour)."""
        if images.ndim != 4 or images.shape[1] != 3:
            raise ValueError(f"expected images [B, 3, H, W] in [0, 1], got shape {tuple(images.shape)}")
        pixels = images.float().permute(0, 2, 3, 1)  # [B, H, W, 3]
        dist = ((pixels[..., None, :] - self._centres.to(pixels.device)) ** 2).sum(-1)  # [B, H, W, 1 + colours]
        return dist.argmin(-1)

    @torch.no_grad()
    def embed(self, images: torch.Tensor) -> torch.Tensor:
        labels = self.classify(images)
        masks = torch.stack([(labels == 1 + i) for i in range(len(self.colours))], dim=1).float()  # [B, 6, H, W]
        occupancy = F.adaptive_avg_pool2d(masks, (self.grid, self.grid)).flatten(1)
        return occupancy / occupancy.norm(dim=-1, keepdim=True).clamp_min(1e-12)


class ObjectsEmbedder:
    """``shapes-objects``: the objects the oracle *perceives*, as soft maps.

    Occupancy maps change smoothly while a blurred blob sharpens; the oracle's verdicts do not —
    they flip when a blob splits in two, gains corners or crosses a neighbour. This embedder
    runs the oracle's own perception (:func:`cast_shapes.perception.detect`) and draws every
    detected object as a Gaussian bump (``sigma`` pixels) at its centre, in the channel of its
    (colour, shape) — a blob that is no shape has a channel of its own per colour. The maps are
    pooled to a ``grid × grid`` raster, concatenated and L2-normalised. Two images are then
    similar exactly when the oracle would see the same objects in the same places, so the curve
    rises when the *perceived* scene settles, not when the pixels do. An image with no object at
    all embeds to a constant unit vector (not zero, which has no direction).
    """

    def __init__(self, grid: int = 8, sigma: float = 2.0):
        if grid < 1 or sigma <= 0:
            raise ValueError(f"grid must be >= 1 and sigma > 0, got grid={grid}, sigma={sigma}")
        from cast_shapes.world import COLOURS, SHAPES

        self.grid, self.sigma = int(grid), float(sigma)
        self._channels = {(c, s): i for i, (c, s) in enumerate((c, s) for c in COLOURS for s in (*SHAPES, None))}

    @property
    def identity(self) -> str:
        return f"shapes-objects:grid={self.grid}:sigma={self.sigma:g}"

    @torch.no_grad()
    def embed(self, images: torch.Tensor) -> torch.Tensor:
        from cast_shapes.perception import detect

        if images.ndim != 4 or images.shape[1] != 3:
            raise ValueError(f"expected images [B, 3, H, W] in [0, 1], got shape {tuple(images.shape)}")
        b, _, h, w = images.shape
        ys = torch.arange(h, dtype=torch.float32)[:, None] + 0.5
        xs = torch.arange(w, dtype=torch.float32)[None, :] + 0.5
        maps = torch.zeros(b, len(self._channels), h, w)
        for i, dets in enumerate(detect(images.detach().float().clamp(0, 1).cpu().numpy())):
            for d in dets:
                bump = torch.exp(-((xs - d.cx) ** 2 + (ys - d.cy) ** 2) / (2 * self.sigma**2))
                maps[i, self._channels[(d.colour, d.shape)]] += bump
        pooled = F.adaptive_avg_pool2d(maps, (self.grid, self.grid)).flatten(1)
        empty = pooled.norm(dim=-1) < 1e-12
        pooled[empty] = 1.0
        return pooled / pooled.norm(dim=-1, keepdim=True)
