"""Base vs trained over several evaluation seeds: the comparison an RL claim needs.

Why more than one seed: a paired evaluation (same prompts, same starting noise for both models)
has a standard error over prompts, but that error does not cover how much the choice of noise
seed moves the difference itself. On the shapes world, one pair of models measured with five
seeds gave paired GM differences from -0.032 to +0.009, each with an error over prompts of
about 0.015 (docs/shapes-rl.md, "How much of a difference one evaluation can resolve"). The number
to quote is the mean over seeds with its standard error over seeds, which is what this returns
next to each seed's own paired difference.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Callable, Sequence

from cast_core.evaluation import (
    evaluate,
    paired_difference,
    paired_skill_differences,
    paired_stats,
    unlike_evaluations,
)

__all__ = [
    "LAYOUT",
    "evaluate_over_seeds",
    "compare_evaluations",
    "compare_over_seeds",
    "summarise_seeds",
    "pool_evaluations",
]

#: the ``layout`` key of every base-vs-trained comparison (documented in :mod:`cast_core.run_dir`)
LAYOUT = "cast-comparison/1"


def _brief(result: dict[str, Any]) -> dict[str, Any]:
    return {"gm": result["gm"], "am": result["am"], "by_skill": result["by_skill"]}


def _paired(base: dict[str, Any], trained: dict[str, Any]) -> dict[str, Any]:
    return {
        "base": _brief(base),
        "trained": _brief(trained),
        "gm_difference": paired_difference(base, trained),
        "skill_differences": paired_skill_differences(base, trained),
    }


def _refuse_unlike(a: dict[str, Any], b: dict[str, Any]) -> None:
    """Results that record different judges (``cast eval --out`` files) are not to be paired or
    pooled; results without the record (:func:`evaluate`'s own) pass."""
    unlike, _ = unlike_evaluations(a, b)
    if unlike:
        raise ValueError(f"cannot compare evaluations measured differently: {'; '.join(unlike)}")


def evaluate_over_seeds(
    policy,
    prompts: Sequence[str],
    scorer,
    decomposer,
    *,
    seeds: Sequence[int],
    images_per_prompt: int = 4,
    num_steps: int = 10,
    progress: Callable[[int, int], None] | None = None,
) -> list[dict[str, Any]]:
    """:func:`~cast_core.evaluation.evaluate` once per seed, in order; ``progress(done, total)``
    counts images over all the seeds."""
    per_seed = len(prompts) * images_per_prompt
    total, out = per_seed * len(seeds), []
    for i, seed in enumerate(seeds):
        tick = (lambda done, _n, o=i * per_seed: progress(o + done, total)) if progress else None
        out.append(
            evaluate(
                policy,
                prompts,
                scorer,
                decomposer,
                images_per_prompt=images_per_prompt,
                num_steps=num_steps,
                seed=int(seed),
                progress=tick,
            )
        )
    return out


def compare_evaluations(
    seeds: Sequence[int], base: Sequence[dict[str, Any]], trained: Sequence[dict[str, Any]]
) -> dict[str, Any]:
    """The one record of base vs trained that the demo (``comparison.json``), the bench (each
    run's ``result.json``) and ``cast compare`` write and the report reads, from one
    :func:`~cast_core.evaluation.evaluate` result per seed of each model (same prompts, same
    seed at the same position). Why one: three layouts of the same numbers let a reader quote a
    per-seed difference from one and a pooled one from another without noticing. The layout
    (``LAYOUT``) is documented in :mod:`cast_core.run_dir`; ``over_seeds`` is None with one seed,
    which has no spread over seeds to report."""
    seeds = [int(s) for s in seeds]
    if not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"a comparison needs distinct evaluation seeds, got {seeds}")
    if len(base) != len(seeds) or len(trained) != len(seeds):
        raise ValueError(
            f"one evaluation per seed of each model: {len(seeds)} seeds, "
            f"{len(base)} base and {len(trained)} trained evaluations"
        )
    for b, t in zip(base, trained):
        _refuse_unlike(b, t)
    rows = [{"seed": seed, **_paired(b, t)} for seed, b, t in zip(seeds, base, trained)]
    first = base[0]
    return {
        "layout": LAYOUT,
        "seeds": seeds,
        "prompts": first["prompts"],
        "images_per_prompt": first["images"] // first["prompts"],
        "per_seed": rows,
        "pooled": _paired(pool_evaluations(base), pool_evaluations(trained)),
        "over_seeds": summarise_seeds(rows) if len(rows) > 1 else None,
    }


def compare_over_seeds(
    before,
    after,
    prompts: Sequence[str],
    scorer,
    decomposer,
    *,
    seeds: Sequence[int],
    images_per_prompt: int = 4,
    num_steps: int = 10,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Evaluate ``before`` (the base) and ``after`` (the trained policy) with every seed in
    ``seeds``, each seed's pair on the same noise: :func:`compare_evaluations` of the results.
    ``progress(done, total)`` counts images over both models and all seeds."""
    seeds = [int(s) for s in seeds]
    if len(seeds) < 2 or len(set(seeds)) != len(seeds):
        raise ValueError(f"compare needs at least two distinct seeds (a standard error over seeds), got {seeds}")
    runs = []
    for j, policy in enumerate((before, after)):
        tick = (lambda done, total, j=j: progress(j * total + done, 2 * total)) if progress else None
        runs.append(
            evaluate_over_seeds(
                policy,
                prompts,
                scorer,
                decomposer,
                seeds=seeds,
                images_per_prompt=images_per_prompt,
                num_steps=num_steps,
                progress=tick,
            )
        )
    return compare_evaluations(seeds, *runs)


def summarise_seeds(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Mean over seeds of the per-seed paired differences, overall (``gm``) and per skill, each
    ``{"delta", "se", "n", "z"}`` with the standard error over seeds; ``base_gm``/``trained_gm``
    are the models' mean GM. A skill counts only where every seed measured it."""
    if len(rows) < 2:
        raise ValueError(f"a standard error over seeds needs at least two seeds, got {len(rows)}")
    skills: dict[str, list[float]] = defaultdict(list)
    for row in rows:
        for skill, d in row["skill_differences"].items():
            skills[skill].append(d["delta"])
    n = len(rows)
    return {
        "base_gm": sum(r["base"]["gm"] for r in rows) / n,
        "trained_gm": sum(r["trained"]["gm"] for r in rows) / n,
        "gm": paired_stats([r["gm_difference"]["delta"] for r in rows]),
        "skills": {k: paired_stats(v) for k, v in sorted(skills.items()) if len(v) == n},
    }


def pool_evaluations(results: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One :func:`~cast_core.evaluation.evaluate` result from several evaluations of the same
    prompts with the same images per prompt (different seeds): every mean is the mean of the
    seeds' means (exact, as each seed scores the same number of images of each prompt), and
    ``images`` the total. Paired with a pooled result of another model on the same seeds, the
    standard error over prompts then reflects all the images, not one seed's."""
    if not results:
        raise ValueError("pool_evaluations needs at least one evaluation")
    first = results[0]
    for r in results[1:]:
        _refuse_unlike(first, r)
        if r["prompts"] != first["prompts"] or r["images"] != first["images"]:
            raise ValueError(
                f"cannot pool evaluations of different sizes: {r['prompts']} prompts / {r['images']} images "
                f"vs {first['prompts']} / {first['images']}"
            )
    n = len(results)

    def avg(values):
        return sum(values) / n

    return {
        "am": avg([r["am"] for r in results]),
        "gm": avg([r["gm"] for r in results]),
        "by_atom_count": {k: avg([r["by_atom_count"][k] for r in results]) for k in first["by_atom_count"]},
        "by_skill": {k: avg([r["by_skill"][k] for r in results]) for k in first["by_skill"]},
        "images": sum(r["images"] for r in results),
        "prompts": first["prompts"],
        "per_prompt_gm": [avg(v) for v in zip(*(r["per_prompt_gm"] for r in results))],
        "per_prompt_skill": [
            {k: avg([d[k] for d in ds]) for k in ds[0]} for ds in zip(*(r["per_prompt_skill"] for r in results))
        ],
    }
