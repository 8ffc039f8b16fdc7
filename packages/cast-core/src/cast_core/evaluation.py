"""Evaluating a policy GenEval 2-style: per-image Soft-TIFA AM/GM from atom scores, reported
overall, by atom count (GM, the prompt-level view) and by skill (AM, the atom-level view).

Images come from the policy's own ODE sampler (no window), seeded per prompt index so a base
model and its fine-tuned adapter see the same initial noise.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any, Callable, Iterator, Sequence

import torch

from cast_core.aggregate import arithmetic_mean, geometric_mean
from cast_core.sampling import ode_images
from cast_core.seeding import seed_for


def skill_of(atom) -> str:
    """GenEval 2's skill names: object, count, attribute, and for relations position or verb."""
    return atom.skill if atom.kind == "relation" and atom.skill else atom.kind


def eval_batches(
    policy, prompts: Sequence[str], *, images_per_prompt: int, num_steps: int, seed: int, batch_size: int = 64
) -> Iterator[tuple[int, list[tuple[int, str]], torch.Tensor]]:
    """``(start, [(prompt index, prompt), ...], images)`` per batch of the evaluation's images,
    each prompt repeated ``images_per_prompt`` times, noise seeded per batch start. Why one place:
    anything that must see exactly the images ``cast eval --seed S`` scored (the over-drawing
    benchmark, a paired comparison) draws them here."""
    jobs = [(i, p) for i, p in enumerate(prompts) for _ in range(images_per_prompt)]
    for start in range(0, len(jobs), batch_size):
        chunk = jobs[start : start + batch_size]
        gen = torch.Generator().manual_seed(seed_for(seed, "eval", start))
        yield start, chunk, ode_images(policy, [p for _, p in chunk], num_steps=num_steps, generator=gen)


def evaluate(
    policy,
    prompts: Sequence[str],
    scorer,
    decomposer,
    *,
    images_per_prompt: int = 4,
    num_steps: int = 10,
    seed: int = 0,
    batch_size: int = 64,
    progress: Callable[[int, int], None] | None = None,
    atomicity: Callable[[str], int] | None = None,
) -> dict[str, Any]:
    """``{"am", "gm", "by_atom_count": {k: gm}, "by_skill": {skill: am}, "images", "prompts",
    "per_prompt_gm": [mean GM of each prompt's images, in prompt order], "per_prompt_skill":
    [{skill: mean atom score of that prompt's images}, ...]}`` — the last two so that two
    evaluations with the same prompts and seed can be compared pairwise, overall and skill by
    skill (:func:`paired_difference`, :func:`paired_skill_differences`). ``atomicity(prompt)``
    says which atom count a prompt is reported under (GenEval 2's own ``atom_count``, which
    leaves out the "how many … → one" questions of singular objects); by default the number
    of atoms in its graph."""
    per_image: list[tuple[int, float, float]] = []
    skills: dict[str, list[float]] = defaultdict(list)
    prompt_skills: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    jobs = [(i, p) for i, p in enumerate(prompts) for _ in range(images_per_prompt)]
    for start, chunk, images in eval_batches(
        policy, prompts, images_per_prompt=images_per_prompt, num_steps=num_steps, seed=seed, batch_size=batch_size
    ):
        graphs = [decomposer.decompose(p) for _, p in chunk]
        scores = scorer.score(images, graphs).scores
        for (i, prompt), graph, s in zip(chunk, graphs, scores):
            row = [float(x) for x in s]
            count = atomicity(prompt) if atomicity is not None else len(graph.atoms)
            per_image.append((count, geometric_mean(row), arithmetic_mean(row)))
            for atom, x in zip(graph.atoms, row):
                skills[skill_of(atom)].append(x)
                prompt_skills[i][skill_of(atom)].append(x)
        if progress:
            progress(min(start + batch_size, len(jobs)), len(jobs))
    by_prompt: dict[int, list[float]] = defaultdict(list)
    for (i, _), (_, gm, _) in zip(jobs, per_image):
        by_prompt[i].append(gm)
    by_count: dict[int, list[float]] = defaultdict(list)
    for k, gm, _ in per_image:
        by_count[k].append(gm)
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    return {
        "am": mean([am for _, _, am in per_image]),
        "gm": mean([gm for _, gm, _ in per_image]),
        "by_atom_count": {str(k): mean(v) for k, v in sorted(by_count.items())},
        "by_skill": {k: mean(v) for k, v in sorted(skills.items())},
        "images": len(per_image),
        "prompts": len(prompts),
        "per_prompt_gm": [mean(by_prompt[i]) for i in range(len(prompts))],
        "per_prompt_skill": [{k: mean(v) for k, v in sorted(prompt_skills[i].items())} for i in range(len(prompts))],
    }


#: what, besides the policy's weights, decides an evaluation's numbers: two results that differ in
#: one of these measured different things, so their difference says nothing about the policy.
#: (The prompts are compared by ``prompts_digest``; ``policy_kwargs`` and ``adapter`` are what a
#: comparison is for, so they are recorded and may differ.)
MEASURED_WITH = ("policy", "scorer", "scorer_kwargs", "decomposer", "decomposer_kwargs")


def unlike_evaluations(before: dict[str, Any], after: dict[str, Any]) -> tuple[list[str], list[str]]:
    """``(differences, unrecorded)`` between two evaluation results' :data:`MEASURED_WITH`
    records: each difference as ``"scorer 'a' there, 'b' here"``; ``unrecorded`` the keys
    ``before`` lacks (a file from before results recorded them), which cannot be checked."""
    differences, unrecorded = [], []
    for key in MEASURED_WITH:
        if key not in before:
            unrecorded.append(key)
        elif key in after and before[key] != after[key]:
            differences.append(f"{key} {_brief(before[key])} there, {_brief(after[key])} here")
    return differences, unrecorded


def _brief(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:80] + "…"


def paired_difference(before: dict[str, Any], after: dict[str, Any]) -> dict[str, float]:
    """GM of ``after`` minus ``before`` with its standard error over prompts.

    Both must be :func:`evaluate` results on the same prompts (and, for a paired comparison, the
    same seed: the same starting noise for every image). Why: a held-out GM difference of 0.02
    looks like progress but is inside what a second evaluation seed moves it by; the standard
    error of the per-prompt differences says how large a difference these prompts can resolve.
    ``{"delta", "se", "prompts", "z"}`` (``z = delta / se``; |z| < 2 is noise)."""
    a, b = before.get("per_prompt_gm"), after.get("per_prompt_gm")
    if a is None or b is None:
        raise ValueError("paired_difference needs evaluate() results with per_prompt_gm (re-run the evaluation)")
    if len(a) != len(b) or len(a) < 2:
        raise ValueError(f"paired_difference needs the same >= 2 prompts on both sides, got {len(a)} and {len(b)}")
    return _paired([y - x for x, y in zip(a, b)])


def paired_skill_differences(before: dict[str, Any], after: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Per skill, the mean atom score of ``after`` minus ``before`` over the prompts that have
    atoms of that skill, with its standard error over those prompts (as :func:`paired_difference`).

    Why: a GM that does not move can hide a skill that does (RL on the shapes world raises
    position long before GM), and a GM gain can come from one skill alone; skills present in
    fewer than two prompts are left out. ``{skill: {"delta", "se", "prompts", "z"}}``."""
    a, b = before.get("per_prompt_skill"), after.get("per_prompt_skill")
    if a is None or b is None:
        raise ValueError(
            "paired_skill_differences needs evaluate() results with per_prompt_skill "
            "(older result files lack it; re-run the evaluation)"
        )
    if len(a) != len(b):
        raise ValueError(f"paired_skill_differences needs the same prompts on both sides, got {len(a)} and {len(b)}")
    diffs: dict[str, list[float]] = defaultdict(list)
    for x, y in zip(a, b):
        for skill in x.keys() & y.keys():
            diffs[skill].append(y[skill] - x[skill])
    return {k: _paired(v) for k, v in sorted(diffs.items()) if len(v) >= 2}


def paired_stats(diffs: Sequence[float]) -> dict[str, float]:
    """Mean of ``>= 2`` paired differences with its standard error (sample sd / √n) and
    ``z = delta / se``: ``{"delta", "se", "n", "z"}`` (``z`` is ±inf when every difference is the
    same non-zero value, 0 when all are 0)."""
    n = len(diffs)
    if n < 2:
        raise ValueError(f"a standard error needs at least two differences, got {n}")
    delta = sum(diffs) / n
    se = (sum((d - delta) ** 2 for d in diffs) / (n - 1) / n) ** 0.5
    if se > 0:
        z = delta / se
    else:  # every difference is exactly delta
        z = 0.0 if delta == 0 else math.copysign(math.inf, delta)
    return {"delta": delta, "se": se, "n": n, "z": z}


def _paired(diffs: list[float]) -> dict[str, float]:
    out = paired_stats(diffs)
    out["prompts"] = out.pop("n")
    return out


def paired_verdict(z: float) -> str:
    """Words for a :func:`paired_difference` z: beyond two standard errors either way, or not."""
    if z >= 2:
        return "better than the base"
    if z <= -2:
        return "worse than the base"
    return "not distinguishable from the base (|z| < 2)"


def difference_line(label: str, d: dict[str, float]) -> str:
    """One line for a paired difference, the same wording in `cast eval --baseline`, the demo
    and its report: ``"<label> <delta> ± <se> over <n> prompts: <verdict>"``."""
    return f"{label} {d['delta']:+.3f} ± {d['se']:.3f} over {d['prompts']} prompts: {paired_verdict(d['z'])}"


def verdict_grid(
    policy,
    prompts: Sequence[str],
    scorer,
    decomposer,
    *,
    images_per_prompt: int = 4,
    num_steps: int = 10,
    seed: int = 0,
):
    """A picture: one row per prompt (its images with GM and per-atom pass/fail marks), sampled
    with :func:`evaluate`'s seeding so base and fine-tuned grids show the same noise."""
    from PIL import Image, ImageDraw

    from cast_core.viz import sample_grid

    rows = []
    for i, prompt in enumerate(prompts):
        gen = torch.Generator().manual_seed(seed_for(seed, "grid", i))
        images = ode_images(policy, [prompt] * images_per_prompt, num_steps=num_steps, generator=gen)
        graph = decomposer.decompose(prompt)
        scores = scorer.score(images, [graph] * images_per_prompt).scores
        rows.append((prompt, sample_grid(images, graph, scores)))
    width = max(r.width for _, r in rows)
    canvas = Image.new("RGB", (width, sum(r.height + 14 for _, r in rows)), "white")
    draw, y = ImageDraw.Draw(canvas), 0
    for prompt, row in rows:
        draw.text((2, y), prompt, fill=(0, 0, 0))
        canvas.paste(row, (0, y + 14))
        y += row.height + 14
    return canvas
