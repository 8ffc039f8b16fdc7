"""Every random choice of a run comes from a generator seeded by ``(run seed, step, purpose, …)``,
never from a continuing global stream.

That is what makes a resumed run replay the steps the original would have taken, and what makes
an image independent of how the batch was cut: sample ``(p, g)`` of step ``s`` (member ``g`` of
the group of the step's ``p``-th prompt) draws its starting noise and every SDE step's noise from
its own generator, so it is the same image whether it was sampled in chunks of 2 or 4, first or
last, on rank 0 or rank 3 of a distributed run.
"""

from __future__ import annotations

import hashlib
from typing import Any, Sequence

import torch

__all__ = ["seed_for", "generator_for", "sample_generators"]


def seed_for(seed: int, *parts: Any) -> int:
    """A 63-bit seed from ``(seed, parts)``: stable across processes and Python versions."""
    digest = hashlib.sha256(repr((seed, *parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def generator_for(seed: int, *parts: Any) -> torch.Generator:
    """A CPU generator seeded by :func:`seed_for` (CPU so a seed draws the same numbers on
    every device)."""
    return torch.Generator().manual_seed(seed_for(seed, *parts))


def sample_generators(seed: int, step: int, samples: Sequence[tuple[int, int]], purpose: str = "sample") -> list[torch.Generator]:
    """One generator per sample ``(prompt index, member index)`` of training step ``step``."""
    return [generator_for(seed, step, purpose, int(p), int(g)) for p, g in samples]
