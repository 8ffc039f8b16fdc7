"""The knee finder on synthetic curves whose knee is known."""

import warnings

import numpy as np
import pytest

from cast_windows.knee import FlatCurveWarning, curvature, default_smooth, find_knee, moving_average


def logistic(num_steps: int, midpoint: float, width: float) -> np.ndarray:
    t = np.arange(num_steps, dtype=float)
    return 1.0 / (1.0 + np.exp(-(t - midpoint) / width))


def true_knee(num_steps: int, midpoint: float, width: float) -> float:
    """The exact point of maximal concave curvature of the continuous logistic on normalised
    axes (x = t/(T-1), y scaled to [0, 1] over the same steps), found on a dense grid."""
    t = np.linspace(0, num_steps - 1, 200_001)
    y = 1.0 / (1.0 + np.exp(-(t - midpoint) / width))
    lo, hi = logistic(num_steps, midpoint, width)[[0, -1]]
    yn, x = (y - lo) / (hi - lo), t / (num_steps - 1)
    d1 = np.gradient(yn, x)
    kappa = np.gradient(d1, x) / (1 + d1**2) ** 1.5
    return float(t[np.argmin(kappa)])


# (steps, midpoint as a fraction of the schedule, width in steps)
CASES = [
    (10, 0.2, 0.5),
    (10, 0.4, 0.5),
    (10, 0.6, 0.5),
    (10, 0.3, 1.0),
    (20, 0.2, 1.0),
    (20, 0.4, 1.0),
    (20, 0.6, 1.0),
    (20, 0.3, 1.5),
    (28, 0.3, 1.5),
]


@pytest.mark.parametrize("steps,frac,width", CASES)
def test_sigmoid_knee_is_within_one_step_of_the_maximal_curvature(steps, frac, width):
    truth = round(true_knee(steps, frac * (steps - 1), width))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a real knee must not warn
        knee = find_knee(logistic(steps, frac * (steps - 1), width))
    assert abs(knee.step - truth) <= 1, (knee.step, truth, knee.reason)
    assert not knee.fallback and knee.reason.startswith("kneedle")
    assert knee.step > frac * (steps - 1)  # after the midpoint: where the rise flattens, not where it starts


@pytest.mark.parametrize("steps,frac,width", [(10, 0.3, 0.5), (20, 0.3, 1.0), (20, 0.3, 1.5)])
def test_curvature_method_is_exact_on_clean_sigmoids(steps, frac, width):
    truth = round(true_knee(steps, frac * (steps - 1), width))
    knee = find_knee(logistic(steps, frac * (steps - 1), width), method="curvature")
    assert abs(knee.step - truth) <= 1, (knee.step, truth)
    assert knee.reason.startswith("curvature")


def test_knee_moves_with_the_midpoint():
    steps = [find_knee(logistic(20, m, 1.0)).step for m in (3, 6, 9, 12)]
    assert steps == sorted(steps) and len(set(steps)) == 4, steps


@pytest.mark.parametrize("steps,frac,width", [(10, 0.3, 0.5), (10, 0.5, 0.5), (20, 0.3, 1.0), (20, 0.5, 1.0)])
def test_noisy_sigmoids_stay_within_one_step(steps, frac, width):
    truth = round(true_knee(steps, frac * (steps - 1), width))
    rng = np.random.default_rng(0)
    clean = logistic(steps, frac * (steps - 1), width)
    found = [find_knee(clean + rng.normal(0, 0.02, steps)).step for _ in range(30)]
    assert max(abs(f - truth) for f in found) <= 1, (truth, found)


def test_concave_saturating_curve_knee_is_where_it_flattens():
    t = np.arange(20, dtype=float)
    knee = find_knee(1 - np.exp(-t / 3.0))
    assert 3 <= knee.step <= 8, knee.step
    assert knee.curvature[knee.step] < 0  # concave there


def test_rule_ignores_the_similarity_scale():
    y = logistic(20, 7, 1.0)
    assert find_knee(0.7 + 0.05 * y).step == find_knee(y).step == find_knee(3 * y - 1).step


@pytest.mark.parametrize(
    "curve,words",
    [
        (np.ones(10), "flat"),
        (0.9 + 1e-5 * np.random.default_rng(1).standard_normal(10), "flat"),
        (np.linspace(1.0, 0.8, 10), "flat"),  # falls: no rise to locate
        (np.linspace(0.2, 1.0, 12), "no bend"),  # straight: no knee
        (np.exp(np.arange(10) / 2.0), "no bend"),  # convex: rises without flattening
    ],
)
def test_curves_without_a_knee_fall_back_to_the_middle_with_a_warning(curve, words):
    with pytest.warns(FlatCurveWarning, match=words):
        knee = find_knee(curve)
    assert knee.fallback and knee.step == (len(curve) - 1) // 2
    assert words in knee.reason and "middle step" in knee.reason


def test_curvature_method_falls_back_on_convex_curves():
    with pytest.warns(FlatCurveWarning, match="no concave point"):
        knee = find_knee(np.exp(np.arange(10) / 2.0), method="curvature")
    assert knee.fallback and knee.step == 4


@pytest.mark.parametrize("n", [1, 2])
def test_very_short_curves_do_not_crash(n):
    with pytest.warns(FlatCurveWarning, match="too short"):
        knee = find_knee(np.linspace(0.5, 1.0, n))
    assert knee.step == 0 and len(knee.curvature) == n


def test_bad_inputs_raise():
    with pytest.raises(ValueError, match="non-finite"):
        find_knee([0.1, float("nan"), 1.0])
    with pytest.raises(ValueError, match="empty"):
        find_knee([])
    with pytest.raises(ValueError, match="method"):
        find_knee([0.1, 0.5, 1.0], method="elbow")


def test_result_arrays_and_json():
    knee = find_knee(logistic(10, 3, 0.7))
    d = knee.to_dict()
    assert all(len(d[k]) == 10 for k in ("smoothed", "normalised", "curvature", "distance"))
    assert d["step"] == knee.step and isinstance(d["curvature"][0], float)
    assert min(knee.normalised) == 0.0 and max(knee.normalised) == 1.0


def test_smoothing_helpers():
    assert [default_smooth(n) for n in (10, 15, 16, 20, 32, 50)] == [1, 1, 3, 3, 5, 7]
    y = np.array([0.0, 0.0, 3.0, 0.0, 0.0])
    np.testing.assert_allclose(moving_average(y, 3), [0, 1, 1, 1, 0])
    np.testing.assert_allclose(moving_average(y, 1), y)
    with pytest.raises(ValueError):
        moving_average(y, 2)
    np.testing.assert_allclose(curvature(np.linspace(0, 1, 7)), 0, atol=1e-12)  # a line has none


def test_settle_is_the_first_step_from_which_the_curve_stays_above_the_level():
    # normalised: 0, .2, .4, .6, .95, .85, .92, 1 -> dips below 0.9 at step 5, so it settles at 6
    curve = np.array([0.0, 0.2, 0.4, 0.6, 0.95, 0.85, 0.92, 1.0]) * 0.5 + 0.3
    knee = find_knee(curve, method="settle")
    assert knee.step == 6 and not knee.fallback and knee.reason.startswith("settle")
    assert find_knee(curve, method="settle", level=0.5).step == 3
    assert find_knee(curve, method="settle", level=1.0).step == 7


def test_settle_on_a_straight_line_is_where_it_crosses_the_level():
    # kneedle has no bend to find on a straight rise (fallback); settle has an exact answer
    line = np.linspace(0.2, 1.0, 11)  # normalised i/10
    with pytest.warns(FlatCurveWarning):
        assert find_knee(line).fallback
    assert find_knee(line, method="settle").step == 9
    assert find_knee(line, method="settle", level=0.75).step == 8  # 0.7 < 0.75 <= 0.8


def test_settle_on_a_sigmoid_matches_the_exact_crossing():
    for steps, mid, width in [(10, 3.0, 0.8), (20, 8.0, 1.5), (28, 12.0, 2.0)]:
        y = logistic(steps, mid, width)
        yn = (y - y.min()) / (y.max() - y.min())
        expected = int(np.argmax(yn >= 0.9))  # monotone: first crossing = stays above from there
        assert find_knee(y, method="settle", smooth=1).step == expected


def test_settle_falls_back_on_flat_curves_and_curves_that_end_low():
    with pytest.warns(FlatCurveWarning, match="flat"):
        assert find_knee(np.full(10, 0.7), method="settle").step == 4
    with pytest.warns(FlatCurveWarning, match="never settles"):
        knee = find_knee(np.array([0.0, 0.5, 1.0, 0.95, 0.5]), method="settle", smooth=1)
    assert knee.fallback and knee.step == 2
    with pytest.raises(ValueError, match="level"):
        find_knee(np.linspace(0, 1, 5), method="settle", level=0.0)


def test_cli_knows_every_method_without_importing_numpy():
    from cast_windows.commands import KNEE_METHODS
    from cast_windows.knee import METHODS

    assert tuple(KNEE_METHODS) == tuple(METHODS)
