"""Pixels -> detections: colour segmentation, connected components, shape classification.

Only numpy, no learned parts, every step a documented rule, so the oracle is exact on rendered
images and degrades gracefully on blurred, noisy or generated ones:

1. **Colour.** The image is the background with flat colours painted on it, and a blurred edge
   pixel is a *mix* ``bg + a·(colour - bg)``. So each pixel is matched to the palette colour whose
   line segment from the background (``a`` in ``[0, ALPHA_MAX]``) passes closest to it: a pale red
   edge pixel is still red, not orange or background. The pixel is foreground when its mixing
   weight ``a >= FOREGROUND_ALPHA`` (more object than background, which puts the mask's edge where
   the unblurred edge was) and its distance to that segment is ``<= MAX_RESIDUAL`` (it is some
   palette colour at all).
2. **Components.** 4-connected components of the foreground, regardless of colour. Inside one
   component the majority colour wins (edge pixels of an orange shape that look yellow under noise
   are absorbed, not counted as yellow specks) — unless two colours each cover a substantial part
   (>= ``MIXED_FRACTION`` and >= ``MIN_AREA`` px) *and* the single-colour parts match shapes
   better (area-weighted IoU, step 4) than the whole: then two differently coloured objects touch
   and the component is split by colour.
3. **Specks.** Components under ``MIN_AREA`` pixels are dropped (the smallest world object, a
   7 px triangle, has 31).
4. **Shape.** The component is compared (IoU) with each shape's mask drawn in its own bounding box
   (:func:`cast_shapes.render.shape_mask`, the renderer's own definition), times the box's
   squareness ``min(w, h) / max(w, h)`` since every world shape has a square box. It is the best-matching
   shape when that IoU is ``>= MIN_IOU``, otherwise no shape (a blob). Evidence for shape ``s`` is
   ``sigmoid((IoU_s - max(best other IoU, MIN_IOU)) / SHAPE_SOFTNESS)``: above 0.5 exactly when
   ``s`` is the classified shape, and near 1 when it wins clearly.
"""

from __future__ import annotations

import math

import numpy as np

from cast_shapes.render import shape_mask
from cast_shapes.semantics import Detection
from cast_shapes.world import BACKGROUND, COLOURS, PALETTE, SHAPES

FOREGROUND_ALPHA = 0.5
ALPHA_MAX = 1.25
MAX_RESIDUAL = 0.2
"""In [0, 1] RGB units (Euclidean); about half the distance between the closest palette pair."""
MIXED_FRACTION = 0.2
MIN_AREA = 8
MIN_IOU = 0.6
SHAPE_SOFTNESS = 0.04

_BG = np.asarray(BACKGROUND, dtype=np.float32) / 255.0
_DIRS = np.asarray([PALETTE[c] for c in COLOURS], dtype=np.float32) / 255.0 - _BG  # [C, 3]
_DIR_SQ = (_DIRS**2).sum(1)


def classify_pixels(images: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For ``float [B, 3, H, W]`` images in [0, 1]: ``colour`` (int ``[B, H, W]``, index into
    ``COLOURS`` of the best segment), ``foreground`` (bool) and ``residual`` (``[B, H, W, C]``,
    distance of each pixel to each colour's segment)."""
    v = np.moveaxis(np.asarray(images, dtype=np.float32), 1, -1) - _BG  # [B, H, W, 3]
    dots = v @ _DIRS.T  # [B, H, W, C]
    alpha = np.clip(dots / _DIR_SQ, 0.0, ALPHA_MAX)
    resid_sq = (v**2).sum(-1, keepdims=True) - 2 * alpha * dots + alpha**2 * _DIR_SQ
    residual = np.sqrt(np.maximum(resid_sq, 0.0))
    colour = residual.argmin(-1)
    best_alpha = np.take_along_axis(alpha, colour[..., None], -1)[..., 0]
    best_resid = np.take_along_axis(residual, colour[..., None], -1)[..., 0]
    foreground = (best_alpha >= FOREGROUND_ALPHA) & (best_resid <= MAX_RESIDUAL)
    return colour, foreground, residual


def label_components(mask: np.ndarray) -> np.ndarray:
    """4-connected components of a bool ``[B, H, W]`` mask, vectorised over the batch.

    Returns int64 ``[B, H, W]``: background is -1, a component's pixels all hold the flat index
    (over the whole batch) of its first pixel. Min-label propagation to the 4 neighbours plus
    pointer jumping (a label is a pixel index, so ``label[label[p]]`` is a valid shortcut)."""
    mask = np.asarray(mask, dtype=bool)
    big = mask.size
    lab = np.where(mask, np.arange(big).reshape(mask.shape), big)
    while True:
        new = lab.copy()
        np.minimum(new[:, 1:], lab[:, :-1], out=new[:, 1:])
        np.minimum(new[:, :-1], lab[:, 1:], out=new[:, :-1])
        np.minimum(new[:, :, 1:], lab[:, :, :-1], out=new[:, :, 1:])
        np.minimum(new[:, :, :-1], lab[:, :, 1:], out=new[:, :, :-1])
        new = np.where(mask, new, big)
        flat = np.append(new.ravel(), big)
        for _ in range(3):
            flat = np.minimum(flat, flat[flat])
        new = flat[:-1].reshape(mask.shape)
        if np.array_equal(new, lab):
            break
        lab = new
    return np.where(mask, lab, -1)


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


def shape_ious(component: np.ndarray) -> tuple[dict[str, float], tuple[int, int, int, int]]:
    """IoU of a bool ``[H, W]`` component with each shape drawn in its bounding box, times the
    box's squareness ``min(w, h) / max(w, h)`` (world shapes have square boxes: a 2:1 rectangle
    is not a square, nor two touching squares one), and the box ``(x0, y0, x1, y1)``."""
    ys, xs = np.nonzero(component)
    y0, y1, x0, x1 = int(ys.min()), int(ys.max()) + 1, int(xs.min()), int(xs.max()) + 1
    crop = component[y0:y1, x0:x1]
    w, h = x1 - x0, y1 - y0
    squareness = min(w, h) / max(w, h)
    ious = {}
    for s in SHAPES:
        t = shape_mask(s, w, h)
        ious[s] = squareness * float((crop & t).sum()) / float((crop | t).sum())
    return ious, (x0, y0, x1, y1)


def classify_shape(component: np.ndarray) -> tuple[str | None, dict[str, float], tuple[float, float]]:
    """Shape, per-shape evidence and bounding-box centre ``(cx, cy)`` of a bool ``[H, W]`` mask."""
    ious, (x0, y0, x1, y1) = shape_ious(component)
    best = max(SHAPES, key=lambda s: ious[s])  # ties go to the first in SHAPES order
    evidence = {}
    for s in SHAPES:
        rival = max([ious[t] for t in SHAPES if t != s] + [MIN_IOU])
        ev = _sigmoid((ious[s] - rival) / SHAPE_SOFTNESS)
        evidence[s] = ev if s == best else min(ev, 0.49)
    shape = best if ious[best] >= MIN_IOU else None
    if shape is None:
        evidence = {s: min(v, 0.49) for s, v in evidence.items()}
    return shape, evidence, ((x0 + x1) / 2.0, (y0 + y1) / 2.0)


def detect(images: np.ndarray) -> list[list[Detection]]:
    """The objects in each of ``float [B, 3, H, W]`` images in [0, 1] (masks included)."""
    images = np.asarray(images, dtype=np.float32)
    if images.ndim != 4 or images.shape[1] != 3:
        raise ValueError(f"expected images [B, 3, H, W], got shape {images.shape}")
    colour, fg, residual = classify_pixels(images)
    labels = label_components(fg)
    out: list[list[Detection]] = []
    for b in range(images.shape[0]):
        dets: list[Detection] = []
        for comp_mask, comp_colour in _split_components(labels[b], colour[b], residual[b]):
            if comp_mask.sum() < MIN_AREA:
                continue
            shape, evidence, (cx, cy) = classify_shape(comp_mask)
            dets.append(Detection(shape, COLOURS[comp_colour], cx, cy, evidence, comp_mask))
        out.append(dets)
    return out


def _split_components(labels: np.ndarray, colour: np.ndarray, residual: np.ndarray):
    """Yield ``(mask, colour index)`` per object: the component with its majority colour, or —
    when two colours each cover a substantial part — its single-colour parts, if those look more
    like shapes than the whole does (touching objects, not colour noise inside one object)."""
    ids, counts = np.unique(labels[labels >= 0], return_counts=True)
    for cid, area in zip(ids, counts):
        if area < MIN_AREA:
            continue
        mask = labels == cid
        hist = np.bincount(colour[mask], minlength=len(COLOURS))
        majority = int(hist.argmax())
        real = [c for c in range(len(COLOURS)) if hist[c] >= max(MIN_AREA, MIXED_FRACTION * area)]
        if len(real) <= 1:
            yield mask, majority
            continue
        nearest = np.asarray(real)[residual[..., real].argmin(-1)]  # among the real colours only
        parts = []
        for c in real:
            sub = label_components((mask & (nearest == c))[None])[0]
            for sid in np.unique(sub[sub >= 0]):
                part = sub == sid
                if part.sum() >= MIN_AREA:
                    parts.append((part, c))
        whole = max(shape_ious(mask)[0].values())
        split = sum(max(shape_ious(m)[0].values()) * m.sum() for m, _ in parts) / area
        if split > whole:
            yield from parts
        else:
            yield mask, majority
