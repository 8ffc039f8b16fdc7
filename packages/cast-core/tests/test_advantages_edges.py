"""The edges of the advantage maths that the property tests never reach: the default ``eps``
on exact numbers, the strictness of ``min_std``, empty groups and graphs, integer input, the
log floor's bounds, and the words of every error. Each test here was written against a
surviving mutant of ``advantages.py`` (docs/testing.md, "Mutation testing")."""

from __future__ import annotations

import math

import pytest
import torch

from cast_core.advantages import (
    advantage_stats,
    atom_advantages,
    gate_scores,
    geometric_mean,
    group_zscore,
    log_gm_atom_advantages,
    prompt_advantages,
    topological_order,
)

EPS = 1e-6  # the documented default of every function below


def exact(actual: torch.Tensor, expected: list) -> None:
    torch.testing.assert_close(actual.double(), torch.tensor(expected, dtype=torch.float64), rtol=0, atol=1e-12)


# --- the default eps, on exact numbers ------------------------------------------------------


def test_group_zscore_default_eps_exact():
    # [0, 2]: mean 1, population std 1, so ±1 / (1 + eps)
    exact(group_zscore(torch.tensor([0.0, 2.0], dtype=torch.float64)), [-1 / (1 + EPS), 1 / (1 + EPS)])


def test_atom_advantages_default_eps_exact():
    adv, flat = atom_advantages(torch.tensor([[0.0, 0.5], [1.0, 0.5]], dtype=torch.float64))
    # column 0: mean 0.5, std 0.5; column 1 has no spread
    exact(adv, [[-0.5 / (0.5 + EPS), 0.0], [0.5 / (0.5 + EPS), 0.0]])
    assert flat.tolist() == [False, True]


def test_prompt_advantages_default_eps_exact():
    scores = torch.tensor([[0.25, 1.0], [1.0, 1.0]], dtype=torch.float64)  # GM 0.5 and 1
    exact(prompt_advantages(scores), [-0.25 / (0.25 + EPS), 0.25 / (0.25 + EPS)])


def test_log_gm_atom_advantages_default_eps_exact():
    scores = torch.tensor([[0.25, 1.0], [1.0, 1.0]], dtype=torch.float64)
    adv, _ = log_gm_atom_advantages(scores)
    big = math.log(0.25)  # atom 0's log in image 0; atom 1 is 0 everywhere
    spread = abs(big / 2) / 2  # L = [big/2, 0]: population std is |big/2| / 2
    exact(adv, [[(big / 2) / (2 * (spread + EPS)), 0.0], [(-big / 2) / (2 * (spread + EPS)), 0.0]])


def test_log_gm_atom_advantages_one_atom():
    # K = 1 is a real case (a one-atom prompt), not an empty one
    adv, _ = log_gm_atom_advantages(torch.tensor([[0.5], [1.0]], dtype=torch.float64))
    half = math.log(0.5) / 2
    exact(adv, [[half / (abs(half) + EPS)], [-half / (abs(half) + EPS)]])


# --- min_std is a strict bound --------------------------------------------------------------


def test_spread_exactly_min_std_still_counts():
    # "below min_std counts as no spread": a spread equal to it is kept
    assert group_zscore(torch.tensor([0.0, 2.0], dtype=torch.float64), min_std=1.0).abs().min() > 0.99
    adv, flat = atom_advantages(torch.tensor([[0.0], [2.0]], dtype=torch.float64), min_std=1.0)
    assert not flat.any() and adv.abs().min() > 0.99
    scores = torch.tensor([[0.25, 1.0], [1.0, 1.0]], dtype=torch.float64)
    spread = float(torch.log(scores).mean(1).std(unbiased=False))
    adv, _ = log_gm_atom_advantages(scores, min_std=spread)
    assert adv.abs().max() > 0.1


# --- empty groups, empty graphs -------------------------------------------------------------


@pytest.mark.parametrize("k", [1, 3])
def test_empty_group(k):
    adv, flat = atom_advantages(torch.zeros(0, k))
    assert adv.shape == (0, k) and adv.dtype == torch.float32
    assert flat.shape == (k,) and flat.all(), "an empty group has no spread on any atom"
    adv, flat = log_gm_atom_advantages(torch.zeros(0, k))
    assert adv.shape == (0, k) and adv.dtype == torch.float32 and flat.all()
    stats = advantage_stats(torch.zeros(0, k), torch.ones(k, dtype=torch.bool))
    assert (stats.reward_std, stats.reward_mean_gm, stats.reward_mean_am) == (0.0, 0.0, 0.0)
    assert stats.saturated_fraction == 1.0


def test_graph_without_atoms():
    scores = torch.zeros(3, 0)
    assert gate_scores(scores, []).shape == (3, 0)
    adv, _ = log_gm_atom_advantages(scores)
    assert adv.shape == (3, 0) and adv.dtype == torch.float32
    gm = geometric_mean(scores)
    assert gm.dtype == torch.float64 and gm.tolist() == [1.0, 1.0, 1.0], "the empty product is 1"
    stats = advantage_stats(scores, torch.zeros(0, dtype=torch.bool))
    assert stats.saturated_fraction == 0.0 and stats.total_atoms == 0
    assert stats.reward_mean_am == 0.0 and stats.reward_mean_gm == 1.0 and stats.reward_std == 0.0


def test_no_spread_returns_input_dtype():
    adv, flat = log_gm_atom_advantages(torch.full((4, 2), 0.7))
    assert adv.dtype == torch.float32 and not adv.any() and flat.all()


def test_integer_scores_give_float32():
    # 0/1 verdicts as integers: advantages must not be truncated to integers
    hard = torch.tensor([[0, 1], [1, 1]])
    assert gate_scores(hard, [[], []]).dtype == torch.float32
    adv, _ = atom_advantages(hard)
    assert adv.dtype == torch.float32 and adv[0, 0] == pytest.approx(-1 / (0.5 + EPS) * 0.5)


# --- the log floor --------------------------------------------------------------------------


def test_floor_bounds():
    adv, _ = log_gm_atom_advantages(torch.tensor([[0.2], [0.9]]), floor=1.0)
    assert not adv.any(), "floor 1 maps every score to log 1 = 0"
    for bad in (0.0, 1.5, -0.1):
        with pytest.raises(ValueError, match=r"floor must be in \(0, 1\], got"):
            log_gm_atom_advantages(torch.tensor([[0.2], [0.9]]), floor=bad)


def test_scores_above_one_count_as_one():
    # a judge's rounding can give 1.0000001; it must not out-score a sure "yes"
    over = log_gm_atom_advantages(torch.tensor([[0.3, 1.5], [0.9, 1.0]], dtype=torch.float64))[0]
    at_one = log_gm_atom_advantages(torch.tensor([[0.3, 1.0], [0.9, 1.0]], dtype=torch.float64))[0]
    exact(over, at_one.tolist())


# --- errors say what is wrong ---------------------------------------------------------------


def test_error_messages():
    with pytest.raises(ValueError, match=r"atom 0 has invalid parent index 2 \(there are 2 atoms\)"):
        topological_order([[2], []])
    with pytest.raises(ValueError, match="cycle through atom 1 \\(it is its own parent\\)"):
        topological_order([[], [1]])
    with pytest.raises(ValueError, match="1 parent lists for 2 atoms"):
        gate_scores(torch.zeros(2, 2), [[]])
    with pytest.raises(ValueError, match="unknown gating mode 'dsg'; choose one of soft, hard"):
        gate_scores(torch.zeros(2, 1), [[]], mode="dsg")
    with pytest.raises(ValueError, match=r"rewards must be a vector \[G\], got shape \(2, 1\)"):
        group_zscore(torch.zeros(2, 1))
