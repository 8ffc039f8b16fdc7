"""Entry point of cast-shapes (``[project.entry-points.cast] shapes = "cast_shapes.plugin"``).

Only names and lazy factories here: loading the plugin imports neither numpy nor torch.
"""

from cast_core import Recipe, hookimpl, lazy


@hookimpl
def register_policies(register):
    register(
        "shapes",
        lazy("cast_shapes.policy:ShapesPolicy"),
        description="tiny pretrained pixel-space FLUX.2 transformer of the shapes world, LoRA, CFG 2",
    )


@hookimpl
def register_embedders(register):
    register(
        "shapes-layout",
        lazy("cast_shapes.layout_embedder:LayoutEmbedder"),
        description="per-colour occupancy maps: what is where in a shapes-world image",
    )
    register(
        "shapes-objects",
        lazy("cast_shapes.layout_embedder:ObjectsEmbedder"),
        description="the objects the shapes oracle perceives (colour, shape, place) as soft maps",
    )
    register(
        "shapes-scene",
        lazy("cast_shapes.layout_embedder:SceneEmbedder"),
        description="the oracle's scene as discrete facts: count and coarse place per colour x shape",
    )


@hookimpl
def register_prompt_suites(register):
    from cast_shapes.suites import SUITE_NAMES  # pure Python, no numpy/torch

    for name in SUITE_NAMES:
        register(name, _suite_factory(name), description=f"shapes world suite {name!r}")


def _suite_factory(name):
    def factory():
        from cast_shapes.suites import suite

        return suite(name)

    return factory


@hookimpl
def register_recipes(register):
    shapes = Recipe(
        policy="shapes",
        scorer="shapes-oracle",
        decomposer="template",
        projector="spatial",
        window="clip-curvature",
        settings={
            "prompts": "cast_shapes.suites:train_prompts",
            # the two steps ending at the measured formation point: the shapes-scene similarity
            # settles (>= 0.9) at step 7 of 10, within one step of the oracle's own ground truth
            # (docs/results.md, "Window validation"); earlier steps' x̂0 is too blurry to point at objects
            "window_kwargs": {"embedder": "shapes-scene", "method": "settle", "window_size": 2},
            # maps from x̂0 before the window, not from the final image (docs/shapes-rl.md)
            "heatmap_source": "x0",
            "num_steps": 10,
            "eta": 0.7,
            "group_size": 8,
            "prompts_per_step": 4,
            "lr": 1e-4,
            "clip_range": 1e-3,
            "adv_clip": 5.0,
            "beta": 0.0,
            "lam": 1.0,
            "gating": "soft",
            "ratio_mode": "position",
            "sample_every": 10,
            "checkpoint_every": 25,
        },
        description="CAST on the built-in shapes world (CPU, minutes): the default of `cast train`",
    )
    register("shapes", shapes)
    from cast_core.objectives.recipes import objective_variants

    # shapes-nft, shapes-awm, shapes-cast-nft, shapes-cast-awm: without KL, as every method here
    for name, recipe in objective_variants("shapes", shapes, kl=False).items():
        register(name, recipe)


@hookimpl
def register_atom_scorers(register):
    register(
        "shapes-oracle",
        lazy("cast_shapes.oracle:ShapesOracleScorer"),
        description="exact per-atom verdicts and object masks for shapes-world images, from pixels",
    )
    register(
        "shapes-quality",
        lazy("cast_shapes.stand_in_scorers:ShapesQualityScorer"),
        description="prompt-level quality stand-in: share of cleanly drawn pixels (background or palette)",
    )
    register(
        "shapes-colour",
        lazy("cast_shapes.stand_in_scorers:ShapesColourScorer"),
        description="hackable on purpose: share of pixels of one colour (colour=red), whatever the prompt says",
    )
    register(
        "shapes-judge",
        lazy("cast_shapes.judge_scorer:shapes_judge"),
        description="soft-tifa on the learned shapes judge "
        "(a 1.2M-parameter Qwen3-VL trained on the world; see its model card)",
    )


@hookimpl
def register_commands(cli):
    from cast_shapes.commands import bench_command, shapes_group

    cli.add_command(shapes_group)
    cli.add_command(bench_command)
