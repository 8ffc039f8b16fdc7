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
