"""The baseline windows CAST is compared with: ``fixed``, ``random`` (Flow-GRPO-Fast) and
``sliding`` (MixGRPO progressive).

``random`` and ``sliding`` change with the training step, so they implement
``select_for_step(policy, prompts, num_steps, *, step, seed)``, which the trainer calls every
step with the run's seed. Their choice is a pure function of ``(seed, step)`` — never of a global
random stream — which fixes the two window problems found in Flow-GRPO's code (see
shared/notes/flow-grpo-and-peers.md): the Qwen-Image window never changed (``random.seed`` of a
constant), and the SD3/FLUX window differed across the ranks sharing a group (per-rank global
seeds). Here every process draws the same window for the same step, and a resumed run replays it.
``select()`` (no step) answers for step 0 with the selector's own ``seed``.
"""

from __future__ import annotations

import random
from typing import Any, Sequence

from cast_core.seeding import seed_for
from cast_core.types import Window


def _check_range(lo: int, hi: int | None, size: int, num_steps: int, what: str) -> int:
    hi = num_steps if hi is None else int(hi)
    if hi > num_steps:
        raise ValueError(f"{what}: range end {hi} exceeds the schedule's {num_steps} steps")
    if hi - lo < size:
        raise ValueError(f"{what}: a window of {size} steps does not fit the range [{lo}, {hi})")
    return hi


class FixedWindow:
    """Steps ``start..start+size-1`` every time (Flow-GRPO's non-Fast default covers all steps
    but the last; the recipes here name their own)."""

    def __init__(self, start: int = 0, size: int = 2):
        if start < 0 or size < 1:
            raise ValueError(f"fixed window needs start >= 0 and size >= 1, got start={start}, size={size}")
        self.start, self.size = int(start), int(size)

    def select(self, policy: Any, prompts: Sequence[str], num_steps: int) -> Window:
        return Window(self.start, self.size, diagnostics={"selector": "fixed"}).check_fits(num_steps)


class RandomWindow:
    """Flow-GRPO-Fast: a window of ``size`` steps at a uniformly random start in ``[lo, hi - size]``
    (so the window lies in ``[lo, hi)``; ``hi=None`` = the schedule's length), drawn anew each
    training step from ``random.Random(seed_for(seed, step, "window"))``.

    Flow-GRPO's own configs: FLUX Fast size 3 in ``[0, 3)``, Qwen-Image size 2 in ``[0, 5)``.
    """

    def __init__(self, size: int = 2, lo: int = 0, hi: int | None = None, seed: int = 0):
        if size < 1 or lo < 0 or (hi is not None and hi <= lo):
            raise ValueError(f"random window needs size >= 1 and 0 <= lo < hi, got size={size}, lo={lo}, hi={hi}")
        self.size, self.lo, self.hi, self.seed = int(size), int(lo), hi, int(seed)

    def select_for_step(self, policy: Any, prompts: Sequence[str], num_steps: int, *, step: int, seed: int) -> Window:
        hi = _check_range(self.lo, self.hi, self.size, num_steps, "random window")
        start = random.Random(seed_for(seed, step, "window")).randint(self.lo, hi - self.size)
        return Window(start, self.size, diagnostics={"selector": "random", "step": step, "range": [self.lo, hi]})

    def select(self, policy: Any, prompts: Sequence[str], num_steps: int) -> Window:
        return self.select_for_step(policy, prompts, num_steps, step=0, seed=self.seed)


class SlidingWindow:
    """MixGRPO's ``progressive`` strategy: a window of ``size`` steps that starts at ``start`` and
    moves ``stride`` steps later every ``every`` training steps.

    The window's start runs over ``start, start+stride, ...`` up to the last start that still fits
    (``end - size``, ``end=None`` = the schedule's length). Then ``mode="wrap"`` goes back to
    ``start`` (MixGRPO's ``roll_back``) and ``mode="stop"`` stays at the last position.
    MixGRPO's defaults: size 4, stride 1 (``prog_overlap_step``), every 25 iterations.
    """

    MODES = ("wrap", "stop")

    def __init__(
        self,
        size: int = 4,
        start: int = 0,
        stride: int = 1,
        every: int = 25,
        end: int | None = None,
        mode: str = "wrap",
    ):
        if size < 1 or start < 0 or stride < 1 or every < 1:
            raise ValueError(
                f"sliding window needs size, stride, every >= 1 and start >= 0; got size={size}, "
                f"start={start}, stride={stride}, every={every}"
            )
        if mode not in self.MODES:
            raise ValueError(f"sliding window mode must be one of {', '.join(self.MODES)}, got {mode!r}")
        self.size, self.start, self.stride, self.every = int(size), int(start), int(stride), int(every)
        self.end, self.mode = end, mode

    def start_at(self, step: int, num_steps: int) -> int:
        """The window's first step at training step ``step``."""
        end = _check_range(self.start, self.end, self.size, num_steps, "sliding window")
        positions = (end - self.size - self.start) // self.stride + 1
        moves = step // self.every
        index = moves % positions if self.mode == "wrap" else min(moves, positions - 1)
        return self.start + index * self.stride

    def select_for_step(
        self, policy: Any, prompts: Sequence[str], num_steps: int, *, step: int, seed: int = 0
    ) -> Window:
        return Window(
            self.start_at(step, num_steps),
            self.size,
            diagnostics={"selector": "sliding", "step": step, "mode": self.mode},
        ).check_fits(num_steps)

    def select(self, policy: Any, prompts: Sequence[str], num_steps: int) -> Window:
        return self.select_for_step(policy, prompts, num_steps, step=0)
