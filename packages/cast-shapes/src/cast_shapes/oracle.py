"""The ``shapes-oracle`` scorer: exact per-atom scores and masks for shapes-world images.

It implements cast-core's ``AtomScorer`` protocol with the same interface as soft-tifa, but
judges from pixels alone with fixed rules instead of a VLM: :mod:`cast_shapes.perception` finds
the objects (colour segmentation, connected components, shape by template IoU), and
:mod:`cast_shapes.semantics` decides each atom from them (binding, counting, colour fractions,
group-centre relations). See those modules for every rule and threshold.

Heatmaps are the masks of the objects each atom is about — the pixels of the entity's objects
for ``object``/``count``/``attribute`` atoms, of both entities' objects for a ``relation`` — as
0/1 float maps. When there is nothing to point at (the object is missing, or the graph uses
words outside the world's vocabulary, which score 0) the map is flat (all ones), so the advantage
spreads evenly instead of pointing somewhere arbitrary.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from cast_core.scene_graph import SceneGraph
from cast_core.types import AtomScores

from cast_shapes import judge_maps
from cast_shapes.perception import detect
from cast_shapes.semantics import COUNT_MAPS, AtomResult, Detection, evaluate
from cast_shapes.world import BACKGROUND, IMAGE_SIZE, PALETTE

EXACT_TOLERANCE = 2.0
"""Largest channel difference (of 255) from a palette colour or the background that an exact
render may show: a PNG round trip keeps colours exact, an 8-bit rescale of a float image moves
them by at most one level; JPEG moves them by tens."""
_EXACT = np.asarray([BACKGROUND, *PALETTE.values()], dtype=np.float32)  # [C + 1, 3]


class ShapesOracleScorer:
    """Scores shapes-world images atom by atom. Stateless and deterministic; CPU numpy inside,
    so images may live on any device (results come back on the images' device).

    ``count_maps="surplus"`` points a count atom with too many objects at the surplus ones only
    (:func:`cast_shapes.semantics.evaluate`); scores are the same either way.

    ``judge_grid`` / ``judge_blur`` / ``judge_noise`` degrade the maps as a VLM judge's would be
    (:mod:`cast_shapes.judge_maps`: token grid, Gaussian blur in cells, share of mass moved to
    random cells); scores are unchanged. All off by default: exact masks."""

    def __init__(self, count_maps: str = "all", judge_grid: int = 0, judge_blur: float = 0.0, judge_noise: float = 0.0):
        from cast_core.config import ConfigError  # a CastError: the CLI prints one line, no traceback

        if count_maps not in COUNT_MAPS:
            raise ConfigError(
                f"shapes-oracle: count_maps must be one of {COUNT_MAPS}, got {count_maps!r} "
                '(set it with scorer_kwargs={count_maps="surplus"})'
            )
        try:
            judge_maps.check(judge_grid, judge_blur, judge_noise)
        except (TypeError, ValueError) as err:
            raise ConfigError(f"shapes-oracle: {err} (scorer_kwargs.judge_grid / judge_blur / judge_noise)") from None
        self.count_maps = count_maps
        self.judge = (int(judge_grid), float(judge_blur), float(judge_noise))

    def image_caveat(self, image: torch.Tensor) -> str | None:
        """Why ``image`` (``[3, H, W]`` in [0, 1], read from a file by ``cast score``) is not an
        exact shapes-world render, or None when it is. The rules here are exact on renders only:
        a JPEG's shifted colours or a resize's new edge pixels can move a score from 0.7 to 0.0
        with no error, so the user hears that these scores are approximate."""
        h, w = image.shape[-2:]
        how = "shapes-oracle is exact on shapes-world renders (`cast shapes render`) only; its scores of resized, "
        how += "JPEG-compressed or generated images are approximate and can fall to 0"
        if (h, w) != (IMAGE_SIZE, IMAGE_SIZE):
            return f"{w}x{h} pixels, not the world's {IMAGE_SIZE}x{IMAGE_SIZE}: {how}"
        pixels = (_to_numpy(image[None])[0] * 255.0).reshape(3, -1).T  # [H*W, 3] in 0..255
        nearest = np.abs(pixels[:, None, :] - _EXACT[None]).max(-1).min(-1)  # max channel error to the closest
        off = float((nearest > EXACT_TOLERANCE).mean())
        if off > 0:
            return f"{off:.0%} of its pixels are not shapes-world colours (palette or background): {how}"
        return None

    def detect(self, images: torch.Tensor) -> list[list[Detection]]:
        """The objects found in each image (shape, colour, box centre, mask)."""
        return detect(_to_numpy(images))

    def score(self, images: torch.Tensor, graphs: Sequence[SceneGraph], heatmaps: bool = False) -> AtomScores:
        if images.ndim != 4 or images.shape[1] != 3:
            raise ValueError(f"expected images [B, 3, H, W] in [0, 1], got shape {tuple(images.shape)}")
        if len(images) != len(graphs):
            raise ValueError(f"got {len(images)} images but {len(graphs)} scene graphs")
        h, w = images.shape[-2:]
        pixels = _to_numpy(images)
        detections = detect(pixels)
        scores, maps = [], []
        for graph, dets, image in zip(graphs, detections, pixels):
            results = evaluate(graph, dets, (h, w), count_maps=self.count_maps)
            scores.append(
                torch.tensor([min(max(r.score, 0.0), 1.0) for r in results], dtype=torch.float32, device=images.device)
            )
            if heatmaps:
                exact = _heatmaps(results, dets, h, w)
                try:
                    hm = judge_maps.degrade(exact, image, *self.judge)
                except ValueError as err:
                    raise ValueError(f"shapes-oracle: {err}") from None
                maps.append(torch.from_numpy(hm).to(images.device))
        return AtomScores(graphs=list(graphs), scores=scores, heatmaps=maps if heatmaps else None)


def _to_numpy(images: torch.Tensor) -> np.ndarray:
    return images.detach().to("cpu", torch.float32).clamp(0.0, 1.0).numpy()


def _heatmaps(results: Sequence[AtomResult], dets: Sequence[Detection], h: int, w: int) -> np.ndarray:
    out = np.ones((len(results), h, w), dtype=np.float32)
    for k, r in enumerate(results):
        if r.members:
            m = np.zeros((h, w), dtype=bool)
            for i in r.members:
                m |= dets[i].mask
            out[k] = m
    return out
