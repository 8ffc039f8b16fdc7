"""The world's vocabulary, the layout sampler and the renderer."""

import itertools
import math
import random

import numpy as np
import pytest

from cast_shapes.grammar import sample_scene
from cast_shapes.render import object_masks, render, render_batch, render_float, shape_mask
from cast_shapes.world import (
    BACKGROUND,
    BORDER,
    COLOURS,
    COUNTS,
    GAP,
    IMAGE_SIZE,
    MAX_OBJECTS,
    PALETTE,
    RELATION_MIN_OFFSET,
    RELATIONS,
    SHAPES,
    LayoutError,
    ObjectSpec,
    Relation,
    Scene,
    group_centre,
    relation_offset,
    sample_layout,
)


def test_vocabulary():
    assert IMAGE_SIZE == 32
    assert SHAPES == ("circle", "square", "triangle")
    assert COUNTS == (1, 2, 3, 4)
    assert RELATIONS == ("left of", "right of", "above", "below")
    assert len(PALETTE) == 6 and COLOURS == tuple(PALETTE)


def test_palette_is_well_separated():
    cols = {n: np.asarray(c, float) for n, c in PALETTE.items()}
    pair = min(np.linalg.norm(cols[a] - cols[b]) for a, b in itertools.combinations(cols, 2))
    to_bg = min(np.linalg.norm(c - np.asarray(BACKGROUND, float)) for c in cols.values())
    assert pair >= 100 and to_bg >= 200, (pair, to_bg)


def _random_layouts(n, seed=0):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        scene = sample_scene(rng)
        out.append((scene, sample_layout(scene, rng)))
    return out


def test_layouts_do_not_overlap_and_stay_inside():
    for scene, layout in _random_layouts(300):
        assert len(layout) == scene.n_objects <= MAX_OBJECTS
        for p in layout:
            x0, y0, x1, y1 = p.box
            assert x0 >= BORDER and y0 >= BORDER and x1 <= IMAGE_SIZE - BORDER and y1 <= IMAGE_SIZE - BORDER
        for a, b in itertools.combinations(layout, 2):
            ax0, ay0, ax1, ay1 = a.box
            bx0, by0, bx1, by1 = b.box
            assert ax1 + GAP <= bx0 or bx1 + GAP <= ax0 or ay1 + GAP <= by0 or by1 + GAP <= ay0, (a, b)
        masks = object_masks(layout)
        assert masks.sum(0).max() <= 1


def test_layouts_respect_entities_and_relations():
    n_rel = 0
    for scene, layout in _random_layouts(300, seed=1):
        for i, e in enumerate(scene.entities):
            mine = [p for p in layout if p.entity == i]
            assert len(mine) == e.count and all(p.shape == e.shape for p in mine)
            if e.colour:
                assert all(p.colour == e.colour for p in mine)
        for r in scene.relations:
            n_rel += 1
            d = relation_offset(r.relation, group_centre(layout, r.subject_index), group_centre(layout, r.object_index))
            assert d >= RELATION_MIN_OFFSET, (scene, layout)
    assert n_rel > 50


def test_colourless_entities_avoid_colours_claimed_for_their_noun():
    scene = Scene((ObjectSpec("circle", "red", 1), ObjectSpec("circle", "blue", 2), ObjectSpec("square", None, 3)))
    for seed in range(30):
        layout = sample_layout(scene, seed)
        assert sorted(p.colour for p in layout if p.shape == "circle") == ["blue", "blue", "red"]


def test_layout_is_deterministic_per_seed():
    scene = Scene((ObjectSpec("circle", "red", 2), ObjectSpec("square", "blue", 1)), (Relation(0, "left of", 1),))
    assert sample_layout(scene, 7) == sample_layout(scene, 7)
    assert sample_layout(scene, random.Random(3)) == sample_layout(scene, random.Random(3))
    assert len({sample_layout(scene, s) for s in range(10)}) > 5


def test_invalid_and_impossible_scenes_raise_clearly():
    with pytest.raises(ValueError, match="hexagon"):
        sample_layout(Scene((ObjectSpec("hexagon"),)), 0)
    with pytest.raises(ValueError, match="at most 6"):
        sample_layout(Scene((ObjectSpec("circle", count=4), ObjectSpec("square", count=4))), 0)
    with pytest.raises(ValueError, match="two different colours"):
        sample_layout(Scene((ObjectSpec("circle"), ObjectSpec("circle", "red"))), 0)
    with pytest.raises(LayoutError, match="could not lay out"):
        sample_layout(Scene((ObjectSpec("circle", count=4),)), 0, image_size=16, max_tries=5)


def test_shape_masks_fill_their_box_and_triangles_point_up():
    for s in range(5, 13):
        for shape in SHAPES:
            m = shape_mask(shape, s)
            ys, xs = np.nonzero(m)
            assert (ys.min(), xs.min(), ys.max(), xs.max()) == (0, 0, s - 1, s - 1), (shape, s)
        tri = shape_mask("triangle", s).sum(1)
        assert all(tri[i] <= tri[i + 1] for i in range(s - 1)) and tri[0] <= 2 and tri[-1] == s
        assert shape_mask("square", s).all()
        circle = shape_mask("circle", s)
        assert abs(circle.mean() - math.pi / 4) < 0.12 and not circle[0, 0]


def test_render_paints_flat_colours_on_the_background():
    scene = Scene((ObjectSpec("triangle", "orange", 1), ObjectSpec("square", "green", 2)))
    layout = sample_layout(scene, 0)
    img = render(layout)
    assert img.shape == (3, IMAGE_SIZE, IMAGE_SIZE) and img.dtype == np.uint8
    masks = object_masks(layout)
    for p, m in zip(layout, masks):
        assert (img[:, m].T == PALETTE[p.colour]).all()
    assert (img[:, ~masks.any(0)].T == BACKGROUND).all()
    f = render_float(layout)
    assert f.dtype == np.float32 and 0.0 <= f.min() and f.max() <= 1.0
    assert render_batch([layout, layout]).shape == (2, 3, IMAGE_SIZE, IMAGE_SIZE)
