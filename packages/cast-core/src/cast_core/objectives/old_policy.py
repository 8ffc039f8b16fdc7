"""The old policy of DiffusionNFT and AWM: an exponential moving average of the trained adapter,
kept as a second set of values for the same parameters and swapped in for a forward pass.

Both methods hold it as a second LoRA adapter; cast holds it as tensors laid out exactly like
the trainable parameters (sharded slices under FSDP2), so swapping costs two copies of the
adapter and needs nothing from the policy. After every training step it moves towards the
trained weights, ``old ← decay·old + (1 − decay)·θ``, with the schedule of DiffusionNFT's
``return_decay``: ``decay = 0`` for the first ``flat`` optimizer steps, then
``min(rate·(steps − flat), cap)`` — at ``decay = 0`` the old policy *is* the trained one.
"""

from __future__ import annotations

import contextlib
from typing import Iterator, Mapping, Sequence

import torch

from cast_core.sharding import like

__all__ = ["OldPolicy", "decay_at"]


def decay_at(optimizer_steps: int, *, flat: int, rate: float, cap: float) -> float:
    """DiffusionNFT's ``return_decay(step, decay_type)`` with its three numbers named: 0 before
    ``flat`` steps, then ``rate`` per step up to ``cap`` (type 1 is ``flat=0, rate=0.001,
    cap=0.5``; AWM's KL-EMA uses ``cap=0.3``)."""
    if optimizer_steps < flat:
        return 0.0
    return min((optimizer_steps - flat) * rate, cap)


class OldPolicy:
    """A copy of the trainable parameters' values that trails them (``attach`` first)."""

    def __init__(self, *, flat: int = 0, rate: float = 0.001, cap: float = 0.5):
        if flat < 0 or rate < 0 or not 0.0 <= cap < 1.0:
            raise ValueError(
                f"old-policy schedule needs flat >= 0, rate >= 0 and 0 <= cap < 1; got {flat}, {rate}, {cap}"
            )
        self.flat, self.rate, self.cap = int(flat), float(rate), float(cap)
        self.values: list[torch.Tensor] | None = None
        self.decay = 0.0  # the last decay applied (logged)

    def attach(self, params: Sequence[torch.nn.Parameter]) -> None:
        """Start equal to the trained parameters (both methods copy the adapter at start)."""
        self.values = [p.detach().clone() for p in params]

    def _check(self) -> list[torch.Tensor]:
        if self.values is None:
            raise RuntimeError("OldPolicy.attach(params) must be called before it is used")
        return self.values

    @contextlib.contextmanager
    def active(self, params: Sequence[torch.nn.Parameter]) -> Iterator[None]:
        """The parameters hold the old policy's values inside; their own values come back on exit
        (also after an exception), bit for bit."""
        values = self._check()
        with torch.no_grad():
            live = [p.detach().clone() for p in params]
            for p, v in zip(params, values):
                p.copy_(v)
        try:
            yield
        finally:
            with torch.no_grad():
                for p, v in zip(params, live):
                    p.copy_(v)

    @torch.no_grad()
    def update(self, params: Sequence[torch.nn.Parameter], optimizer_steps: int) -> float:
        """``old ← decay·old + (1 − decay)·θ`` with the schedule's decay at ``optimizer_steps``."""
        self.decay = decay_at(optimizer_steps, flat=self.flat, rate=self.rate, cap=self.cap)
        for v, p in zip(self._check(), params):
            v.mul_(self.decay).add_(p.detach(), alpha=1.0 - self.decay)
        return self.decay

    def tensors(self, prefix: str = "old") -> dict[str, torch.Tensor]:
        return {f"{prefix}.{i}": v for i, v in enumerate(self._check())}

    def load(
        self, tensors: Mapping[str, torch.Tensor], params: Sequence[torch.nn.Parameter], prefix: str = "old"
    ) -> None:
        """Values saved by :meth:`tensors` (full tensors), laid out like ``params`` again."""
        missing = [f"{prefix}.{i}" for i in range(len(params)) if f"{prefix}.{i}" not in tensors]
        if missing:
            raise KeyError(
                f"the checkpoint has no old-policy tensors {missing[:3]}; it was not written by this objective"
            )
        self.values = [like(tensors[f"{prefix}.{i}"], p) for i, p in enumerate(params)]


class TrailsAnOldPolicy:
    """The :class:`~cast_core.protocols.KeepsState` feature of an objective whose only state is
    one :class:`OldPolicy` (``self.trailing``), saved under ``trailing_name``: DiffusionNFT's
    old policy, AWM's KL-EMA."""

    trailing: OldPolicy
    trailing_name = "old"
    params: list

    def attach(self, params) -> None:
        self.params = list(params)
        self.trailing.attach(self.params)

    def after_update(self, params, optimizer_steps: int) -> None:
        self.trailing.update(params, optimizer_steps)

    def state(self):
        return {f"{self.trailing_name}_decay": self.trailing.decay}, self.trailing.tensors(self.trailing_name)

    def restore(self, state, tensors) -> None:
        self.trailing.load(tensors, self.params, self.trailing_name)
        self.trailing.decay = float(state.get(f"{self.trailing_name}_decay", 0.0))
