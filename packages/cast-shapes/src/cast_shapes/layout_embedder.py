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


def _channels() -> dict[tuple[str, str | None], int]:
    """One channel per (colour, shape) the oracle can perceive, plus a shapeless blob per colour."""
    from cast_shapes.world import COLOURS, SHAPES

    return {(c, s): i for i, (c, s) in enumerate((c, s) for c in COLOURS for s in (*SHAPES, None))}


def _detect(images: torch.Tensor) -> list:
    """The oracle's perception on ``[B, 3, H, W]`` images in [0, 1]: detections per image."""
    from cast_shapes.perception import detect

    if images.ndim != 4 or images.shape[1] != 3:
        raise ValueError(f"expected images [B, 3, H, W] in [0, 1], got shape {tuple(images.shape)}")
    return detect(images.detach().float().clamp(0, 1).cpu().numpy())


def _unit_rows(x: torch.Tensor) -> torch.Tensor:
    """Rows L2-normalised; an all-zero row (no object at all) becomes a constant unit vector,
    since zero has no direction."""
    x = x.clone()
    x[x.norm(dim=-1) < 1e-12] = 1.0
    return x / x.norm(dim=-1, keepdim=True)


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
        self.grid, self.sigma = int(grid), float(sigma)
        self._channels = _channels()

    @property
    def identity(self) -> str:
        return f"shapes-objects:grid={self.grid}:sigma={self.sigma:g}"

    @torch.no_grad()
    def embed(self, images: torch.Tensor) -> torch.Tensor:
        detections = _detect(images)
        b, _, h, w = images.shape
        ys = torch.arange(h, dtype=torch.float32)[:, None] + 0.5
        xs = torch.arange(w, dtype=torch.float32)[None, :] + 0.5
        maps = torch.zeros(b, len(self._channels), h, w)
        for i, dets in enumerate(detections):
            for d in dets:
                bump = torch.exp(-((xs - d.cx) ** 2 + (ys - d.cy) ** 2) / (2 * self.sigma**2))
                maps[i, self._channels[(d.colour, d.shape)]] += bump
        return _unit_rows(F.adaptive_avg_pool2d(maps, (self.grid, self.grid)).flatten(1))


class SceneEmbedder:
    """``shapes-scene``: the oracle's scene as discrete facts, so that similarity moves in the
    same jumps as its verdicts.

    ``shapes-objects`` draws detections as smooth bumps, so a blob drifting one pixel or a fourth
    triangle appearing next to three changes the cosine only a little — while the oracle's count
    and relation verdicts flip outright. Here every (colour, shape) channel the perception finds
    (a blob that is no shape has a channel per colour) contributes two one-hot facts: its count
    (1, 2, 3, ``cap`` or more) and the ``cells × cells`` cell of its objects' mean centre. An
    absent channel contributes nothing. The cosine of two embeddings is then the number of facts
    the two scenes share over the geometric mean of the numbers they state — 1 exactly when the
    oracle would list the same objects, as many, in the same coarse places. An image with no
    object at all embeds to a constant unit vector (not zero, which has no direction).
    """

    def __init__(self, cells: int = 3, cap: int = 4):
        if cells < 1 or cap < 1:
            raise ValueError(f"cells and cap must be >= 1, got cells={cells}, cap={cap}")
        self.cells, self.cap = int(cells), int(cap)
        self._channels = _channels()
        self._block = self.cap + self.cells * self.cells

    @property
    def identity(self) -> str:
        return f"shapes-scene:cells={self.cells}:cap={self.cap}"

    @torch.no_grad()
    def embed(self, images: torch.Tensor) -> torch.Tensor:
        detections = _detect(images)
        b, _, h, w = images.shape
        out = torch.zeros(b, len(self._channels) * self._block)
        for i, dets in enumerate(detections):
            groups: dict[tuple, list] = {}
            for d in dets:
                groups.setdefault((d.colour, d.shape), []).append(d)
            for key, members in groups.items():
                base = self._channels[key] * self._block
                out[i, base + min(len(members), self.cap) - 1] = 1.0
                cx = sum(d.cx for d in members) / len(members)
                cy = sum(d.cy for d in members) / len(members)
                col = min(int(cx * self.cells / w), self.cells - 1)
                row = min(int(cy * self.cells / h), self.cells - 1)
                out[i, base + self.cap + row * self.cells + col] = 1.0
        return _unit_rows(out)
