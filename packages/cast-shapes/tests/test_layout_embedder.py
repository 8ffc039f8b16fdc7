"""The shapes-layout embedder keeps the layout and ignores pixel noise."""

import dataclasses

import numpy as np
import torch

from cast_core.testing import EmbedderConformance
from cast_shapes.grammar import parse_prompt
from cast_shapes.layout_embedder import LayoutEmbedder
from cast_shapes.render import render_batch
from cast_shapes.world import sample_layout

PROMPT = "a red circle left of two blue squares"


def scenes(prompt: str, seeds) -> torch.Tensor:
    scene = parse_prompt(prompt)
    return torch.from_numpy(render_batch([sample_layout(scene, s) for s in seeds]))


def cos(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.cosine_similarity(a, b, dim=-1)


class TestLayoutEmbedder(EmbedderConformance):
    def make_embedder(self):
        return LayoutEmbedder()

    def make_images(self):
        return torch.cat([scenes(PROMPT, [0, 1]), scenes("three yellow triangles", [0]), scenes("a green square", [2])])


def test_same_scene_with_pixel_noise_embeds_the_same():
    clean = scenes(PROMPT, [0, 1, 2])
    gen = torch.Generator().manual_seed(0)
    noisy = (clean + 0.08 * torch.randn(clean.shape, generator=gen)).clamp(0, 1)
    emb = LayoutEmbedder()
    sims = cos(emb.embed(clean), emb.embed(noisy))
    assert bool((sims > 0.99).all()), sims.tolist()


def test_different_layouts_are_less_similar():
    emb = LayoutEmbedder().embed(scenes(PROMPT, [0, 1, 2, 3]))
    pairs = [float(cos(emb[i], emb[j])) for i in range(4) for j in range(i + 1, 4)]
    assert max(pairs) < 0.95, pairs
    other_colours = LayoutEmbedder().embed(scenes("a green circle left of two purple squares", [0]))
    assert float(cos(emb[0], other_colours[0])) < 0.05  # same places, other colours: nothing shared


def test_occupancy_is_the_colour_fraction_per_cell():
    img = torch.ones(1, 3, 32, 32)  # white background
    img[0, :, :4, :4] = torch.tensor([225, 20, 30]).view(3, 1, 1) / 255.0  # a red top-left cell
    e = LayoutEmbedder().embed(img)
    assert e.shape == (1, 6 * 64)
    assert np.isclose(float(e[0, 0]), 1.0) and float(e[0, 1:].abs().sum()) == 0.0


class TestObjectsEmbedder(EmbedderConformance):
    def make_embedder(self):
        from cast_shapes.layout_embedder import ObjectsEmbedder

        return ObjectsEmbedder()

    def make_images(self):
        return torch.cat([scenes(PROMPT, [0, 1]), scenes("three yellow triangles", [0]), torch.ones(1, 3, 32, 32)])


def test_objects_embedder_sees_what_the_oracle_sees():
    from cast_shapes.layout_embedder import ObjectsEmbedder

    emb = ObjectsEmbedder()
    clean = scenes(PROMPT, [0, 1])
    gen = torch.Generator().manual_seed(0)
    noisy = (clean + 0.05 * torch.randn(clean.shape, generator=gen)).clamp(0, 1)
    assert bool((cos(emb.embed(clean), emb.embed(noisy)) > 0.99).all())
    # same places, the red circle repainted as a red square: a different object to the oracle
    scene = parse_prompt(PROMPT)
    layout = sample_layout(scene, 0)
    swapped = [dataclasses.replace(p, shape="square") if p.shape == "circle" else p for p in layout]
    a, b = emb.embed(torch.from_numpy(render_batch([layout, swapped])))
    assert float(cos(a, b)) < 0.9
    # an empty image is a valid, constant direction
    e = emb.embed(torch.ones(2, 3, 32, 32))
    assert torch.allclose(e[0], e[1]) and torch.isclose(e[0].norm(), torch.tensor(1.0))


class TestSceneEmbedder(EmbedderConformance):
    def make_embedder(self):
        from cast_shapes.layout_embedder import SceneEmbedder

        return SceneEmbedder()

    def make_images(self):
        return torch.cat([scenes(PROMPT, [0, 1]), scenes("three yellow triangles", [0]), torch.ones(1, 3, 32, 32)])


def _render(*objects) -> torch.Tensor:
    from cast_shapes.world import Placed

    return torch.from_numpy(render_batch([tuple(Placed(s, c, x, y, 8, i) for i, (s, c, x, y) in enumerate(objects))]))


def test_scene_embedder_counts_shared_facts():
    """cos = shared facts / sqrt(facts of a · facts of b); each present (colour, shape) states two:
    its count and the coarse cell of its objects' mean centre."""
    from cast_shapes.layout_embedder import SceneEmbedder

    emb = SceneEmbedder(cells=3)
    left = emb.embed(_render(("circle", "red", 6, 16)))
    right = emb.embed(_render(("circle", "red", 26, 16)))  # same count, other cell: 1 of 2 facts
    assert np.isclose(float(cos(left, right)), 0.5)
    # a blue square added: 2 of (2, 4) facts shared -> 2 / sqrt(8)
    both = emb.embed(_render(("circle", "red", 6, 16), ("square", "blue", 26, 16)))
    assert np.isclose(float(cos(left, both)), 2 / np.sqrt(8))
    # a second red circle in the same (left) third: the count fact flips, the cell fact stays
    two = emb.embed(_render(("circle", "red", 5, 6), ("circle", "red", 5, 26)))
    assert np.isclose(float(cos(left, two)), 0.5)
    # a red square where the circle was: another channel, nothing shared
    square = emb.embed(_render(("square", "red", 6, 16)))
    assert float(cos(left, square)) == 0.0


def test_scene_embedder_ignores_pixel_noise_and_embeds_empty_images():
    from cast_shapes.layout_embedder import SceneEmbedder

    emb = SceneEmbedder()
    clean = scenes(PROMPT, [0, 1])
    gen = torch.Generator().manual_seed(0)
    noisy = (clean + 0.05 * torch.randn(clean.shape, generator=gen)).clamp(0, 1)
    assert bool((cos(emb.embed(clean), emb.embed(noisy)) > 0.99).all())
    e = emb.embed(torch.ones(2, 3, 32, 32))
    assert torch.allclose(e[0], e[1]) and torch.isclose(e[0].norm(), torch.tensor(1.0))
    assert emb.identity == "shapes-scene:cells=3:cap=4"
    try:
        SceneEmbedder(cells=0)
    except ValueError as err:
        assert "cells" in str(err)
    else:
        raise AssertionError("cells=0 must be refused")
