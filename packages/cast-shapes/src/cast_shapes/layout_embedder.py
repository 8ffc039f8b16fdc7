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
