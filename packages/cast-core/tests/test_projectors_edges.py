"""The projectors' edges that the main tests never reach: both sides of the clip, the clipped
fraction on exact numbers, the documented defaults as behaviour (Flow-GRPO's clip of 5, λ = 1,
eps = 1e-6), every constructor option reaching the maths, maps that are partly unusable, the
resize rule at equal sizes, and the words of every error. Each test here was written against a
surviving mutant of ``projectors.py`` (docs/testing.md, "Mutation testing")."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from cast_core.advantages import prompt_advantages
from cast_core.projectors import (
    ScalarProjector,
    SpatialProjector,
    equalise_mass,
    normalise_heatmaps,
    resize_maps,
)
from cast_core.scene_graph import Atom, Entity, SceneGraph
from cast_core.testing.fakes import simple_graph

EPS = 1e-6


def one_atom_graph() -> SceneGraph:
    return SceneGraph("a cat", (Entity("e1", "cat"),), (Atom("a1", "object", "e1"),)).validate()


def outlier_group(n: int = 64) -> torch.Tensor:
    """One image passes, n - 1 fail: its z-score is sqrt(n - 1) (7.9 at 64), above any clip."""
    scores = torch.full((n, 1), 0.25)
    scores[0, 0] = 1.0
    return scores


# --- the clip -------------------------------------------------------------------------------


@pytest.mark.parametrize("make", [ScalarProjector, SpatialProjector])
def test_default_clip_is_five_on_both_sides(make):
    scores = outlier_group()
    out = make().project(scores, None, one_atom_graph(), (2, 2))
    assert float(out.values.max()) == 5.0, "Flow-GRPO's default clip"
    flipped = make().project(1.25 - scores, None, one_atom_graph(), (2, 2))
    assert float(flipped.values.min()) == -5.0
    assert out.stats["clipped_fraction"] == pytest.approx(1 / 64)


def test_clip_both_sides_and_fraction_exact():
    scores = torch.tensor([[1.0], [0.25], [0.25], [1.0]])  # Âg = ±1/(1+eps)
    out = ScalarProjector(adv_clip=0.5).project(scores, None, one_atom_graph(), (2, 3))
    assert out.values.max().item() == 0.5 and out.values.min().item() == -0.5
    assert out.stats["clipped_fraction"] == 1.0
    assert out.prompt_advantages.abs().min() > 0.99, "prompt_advantages stay unclipped"


def test_value_exactly_at_the_clip_is_not_counted_as_clipped():
    scores = torch.tensor([[1.0], [0.25]])
    limit = float(prompt_advantages(scores).abs()[0])
    out = ScalarProjector(adv_clip=limit).project(scores, None, one_atom_graph(), (2, 2))
    assert out.stats["clipped_fraction"] == 0.0


def test_empty_group_has_no_clipped_fraction():
    out = SpatialProjector().project(torch.zeros(0, 1), None, one_atom_graph(), (2, 2))
    assert out.values.shape == (0, 2, 2) and out.stats["clipped_fraction"] == 0.0


def test_clip_bounds():
    assert ScalarProjector(adv_clip=0.5).adv_clip == 0.5, "a clip below 1 is allowed"
    for bad in (0.0, -1.0):
        with pytest.raises(ValueError, match=r"adv_clip must be > 0, got"):
            ScalarProjector(adv_clip=bad)


# --- defaults and options as behaviour ------------------------------------------------------


def test_spatial_default_is_lambda_one_and_eps_1e6_exactly():
    scores = torch.tensor([[0.25], [1.0]], dtype=torch.float64)  # Âg = Â = ∓0.375/(0.375+eps)
    out = SpatialProjector().project(scores, None, one_atom_graph(), (1, 1))
    z = 0.375 / (0.375 + EPS)
    torch.testing.assert_close(out.values.double().flatten(), torch.tensor([-2 * z, 2 * z], dtype=torch.float64))
    scalar = ScalarProjector().project(scores, None, one_atom_graph(), (1, 1))
    torch.testing.assert_close(scalar.values.double().flatten(), torch.tensor([-z, z], dtype=torch.float64))


@pytest.mark.parametrize("credit", ["zscore", "log-gm"])
def test_eps_reaches_every_term(credit):
    scores = torch.tensor([[0.25], [1.0]])
    big = SpatialProjector(eps=10.0, atom_credit=credit).project(scores, None, one_atom_graph(), (1, 1))
    small = SpatialProjector(eps=EPS, atom_credit=credit).project(scores, None, one_atom_graph(), (1, 1))
    assert big.values.abs().max() < 0.2 * small.values.abs().max()
    big_g = ScalarProjector(eps=10.0).project(scores, None, one_atom_graph(), (1, 1))
    assert big_g.values.abs().max() < 0.1


def test_hard_gating_threshold_reaches_the_gate():
    graph = simple_graph()  # a2, a3 have parent a1
    scores = torch.tensor([[0.4, 1.0, 1.0], [0.4, 0.0, 0.0]])
    low = SpatialProjector(gating="hard", threshold=0.3, lam=0.0).project(scores, None, graph, (1, 1))
    high = SpatialProjector(gating="hard", threshold=0.5, lam=0.0).project(scores, None, graph, (1, 1))
    assert low.values.abs().max() > 1.0, "parent at 0.4 passes a 0.3 threshold: children count"
    assert high.values.abs().max() == 0.0, "parent fails a 0.5 threshold: children gated to 0"


def test_option_errors_name_the_choices():
    with pytest.raises(ValueError, match="unknown gating 'x'; choose one of soft, hard"):
        SpatialProjector(gating="x")
    with pytest.raises(ValueError, match="unknown heatmap_norm 'x'; choose one of max, mass"):
        SpatialProjector(heatmap_norm="x")
    with pytest.raises(ValueError, match="unknown atom_credit 'x'; choose one of zscore, log-gm"):
        SpatialProjector(atom_credit="x")


@pytest.mark.parametrize("grid", [(0, 4), (4, 0), (-1, 2)])
def test_latent_grid_must_be_positive(grid):
    with pytest.raises(ValueError, match="latent_grid must be two positive ints, got"):
        SpatialProjector().project(torch.zeros(2, 1), None, one_atom_graph(), grid)


def test_one_by_one_latent_grid_is_allowed():
    out = SpatialProjector().project(torch.tensor([[0.0], [1.0]]), torch.rand(2, 1, 4, 4), one_atom_graph(), (1, 1))
    assert out.values.shape == (2, 1, 1)


# --- heatmaps -------------------------------------------------------------------------------


def test_one_broken_map_does_not_flatten_the_others():
    hm = torch.zeros(2, 2, 3, 3)
    hm[..., 0, 0] = 2.0
    hm[1, 1, 2, 2] = float("nan")
    out = normalise_heatmaps(hm, ())
    assert torch.equal(out[1, 1], torch.ones(3, 3)), "the NaN map is flat"
    for g, k in [(0, 0), (0, 1), (1, 0)]:
        assert out[g, k, 0, 0] == 1.0 and out[g, k].sum() == 1.0, "the finite maps keep their shape"


@pytest.mark.parametrize("size_in", [(4, 16), (16, 4)])
def test_resize_averages_when_only_one_side_is_coarser(size_in):
    maps = torch.rand(3, *size_in, generator=torch.Generator().manual_seed(0))
    expected = F.avg_pool2d(maps[:, None], kernel_size=(size_in[0] // 4, size_in[1] // 4))[:, 0]
    torch.testing.assert_close(resize_maps(maps, (4, 4)), expected)


def test_equalise_mass_per_atom_and_below_one():
    maps = torch.zeros(2, 2, 2, 2)
    maps[0, 0, 0, 0] = 0.1  # atom 0: masses 0.1 and 0.3 -> both become 0.2
    maps[1, 0, 1, 1] = 0.3
    maps[:, 1] = 0.5  # atom 1: mass 2 in both images, unchanged
    out = equalise_mass(maps)
    torch.testing.assert_close(out[:, 0].sum((-2, -1)), torch.tensor([0.2, 0.2]))
    torch.testing.assert_close(out[:, 1], maps[:, 1])
