"""cast-core's own components. Only factories are named here; torch loads when one is built."""

from __future__ import annotations

from cast_core.hookspecs import hookimpl
from cast_core.lazy import lazy
from cast_core.types import Recipe


@hookimpl
def register_policies(register):
    register(
        "fake",
        lazy("cast_core.testing.fakes:FakePolicy"),
        description="tiny linear-velocity policy on patchified 16x16 pixels (tests, examples)",
    )


@hookimpl
def register_atom_scorers(register):
    register(
        "constant",
        lazy("cast_core.testing.fakes:ConstantScorer"),
        description="scores every atom with one constant, flat heatmaps (tests, examples)",
    )
    register(
        "left-brightness",
        lazy("cast_core.testing.fakes:LeftBrightnessScorer"),
        description="spatial fake judge: brightness of the left half, left-half heatmaps (tests)",
    )
    register(
        "brightness",
        lazy("cast_core.testing.fakes:MeanBrightnessScorer"),
        description="prompt-level fake judge: the image's mean brightness (tests of several scorers)",
    )
    register(
        "sleeping",
        lazy("cast_core.testing.fakes:SleepingScorer"),
        description="left-brightness after a sleep (seconds=, per_image=): a slow judge for timing (benchmarks)",
    )


@hookimpl
def register_atom_decomposers(register):
    register(
        "fake",
        lazy("cast_core.testing.fakes:FakeDecomposer"),
        description="one entity per prompt (its last word): object + count atoms (tests, examples)",
    )


@hookimpl
def register_advantage_projectors(register):
    register(
        "scalar",
        lazy("cast_core.projectors:ScalarProjector"),
        description="Flow-GRPO: the prompt-level advantage (GM z-score) as a constant map",
    )
    register(
        "spatial",
        lazy("cast_core.projectors:SpatialProjector"),
        description="CAST: λ·prompt advantage + per-atom advantages placed by the judge's heatmaps",
    )
    register(
        "atoms",
        lazy("cast_core.projectors:AtomProjector"),
        description="ablation: CAST's atom-level advantages spread uniformly (no heatmaps)",
    )


@hookimpl
def register_objectives(register):
    register(
        "sde-clipped",
        lazy("cast_core.objectives.sde_clipped:SDEClipped"),
        description="Flow-GRPO / CAST: clipped ratio of SDE-window log-probs, per sample or per position",
    )
    register(
        "nft",
        lazy("cast_core.objectives.nft:NFT"),
        description="DiffusionNFT: implicit positive/negative velocities on the forward process, ODE sampling",
    )
    register(
        "awm",
        lazy("cast_core.objectives.awm:AWM"),
        description="advantage-weighted matching: advantage-weighted flow-matching loss, ODE sampling",
    )


# Flow-GRPO's published defaults (config/grpo.py, geneval_sd3), shared by both recipes so that
# a comparison changes only what CAST changes. Recipes name components; the window selectors
# come from cast-windows (`--window none` falls back to window_start/window_size). Neither names a
# scorer or a policy: they are the methods, for any model and judge, so a run must name its scorer
# (--scorer NAME; build_config refuses one that does not, rather than train on `constant`).
_GRPO_DEFAULTS = {
    "group_size": 24,
    "clip_range": 1e-4,
    "eta": 0.7,
    "adv_clip": 5.0,
    "lr": 3e-4,
    "num_steps": 10,
    "max_grad_norm": 1.0,
}


@hookimpl
def register_recipes(register):
    register(
        "flow-grpo",
        Recipe(
            projector="scalar",
            window="random",
            settings={
                **_GRPO_DEFAULTS,
                "ratio_mode": "sample",
                "beta": 0.04,
                "window_kwargs": {"size": 3, "lo": 0, "hi": 6},
            },
            description="Flow-GRPO(-Fast): scalar GM advantage, one ratio per sample, KL 0.04, random 3-step window "
            "(name the model and judge: --policy NAME --scorer NAME)",
        ),
    )
    register(
        "cast",
        Recipe(
            projector="spatial",
            window="clip-curvature",
            settings={
                **_GRPO_DEFAULTS,
                "ratio_mode": "position",
                "beta": 0.0,
                "lam": 1.0,
                "gating": "soft",
                "window_kwargs": {"embedder": "pixels"},
            },
            description="CAST: measured window, per-atom advantages through heatmaps, per-position ratios "
            "(name the model and judge: --policy NAME --scorer NAME)",
        ),
    )
    from cast_core.objectives.recipes import VARIANTS, variant

    for suffix in VARIANTS:  # nft, awm, cast-nft, cast-awm: the objectives' published settings
        register(suffix, variant(suffix))
