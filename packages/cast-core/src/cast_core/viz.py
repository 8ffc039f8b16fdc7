"""Pictures people would rather look at than read: atom verdicts over heatmap overlays.

Pillow only (no matplotlib), so it works wherever cast-core installs. Small images (the shapes
world is 32×32) are upscaled with nearest-neighbour so pixels stay honest.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from pathlib import Path

    import torch
    from PIL import Image

    from cast_core.scene_graph import SceneGraph

PASS_COLOUR = (20, 140, 40)
FAIL_COLOUR = (200, 30, 30)


def save_picture(picture: "Image.Image", path: "str | Path") -> "Path":
    """``picture.save(path)`` under a temporary name, renamed when complete: a full or read-only
    disk is one :class:`~cast_core.run_dir.WriteError` line and leaves no 0-byte PNG behind."""
    from cast_core.run_dir import write_atomic

    return write_atomic(path, picture.save)


def _to_pil(image: "torch.Tensor", scale: int) -> "Image.Image":
    from PIL import Image

    arr = (image.detach().float().clamp(0, 1).permute(1, 2, 0).cpu().numpy() * 255).round().astype("uint8")
    pil = Image.fromarray(arr)
    return pil.resize((pil.width * scale, pil.height * scale), Image.NEAREST)


def heatmap_grid(
    image: "torch.Tensor", heatmaps: "torch.Tensor", graph: "SceneGraph", scores: "torch.Tensor", threshold: float = 0.5
) -> "Image.Image":
    """One row: the image, then each atom's heatmap (the rest of the image faded), captioned with the atom,
    its score and a PASS/FAIL verdict (``score >= threshold``)."""
    import torch
    from PIL import Image, ImageDraw

    scale = max(1, 128 // max(image.shape[-2:]))
    base = _to_pil(image, scale)
    tile_w, tile_h, caption = base.width, base.height, 28
    canvas = Image.new("RGB", (tile_w * (len(graph.atoms) + 1), tile_h + caption), "white")
    canvas.paste(base, (0, 0))
    draw = ImageDraw.Draw(canvas)
    draw.text((2, tile_h + 2), "image", fill=(0, 0, 0))
    for k, (atom, score) in enumerate(zip(graph.atoms, scores.tolist()), 1):
        m = heatmaps[k - 1].detach().float().to(image.device)  # a GPU judge's map, a CPU image
        m = m / m.max() if float(m.max()) > 0 else m
        # keep what the judge looked at, fade the rest to grey (tinting fails on red objects)
        faded = 0.25 * image.float() + 0.75 * torch.full_like(image.float(), 0.8)
        overlay = m * image.float() + (1 - m) * faded
        canvas.paste(_to_pil(overlay, scale), (k * tile_w, 0))
        ok = score >= threshold
        label = f"{atom.id} {atom.kind}" + (f" {atom.value}" if atom.value is not None else "")
        draw.text((k * tile_w + 2, tile_h + 2), label[: tile_w // 6], fill=(0, 0, 0))
        draw.text(
            (k * tile_w + 2, tile_h + 14),
            f"{'PASS' if ok else 'FAIL'} {score:.2f}",
            fill=PASS_COLOUR if ok else FAIL_COLOUR,
        )
    return canvas


def advantage_colours(adv: "torch.Tensor", size: tuple[int, int], scale: float | None = None) -> "torch.Tensor":
    """An ``[h, w]`` advantage map as an RGB image ``[3, H, W]``: red positive, blue negative,
    white zero, saturating at ``scale`` (default: the map's largest magnitude)."""
    import torch
    import torch.nn.functional as F

    a = adv.detach().float()
    scale = scale or float(a.abs().max()) or 1.0
    a = F.interpolate(a[None, None], size=size, mode="nearest")[0, 0] / scale
    pos, neg = a.clamp(min=0), (-a).clamp(min=0)
    return torch.stack([1 - neg, 1 - pos - neg, 1 - pos]).clamp(0, 1)


def sample_grid(
    images: "torch.Tensor",
    graph: "SceneGraph",
    scores,
    advantages: "torch.Tensor | None" = None,
    threshold: float = 0.5,
) -> "Image.Image":
    """One column per image of a group: the image, its advantage map (if given) and a caption
    with the GM and one PASS/FAIL mark per atom (``+`` pass, ``-`` fail, in atom order)."""
    from PIL import Image, ImageDraw

    from cast_core.aggregate import geometric_mean

    scale = max(1, 96 // max(images.shape[-2:]))
    tiles = [_to_pil(img, scale) for img in images]
    tw, th = tiles[0].size
    rows = 2 if advantages is not None else 1
    canvas = Image.new("RGB", (tw * len(tiles), th * rows + 30), "white")
    draw = ImageDraw.Draw(canvas)
    amax = float(advantages.abs().max()) if advantages is not None else 1.0
    for i, tile in enumerate(tiles):
        canvas.paste(tile, (i * tw, 0))
        if advantages is not None:
            colours = advantage_colours(advantages[i], tuple(images.shape[-2:]), amax)
            canvas.paste(_to_pil(0.5 * colours.to(images.device) + 0.5 * images[i].float(), scale), (i * tw, th))
        row = [float(s) for s in scores[i]]
        marks = "".join("+" if s >= threshold else "-" for s in row)
        draw.text((i * tw + 2, th * rows + 2), f"GM {geometric_mean(row):.2f}", fill=(0, 0, 0))
        draw.text((i * tw + 2, th * rows + 15), marks, fill=PASS_COLOUR if "-" not in marks else FAIL_COLOUR)
    return canvas
