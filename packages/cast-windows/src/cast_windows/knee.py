"""Finding the structure-formation point on a similarity curve.

The curve is ``s_i = cos(embed(x̂0_i), embed(final image))`` for the steps ``i = 0..T-1`` of a
schedule, averaged over a calibration set. It rises while the sample's structure is still being
decided and flattens once the Tweedie estimate already looks like the final image. The
*formation point* is the knee where the rise flattens: noise injected before it can change what
the image shows, noise after it mostly changes details.

The exact rule (:func:`find_knee`), in order:

1. **Checks.** Non-finite values are a caller bug and raise ``ValueError``. Fewer than three
   points cannot bend: fallback (below).
2. **Smoothing.** A centred moving average of odd width ``smooth`` (edge values repeated at both
   ends, so the curve keeps its length). The default width is
   ``2·⌊T/16⌋ + 1``: no smoothing below 16 steps (a 10-step curve has no samples to spare), 3 for
   16-31 steps, 5 for 32-47, ... — enough to stop single-step noise of a small calibration set
   from moving the knee, little enough not to shift a sharp bend.
3. **Flat curves.** If the smoothed curve rises by less than ``min_rise`` (in cosine units,
   default 0.001) from its first to its last step, there is nothing to locate — the embedder sees
   the same image throughout, or the curve falls: fallback. The threshold is absolute and small on
   purpose: a real curve ends at exactly 1, and even the fake policy's nearly linear field rises by
   0.015 with downsampled pixels; only degenerate curves are this flat.
4. **Normalisation.** Both axes to ``[0, 1]``: ``x_i = i/(T-1)``, ``ŷ = (s - min s)/(max s - min s)``
   on the smoothed curve. This makes the rule independent of the schedule length and of the
   embedder's similarity baseline (pixels and CLIP live on very different cosine scales).
5. **The knee** (``method="kneedle"``, the default): the step maximising ``ŷ_i - x_i``, the point
   of the curve farthest above the chord joining its normalised end points (Satopää et al. 2011,
   "Kneedle"). For a rising curve that bends over this is the discrete point of maximal curvature
   of the concave bend — where the rise flattens — and, unlike a second difference, it does not
   amplify noise: on logistic curves, clean or with 2% noise, it stays within one step of the
   exact maximal-curvature point (rounded to a step) for 10-28 step schedules (see the tests).
   Known limits: for a wide, gradual bend it lands a step or two *before* the curvature maximum,
   and a bend in the last ~25% of the schedule barely rises above the chord, so it is reported
   as "no bend" (fallback) — structure forms early in flow models, so this is the safe side.
   ``method="curvature"`` takes the literal rule instead: the interior step with the largest concave discrete curvature
   ``-κ_i``, ``κ = ŷ''/(1 + ŷ'^2)^{3/2}`` (central differences on the normalised axes). It is exact
   on clean curves and fragile on noisy ones; it is offered for comparison.
   ``method="settle"`` is for curves that rise steadily and have no bend to find: the first step
   from which ``ŷ`` stays at or above ``level`` (default 0.9) — the point after which the x̂0 is
   within 10 % of the way to the final image, by this embedder. It is the oracle ground truth's
   own definition ("verdicts settled for 90 % of samples") carried over from verdicts to
   embeddings, so it agrees with that truth exactly when the embedder sees what the verdicts
   see. Why it exists: the shapes world's scene similarity (``shapes-scene``) tracks the oracle's
   verdict agreement step by step, and both rise almost linearly; the maximal-curvature point of
   a nearly straight curve is wherever noise puts the flattest stretch, far before the
   settling step (docs/results.md, "Window validation"). The flat-curve fallback applies; ``min_bend``
   does not (a straight curve settles too).
6. **No bend.** If the best ``ŷ_i - x_i`` is below ``min_bend`` (default 0.05 — a straight or convex
   curve that rises without flattening; for ``"curvature"``: no concave point), fallback.

**Fallback:** the middle step ``(T-1)//2``, with a ``warnings.warn`` and a ``reason`` that says
which check failed. A window up to the middle covers the high-noise half of the schedule, the
conservative Flow-GRPO-Fast-style choice when nothing was measured. Never raises for a flat curve.

The curvature ``κ`` is always computed and returned, whichever method chose the knee, so plots and
``window.json`` can show it.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Sequence

import numpy as np

METHODS = ("kneedle", "curvature", "settle")


class FlatCurveWarning(UserWarning):
    """The similarity curve has no knee; the documented fallback step was used."""


@dataclass(frozen=True)
class Knee:
    """What :func:`find_knee` found. Arrays have the curve's length ``T``.

    ``step`` is the formation point (0-based step index); ``smoothed`` the smoothed curve in the
    curve's own units; ``normalised`` the smoothed curve on ``[0, 1]``; ``curvature`` the signed
    discrete curvature ``κ`` of ``normalised`` (negative = concave = the rise flattens);
    ``distance`` the Kneedle score ``ŷ_i - x_i``; ``fallback`` whether the fallback was used;
    ``reason`` a sentence saying why this step.
    """

    step: int
    smoothed: np.ndarray
    normalised: np.ndarray
    curvature: np.ndarray
    distance: np.ndarray
    method: str
    smooth: int
    fallback: bool
    reason: str

    def to_dict(self) -> dict:
        """JSON-ready form (lists of floats)."""
        as_list = lambda a: [float(v) for v in a]  # noqa: E731
        return {
            "step": self.step,
            "method": self.method,
            "smooth": self.smooth,
            "fallback": self.fallback,
            "reason": self.reason,
            "smoothed": as_list(self.smoothed),
            "normalised": as_list(self.normalised),
            "curvature": as_list(self.curvature),
            "distance": as_list(self.distance),
        }


def default_smooth(num_points: int) -> int:
    """The default moving-average width: ``2·⌊T/16⌋ + 1`` (1 = no smoothing below 16 points)."""
    return 2 * (num_points // 16) + 1


def moving_average(y: np.ndarray, width: int) -> np.ndarray:
    """Centred moving average of odd ``width``; the edge values are repeated so the length and
    the end points' neighbourhoods stay sensible."""
    if width < 1 or width % 2 == 0:
        raise ValueError(f"smoothing width must be a positive odd number, got {width}")
    if width == 1 or len(y) < 2:
        return y.astype(float).copy()
    pad = width // 2
    padded = np.pad(y.astype(float), pad, mode="edge")
    return np.convolve(padded, np.ones(width) / width, mode="valid")


def curvature(y: np.ndarray) -> np.ndarray:
    """Signed discrete curvature ``y''/(1 + y'^2)^{3/2}`` of ``y`` sampled on ``x = linspace(0, 1, T)``
    (central differences inside, one-sided at the ends; zero for fewer than three points)."""
    n = len(y)
    if n < 3:
        return np.zeros(n)
    x = np.linspace(0.0, 1.0, n)
    d1 = np.gradient(y, x)
    d2 = np.gradient(d1, x)
    return d2 / (1.0 + d1**2) ** 1.5


def find_knee(
    curve: Sequence[float] | np.ndarray,
    *,
    method: str = "kneedle",
    smooth: int | None = None,
    min_rise: float = 1e-3,
    min_bend: float = 0.05,
    level: float = 0.9,
) -> Knee:
    """The formation point of a rising similarity curve (rule in the module docstring)."""
    if method not in METHODS:
        raise ValueError(f"unknown knee method {method!r}; choose one of {', '.join(METHODS)}")
    if not 0.0 < level <= 1.0:
        raise ValueError(f"level must be in (0, 1], got {level}")
    y = np.asarray(curve, dtype=float).reshape(-1)
    if y.size == 0:
        raise ValueError("cannot find the knee of an empty curve")
    if not np.isfinite(y).all():
        raise ValueError(f"similarity curve has non-finite values: {y.tolist()}")
    n = y.size
    width = default_smooth(n) if smooth is None else int(smooth)
    s = moving_average(y, width)
    x = np.linspace(0.0, 1.0, n) if n > 1 else np.zeros(1)
    span = float(s.max() - s.min())
    yn = (s - s.min()) / span if span > 0 else np.zeros(n)
    kappa = curvature(yn)
    distance = yn - x

    def result(step: int, reason: str, fallback: bool) -> Knee:
        if fallback:
            warnings.warn(f"no knee in the similarity curve: {reason}", FlatCurveWarning, stacklevel=3)
        return Knee(step, s, yn, kappa, distance, method, width, fallback, reason)

    middle = (n - 1) // 2
    if n < 3:
        return result(middle, f"a {n}-step curve is too short to bend; fell back to the middle step {middle}", True)
    rise = float(s[-1] - s[0])
    if rise < min_rise:
        return result(
            middle,
            f"the curve is flat: it rises by {rise:.4g} < min_rise={min_rise:g} from the first "
            f"to the last step; fell back to the middle step {middle}",
            True,
        )
    if method == "settle":
        below = np.flatnonzero(yn < level - 1e-9)  # a curve exactly at the level counts as there
        step = int(below[-1]) + 1 if below.size else 0
        if step >= n:
            return result(
                middle,
                f"never settles: the normalised curve ends below level={level:g} "
                f"({float(yn[-1]):.3f}; it falls at the end); fell back to the middle step {middle}",
                True,
            )
        return result(
            step,
            f"settle: from step {step} on the normalised curve stays >= level={level:g} "
            f"(y_norm = {float(yn[step]):.3f} there; {float(yn[step - 1]) if step else float('nan'):.3f} "
            f"the step before)",
            False,
        )
    if method == "kneedle":
        step = int(np.argmax(distance))
        best = float(distance[step])
        if best < min_bend:
            return result(
                middle,
                f"no bend: the curve never rises above its chord by min_bend={min_bend:g} "
                f"(best {best:.3f}; straight or convex); fell back to the middle step {middle}",
                True,
            )
        return result(
            step,
            f"kneedle: step {step} lies farthest above the chord of the normalised curve "
            f"(y_norm - x_norm = {best:.3f}), where the rise flattens",
            False,
        )
    concave = np.where(kappa[1:-1] < 0, -kappa[1:-1], 0.0)
    if float(concave.max()) <= 0.0:
        return result(
            middle,
            f"no bend: the curve has no concave point (straight or convex); fell back to the middle step {middle}",
            True,
        )
    step = 1 + int(np.argmax(concave))
    return result(
        step,
        f"curvature: step {step} has the largest concave curvature of the normalised curve "
        f"(kappa = {float(kappa[step]):.3f}), where the rise flattens",
        False,
    )
