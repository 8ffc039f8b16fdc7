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


def sample_generators(
    seed: int, step: int, samples: Sequence[tuple[int, int]], purpose: str = "sample"
) -> list[torch.Generator]:
    """One generator per sample ``(prompt index, member index)`` of training step ``step``."""
    return [generator_for(seed, step, purpose, int(p), int(g)) for p, g in samples]


#: the most seeds a seed list may name: each is a full evaluation
MAX_SEEDS = 10_000


def parse_seed_list(value: str, option: str, minimum: int = 1) -> list[int]:
    """``"0,1,2"`` or ``"0-9,777"`` -> the seeds in order: at least ``minimum`` distinct
    non-negative integers (``a-b`` is the inclusive range), or a usage error on ``option`` that
    shows the expected form."""
    import click

    form = "e.g. 0,1,2 or 0-9,777"
    seeds: list[int] = []
    for piece in (s.strip() for s in value.split(",")):
        if not piece:
            continue
        low, dash, high = piece.partition("-")
        if not low.strip().isdigit() or (dash and not high.strip().isdigit()):
            raise click.BadParameter(
                f"{value!r}: {piece!r} is not a seed or a range of seeds, {form}", param_hint=option
            )
        first, last = int(low), int(high) if dash else int(low)
        if last < first:
            raise click.BadParameter(
                f"{value!r}: the range {piece!r} runs backwards; write {last}-{first}", param_hint=option
            )
        if len(seeds) + last - first + 1 > MAX_SEEDS:  # before building the list: 0-1000000000 must not OOM
            raise click.BadParameter(
                f"{value!r} names more than {MAX_SEEDS} seeds; each seed is a full evaluation, so give fewer",
                param_hint=option,
            )
        seeds += range(first, last + 1)
    if len(seeds) < minimum or len(set(seeds)) != len(seeds):
        need = "at least two distinct seeds (the error bar is over seeds)" if minimum > 1 else "distinct seeds"
        raise click.BadParameter(f"{value!r}: give {need}, {form}", param_hint=option)
    return seeds
