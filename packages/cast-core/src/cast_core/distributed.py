"""What the trainer needs from a multi-process run, in one small object.

A step's ``P`` prompts × ``G`` members are numbered ``s = p·G + g`` and cut into contiguous,
equal shares, one per rank; each rank samples, scores and trains on its share. Everything a
decision depends on is made identical on every rank: the step's prompts and window come from
generators seeded by ``(seed, step)`` (or rank 0's measurement, broadcast), the verdicts of a
group are gathered before its advantages are computed, and every "skip" is agreed on
collectively — a rank that skipped alone would leave the others waiting in a collective forever.

With one process every method is the identity and nothing is pickled or sent, so the
single-process trainer runs the same code path it always did.
"""

from __future__ import annotations

import pickle
from typing import Any, Iterable

import torch

from cast_core.errors import CastError

__all__ = ["Distributed"]


class Distributed:
    """Rank, world size and the few collectives cast uses, on top of accelerate's state."""

    def __init__(self, accelerator: Any = None):
        self.accelerator = accelerator
        self.rank = int(getattr(accelerator, "process_index", 0))
        self.world = int(getattr(accelerator, "num_processes", 1))
        self.device = torch.device(getattr(accelerator, "device", "cpu"))
        self.bytes_sent = 0  # payload this rank contributed to collectives (for benchmarks)

    @property
    def active(self) -> bool:
        return self.world > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    # -- sharding ---------------------------------------------------------------------------------
    def shard(self, n: int) -> range:
        """This rank's contiguous share of ``n`` items (``n`` must divide evenly: equal shares keep
        every rank's collectives in step and every sample's gradient weight equal)."""
        if n % self.world:
            raise CastError(
                f"{n} samples per step cannot be shared equally by {self.world} processes; make "
                f"prompts_per_step × group_size a multiple of the process count"
            )
        per = n // self.world
        return range(self.rank * per, (self.rank + 1) * per)

    # -- collectives ------------------------------------------------------------------------------
    def gather_objects(self, obj: Any) -> list[Any]:
        """Every rank's ``obj`` in rank order (tensors inside should be on the CPU)."""
        if not self.active:
            return [obj]
        import torch.distributed as dist

        self.bytes_sent += len(pickle.dumps(obj))
        out: list[Any] = [None] * self.world
        dist.all_gather_object(out, obj)
        return out

    def broadcast_object(self, obj: Any) -> Any:
        """Rank 0's ``obj`` on every rank."""
        if not self.active:
            return obj
        import torch.distributed as dist

        box = [obj if self.is_main else None]
        if self.is_main:
            self.bytes_sent += len(pickle.dumps(obj)) * (self.world - 1)
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def all_true(self, flag: bool) -> bool:
        """True only if ``flag`` is true on every rank."""
        if not self.active:
            return bool(flag)
        import torch.distributed as dist

        t = torch.tensor([1 if flag else 0], device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MIN)
        self.bytes_sent += t.numel() * t.element_size()
        return bool(t.item())

    def max_ints(self, values: list[int]) -> list[int]:
        """The element-wise maximum of ``values`` over ranks (one small all-reduce)."""
        if not self.active:
            return [int(v) for v in values]
        import torch.distributed as dist

        t = torch.tensor([int(v) for v in values], dtype=torch.long, device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        self.bytes_sent += t.numel() * t.element_size()
        return [int(v) for v in t.tolist()]

    def sum_gradients(self, params: Iterable[torch.nn.Parameter]) -> None:
        """Sum the gradients of ``params`` over ranks in one flat buffer (the path for a policy
        that does not wrap itself with ``prepare``; the loss is scaled so the sum is the
        global mean)."""
        if not self.active:
            return
        import torch.distributed as dist

        params = list(params)
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        flat = torch.cat([g.reshape(-1).float() for g in grads])
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        self.bytes_sent += flat.numel() * flat.element_size()
        offset = 0
        for p, g in zip(params, grads):
            n = g.numel()
            p.grad = flat[offset : offset + n].view_as(g).to(g.dtype)
            offset += n

    def barrier(self) -> None:
        if self.active:
            self.accelerator.wait_for_everyone()


def leave_without_teardown() -> None:
    """End a process of a finished multi-process launch at once, skipping C++ teardown. Why: after
    the last barrier and ``destroy_process_group``, a gloo rank sometimes dies at interpreter exit
    with "terminate called without an active exception" (SIGABRT; several sightings,
    docs/testing.md), and the launcher then reports a failed run although every step and
    checkpoint was done. Call it only when nothing is left to do; outside a launch it returns."""
    import os
    import sys

    from cast_core.launch import in_distributed_launch

    if in_distributed_launch():
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
