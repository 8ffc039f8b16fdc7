"""The bytes a remote scorer and its server exchange: safetensors, never pickle.

A request is one safetensors blob: ``images`` ``[B, 3, H, W]`` float32 in ``[0, 1]``, with the
scene graphs (docs/design.md §3.1 JSON) and the ``heatmaps`` flag in its string metadata. A response is
one blob with ``scores.{i}`` ``[K_i]`` and, when asked, ``heatmaps.{i}`` ``[K_i, H, W]``. Why
safetensors: unpickling bytes from a network port runs whatever they say; safetensors only
ever yields tensors, and the format is already a dependency.
"""

from __future__ import annotations

import json
from typing import Sequence

import torch

from cast_core.scene_graph import SceneGraph
from cast_core.types import AtomScores

__all__ = ["encode_request", "decode_request", "encode_response", "decode_response", "WireError"]


class WireError(ValueError):
    """Bytes that are not a well-formed request or response; the message is one line."""


def encode_request(images: torch.Tensor, graphs: Sequence[SceneGraph], heatmaps: bool) -> bytes:
    from safetensors.torch import save

    meta = {"graphs": json.dumps([g.to_dict() for g in graphs]), "heatmaps": "1" if heatmaps else "0"}
    return save({"images": images.detach().float().cpu().contiguous()}, metadata=meta)


def decode_request(blob: bytes) -> tuple[torch.Tensor, list[SceneGraph], bool]:
    tensors, meta = _load(blob)
    images = tensors.get("images")
    if images is None or images.ndim != 4 or images.shape[1] != 3:
        raise WireError("the request holds no 'images' tensor shaped [B, 3, H, W]")
    try:
        graphs = [SceneGraph.from_dict(g) for g in json.loads(meta.get("graphs", ""))]
    except (ValueError, TypeError) as err:
        raise WireError(f"the request's scene graphs are not valid docs/design.md §3.1 JSON: {err}") from None
    if len(graphs) != images.shape[0]:
        raise WireError(f"{images.shape[0]} images but {len(graphs)} scene graphs")
    return images, graphs, meta.get("heatmaps") == "1"


def encode_response(scores: AtomScores) -> bytes:
    from safetensors.torch import save

    tensors = {f"scores.{i}": s.detach().float().cpu().contiguous() for i, s in enumerate(scores.scores)}
    for i, h in enumerate(scores.heatmaps or []):
        tensors[f"heatmaps.{i}"] = h.detach().float().cpu().contiguous()
    return save(tensors, metadata={"images": str(len(scores.scores)), "heatmaps": "1" if scores.heatmaps else "0"})


def decode_response(blob: bytes, graphs: Sequence[SceneGraph]) -> AtomScores:
    tensors, meta = _load(blob)
    n = int(meta.get("images", -1))
    if n != len(graphs):
        raise WireError(f"the response holds {n} images' scores for {len(graphs)} asked")
    scores = [tensors[f"scores.{i}"] for i in range(n)]
    maps = [tensors[f"heatmaps.{i}"] for i in range(n)] if meta.get("heatmaps") == "1" else None
    return AtomScores(graphs=list(graphs), scores=scores, heatmaps=maps)


def _load(blob: bytes) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Tensors and string metadata of a safetensors blob. The metadata is read from the format's
    header (8-byte little-endian length, then JSON with a ``__metadata__`` entry), which the
    in-memory ``load`` does not return."""
    from safetensors.torch import load

    try:
        tensors = load(blob)
        size = int.from_bytes(blob[:8], "little")
        meta = json.loads(blob[8 : 8 + size]).get("__metadata__") or {}
    except Exception as err:  # noqa: BLE001 - any malformed bytes
        raise WireError(f"not a safetensors blob ({type(err).__name__})") from None
    return tensors, meta
