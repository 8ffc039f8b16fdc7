"""Advantage maths as properties (hypothesis) plus a few exact examples."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from cast_core.advantages import (
    AdvantageStats,
    advantage_stats,
    atom_advantages,
    gate_scores,
    geometric_mean,
    group_zscore,
    prompt_advantages,
    topological_order,
)

SETTINGS = settings(max_examples=50, deadline=None)

# Scores on a 1/20 grid: a column either has no spread or a clearly non-zero one, so
# "saturated" is unambiguous and tolerances can be tight.
grid_score = st.integers(0, 20).map(lambda k: k / 20)


@st.composite
def score_matrix(draw, min_g=2, max_g=8, max_k=5):
    g = draw(st.integers(min_g, max_g))
    k = draw(st.integers(1, max_k))
    rows = draw(st.lists(st.lists(grid_score, min_size=k, max_size=k), min_size=g, max_size=g))
    return torch.tensor(rows, dtype=torch.float64)


@st.composite
def dag(draw, k):
    """Parent lists of a random DAG over k atoms (parents always have a smaller index)."""
    return [sorted(draw(st.sets(st.integers(0, i - 1), max_size=min(i, 2)))) if i else [] for i in range(k)]


@st.composite
def scores_and_dag(draw):
    s = draw(score_matrix())
    return s, draw(dag(s.shape[1]))


@SETTINGS
@given(score_matrix())
def test_atom_advantages_have_zero_mean_and_unit_std_in_the_group(s):
    adv, flat = atom_advantages(s, eps=1e-12)
    torch.testing.assert_close(adv.mean(0), torch.zeros(s.shape[1], dtype=s.dtype), atol=1e-9, rtol=0)
    stds = adv.std(0, unbiased=False)
    for k in range(s.shape[1]):
        if flat[k]:
            assert torch.equal(adv[:, k], torch.zeros_like(adv[:, k]))
        else:
            assert math.isclose(float(stds[k]), 1.0, rel_tol=1e-6)


@SETTINGS
@given(score_matrix(), st.data())
def test_atom_advantages_are_invariant_to_positive_affine_maps(s, data):
    k = s.shape[1]
    a = torch.tensor(data.draw(st.lists(st.floats(0.1, 10), min_size=k, max_size=k)), dtype=s.dtype)
    b = torch.tensor(data.draw(st.lists(st.floats(-5, 5), min_size=k, max_size=k)), dtype=s.dtype)
    adv, flat = atom_advantages(s, eps=1e-12)
    adv2, flat2 = atom_advantages(a * s + b, eps=1e-12)
    assert torch.equal(flat, flat2)
    torch.testing.assert_close(adv2, adv, atol=1e-6, rtol=1e-6)


@SETTINGS
@given(score_matrix())
def test_zero_spread_atoms_get_zero_and_are_counted(s):
    s = s.clone()
    s[:, 0] = s[0, 0]  # force atom 0 to be saturated
    adv, flat = atom_advantages(s)
    expected = torch.tensor([bool((s[:, k] == s[0, k]).all()) for k in range(s.shape[1])])
    assert torch.equal(flat, expected) and bool(flat[0])
    assert torch.equal(adv[:, flat], torch.zeros_like(adv[:, flat]))
    stats = advantage_stats(s, flat)
    assert stats.saturated_atoms == int(expected.sum()) and stats.total_atoms == s.shape[1]
    assert stats.saturated_fraction == pytest.approx(int(expected.sum()) / s.shape[1])


def _soft_reference(s, parents):
    """Independent recursive definition: own score × product of the parents' gated scores."""
    memo: dict[int, torch.Tensor] = {}

    def gated(k):
        if k not in memo:
            out = s[:, k].clone()
            for p in parents[k]:
                out = out * gated(p)
            memo[k] = out
        return memo[k]

    return torch.stack([gated(k) for k in range(s.shape[1])], 1)


def _ancestors(parents, k):
    seen, todo = set(), list(parents[k])
    while todo:
        p = todo.pop()
        if p not in seen:
            seen.add(p)
            todo.extend(parents[p])
    return seen


@SETTINGS
@given(scores_and_dag())
def test_soft_gating_multiplies_by_gated_parents_and_propagates_failures(case):
    s, parents = case
    gated = gate_scores(s, parents, "soft")
    torch.testing.assert_close(gated, _soft_reference(s, parents))
    for k in range(s.shape[1]):
        for g in range(s.shape[0]):
            if any(float(s[g, a]) == 0.0 for a in _ancestors(parents, k)):
                assert float(gated[g, k]) == 0.0  # a failed grandparent propagates


@SETTINGS
@given(scores_and_dag(), st.sampled_from([0.25, 0.5, 0.75]))
def test_hard_gating_zeroes_children_of_failed_parents(case, threshold):
    s, parents = case
    gated = gate_scores(s, parents, "hard", threshold)
    for k, ps in enumerate(parents):
        for g in range(s.shape[0]):
            failed = any(float(s[g, p]) < threshold for p in ps)
            assert float(gated[g, k]) == (0.0 if failed else float(s[g, k]))


def test_gating_examples_and_validation():
    s = torch.tensor([[0.9, 0.8, 0.5], [0.2, 1.0, 1.0]])
    parents = [[], [0], [1]]  # a chain: grandparent 0 -> parent 1 -> child 2
    torch.testing.assert_close(gate_scores(s, parents, "soft"), torch.tensor([[0.9, 0.72, 0.36], [0.2, 0.2, 0.2]]))
    # hard gating looks one level up at raw scores: atom 2's parent (1.0) passed in row 1
    torch.testing.assert_close(gate_scores(s, parents, "hard"), torch.tensor([[0.9, 0.8, 0.5], [0.2, 0.0, 1.0]]))
    assert topological_order([[2], [], [1]]) == [1, 2, 0]
    with pytest.raises(ValueError, match="cycle"):
        gate_scores(s, [[2], [0], [1]])
    with pytest.raises(ValueError, match="invalid parent"):
        gate_scores(s, [[], [5], []])
    with pytest.raises(ValueError, match="gating mode"):
        gate_scores(s, parents, "medium")


@SETTINGS
@given(score_matrix())
def test_geometric_mean_is_zero_iff_an_atom_is_zero(s):
    gm = geometric_mean(s)
    for g in range(s.shape[0]):
        if bool((s[g] == 0).any()):
            assert float(gm[g]) == 0.0
        else:
            assert math.isclose(float(gm[g]), float(s[g].prod()) ** (1 / s.shape[1]), rel_tol=1e-9)
    assert torch.isfinite(gm).all()


@SETTINGS
@given(score_matrix())
def test_prompt_advantages_are_the_group_zscore_of_the_geometric_mean(s):
    adv = prompt_advantages(s, eps=1e-12)
    gm = geometric_mean(s)
    assert abs(float(adv.mean())) < 1e-9
    if float(gm.std(unbiased=False)) < 1e-6:
        assert torch.equal(adv, torch.zeros_like(adv))
    else:
        torch.testing.assert_close(adv, (gm - gm.mean()) / gm.std(unbiased=False))
    torch.testing.assert_close(group_zscore(gm, eps=1e-12), adv)


def test_group_zscore_examples():
    torch.testing.assert_close(group_zscore(torch.tensor([0.0, 1.0]), eps=0.0), torch.tensor([-1.0, 1.0]))
    assert torch.equal(group_zscore(torch.full((4,), 0.3)), torch.zeros(4))
    assert torch.equal(group_zscore(torch.tensor([0.7])), torch.zeros(1))  # a group of one teaches nothing
    with pytest.raises(ValueError):
        group_zscore(torch.zeros(2, 2))


def test_advantage_stats_example():
    s = torch.tensor([[1.0, 0.25, 0.5], [1.0, 1.0, 0.0]])
    _, flat = atom_advantages(s)
    stats = advantage_stats(s, flat)
    assert isinstance(stats, AdvantageStats)
    gm = torch.tensor([0.125 ** (1 / 3), 0.0])
    assert (stats.saturated_atoms, stats.total_atoms) == (1, 3)
    assert stats.saturated_fraction == pytest.approx(1 / 3)
    assert stats.reward_mean_gm == pytest.approx(float(gm.mean()))
    assert stats.reward_std == pytest.approx(float(gm.std(unbiased=False)))
    assert stats.reward_mean_am == pytest.approx((1.75 / 3 + 2 / 3) / 2)
    assert set(stats.as_dict()) == {
        "saturated_atoms",
        "total_atoms",
        "saturated_fraction",
        "reward_std",
        "reward_mean_gm",
        "reward_mean_am",
    }


def test_log_gm_atom_advantages_split_the_log_gm_zscore_exactly():
    # ℓ = [[0, ln .5], [ln .25, ln .5]]: atom 0 moves the log-GM, atom 1 does not.
    # L = [ln .5 / 2, (ln .25 + ln .5) / 2], std_g L = ln 2 / 2, K = 2 -> Â = [[1, 0], [-1, 0]].
    from cast_core.advantages import log_gm_atom_advantages

    scores = torch.tensor([[1.0, 0.5], [0.25, 0.5]])
    adv, flat = log_gm_atom_advantages(scores, eps=0.0)
    torch.testing.assert_close(adv, torch.tensor([[1.0, 0.0], [-1.0, 0.0]]))
    assert flat.tolist() == [False, True]


def test_log_gm_atom_advantages_floor_and_weights():
    from cast_core.advantages import LOG_FLOOR, log_gm_atom_advantages

    # a missing object (0 -> the floor) against a present one, next to a relation at 0.3 and
    # 0.1: z-scores give both atoms ±1, log-GM credit gives the relation ln(.3/.1) / ln(1/.05)
    # ≈ 0.37 of the object's weight.
    scores = torch.tensor([[1.0, 0.3], [0.0, 0.1]], dtype=torch.float64)
    adv, _ = log_gm_atom_advantages(scores, eps=0.0)
    l_obj = math.log(1.0) - math.log(LOG_FLOOR)
    l_rel = math.log(0.3) - math.log(0.1)
    spread = (l_obj + l_rel) / 4  # half the difference of the two images' mean logs
    expect = torch.tensor([[l_obj / 2, l_rel / 2], [-l_obj / 2, -l_rel / 2]], dtype=torch.float64) / (2 * spread)
    torch.testing.assert_close(adv, expect)
    torch.testing.assert_close(adv.sum(1), torch.tensor([1.0, -1.0], dtype=torch.float64))
    # two failed relations at 0.03 and 0.01 both sit on the floor: no credit between them
    floored, _ = log_gm_atom_advantages(torch.tensor([[1.0, 0.03], [0.0, 0.01]]))
    assert torch.equal(floored[:, 1], torch.zeros(2))
    # every image alike -> no advantage at all; bad floors are refused
    same, _ = log_gm_atom_advantages(torch.tensor([[0.3, 0.0], [0.3, 0.0]]))
    assert torch.equal(same, torch.zeros(2, 2))
    with pytest.raises(ValueError, match="floor"):
        log_gm_atom_advantages(scores, floor=0.0)
