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
import re
from typing import Any, Sequence

import torch

__all__ = ["seed_for", "generator_for", "sample_generators", "parse_seed_list", "parse_seed"]


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
#: seeds are 63-bit (torch.Generator.manual_seed, the config's ``seed``): 0 <= seed < 2**63
SEED_LIMIT = 2**63
#: the one seed syntax of every command (each ``--seeds`` help says it)
SEED_FORMS = "e.g. 3, 0,1,5, 0-4 or 0-4,777"


def parse_seed_list(value: str | int, option: str, minimum: int = 1) -> list[int]:
    """``"0,1,2"``, ``"0-9,777"`` or ``"3"`` -> the seeds in order: at least ``minimum`` distinct
    integers in ``[0, 2**63)`` (``a-b`` is the inclusive range), or a usage error on ``option`` that
    shows the expected form. Every command that takes seeds reads them here, so ``cast compare``,
    ``cast sample`` and ``cast window`` accept (and refuse) the same things."""
    import click

    def bad(message: str) -> click.BadParameter:
        shown = text if len(text) <= 60 else f"{text[:40]}..."
        return click.BadParameter(f"{shown!r}: {message}", param_hint=option)

    text = str(value)
    seeds: list[int] = []
    for piece in (s.strip() for s in text.split(",")):
        if not piece:
            continue
        if piece[0] in "-+":
            raise bad(f"{piece!r} is not a seed; seeds are 0 or more, {SEED_FORMS}")
        match = re.fullmatch(r"(\d+)\s*(?:-\s*(\d+))?", piece)
        if match is None:
            raise bad(f"{piece!r} is not a seed or a range of seeds, {SEED_FORMS}")
        too_large = next((d for d in match.groups() if d and (len(d) > 19 or int(d) >= SEED_LIMIT)), None)
        if too_large:  # 19 digits at most: int() of a 5000-digit string is itself an error
            raise bad(f"{too_large[:20]}{'...' if len(too_large) > 20 else ''} is too large; seeds are below 2**63")
        first, last = int(match[1]), int(match[2] or match[1])
        if last < first:
            raise bad(f"the range {piece!r} runs backwards; write {last}-{first}")
        if len(seeds) + last - first + 1 > MAX_SEEDS:  # before building the list: 0-1000000000 must not OOM
            raise bad(f"names more than {MAX_SEEDS} seeds; each seed is a full evaluation, so give fewer")
        seeds += range(first, last + 1)
    if len(seeds) < minimum or len(set(seeds)) != len(seeds):
        need = "at least two distinct seeds (the error bar is over seeds)" if minimum > 1 else "distinct seeds"
        need = need if seeds or minimum > 1 else "at least one seed"
        raise bad(f"give {need}, {SEED_FORMS}")
    return seeds


def parse_seed(value: str | int, option: str) -> int:
    """One seed, in the syntax and range of :func:`parse_seed_list` (``--seed`` of a command that
    draws one set of noise)."""
    import click

    seeds = parse_seed_list(value, option)
    if len(seeds) != 1:
        raise click.BadParameter(f"{value!r} names {len(seeds)} seeds; give one, e.g. 3", param_hint=option)
    return seeds[0]
