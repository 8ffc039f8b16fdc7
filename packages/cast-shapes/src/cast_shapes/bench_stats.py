"""The bench's numbers: paired gains over the base per method, and the gain ratio with a
bootstrap confidence interval.

Why this shape: every trained run is evaluated at the same evaluation seeds as the base (the
same starting noise), so each (run, evaluation seed) cell holds a *paired* difference. A
method's gain is the mean of its cells; its standard error is over training seeds (each run's
mean over evaluation seeds), the spread a reader re-running the bench would see. The ratio
cast / flow-grpo is only a speed-up when flow-grpo gained: where its gain is not above zero the
ratio is reported as undefined, with both gains, never as a number.

The interval resamples training seeds (per method, with replacement) and evaluation seeds (one
draw shared by every method, because the methods share the evaluation noise), and takes the
2.5 / 97.5 percentiles of the ratio. When flow-grpo's resampled gain is not above zero in more
than 2.5 % of the draws, the interval is unbounded: the point ratio then divides by a gain the
data cannot tell from zero (a +0.0002 gave "-73"), so the text shows both gains and that share
instead of a number. ``bench.json`` keeps the point ratio for completeness.
"""

from __future__ import annotations

import random
import statistics
from typing import Sequence

METRICS_ORDER = ("gm", "object", "count", "attribute", "position")
BOOTSTRAP_DRAWS = 2000


def cells(run: dict, metric: str) -> list[float] | None:
    """A run's paired differences at each evaluation seed for ``metric`` (``gm`` or a skill)."""
    out = []
    for row in run["per_seed"]:
        d = row["gm_difference"] if metric == "gm" else row["skill_differences"].get(metric)
        if d is None:
            return None
        out.append(d["delta"])
    return out


def method_gain(runs: Sequence[dict], metric: str) -> dict | None:
    """``{"gain", "se", "se_over", "per_run"}``: mean paired gain and its standard error over
    training seeds (over evaluation seeds when there is one training seed)."""
    grid = [cells(r, metric) for r in runs]
    if not grid or any(c is None for c in grid):
        return None
    per_run = [statistics.fmean(c) for c in grid]
    gain = statistics.fmean(per_run)
    if len(per_run) > 1:
        se, over = statistics.stdev(per_run) / len(per_run) ** 0.5, "training seeds"
    else:
        se, over = statistics.stdev(grid[0]) / len(grid[0]) ** 0.5, "evaluation seeds"
    return {"gain": gain, "se": se, "se_over": over, "per_run": per_run}


def gain_ratio(
    num: Sequence[dict], den: Sequence[dict], metric: str, draws: int = BOOTSTRAP_DRAWS, seed: int = 0
) -> dict | None:
    """The ratio of ``num``'s gain to ``den``'s on ``metric`` with its bootstrap interval:
    ``{"ratio", "ci", "den_not_positive_share", "defined"}``; ``ratio`` is None when the
    denominator's gain is not above zero, ``ci`` None when the interval is unbounded."""
    a, b = [cells(r, metric) for r in num], [cells(r, metric) for r in den]
    if not a or not b or any(c is None for c in a + b):
        return None
    n_eval = len(a[0])
    if any(len(c) != n_eval for c in a + b):
        raise ValueError("every run must be evaluated at the same evaluation seeds")
    mean = lambda grid, rows, cols: statistics.fmean(grid[r][c] for r in rows for c in cols)  # noqa: E731
    g_num, g_den = mean(a, range(len(a)), range(n_eval)), mean(b, range(len(b)), range(n_eval))
    rng = random.Random(seed)
    ratios, not_positive = [], 0
    for _ in range(draws):
        cols = [rng.randrange(n_eval) for _ in range(n_eval)]
        ra = [rng.randrange(len(a)) for _ in range(len(a))]
        rb = [rng.randrange(len(b)) for _ in range(len(b))]
        d = mean(b, rb, cols)
        if d <= 0:
            not_positive += 1
        else:
            ratios.append(mean(a, ra, cols) / d)
    share = not_positive / draws
    ci = None
    if share <= 0.025 and ratios:
        ratios.sort()
        ci = (ratios[int(0.025 * (len(ratios) - 1))], ratios[int(round(0.975 * (len(ratios) - 1)))])
    return {
        "ratio": g_num / g_den if g_den > 0 else None,
        "ci": ci,
        "num_gain": g_num,
        "den_gain": g_den,
        "den_not_positive_share": share,
        "draws": draws,
    }


def summarise(results: dict[str, list[dict]], numerator: str = "cast", denominator: str = "flow-grpo") -> dict:
    """Per method and metric its gain; per metric the ratio ``numerator``/``denominator``
    (``ratio``, the headline), and every other method's ratio to ``denominator`` (``ratios``):
    an ablation's ratio is what the headline would be with that ablation's judge."""
    gains = {m: {k: g for k in METRICS_ORDER if (g := method_gain(runs, k)) is not None} for m, runs in results.items()}
    ratios = {}
    if denominator in results:
        for m in results:
            by_metric = {
                k: r
                for k in METRICS_ORDER
                if m != denominator and (r := gain_ratio(results[m], results[denominator], k)) is not None
            }
            if by_metric:
                ratios[m] = by_metric
    return {
        "gains": gains,
        "ratio": {"numerator": numerator, "denominator": denominator, "by_metric": ratios.get(numerator, {})},
        "ratios": {"denominator": denominator, "by_method": ratios},
    }


def ratio_text(r: dict) -> str:
    """One cell of the ratio row: the number and interval, or why there is none."""
    if r["ratio"] is None:
        return f"undefined (flow-grpo {r['den_gain']:+.3f}, cast {r['num_gain']:+.3f})"
    if r["ci"] is None:
        return (
            f"not determined (flow-grpo {r['den_gain']:+.3f}, ≤ 0 in "
            f"{100 * r['den_not_positive_share']:.0f}% of draws; cast {r['num_gain']:+.3f})"
        )
    return f"{r['ratio']:.2f} [{r['ci'][0]:.2f}, {r['ci'][1]:.2f}]"


def ratio_cell(r: dict) -> str:
    """The short form of :func:`ratio_text` for a table of ratios (the legend says the rest)."""
    if r["ratio"] is None:
        return "undefined"
    if r["ci"] is None:
        return f"n.d. ({100 * r['den_not_positive_share']:.0f}%)"
    return f"{r['ratio']:.2f} [{r['ci'][0]:.2f}, {r['ci'][1]:.2f}]"
