"""Prompt-level numbers from atom scores, as GenEval 2's Soft-TIFA defines them.

AM (arithmetic mean) is the atom-level estimate; GM (geometric mean, a soft AND) is the
prompt-level one and is exactly 0 as soon as one atom scores 0 — which is the point: a prompt is
only satisfied when every atom is.
"""

from __future__ import annotations

import math
from typing import Iterable


def arithmetic_mean(scores: Iterable[float]) -> float:
    values = [float(s) for s in scores]
    if not values:
        raise ValueError("arithmetic mean of no atom scores")
    return sum(values) / len(values)


def geometric_mean(scores: Iterable[float]) -> float:
    values = [float(s) for s in scores]
    if not values:
        raise ValueError("geometric mean of no atom scores")
    if any(v < 0 for v in values):
        raise ValueError(f"geometric mean needs non-negative scores, got {values}")
    if any(v == 0 for v in values):
        return 0.0
    return math.exp(sum(math.log(v) for v in values) / len(values))
