"""Advantage projectors: one prompt group's atom scores (and heatmaps) -> an advantage per latent
position (docs/design.md §4, "Projection"). Registered as the built-ins ``scalar`` and ``spatial``.

* :class:`ScalarProjector` is Flow-GRPO: every position of image ``g`` gets the prompt-level
  advantage ``Âg`` — the image is credited or blamed as a whole.
* :class:`SpatialProjector` is CAST: ``A[g](p) = λ·Âg + Σ_k Â[g,k]·H̃[g,k](p)`` — each atom's
  advantage is placed where the judge looked for it, on top of a λ-weighted global term.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from cast_core.advantages import (
    GATING_MODES,
    AdvantageStats,
    advantage_stats,
    atom_advantages,
    gate_scores,
    log_gm_atom_advantages,
    prompt_advantages,
)
from cast_core.scene_graph import SceneGraph
from cast_core.types import AdvantageMap

__all__ = [
    "ScalarProjector",
    "SpatialProjector",
    "AtomProjector",
    "normalise_heatmaps",
    "equalise_mass",
    "resize_maps",
    "HEATMAP_NORMS",
    "ATOM_CREDITS",
]


def _check(scores: torch.Tensor, graph: SceneGraph, latent_grid: tuple[int, int]) -> tuple[int, int]:
    if scores.ndim != 2 or scores.shape[1] != len(graph.atoms):
        raise ValueError(
            f"scores must be [G, K] with K = {len(graph.atoms)} atoms of {graph.prompt!r}, "
            f"got shape {tuple(scores.shape)}"
        )
    h, w = (int(v) for v in latent_grid)
    if h < 1 or w < 1:
        raise ValueError(f"latent_grid must be two positive ints, got {latent_grid!r}")
    return h, w


def _clip(raw: torch.Tensor, stats: AdvantageStats, adv_clip: float) -> tuple[torch.Tensor, dict[str, float]]:
    """Clip the map to ``±adv_clip``; stats = the AdvantageStats fields plus the fraction of
    positions the clip changed (``clipped_fraction``)."""
    out = stats.as_dict()
    out["clipped_fraction"] = float((raw.abs() > adv_clip).float().mean()) if raw.numel() else 0.0
    return raw.clamp(-adv_clip, adv_clip).contiguous(), out


def _check_clip(adv_clip: float) -> float:
    adv_clip = float(adv_clip)
    if not adv_clip > 0:
        raise ValueError(f"adv_clip must be > 0, got {adv_clip}")
    return adv_clip


class ScalarProjector:
    """Flow-GRPO's advantage: the constant map ``Âg`` (GM of the raw atom scores, z-scored in
    the group), clipped to ``±adv_clip`` as Flow-GRPO clips before its loss.

    ``prompt_advantages`` is the unclipped ``Âg``; ``values`` the clipped map.
    """

    needs_heatmaps = False  # the trainer then asks the scorer for scores only

    def __init__(self, adv_clip: float = 5.0, eps: float = 1e-6):
        self.adv_clip = _check_clip(adv_clip)
        self.eps = float(eps)

    def project(
        self,
        scores: torch.Tensor,
        heatmaps: torch.Tensor | None,
        graph: SceneGraph,
        latent_grid: tuple[int, int],
    ) -> AdvantageMap:
        h, w = _check(scores, graph, latent_grid)
        scores = scores.float()
        adv_g = prompt_advantages(scores, self.eps)
        # zero_spread is still computed on the gated atoms so that saturation logs the same way
        # for both recipes and runs can be compared.
        _, flat = atom_advantages(gate_scores(scores, graph.parent_indices()), self.eps)
        values, stats = _clip(adv_g[:, None, None].expand(-1, h, w), advantage_stats(scores, flat), self.adv_clip)
        return AdvantageMap(values, adv_g, stats)


def normalise_heatmaps(heatmaps: torch.Tensor | None, shape: tuple[int, ...]) -> torch.Tensor:
    """``H̃``: each map ``[..., H, W]`` divided by its own maximum, so its peak is 1.

    A flat map becomes 1 everywhere; an all-zero (or non-finite) map, or ``heatmaps=None``, is
    treated as flat — "the judge did not say where", so the atom's advantage applies uniformly.
    Max-normalisation (rather than sum-to-one) means the atom's advantage acts at **full
    strength** where the judge looked: a small object is not amplified to compensate for its
    size, and a large one is not diluted. ``shape`` is used only when ``heatmaps`` is None.
    """
    if heatmaps is None:
        return torch.ones(shape)
    hm = heatmaps.float().clamp_min(0)
    peak = hm.flatten(-2).amax(-1)[..., None, None]
    usable = torch.isfinite(peak) & (peak > 0) & torch.isfinite(hm).all(-1).all(-1)[..., None, None]
    return torch.where(usable, hm / torch.where(usable, peak, torch.ones_like(peak)), torch.ones_like(hm))


def resize_maps(maps: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """``[..., H, W]`` maps onto the ``size`` latent grid: area averaging where the maps are at
    least as fine as the grid (an image-grid map: each latent position gets the mean over the
    pixels it covers), bilinear interpolation where they are coarser (a VLM judge's map has one
    cell per 32 px, coarser than FLUX.2's 16 px latent positions; copying cells would put
    hard steps into the advantage map)."""
    h, w = size
    H, W = maps.shape[-2:]
    flat = maps.reshape(-1, 1, H, W)
    if H >= h and W >= w:
        out = F.adaptive_avg_pool2d(flat, (h, w))
    else:
        out = F.interpolate(flat, size=(h, w), mode="bilinear", align_corners=False)
    return out.reshape(*maps.shape[:-2], h, w)


HEATMAP_NORMS = ("max", "mass")
ATOM_CREDITS = ("zscore", "log-gm")


def equalise_mass(maps: torch.Tensor) -> torch.Tensor:
    """``[G, K, h, w]`` maps rescaled so that atom ``k`` has the same total mass in every image
    of the group: the group's mean mass of that atom's maps. Mass-free (all-zero) maps stay 0."""
    mass = maps.sum((-2, -1), keepdim=True)
    target = mass.mean(0, keepdim=True)
    return torch.where(mass > 0, maps * target / mass.clamp_min(1e-12), torch.zeros_like(maps))


class SpatialProjector:
    """CAST's advantage map ``A[g](p) = λ·Âg + Σ_k Â[g,k]·H̃[g,k](p)`` on the latent grid.

    ``Â[g,k]`` are per-atom z-scores of the gated scores (``gating`` ``"soft"`` or ``"hard"``,
    ``threshold`` for hard), ``Âg`` the prompt-level GM z-score, ``H̃`` the max-normalised
    heatmaps (see :func:`normalise_heatmaps`). The map is formed on the heatmaps' grid and
    resized onto the ``(h, w)`` latent grid (:func:`resize_maps`: area averaging from the image
    grid, bilinear from a judge's coarser grid) — implemented by resizing each ``H̃`` first,
    which is the same thing because resizing is linear and λ·Âg is constant — then clipped to
    ``±adv_clip``. Saturated atoms contribute nothing because their ``Â`` is 0.

    ``atom_credit="log-gm"`` replaces the per-atom z-scores by atom advantages that add up to
    the z-scored log-GM of the raw scores (:func:`cast_core.advantages.log_gm_atom_advantages`):
    an atom weighs what it moves the image's GM by, and ``gating`` does not apply.

    ``heatmap_norm="mass"`` then rescales atom ``k``'s map in every image to the same total mass
    (the group's mean mass of the peak-normalised maps), as a judge's attention sums to one: each
    image gets the same *amount* of credit for an atom, spread over whatever the judge looked at.
    With ``"max"`` an image's credit for an atom grows with the area its map covers, so images
    whose maps cover more pixels weigh more. On the shapes world ``"mass"`` did not help
    (docs/shapes-rl.md: the harm there came from where the maps are computed, see the trainer's
    ``heatmap_source``), so the default stays ``"max"``, the paper's normalisation.
    """

    def __init__(
        self,
        lam: float = 1.0,
        adv_clip: float = 5.0,
        gating: str = "soft",
        threshold: float = 0.5,
        eps: float = 1e-6,
        heatmap_norm: str = "max",
        atom_credit: str = "zscore",
    ):
        if gating not in GATING_MODES:
            raise ValueError(f"unknown gating {gating!r}; choose one of {', '.join(GATING_MODES)}")
        if heatmap_norm not in HEATMAP_NORMS:
            raise ValueError(f"unknown heatmap_norm {heatmap_norm!r}; choose one of {', '.join(HEATMAP_NORMS)}")
        if atom_credit not in ATOM_CREDITS:
            raise ValueError(f"unknown atom_credit {atom_credit!r}; choose one of {', '.join(ATOM_CREDITS)}")
        self.heatmap_norm = heatmap_norm
        self.atom_credit = atom_credit
        self.lam = float(lam)
        self.adv_clip = _check_clip(adv_clip)
        self.gating = gating
        self.threshold = float(threshold)
        self.eps = float(eps)

    def project(
        self,
        scores: torch.Tensor,
        heatmaps: torch.Tensor | None,
        graph: SceneGraph,
        latent_grid: tuple[int, int],
    ) -> AdvantageMap:
        h, w = _check(scores, graph, latent_grid)
        g, k = scores.shape
        if heatmaps is not None and (heatmaps.ndim != 4 or tuple(heatmaps.shape[:2]) != (g, k)):
            raise ValueError(
                f"heatmaps must be [G, K, H, W] = [{g}, {k}, H, W] to match the scores, "
                f"got shape {tuple(heatmaps.shape)}"
            )
        device = heatmaps.device if heatmaps is not None else scores.device
        scores = scores.float().to(device)
        if self.atom_credit == "log-gm":
            adv_atoms, flat = log_gm_atom_advantages(scores, eps=self.eps)
        else:
            gated = gate_scores(scores, graph.parent_indices(), self.gating, self.threshold)
            adv_atoms, flat = atom_advantages(gated, self.eps)
        adv_g = prompt_advantages(scores, self.eps)
        if heatmaps is None or k == 0:
            maps = normalise_heatmaps(None, (g, k, h, w)).to(device)
        else:
            maps = normalise_heatmaps(heatmaps, ())
            maps = resize_maps(maps.reshape(g * k, 1, *maps.shape[-2:]), (h, w)).reshape(g, k, h, w)
            if self.heatmap_norm == "mass":
                maps = equalise_mass(maps)
        values = self.lam * adv_g[:, None, None] + torch.einsum("gk,gkhw->ghw", adv_atoms, maps)
        values, stats = _clip(values, advantage_stats(scores, flat), self.adv_clip)
        return AdvantageMap(values, adv_g, stats)


class AtomProjector(SpatialProjector):
    """Ablation between the two: CAST's atom-level advantages without spatial grounding —
    every heatmap is treated as flat, so ``A[g] = λ·Âg + Σ_k Â[g,k]`` everywhere. Comparing it
    with ``spatial`` isolates the effect of placing advantages where the judge looked."""

    needs_heatmaps = False

    def project(self, scores, heatmaps, graph, latent_grid) -> AdvantageMap:
        return super().project(scores, None, graph, latent_grid)
