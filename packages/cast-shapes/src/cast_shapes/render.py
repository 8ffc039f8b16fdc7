"""Layouts -> pixels: flat colours on the background, no antialiasing, numpy only.

The shape masks (:func:`shape_mask`) are defined on a ``w x h`` box so that every shape's
pixel bounding box *is* its box: the oracle can then classify a found component by matching it
against the same masks drawn at the component's own bounding-box size. One definition of "what a
triangle looks like" serves both drawing and verifying.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Sequence

import numpy as np

from cast_shapes.world import BACKGROUND, IMAGE_SIZE, PALETTE, SHAPES, Placed


@lru_cache(maxsize=4096)
def _shape_mask(shape: str, w: int, h: int) -> np.ndarray:
    ys, xs = np.mgrid[0:h, 0:w]
    px, py = xs + 0.5, ys + 0.5  # pixel centres
    if shape == "square":
        m = np.ones((h, w), dtype=bool)
    elif shape == "circle":  # ellipse inscribed in the box; a disc when w == h
        m = ((px - w / 2) / (w / 2)) ** 2 + ((py - h / 2) / (h / 2)) ** 2 <= 1.0
    elif shape == "triangle":  # apex at top centre, base along the bottom row
        # row r is filled to half-width (r + 1) / h * w / 2 (its lower edge), so the apex row is
        # never empty and the bounding box is the full box
        m = np.abs(px - w / 2) <= (ys + 1) / h * (w / 2)
    else:
        raise ValueError(f"unknown shape {shape!r}; shapes: {', '.join(SHAPES)}")
    m.setflags(write=False)
    return m


def shape_mask(shape: str, w: int, h: int | None = None) -> np.ndarray:
    """Boolean ``[h, w]`` mask of ``shape`` filling a ``w x h`` box (read-only, cached)."""
    h = w if h is None else h
    if w < 1 or h < 1:
        raise ValueError(f"shape box must be at least 1x1, got {w}x{h}")
    return _shape_mask(shape, int(w), int(h))


def object_masks(layout: Sequence[Placed], image_size: int = IMAGE_SIZE) -> np.ndarray:
    """Boolean ``[n, H, W]``: the pixels of each placed object."""
    out = np.zeros((len(layout), image_size, image_size), dtype=bool)
    for i, p in enumerate(layout):
        x0, y0, x1, y1 = p.box
        if x0 < 0 or y0 < 0 or x1 > image_size or y1 > image_size:
            raise ValueError(f"{p} lies outside the {image_size} px canvas")
        out[i, y0:y1, x0:x1] = shape_mask(p.shape, p.size)
    return out


def render(layout: Sequence[Placed], image_size: int = IMAGE_SIZE) -> np.ndarray:
    """``uint8 [3, H, W]`` image of the layout."""
    img = np.empty((image_size, image_size, 3), dtype=np.uint8)
    img[...] = BACKGROUND
    for p, m in zip(layout, object_masks(layout, image_size)):
        img[m] = PALETTE[p.colour]
    return np.ascontiguousarray(img.transpose(2, 0, 1))


def render_float(layout: Sequence[Placed], image_size: int = IMAGE_SIZE) -> np.ndarray:
    """``float32 [3, H, W]`` in ``[0, 1]`` — the form policies and scorers take."""
    return render(layout, image_size).astype(np.float32) / 255.0


def render_batch(layouts: Sequence[Sequence[Placed]], image_size: int = IMAGE_SIZE) -> np.ndarray:
    """``float32 [B, 3, H, W]`` in ``[0, 1]``."""
    if not layouts:
        return np.zeros((0, 3, image_size, image_size), dtype=np.float32)
    return np.stack([render_float(layout, image_size) for layout in layouts])
