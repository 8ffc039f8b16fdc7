"""Scalar (Flow-GRPO) and spatial (CAST) advantage projectors: exact small examples, clipping,
the conformance kit and registration."""

from __future__ import annotations

import math

import pytest
import torch

from cast_core import AdvantageProjector, get_advantage_projector
from cast_core.projectors import ScalarProjector, SpatialProjector, normalise_heatmaps
from cast_core.scene_graph import Atom, Entity, SceneGraph
from cast_core.testing.conformance import AdvantageProjectorConformance
from cast_core.testing.fakes import simple_graph

STAT_KEYS = {"saturated_atoms", "total_atoms", "saturated_fraction", "reward_std", "reward_mean_gm", "reward_mean_am"}


def one_atom_graph() -> SceneGraph:
    return SceneGraph("a cat", (Entity("e1", "cat"),), (Atom("a1", "object", "e1"),)).validate()


def test_left_half_heatmap_gives_positive_left_half_exactly():
    # Two images, one atom: image 0 passes (1.0), image 1 fails (0.0) -> Â = Âg = ±1 with eps=0.
    scores = torch.tensor([[1.0], [0.0]])
    heat = torch.zeros(2, 1, 4, 4)
    heat[0, 0, :, :2] = 2.0
    heat[0, 0, 0, 0] = 4.0  # peak: H̃ is 1 there and 0.5 on the rest of the left half
    # image 1's map is all zero -> treated as flat (the judge did not say where)
    out = SpatialProjector(lam=0.5, eps=0.0).project(scores, heat, one_atom_graph(), (2, 2))
    torch.testing.assert_close(out.prompt_advantages, torch.tensor([1.0, -1.0]))
    # latent cell = 2x2 pixels; top-left H̃ mean = (1 + .5 + .5 + .5)/4, bottom-left 0.5, right 0
    expected0 = torch.tensor([[0.5 + 0.625, 0.5], [0.5 + 0.5, 0.5]])
    expected1 = torch.full((2, 2), -0.5 - 1.0)
    torch.testing.assert_close(out.values, torch.stack([expected0, expected1]))
    assert bool((out.values[0, :, 0] > out.values[0, :, 1]).all())
    assert set(out.stats) >= STAT_KEYS


def test_left_half_positive_with_several_atoms_and_the_lambda_term_on_the_right():
    graph = simple_graph()  # a1 object, a2 count (parent a1), a3 colour (parent a1)
    scores = torch.tensor([[0.9, 0.9, 1.0], [0.9, 0.9, 0.0], [0.9, 0.9, 0.125], [0.9, 0.9, 0.125]])
    heat = torch.zeros(4, 3, 8, 8)
    heat[:, :, :, :4] = 1.0  # every atom is found on the left half
    out = SpatialProjector(lam=1.0).project(scores, heat, graph, (4, 4))
    # Âg by hand: GM = 0.81^(1/3)·colour^(1/3); z-scores ignore the common factor, so they are those
    # of cube roots [1, 0, .5, .5] (population std): mean .5, std sqrt(.125), z = [√2, -√2, 0, 0]
    adv_g = torch.tensor([2**0.5, -(2**0.5), 0.0, 0.0])
    # only the colour atom varies; a1, a2 are saturated and contribute nothing
    assert out.stats["saturated_atoms"] == 2.0 and out.stats["total_atoms"] == 3.0
    torch.testing.assert_close(out.values[:, :, 2:], adv_g[:, None, None].expand(-1, 4, 2))  # right: λ·Âg
    assert float(out.values[0, :, :2].min()) > float(out.values[0, :, 2:].max()) > 0  # best image: left > right > 0


def test_heatmaps_none_is_the_flat_map():
    graph = simple_graph()
    gen = torch.Generator().manual_seed(0)
    scores = torch.rand(5, 3, generator=gen)
    proj = SpatialProjector(lam=0.7)
    none = proj.project(scores, None, graph, (3, 2))
    flat = proj.project(scores, torch.full((5, 3, 6, 4), 0.3), graph, (3, 2))
    torch.testing.assert_close(none.values, flat.values)
    assert none.values.shape == (5, 3, 2)


def test_normalise_heatmaps_peak_one_flat_and_zero_maps():
    hm = torch.stack([torch.tensor([[0.0, 2.0], [1.0, 4.0]]), torch.full((2, 2), 3.0), torch.zeros(2, 2)])
    out = normalise_heatmaps(hm, ())
    torch.testing.assert_close(out[0], torch.tensor([[0.0, 0.5], [0.25, 1.0]]))
    torch.testing.assert_close(out[1], torch.ones(2, 2))
    torch.testing.assert_close(out[2], torch.ones(2, 2))
    assert torch.equal(normalise_heatmaps(None, (2, 3, 4, 4)), torch.ones(2, 3, 4, 4))


def test_scalar_projector_is_the_constant_prompt_advantage():
    graph = simple_graph()
    # per-image GMs 1, 0.125^(1/3) = 0.5 and 0 (a failed atom): mean .5, population std
    # sqrt(.5/3) = sqrt(1/6), so Âg = (GM - .5)·sqrt(6) = [√1.5, 0, -√1.5]
    scores = torch.tensor([[1.0, 1.0, 1.0], [0.125, 1.0, 1.0], [0.0, 1.0, 1.0]])
    heat = torch.rand(3, 3, 8, 8, generator=torch.Generator().manual_seed(2))
    out = ScalarProjector(eps=0.0).project(scores, heat, graph, (2, 3))
    adv_g = torch.tensor([1.5**0.5, 0.0, -(1.5**0.5)])
    torch.testing.assert_close(out.prompt_advantages, adv_g)
    torch.testing.assert_close(out.values, adv_g[:, None, None].expand(-1, 2, 3))
    assert torch.equal(out.values, ScalarProjector(eps=0.0).project(scores, None, graph, (2, 3)).values)
    assert set(out.stats) >= STAT_KEYS


def test_clipping():
    # 1 pass among 30 failures: the winner's z-score is sqrt(29) ≈ 5.39 for both terms
    scores = torch.zeros(30, 1)
    scores[0] = 1.0
    graph = one_atom_graph()
    spatial = SpatialProjector(lam=1.0, adv_clip=5.0).project(scores, None, graph, (2, 2))
    assert float(spatial.values.max()) == 5.0 and float(spatial.prompt_advantages[0]) > 5.0
    assert spatial.stats["clipped_fraction"] == pytest.approx(1 / 30)
    scalar = ScalarProjector(adv_clip=2.0).project(scores, None, graph, (2, 2))
    assert torch.equal(scalar.values[0], torch.full((2, 2), 2.0))
    assert float(scalar.values.min()) > -2.0
    with pytest.raises(ValueError, match="adv_clip"):
        ScalarProjector(adv_clip=0)


def test_hard_gating_projector_and_shape_errors():
    graph = simple_graph()
    scores = torch.tensor([[0.2, 1.0, 1.0], [0.9, 1.0, 1.0]])
    # count and colour pass in both images, but hard gating zeroes them in image 0 whose object
    # failed the 0.5 threshold: they are no longer saturated and blame image 0
    hard = SpatialProjector(gating="hard").project(scores, None, graph, (2, 2))
    assert hard.stats["saturated_atoms"] == 0.0
    assert float(hard.values[0].mean()) < 0 < float(hard.values[1].mean())
    with pytest.raises(ValueError, match="gating"):
        SpatialProjector(gating="medium")
    with pytest.raises(ValueError, match=r"\[G, K\]"):
        SpatialProjector().project(torch.rand(2, 2), None, graph, (2, 2))
    with pytest.raises(ValueError, match="heatmaps"):
        SpatialProjector().project(scores, torch.rand(2, 2, 4, 4), graph, (2, 2))


def test_registered_as_builtins():
    assert isinstance(get_advantage_projector("scalar"), ScalarProjector)
    spatial = get_advantage_projector("spatial", lam=0.5)
    assert isinstance(spatial, SpatialProjector) and isinstance(spatial, AdvantageProjector) and spatial.lam == 0.5


class TestScalarProjectorConformance(AdvantageProjectorConformance):
    def make_projector(self):
        return ScalarProjector()


class TestSpatialProjectorConformance(AdvantageProjectorConformance):
    def make_projector(self):
        return SpatialProjector()


class TestHardSpatialProjectorConformance(AdvantageProjectorConformance):
    latent_grid = (3, 5)  # does not divide the 16x16 image: area averaging over uneven cells

    def make_projector(self):
        return SpatialProjector(lam=0.5, gating="hard")


class TestAtomProjectorConformance(AdvantageProjectorConformance):
    def make_projector(self):
        from cast_core.projectors import AtomProjector

        return AtomProjector()


def test_atom_projector_is_spatial_with_flat_maps():
    from cast_core.projectors import AtomProjector

    # one atom, pass/fail: Â = Âg = ±1 (eps=0), so with flat maps A = λ·Âg + Â·1 = ±(0.5 + 1)
    # everywhere; the (non-flat, left-half) heatmap given must be ignored
    scores = torch.tensor([[1.0], [0.0]])
    heat = torch.zeros(2, 1, 4, 4)
    heat[:, :, :, :2] = 1.0
    a = AtomProjector(lam=0.5, eps=0.0).project(scores, heat, one_atom_graph(), (2, 2)).values
    torch.testing.assert_close(a, torch.stack([torch.full((2, 2), 1.5), torch.full((2, 2), -1.5)]))
    assert AtomProjector.needs_heatmaps is False


def test_equalise_mass_gives_each_image_the_groups_mean_mass():
    from cast_core.projectors import equalise_mass

    maps = torch.zeros(2, 1, 2, 2)
    maps[0, 0, 0, 0] = 1.0  # one cell: mass 1
    maps[1, 0] = 1.0  # flat: mass 4  -> target mass 2.5 for both
    out = equalise_mass(maps)
    torch.testing.assert_close(out[0, 0], torch.tensor([[2.5, 0.0], [0.0, 0.0]]))
    torch.testing.assert_close(out[1, 0], torch.full((2, 2), 0.625))
    assert torch.equal(equalise_mass(torch.zeros(3, 2, 2, 2)), torch.zeros(3, 2, 2, 2))


def test_mass_norm_balances_credit_between_small_and_large_heatmaps():
    # image 0 passes with a one-cell object, image 1 fails with a four-cell object: under "max"
    # the failing image carries 4× the atom mass; under "mass" both carry the same (±2.5).
    scores = torch.tensor([[1.0], [0.0]])
    heat = torch.zeros(2, 1, 2, 2)
    heat[0, 0, 0, 0] = 1.0
    heat[1, 0] = 1.0
    graph = one_atom_graph()
    peak = SpatialProjector(lam=0.0, eps=0.0).project(scores, heat, graph, (2, 2)).values
    mass = SpatialProjector(lam=0.0, eps=0.0, heatmap_norm="mass").project(scores, heat, graph, (2, 2)).values
    assert float(peak[0].sum()) == pytest.approx(1.0) and float(peak[1].sum()) == pytest.approx(-4.0)
    assert float(mass[0].sum()) == pytest.approx(2.5) and float(mass[1].sum()) == pytest.approx(-2.5)
    with pytest.raises(ValueError, match="heatmap_norm"):
        SpatialProjector(heatmap_norm="sum")


def test_log_gm_credit_splits_the_prompt_advantage_over_the_maps():
    # object atom on the left column, count atom (child of the object) on the right column;
    # image 0 has the object and the wrong count, image 1 neither: ℓ = [[0, ln .5], [ln .05, ln .05]]
    # (log floor 0.05). Centred columns: ±ln(20)/2 and ±ln(10)/2; L = mean_k ℓ = [ln(.5)/2, ln .05]
    # has population std ln(10√2)/2, so Â = centred / (K·std) = ±[ln 20, ln 10] / ln 200.
    graph = simple_graph(colour=None)
    scores = torch.tensor([[1.0, 0.5], [0.0, 0.0]])
    heat = torch.zeros(2, 2, 2, 2)
    heat[:, 0, :, 0] = 1.0
    heat[:, 1, :, 1] = 1.0
    adv = torch.tensor([[math.log(20), math.log(10)], [-math.log(20), -math.log(10)]]) / math.log(200)
    for gating in ("soft", "hard"):  # log-GM credit reads the raw scores: gating changes nothing
        out = SpatialProjector(lam=0.0, eps=0.0, gating=gating, atom_credit="log-gm").project(
            scores, heat, graph, (2, 2)
        )
        torch.testing.assert_close(out.values[:, :, 0], adv[:, :1].expand(2, 2))
        torch.testing.assert_close(out.values[:, :, 1], adv[:, 1:].expand(2, 2))
    # the atoms' shares add up to the prompt's log-GM z-score (±1 for two images); the object
    # (ln 20 / ln 200 ≈ .565) moved the log-GM more than the count (ln 10 / ln 200 ≈ .435)
    torch.testing.assert_close(out.values[:, 0, 0] + out.values[:, 0, 1], torch.tensor([1.0, -1.0]))
    assert float(out.values[0, 0, 0]) > float(out.values[0, 0, 1]) > 0
    with pytest.raises(ValueError, match="atom_credit"):
        SpatialProjector(atom_credit="sum")
