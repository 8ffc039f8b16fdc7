"""Oracle evaluation of a shapes network on the fixed suites (GenEval 2 layout: GM and AM)."""

from __future__ import annotations

import torch

from cast_core.aggregate import arithmetic_mean, geometric_mean


def evaluate_net(
    net,
    *,
    images_per_prompt: int = 4,
    num_steps: int = 20,
    guidance: float = 2.0,
    suites=("single", "heldout-hard"),
    limit: int | None = None,
    seed: int = 0,
) -> dict:
    """``{"<suite>_gm": …, "<suite>_am": …}`` — mean over prompts and images of the oracle's GM/AM."""
    from cast_shapes.grammar import graph_for_prompt
    from cast_shapes.oracle import ShapesOracleScorer
    from cast_shapes.sampling_ode import ode_sample
    from cast_shapes.suites import suite

    oracle = ShapesOracleScorer()
    out: dict = {}
    for name in suites:
        prompts = suite(name)[:limit] if limit else suite(name)
        batch = [p for p in prompts for _ in range(images_per_prompt)]
        images = torch.cat(
            [
                ode_sample(net, batch[i : i + 128], num_steps=num_steps, guidance=guidance, seed=seed + i)
                for i in range(0, len(batch), 128)
            ]
        )
        graphs = [graph_for_prompt(p) for p in batch]
        scores = oracle.score(images, graphs).scores
        out[f"{name}_gm"] = sum(geometric_mean(s.tolist()) for s in scores) / len(scores)
        out[f"{name}_am"] = sum(arithmetic_mean(s.tolist()) for s in scores) / len(scores)
    return out
