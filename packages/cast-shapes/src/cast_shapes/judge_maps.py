"""The oracle's exact atom masks, degraded the way a VLM judge's attention would give them.

Why: the shapes oracle points at the exact pixels of an atom's objects, which no real judge
does. Qwen3-VL reads a 1024² image as a grid of merged 32-px tokens against FLUX's 16-px latents,
one token per two latent cells; on the 32×32 shapes images that ratio is a 4×4 token grid (one
token per 8 px). Its attention is also smooth and partly elsewhere. Training with maps degraded
this way (the bench's judge-resolution ablation) tells how much of the shapes-world gain rests on
exactness a VLM cannot give.

Three degradations, applied in this order to every non-flat map:

* ``grid`` — average-pool to ``grid × grid`` cells (the token grid), then hand the map back at
  image resolution with each cell's value repeated over its pixels;
* ``blur`` — a Gaussian of standard deviation ``blur`` *cells* on that grid (mass kept at the
  borders by renormalising the kernel);
* ``noise`` — that fraction of the map's mass moved to random cells: as many cells as the map
  covers, drawn without replacement, with equal shares — a distractor the size of the target.

Flat maps (nothing to point at) stay flat. The random cells come from a generator seeded with
the image's bytes, so the same image always gets the same map: resumed runs stay bit-identical.
"""

from __future__ import annotations

import hashlib

import numpy as np


def check(grid: int, blur: float, noise: float) -> None:
    """Raise ValueError for settings that mean nothing (the oracle turns it into a config error)."""
    if int(grid) != grid or grid < 0:
        raise ValueError(
            f"judge_grid must be 0 (exact pixel maps) or a positive number of cells per side, got {grid!r}"
        )
    if not blur >= 0:
        raise ValueError(f"judge_blur must be >= 0 (a Gaussian std in cells), got {blur!r}")
    if not 0 <= noise < 1:
        raise ValueError(f"judge_noise must be in [0, 1) (the share of mass moved to random cells), got {noise!r}")


def image_rng(image: np.ndarray) -> np.random.Generator:
    """A generator that depends only on the image's content (its 8-bit pixels)."""
    pixels = np.ascontiguousarray((np.clip(image, 0.0, 1.0) * 255).round().astype(np.uint8))
    return np.random.default_rng(int.from_bytes(hashlib.sha256(pixels.tobytes()).digest()[:8], "big"))


def _pool(m: np.ndarray, grid: int) -> np.ndarray:
    h, w = m.shape
    if h % grid or w % grid:
        raise ValueError(f"judge_grid={grid} must divide the image size {h}x{w}")
    return m.reshape(grid, h // grid, grid, w // grid).mean(axis=(1, 3))


def _gauss_1d(n: int, sigma: float) -> np.ndarray:
    idx = np.arange(n)
    k = np.exp(-0.5 * ((idx[:, None] - idx[None, :]) / sigma) ** 2)
    return k / k.sum(axis=1, keepdims=True)  # row i: how cell i's value is spread, renormalised at the borders


def _blur(m: np.ndarray, sigma: float) -> np.ndarray:
    if sigma == 0:
        return m
    rows, cols = _gauss_1d(m.shape[0], sigma), _gauss_1d(m.shape[1], sigma)
    return rows.T @ m @ cols  # separable: spread along rows, then along columns (total mass kept)


def _move_mass(m: np.ndarray, noise: float, rng: np.random.Generator) -> np.ndarray:
    if noise == 0 or m.sum() <= 0:
        return m
    p = m / m.sum()
    n = max(1, int((p > 0).sum()))
    cells = rng.choice(p.size, size=min(n, p.size), replace=False)
    r = np.zeros(p.size)
    r[cells] = 1.0 / len(cells)
    return (1 - noise) * p + noise * r.reshape(p.shape)


def degrade(maps: np.ndarray, image: np.ndarray, grid: int = 0, blur: float = 0.0, noise: float = 0.0) -> np.ndarray:
    """``maps`` [K, H, W] of one ``image`` [3, H, W] -> degraded maps [K, H, W] (float32, each
    non-flat map scaled to max 1; the projector normalises by the max too)."""
    check(grid, blur, noise)
    if grid == 0 and blur == 0 and noise == 0:
        return maps
    k, h, w = maps.shape
    rng = image_rng(image)
    out = np.array(maps, dtype=np.float32, copy=True)
    for i in range(k):
        m = maps[i].astype(np.float64)
        if m.max() == m.min():
            continue  # flat: the judge has nothing to point at; so does the degraded judge
        cells = _pool(m, grid) if grid else m
        cells = _move_mass(_blur(cells, blur), noise, rng)
        if grid:
            cells = np.repeat(np.repeat(cells, h // grid, axis=0), w // grid, axis=1)
        out[i] = (cells / cells.max()).astype(np.float32)
    return out
