"""A deliberately simple AtomScorer: brightness stands in for a judge's verdict.

Every atom of an image gets the image's mean luminance as its score and the luminance map as its
heatmap — "where the judge looked" is simply where the image is bright.
"""

from __future__ import annotations

from typing import Sequence

import torch

from cast_core import AtomScores, SceneGraph

# ITU-R BT.601 luma weights
_LUMA = (0.299, 0.587, 0.114)


class MeanBrightnessScorer:
    def score(self, images: torch.Tensor, graphs: Sequence[SceneGraph], heatmaps: bool = False) -> AtomScores:
        if images.ndim != 4 or images.shape[1] != 3:
            raise ValueError(f"expected images [B, 3, H, W], got {tuple(images.shape)}")
        if len(images) != len(graphs):
            raise ValueError(f"got {len(images)} images but {len(graphs)} scene graphs")
        luma = torch.einsum("bchw,c->bhw", images.float().clamp(0, 1), torch.tensor(_LUMA))
        scores = [luma[i].mean().expand(len(g.atoms)).clone() for i, g in enumerate(graphs)]
        maps = [luma[i].expand(len(g.atoms), -1, -1).clone() for i, g in enumerate(graphs)] if heatmaps else None
        return AtomScores(graphs=list(graphs), scores=scores, heatmaps=maps)
