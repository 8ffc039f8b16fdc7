"""The shapes-oracle scorer: protocol conformance, accuracy against ground truth (with true and
false atoms), robustness to blur and noise, and masks that cover the right pixels."""

from __future__ import annotations

import random
from collections import defaultdict

import numpy as np
import pytest
import torch

from cast_core.scene_graph import Atom, Entity, SceneGraph
from cast_core.testing.conformance import AtomScorerConformance
from cast_shapes.grammar import graph_for_prompt, sample_scene, scene_to_graph
from cast_shapes.oracle import ShapesOracleScorer
from cast_shapes.render import object_masks, render_batch, render_float
from cast_shapes.semantics import RELATION_MARGIN, ground_truth
from cast_shapes.world import (
    COLOURS,
    COUNTS,
    IMAGE_SIZE,
    OPPOSITE,
    PALETTE,
    SHAPES,
    ObjectSpec,
    Placed,
    Relation,
    Scene,
    group_centre,
    relation_offset,
    sample_layout,
    with_entity,
)

N_SCENES = 300
KINDS = ("object", "count", "attribute", "relation")


class TestShapesOracleConformance(AtomScorerConformance):
    def make_scorer(self):
        return ShapesOracleScorer()

    def make_inputs(self):
        rng = random.Random(0)
        scenes = [sample_scene(rng, k) for k in (3, 5, 8)]
        images = torch.from_numpy(render_batch([sample_layout(s, rng) for s in scenes]))
        return images, [scene_to_graph(s) for s in scenes]


class TestShapesOracleConformanceOnNoise(AtomScorerConformance):
    """The kit's own inputs: uniform noise images must not crash the oracle."""

    def make_scorer(self):
        return ShapesOracleScorer()


# -- the accuracy data set ----------------------------------------------------------------------
def blur(images: torch.Tensor, sigma: float) -> torch.Tensor:
    r = 2
    k = torch.exp(-(torch.arange(-r, r + 1, dtype=torch.float32) ** 2) / (2 * sigma**2))
    k = k / k.sum()
    b, c, h, w = images.shape
    x = torch.nn.functional.pad(images.reshape(b * c, 1, h, w), (r, r, r, r), mode="replicate")
    x = torch.nn.functional.conv2d(x, k.view(1, 1, 1, -1))
    x = torch.nn.functional.conv2d(x, k.view(1, 1, -1, 1))
    return x.reshape(b, c, h, w)


def degrade(images: torch.Tensor, sigma: float = 0.5, noise: float = 0.03, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return (blur(images, sigma) + noise * torch.randn(images.shape, generator=gen)).clamp(0.0, 1.0)


def _mismatches(scene: Scene, layout, rng: random.Random) -> list[Scene]:
    """Counterfactual prompts for one image: wrong count, wrong colour, missing object, wrong
    relation (so that false atoms of every kind are tested, not only true ones)."""
    i = rng.randrange(len(scene.entities))
    e = scene.entities[i]
    out = [
        with_entity(scene, i, count=rng.choice([c for c in COUNTS if c != e.count])),
        with_entity(scene, i, colour=rng.choice([c for c in COLOURS if c != e.colour])),
    ]
    absent = [s for s in SHAPES if s not in {p.shape for p in layout}]
    if absent:
        out.append(with_entity(scene, i, shape=rng.choice(absent)))
    if scene.relations:
        j = rng.randrange(len(scene.relations))
        r = scene.relations[j]
        rels = list(scene.relations)
        rels[j] = Relation(r.subject_index, OPPOSITE[r.relation], r.object_index)
        out.append(Scene(scene.entities, tuple(rels)))
    elif len(scene.entities) >= 2:
        # an unconstrained relation: its truth is whatever the layout says, unless the offset
        # sits within 1 px of the decision margin, where "left of" has no crisp answer
        rel = rng.choice(list(OPPOSITE))
        d = relation_offset(rel, group_centre(layout, 0), group_centre(layout, 1))
        if abs(d - RELATION_MARGIN * IMAGE_SIZE) >= 1.0:
            out.append(Scene(scene.entities, (Relation(0, rel, 1),)))
    return out


@pytest.fixture(scope="module")
def cases():
    return build_cases()


def build_cases(seed: int = 2024):
    """Fresh random scenes, each with its true graph and its counterfactual graphs, plus blank
    images (the no-object case): (image index, graph, ground-truth verdicts)."""
    rng = random.Random(seed)
    layouts, items = [], []
    for n in range(N_SCENES):
        scene = sample_scene(rng, 2 + n % 7)
        layout = sample_layout(scene, rng)
        layouts.append(layout)
        for s in [scene, *_mismatches(scene, layout, rng)]:
            g = scene_to_graph(s)
            items.append((n, g, [r.verdict for r in ground_truth(g, layout)]))
    for n in range(30):  # blank canvases scored against real prompts
        layouts.append(())
        g = scene_to_graph(sample_scene(rng, 2 + n % 7))
        items.append((len(layouts) - 1, g, [r.verdict for r in ground_truth(g, ())]))
    images = torch.from_numpy(render_batch(layouts))
    return layouts, images, items


def _accuracy(images: torch.Tensor, items) -> dict[str, dict[str, float]]:
    idx = torch.tensor([i for i, _, _ in items])
    out = ShapesOracleScorer().score(images[idx], [g for _, g, _ in items])
    tally = defaultdict(lambda: defaultdict(int))
    for (_, g, truth), scores in zip(items, out.scores):
        for atom, t, s in zip(g.atoms, truth, scores.tolist()):
            row = tally[atom.kind]
            row["n"] += 1
            row["true" if t else "false"] += 1
            row["correct"] += int((s >= 0.5) == t)
    return {k: {**v, "accuracy": v["correct"] / v["n"]} for k, v in tally.items()}


def test_accuracy_on_clean_renders_is_at_least_99_percent_per_atom_type(cases):
    _, images, items = cases
    acc = _accuracy(images, items)
    print("\nclean accuracy:", {k: round(v["accuracy"], 4) for k, v in acc.items()})
    for kind in KINDS:
        assert acc[kind]["true"] >= 80 and acc[kind]["false"] >= 80, (kind, dict(acc[kind]))
        assert acc[kind]["accuracy"] >= 0.99, (kind, dict(acc[kind]))


def test_accuracy_under_blur_and_noise_is_at_least_95_percent(cases):
    _, images, items = cases
    acc = _accuracy(degrade(images), items)
    print("\nblur 0.5 + noise 0.03 accuracy:", {k: round(v["accuracy"], 4) for k, v in acc.items()})
    for kind in KINDS:
        assert acc[kind]["accuracy"] >= 0.95, (kind, dict(acc[kind]))


def test_accuracy_with_off_palette_colours_is_at_least_95_percent(cases):
    """Generated images do not hit the palette exactly: shift each object's colour (std 0.06 per
    channel, one draw per object), then blur and add noise."""
    layouts, images, items = cases
    gen = torch.Generator().manual_seed(1)
    jittered = images.clone()
    for n, layout in enumerate(layouts):
        for m in object_masks(layout) if layout else ():
            jittered[n][:, torch.from_numpy(m)] += 0.06 * torch.randn(3, 1, generator=gen)
    acc = _accuracy(degrade(jittered.clamp(0.0, 1.0)), items)
    print("\ncolour jitter + blur + noise accuracy:", {k: round(v["accuracy"], 4) for k, v in acc.items()})
    for kind in KINDS:
        assert acc[kind]["accuracy"] >= 0.95, (kind, dict(acc[kind]))


def test_true_atoms_score_high_and_false_ones_low(cases):
    _, images, items = cases
    idx = torch.tensor([i for i, _, _ in items])
    out = ShapesOracleScorer().score(images[idx], [g for _, g, _ in items])
    true_s = [s for (_, _, t), sc in zip(items, out.scores) for tt, s in zip(t, sc.tolist()) if tt]
    false_s = [s for (_, _, t), sc in zip(items, out.scores) for tt, s in zip(t, sc.tolist()) if not tt]
    assert np.mean(true_s) > 0.9 and np.mean(false_s) < 0.1


def _mask_ious(images: torch.Tensor, layouts, items) -> list[float]:
    firsts = [(n, g) for n, g, _ in items if n < N_SCENES and g.prompt == items_first_prompt(items, n)]
    out = ShapesOracleScorer().score(
        images[torch.tensor([n for n, _ in firsts])], [g for _, g in firsts], heatmaps=True
    )
    ious = []
    for (n, g), maps in zip(firsts, out.heatmaps):
        masks = object_masks(layouts[n])
        ent = {f"e{i + 1}": masks[[p.entity == i for p in layouts[n]]].any(0) for i in range(len(g.entities))}
        for atom, m in zip(g.atoms, maps.numpy()):
            want = ent[atom.entity] | (ent[atom.other] if atom.kind == "relation" else False)
            got = m > 0
            ious.append((got & want).sum() / (got | want).sum())
    return ious


def items_first_prompt(items, n):
    return next(g.prompt for i, g, _ in items if i == n)


def test_heatmaps_are_the_masks_of_the_objects_each_atom_is_about(cases):
    layouts, images, items = cases
    clean = _mask_ious(images, layouts, items)
    assert min(clean) >= 0.9, min(clean)
    degraded = _mask_ious(degrade(images), layouts, items)
    print(f"\nmask IoU clean min {min(clean):.3f}; degraded mean {np.mean(degraded):.3f} min {min(degraded):.3f}")
    assert np.mean(degraded) >= 0.9 and np.percentile(degraded, 1) >= 0.8


# -- edge cases ---------------------------------------------------------------------------------
def test_missing_objects_and_blank_images_get_zero_and_flat_maps():
    g = graph_for_prompt("two red circles left of a blue square")
    blank = torch.ones(1, 3, IMAGE_SIZE, IMAGE_SIZE)
    out = ShapesOracleScorer().score(blank, [g], heatmaps=True)
    assert out.scores[0].max() < 0.5
    assert torch.equal(out.heatmaps[0], torch.ones(len(g.atoms), IMAGE_SIZE, IMAGE_SIZE))


def test_unknown_vocabulary_scores_zero_instead_of_crashing():
    layout = sample_layout(Scene((ObjectSpec("circle", "red"),)), 0)
    g = SceneGraph(
        "a pink hexagon next to a red circle",
        (Entity("e1", "hexagon"), Entity("e2", "circle")),
        (
            Atom("a1", "object", "e1"),
            Atom("a2", "count", "e1", ("a1",), value=1),
            Atom("a3", "attribute", "e1", ("a1",), value="pink"),
            Atom("a4", "object", "e2"),
            Atom("a5", "count", "e2", ("a4",), value=1),
            Atom("a6", "attribute", "e2", ("a4",), value="red"),
            Atom("a7", "relation", "e1", ("a1", "a4"), value="next to", other="e2", skill="position"),
        ),
    ).validate()
    out = ShapesOracleScorer().score(torch.from_numpy(render_float(layout))[None], [g], heatmaps=True)
    assert [round(s, 1) for s in out.scores[0].tolist()] == [0, 0, 0, 1, 1, 1, 0]
    flat = [bool((m == 1).all()) for m in out.heatmaps[0]]
    assert flat == [True, True, True, False, False, False, True]


def test_touching_objects_of_different_colours_are_told_apart():
    layout = (Placed("square", "red", 8.0, 16.0, 8, 0), Placed("square", "orange", 16.0, 16.0, 8, 1))
    img = torch.from_numpy(render_float(layout))[None]
    dets = ShapesOracleScorer().detect(img)[0]
    assert sorted((d.shape, d.colour, d.cx) for d in dets) == [("square", "orange", 16.0), ("square", "red", 8.0)]


def test_blobs_that_are_not_world_shapes_are_not_objects():
    # two same-colour squares that touch make one 2:1 blob: neither a square nor two of them
    layout = (Placed("square", "red", 8.0, 16.0, 8, 0), Placed("square", "red", 16.0, 16.0, 8, 0))
    (d,) = ShapesOracleScorer().detect(torch.from_numpy(render_float(layout))[None])[0]
    assert d.shape is None and max(d.shape_evidence.values()) < 0.5
    out = ShapesOracleScorer().score(
        torch.from_numpy(render_float(layout))[None], [graph_for_prompt("two red squares")]
    )
    assert all(s < 0.5 for s in out.scores[0].tolist()[:2])  # object and count fail


def test_every_colour_and_shape_is_recognised_at_every_size():
    scorer = ShapesOracleScorer()
    for shape in SHAPES:
        for colour in PALETTE:
            for size in range(7, 11):
                layout = (Placed(shape, colour, 10.0 + size / 2, 9.0 + size / 2, size, 0),)
                img = torch.from_numpy(render_float(layout))[None]
                for x in (img, degrade(img, seed=size)):
                    (d,) = scorer.detect(x)[0]
                    assert (d.shape, d.colour) == (shape, colour), (shape, colour, size)


def test_accepts_any_float_dtype_and_checks_its_inputs():
    g = graph_for_prompt("a red circle")
    layout = sample_layout(Scene((ObjectSpec("circle", "red"),)), 0)
    img = torch.from_numpy(render_float(layout))[None]
    scorer = ShapesOracleScorer()
    ref = scorer.score(img, [g]).scores[0]
    assert ref.dtype == torch.float32 and ref.min() > 0.9
    torch.testing.assert_close(scorer.score(img.double(), [g]).scores[0], ref)
    torch.testing.assert_close(scorer.score(img.bfloat16(), [g]).scores[0], ref)
    with pytest.raises(ValueError, match="2 scene graphs"):
        scorer.score(img, [g, g])
    with pytest.raises(ValueError, match=r"\[B, 3, H, W\]"):
        scorer.score(img[0], [g])


def test_surplus_count_maps_cover_only_the_extra_objects():
    layout = tuple(Placed("circle", "red", x, 16.0, 6, 0) for x in (5.0, 16.0, 27.0))
    img = torch.from_numpy(render_float(layout))[None]
    g = graph_for_prompt("a red circle")
    every = ShapesOracleScorer().score(img, [g], heatmaps=True)
    surplus = ShapesOracleScorer(count_maps="surplus").score(img, [g], heatmaps=True)
    assert torch.equal(every.scores[0], surplus.scores[0])
    count_all, count_surplus = every.heatmaps[0][1], surplus.heatmaps[0][1]
    assert bool((count_surplus <= count_all).all())  # a subset of the objects...
    assert float(count_surplus.sum()) == pytest.approx(float(count_all.sum()) * 2 / 3, rel=0.05)  # ...two of the three
    assert torch.equal(every.heatmaps[0][0], surplus.heatmaps[0][0])
    with pytest.raises(ValueError, match="count_maps"):
        ShapesOracleScorer(count_maps="extra")
