"""The objective variants of a recipe: ``NAME-nft``, ``NAME-awm``, ``NAME-cast-nft`` and
``NAME-cast-awm`` from any recipe ``NAME`` (the shapes world and each backbone register theirs
with :func:`objective_variants`), and the policy-less ``nft`` / ``awm`` / ``cast-nft`` /
``cast-awm`` that cast-core registers beside ``flow-grpo`` and ``cast``.

A variant keeps what its base recipe says about the model and the world (policy, scorer,
decomposer, prompts, steps, group size, learning rate, precision, memory settings) and changes
only what the objective changes: the objective itself, the credit (``scalar`` projector with one
advantage per sample, or CAST's ``spatial`` maps per position), no SDE window (both objectives
sample with the plain ODE), heatmaps of the final image (there is no window start to take x̂0
at) and the method's published KL weight, unless the base recipe trains without KL (the shapes
world: every method there trains without it).
"""

from __future__ import annotations

from typing import Any, Mapping

from cast_core.types import Recipe

__all__ = ["VARIANTS", "KL_WEIGHTS", "objective_variants", "variant"]

#: the KL weight each method publishes (DiffusionNFT ``train.beta``; AWM ``geneval_sd3`` ``train.beta``)
KL_WEIGHTS = {"nft": 1e-4, "awm": 1e-3}

#: variant suffix -> (objective, projector, ratio_mode)
VARIANTS: dict[str, tuple[str, str, str]] = {
    "nft": ("nft", "scalar", "sample"),
    "awm": ("awm", "scalar", "sample"),
    "cast-nft": ("nft", "spatial", "position"),
    "cast-awm": ("awm", "spatial", "position"),
}

_DESCRIPTIONS = {
    "nft": "DiffusionNFT with the scalar GM advantage (ODE sampling, forward-process loss)",
    "awm": "advantage-weighted matching with the scalar GM advantage (ODE sampling)",
    "cast-nft": "DiffusionNFT with CAST's credit: per-atom advantages through heatmaps, per position",
    "cast-awm": "advantage-weighted matching with CAST's credit, per position",
}

#: settings that belong to the SDE window or to x̂0 maps at its start: not carried into a variant
_WINDOW_SETTINGS = ("window_kwargs", "window_start", "window_size", "heatmap_source", "eta", "noise_block")


def variant(suffix: str, base: Recipe | None = None, *, label: str = "", kl: bool = True) -> Recipe:
    """Recipe ``suffix`` (a key of :data:`VARIANTS`) on top of ``base`` (``None``: policy-less);
    ``kl=False`` keeps training without KL (the shapes world's convention for every method)."""
    objective, projector, ratio_mode = VARIANTS[suffix]
    settings: dict[str, Any] = {
        k: v for k, v in dict(base.settings if base else {}).items() if k not in _WINDOW_SETTINGS
    }
    settings.update({"ratio_mode": ratio_mode, "heatmap_source": "final", "beta": KL_WEIGHTS[objective] if kl else 0.0})
    if base is None:  # the methods' own published batch: 24 images per prompt, lr 3e-4
        settings.update({"group_size": 24, "lr": 3e-4, "num_steps": 10, "adv_clip": 5.0, "max_grad_norm": 1.0})
    if projector == "spatial":
        settings.setdefault("lam", 1.0)
        settings.setdefault("gating", "soft")
    where = f" on {label}" if label else ""
    return Recipe(
        policy=base.policy if base else None,
        scorer=base.scorer if base else None,
        decomposer=base.decomposer if base else None,
        projector=projector,
        window=None,
        objective=objective,
        settings=settings,
        description=_DESCRIPTIONS[suffix] + where,
    )


def objective_variants(name: str, base: Recipe, *, kl: bool = True) -> Mapping[str, Recipe]:
    """``{f"{name}-{suffix}": recipe}`` for every variant of recipe ``name``."""
    return {f"{name}-{suffix}": variant(suffix, base, label=name, kl=kl) for suffix in VARIANTS}
