"""Degraded judge maps (the bench's judge-resolution ablation): each degradation against a hand
or independent computation, determinism from the image, and scores left alone."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
import torch

from cast_core.config import ConfigError
from cast_shapes.grammar import sample_scene, scene_to_graph
from cast_shapes.judge_maps import degrade
from cast_shapes.oracle import ShapesOracleScorer
from cast_shapes.render import render_batch
from cast_shapes.world import sample_layout

IMG = np.zeros((3, 32, 32), dtype=np.float32)


def _mask(*boxes):
    m = np.zeros((1, 32, 32), dtype=np.float32)
    for r0, r1, c0, c1 in boxes:
        m[0, r0:r1, c0:c1] = 1
    return m


def test_grid_pools_to_token_cells_and_repeats_them():
    # half of cell (0, 0) and all of cell (1, 1): pooled 0.5 and 1
    out = degrade(_mask((0, 8, 0, 4), (8, 16, 8, 16)), IMG, grid=4)[0]
    assert np.all(out[:8, :8] == 0.5) and np.all(out[8:16, 8:16] == 1.0)
    out[:8, :8] = out[8:16, 8:16] = 0
    assert not out.any()


def test_blur_matches_a_direct_sum_with_border_renormalised_kernels():
    sigma, m = 0.7, _mask((8, 16, 0, 8), (24, 32, 24, 32))
    out = degrade(m, IMG, grid=4, blur=sigma)[0][::8, ::8]  # one value per cell
    cells = m[0].reshape(4, 8, 4, 8).mean(axis=(1, 3))
    want = np.zeros((4, 4))
    for i in range(4):
        for j in range(4):
            wi = [math.exp(-0.5 * ((i - a) / sigma) ** 2) for a in range(4)]
            wj = [math.exp(-0.5 * ((j - b) / sigma) ** 2) for b in range(4)]
            for a in range(4):
                for b in range(4):
                    want[a, b] += cells[i, j] * wi[a] / sum(wi) * wj[b] / sum(wj)
    np.testing.assert_allclose(out, want / want.max(), rtol=1e-6, atol=1e-7)


def test_noise_moves_exactly_that_share_to_as_many_random_cells():
    m = _mask((0, 8, 0, 16))  # two cells
    base = degrade(m, IMG, grid=4)[0][::8, ::8].astype(np.float64)
    noisy = degrade(m, IMG, grid=4, noise=0.2)[0][::8, ::8].astype(np.float64)
    p, q = base / base.sum(), noisy / noisy.sum()
    moved = q - 0.8 * p
    assert moved.sum() == pytest.approx(0.2)
    assert sorted(np.round(moved[moved > 1e-9], 6)) == [0.1, 0.1]  # two cells, equal shares


def test_same_image_same_map_other_image_other_cells():
    m = _mask((0, 8, 0, 8))
    a = degrade(m, IMG, grid=4, noise=0.5)
    assert np.array_equal(a, degrade(m, IMG.copy(), grid=4, noise=0.5))
    picks = set()
    for v in range(8):
        picks.add(degrade(m, IMG + v / 10, grid=4, noise=0.5).tobytes())
    assert len(picks) > 2


def test_flat_maps_stay_flat_and_off_means_exact():
    flat = np.ones((1, 32, 32), dtype=np.float32)
    assert np.array_equal(degrade(flat, IMG, grid=4, blur=1.0, noise=0.2), flat)
    m = _mask((3, 9, 5, 20))
    assert degrade(m, IMG) is m


def test_oracle_scores_unchanged_maps_degraded_and_bad_settings_refused():
    rng = random.Random(3)
    scenes = [sample_scene(rng, k) for k in (5, 7)]
    images = torch.from_numpy(render_batch([sample_layout(s, rng) for s in scenes]))
    graphs = [scene_to_graph(s) for s in scenes]
    exact = ShapesOracleScorer().score(images, graphs, heatmaps=True)
    judged = ShapesOracleScorer(judge_grid=4, judge_blur=0.5, judge_noise=0.2).score(images, graphs, heatmaps=True)
    for a, b in zip(exact.scores, judged.scores):
        assert torch.equal(a, b)
    for e, j in zip(exact.heatmaps, judged.heatmaps):
        assert e.shape == j.shape
        assert not torch.equal(e, j)
        assert len(torch.unique(j[0])) <= 16  # one value per token cell
    for bad in ({"judge_grid": -1}, {"judge_blur": -0.1}, {"judge_noise": 1.0}, {"judge_grid": 2.5}):
        with pytest.raises(ConfigError, match="judge_"):
            ShapesOracleScorer(**bad)
    with pytest.raises(ValueError, match="judge_grid=5 must divide"):
        ShapesOracleScorer(judge_grid=5).score(images, graphs, heatmaps=True)
