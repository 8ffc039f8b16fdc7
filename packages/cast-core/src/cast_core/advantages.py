"""From per-atom scores of one prompt group to advantages (docs/design.md §4, "Atoms → advantages").

A group is ``G`` images of the same prompt, scored on the ``K`` atoms of its scene graph:
``scores[g, k]`` in ``[0, 1]``. Three quantities come out of it:

* **gated** scores — a child atom's score only counts as far as its parents hold ("red" means
  nothing if there is no circle), DSG-style;
* **per-atom advantages** ``Â[g, k]`` — each atom z-scored within the group, so an atom every
  image passes (or fails) teaches nothing and is *counted* as saturated instead;
* **prompt-level advantage** ``Âg`` — the geometric mean of the atom scores (a soft AND: one
  failed atom fails the image) z-scored within the group.

A second way to credit atoms, :func:`log_gm_atom_advantages`, splits the prompt's own log-GM
advantage among its atoms instead of z-scoring each atom on its own (see there for why).

Standard deviations are *population* std (``unbiased=False``), as Flow-GRPO's ``np.std``: the
group is the whole population being compared, and a group of 2 should give ±1, not ±0.71.

Everything here is small (``G×K``), so it is computed in float64 and returned in the input's
floating dtype; that keeps the zero-mean and affine-invariance properties tight.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Sequence

import torch

__all__ = [
    "GATING_MODES",
    "gate_scores",
    "atom_advantages",
    "prompt_advantages",
    "group_zscore",
    "geometric_mean",
    "AdvantageStats",
    "advantage_stats",
    "topological_order",
    "log_gm_atom_advantages",
    "LOG_FLOOR",
]

GATING_MODES = ("soft", "hard")

#: Below this group std an atom (or reward) counts as having no spread. Scores live in [0, 1];
#: float32 round-off of identical scores gives ~1e-8, real disagreement is orders larger.
MIN_STD = 1e-6


def _out_dtype(t: torch.Tensor) -> torch.dtype:
    return t.dtype if t.is_floating_point() else torch.float32


def _check_scores(scores: torch.Tensor) -> None:
    if scores.ndim != 2:
        raise ValueError(f"scores must be [G, K] (group × atoms), got shape {tuple(scores.shape)}")


def topological_order(parents: Sequence[Sequence[int]]) -> list[int]:
    """Atom indices with every parent before its children (stable: ties keep index order).
    Raises ``ValueError`` on a parent index out of range or a cycle."""
    k = len(parents)
    for i, ps in enumerate(parents):
        for p in ps:
            if not 0 <= p < k:
                raise ValueError(f"atom {i} has invalid parent index {p} (there are {k} atoms)")
            if p == i:
                raise ValueError(f"parent links form a cycle through atom {i} (it is its own parent)")
    order: list[int] = []
    state = [0] * k  # 0 = new, 1 = on the current path, 2 = placed

    def visit(i: int) -> None:
        if state[i] == 2:
            return
        if state[i] == 1:
            raise ValueError(f"parent links form a cycle through atom {i}")
        state[i] = 1
        for p in parents[i]:
            visit(p)
        state[i] = 2
        order.append(i)

    for i in range(k):
        visit(i)
    return order


def gate_scores(
    scores: torch.Tensor,
    parents: Sequence[Sequence[int]],
    mode: str = "soft",
    threshold: float = 0.5,
) -> torch.Tensor:
    """Gate each atom's score ``[G, K]`` by its parents (``parents[k]`` = indices of atom k's
    parents, e.g. ``SceneGraph.parent_indices()``).

    * ``"soft"``: ``S[:, k] = s[:, k] · Π_{p ∈ parents(k)} S[:, p]`` with the parents' *gated*
      scores, in topological order — a failed grandparent propagates to every descendant, and a
      relation is worth as much as both of its objects being present.
    * ``"hard"`` (DSG's ``calc_vqa_score``): ``S[:, k] = 0`` if any parent's **raw** score is
      below ``threshold``, otherwise the atom keeps its raw score. One level only, as in DSG.
    """
    _check_scores(scores)
    if len(parents) != scores.shape[1]:
        raise ValueError(f"{len(parents)} parent lists for {scores.shape[1]} atoms")
    if mode not in GATING_MODES:
        raise ValueError(f"unknown gating mode {mode!r}; choose one of {', '.join(GATING_MODES)}")
    raw = scores.double()
    if mode == "hard":
        topological_order(parents)  # validates the links
        cols = []
        for k, ps in enumerate(parents):
            ok = torch.ones_like(raw[:, k], dtype=torch.bool)
            for p in ps:
                ok &= raw[:, p] >= threshold
            cols.append(torch.where(ok, raw[:, k], torch.zeros_like(raw[:, k])))
    else:
        cols = [raw[:, k] for k in range(raw.shape[1])]
        for k in topological_order(parents):
            for p in parents[k]:
                cols[k] = cols[k] * cols[p]
    out = torch.stack(cols, 1) if cols else raw.clone()
    return out.to(_out_dtype(scores))


def _zscore_columns(x: torch.Tensor, eps: float, min_std: float) -> tuple[torch.Tensor, torch.Tensor]:
    """z-score each column of ``[G, K]`` (float64); zero columns whose std < ``min_std``."""
    mean = x.mean(0, keepdim=True)
    std = x.std(0, unbiased=False, keepdim=True) if x.numel() else torch.zeros_like(mean)
    flat = (std < min_std).squeeze(0)
    z = (x - mean) / (std + eps)
    z = torch.where(flat.unsqueeze(0), torch.zeros_like(z), z)
    return z, flat


def atom_advantages(
    gated: torch.Tensor, eps: float = 1e-6, *, min_std: float = MIN_STD
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-atom z-scores within the group: ``Â[g, k] = (S[g,k] - mean_g) / (std_g + eps)``.

    Returns ``(adv [G, K], zero_spread [K] bool)``. An atom whose group std is below ``min_std``
    (every image agrees) gets exactly 0 — it carries no learning signal, and dividing round-off
    by ``eps`` would invent one — and is flagged: the fraction of such atoms is the saturation
    signal that says the prompt is too easy (or too hard) for the current policy.
    """
    _check_scores(gated)
    z, flat = _zscore_columns(gated.double(), eps, min_std)
    return z.to(_out_dtype(gated)), flat


def group_zscore(r: torch.Tensor, eps: float = 1e-6, *, min_std: float = MIN_STD) -> torch.Tensor:
    """``(r - mean) / (std + eps)`` over a group's reward vector ``[G]`` (population std); all
    zeros when the group has no spread. Flow-GRPO's per-prompt normalisation uses ``eps=1e-4``."""
    if r.ndim != 1:
        raise ValueError(f"rewards must be a vector [G], got shape {tuple(r.shape)}")
    z, _ = _zscore_columns(r.double().unsqueeze(1), eps, min_std)
    return z.squeeze(1).to(_out_dtype(r))


#: Scores below this count as this in :func:`log_gm_atom_advantages`: GM's log of a 0 is -inf,
#: and a failed atom should weigh heavily (log 0.05 ≈ -3.0, against ≈ -0.1 for a 0.9), not
#: infinitely.
LOG_FLOOR = 0.05


def log_gm_atom_advantages(
    scores: torch.Tensor, floor: float = LOG_FLOOR, eps: float = 1e-6, *, min_std: float = MIN_STD
) -> tuple[torch.Tensor, torch.Tensor]:
    """Atom advantages that add up to the prompt's log-GM advantage: with
    ``ℓ[g,k] = log min(max(s[g,k], floor), 1)`` on the **raw** scores and ``L[g] = mean_k ℓ[g,k]`` (the
    log of the image's floored GM),
    ``Â[g,k] = (ℓ[g,k] - mean_g ℓ[:,k]) / (K · (std_g L + eps))``, so ``Σ_k Â[g,k]`` is exactly
    the z-score of ``L`` in the group.

    Why: per-atom z-scores (:func:`atom_advantages`) give every atom unit variance whatever it
    does to the image's GM, which the evaluation reports. An atom whose scores barely differ
    (four failed relations at sigmoid 0.01-0.03) gets the same ±1 as an object that is present
    in half the images and missing in the other half, so small soft-score differences become
    full-size advantages, and atoms are traded against each other at rates the metric does
    not use. Here an atom weighs what it moves the log-GM by, and the spatial map only
    redistributes the prompt's advantage over positions. Gating is not applied: the log of a
    gated score would count each parent's failure again in every child.

    Returns ``(adv [G, K], zero_spread [K])`` as :func:`atom_advantages` does (``zero_spread``
    of the raw scores, for the saturation statistics). All zeros when ``L`` has no spread.
    """
    _check_scores(scores)
    if not 0 < floor <= 1:
        raise ValueError(f"floor must be in (0, 1], got {floor}")
    s = scores.double()
    g, k = s.shape
    _, flat = _zscore_columns(s, eps, min_std)
    if k == 0 or g == 0:
        return torch.zeros_like(s).to(_out_dtype(scores)), flat
    logs = torch.log(s.clamp(min=floor, max=1.0))
    centred = logs - logs.mean(0, keepdim=True)
    spread = logs.mean(1).std(unbiased=False)
    if spread < min_std:
        return torch.zeros_like(s).to(_out_dtype(scores)), flat
    return (centred / (k * (spread + eps))).to(_out_dtype(scores)), flat


def geometric_mean(scores: torch.Tensor) -> torch.Tensor:
    """Per-image geometric mean of the atom scores ``[G, K] -> [G]`` (float64): the soft AND.

    Computed as ``exp(mean log s)``; an image with any atom at 0 gets exactly 0 (no ``log 0``
    is ever taken). With no atoms the empty product is 1.
    """
    _check_scores(scores)
    s = scores.double()
    if s.shape[1] == 0:
        return torch.ones(s.shape[0], dtype=torch.float64, device=s.device)
    dead = (s <= 0).any(1)
    logs = torch.log(torch.where(s > 0, s, torch.ones_like(s)))
    return torch.where(dead, torch.zeros_like(dead, dtype=s.dtype), logs.mean(1).exp())


def prompt_advantages(scores: torch.Tensor, eps: float = 1e-6, *, min_std: float = MIN_STD) -> torch.Tensor:
    """``Âg``: the geometric mean of each image's **raw** atom scores, z-scored in the group
    ``[G, K] -> [G]`` (zeros when every image gets the same GM)."""
    z, _ = _zscore_columns(geometric_mean(scores).unsqueeze(1), eps, min_std)
    return z.squeeze(1).to(_out_dtype(scores))


@dataclass
class AdvantageStats:
    """What one group's advantage computation tells the logs.

    ``saturated_atoms`` of ``total_atoms`` had no spread in the group (``saturated_fraction``,
    0 for a graph without atoms); ``reward_std`` is the population std of the per-image
    geometric mean, ``reward_mean_gm`` its mean, ``reward_mean_am`` the mean of the per-image
    arithmetic mean of the raw atom scores.
    """

    saturated_atoms: int
    total_atoms: int
    saturated_fraction: float
    reward_std: float
    reward_mean_gm: float
    reward_mean_am: float

    def as_dict(self) -> dict[str, float]:
        return {k: float(v) for k, v in asdict(self).items()}


def advantage_stats(scores: torch.Tensor, zero_spread: torch.Tensor) -> AdvantageStats:
    """Stats of a group from its raw ``scores [G, K]`` and :func:`atom_advantages`'
    ``zero_spread [K]``."""
    _check_scores(scores)
    gm = geometric_mean(scores)
    k = int(scores.shape[1])
    sat = int(zero_spread.sum())
    am = scores.double().mean(1) if k else torch.zeros_like(gm)
    return AdvantageStats(
        saturated_atoms=sat,
        total_atoms=k,
        saturated_fraction=sat / k if k else 0.0,
        reward_std=float(gm.std(unbiased=False)) if gm.numel() else 0.0,
        reward_mean_gm=float(gm.mean()) if gm.numel() else 0.0,
        reward_mean_am=float(am.mean()) if am.numel() else 0.0,
    )
