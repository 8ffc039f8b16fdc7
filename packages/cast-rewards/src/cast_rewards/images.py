"""Image tensors as the judges' processors want them."""

from __future__ import annotations

import torch

__all__ = ["to_pil"]


def to_pil(image: torch.Tensor):
    """``[3, H, W]`` floats in [0, 1] → an 8-bit RGB PIL image (what a judge sees of a saved PNG)."""
    from PIL import Image

    arr = (image.detach().float().clamp(0, 1).permute(1, 2, 0).cpu().numpy() * 255).round().astype("uint8")
    return Image.fromarray(arr)
