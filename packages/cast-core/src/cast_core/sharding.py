"""FSDP2 for the policy's trainable module, and what the engine must do differently once its
parameters are sharded.

Under ``sharding = "fsdp2"`` each process holds a slice (``DTensor``) of every parameter the
policy shards — frozen base weights and the adapter alike — and the forward pass gathers a
block's weights just before it runs. Three consequences shape the engine:

* **every forward pass is a collective**, so every process runs the same number of them (the
  equal sample shares and the zero-weighted update passes already ensure that, and a window
  measurement runs on every process, not on rank 0 alone);
* **gradients are averaged by FSDP's reduce-scatter** (as DDP averages them), and the global
  gradient norm of sharded gradients is a collective too;
* **a checkpoint is gathered, then written by rank 0**: the adapter, the optimizer state and the
  EMA are stored as full tensors, so a run resumes with any process count, and on load each
  process keeps its own slice.

With unsharded tensors every helper here is the identity, so the single-process and DDP paths
run unchanged through the same calls.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterable, Iterator

import torch

__all__ = [
    "fully_shard_module",
    "is_sharded",
    "full_tensor",
    "like",
    "copy_full_",
    "is_writer",
    "gradients_unsynced",
    "full_optimizer_state",
    "shard_optimizer_state",
    "local",
]


def is_sharded(tensor: Any) -> bool:
    """Whether ``tensor`` is a distributed tensor (an FSDP2 parameter, its gradient or state)."""
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # pragma: no cover - torch built without distributed
        return False
    return isinstance(tensor, DTensor)


def full_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """The whole tensor on every process (a collective for a sharded one, a no-op otherwise)."""
    return tensor.full_tensor() if is_sharded(tensor) else tensor


def local(tensor: torch.Tensor) -> torch.Tensor:
    """This process's slice (the tensor itself when unsharded) — for checks that each process
    makes on its own part before an ``all_true``."""
    return tensor.to_local() if is_sharded(tensor) else tensor


def like(full: torch.Tensor, param: torch.Tensor) -> torch.Tensor:
    """``full`` laid out as ``param`` is: sliced the same way when ``param`` is sharded."""
    full = full.detach().to(device=param.device, dtype=param.dtype)
    if not is_sharded(param):
        return full
    from torch.distributed.tensor import distribute_tensor

    return distribute_tensor(full, param.device_mesh, param.placements)


@torch.no_grad()
def copy_full_(param: torch.Tensor, full: torch.Tensor) -> None:
    """Load a full tensor (as a checkpoint holds it) into a parameter, sharded or not."""
    param.copy_(like(full, param))


def is_writer() -> bool:
    """Whether this process writes shared files: rank 0 of a process group, or a lone process."""
    import torch.distributed as dist

    return not (dist.is_available() and dist.is_initialized()) or dist.get_rank() == 0


def fully_shard_module(
    module: torch.nn.Module, blocks: Iterable[torch.nn.Module] = (), *, reshard_after_forward: bool = True
) -> torch.nn.Module:
    """``fully_shard`` each of ``blocks`` (a backbone's transformer blocks: their weights are
    gathered one block at a time), then the root for everything else. Frozen base weights may
    keep their own dtype (bf16) next to a float32 adapter: FSDP2 asks only the trainable
    parameters of a group to share one dtype."""
    from torch.distributed.fsdp import fully_shard

    for block in blocks:
        fully_shard(block, reshard_after_forward=reshard_after_forward)
    fully_shard(module, reshard_after_forward=reshard_after_forward)
    return module


@contextlib.contextmanager
def gradients_unsynced(module: torch.nn.Module) -> Iterator[None]:
    """FSDP2's counterpart of DDP's ``no_sync``: gradients accumulate unreduced until the last
    micro-batch of an optimizer step."""
    module.set_requires_gradient_sync(False)
    try:
        yield
    finally:
        module.set_requires_gradient_sync(True)


def full_optimizer_state(optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """``optimizer.state_dict()`` with every sharded state tensor gathered whole (a collective:
    every process calls it, in the same parameter order)."""
    state = optimizer.state_dict()
    # state_dict() shares the live per-parameter dicts: build new ones, never write into them
    state["state"] = {
        index: {key: full_tensor(value) for key, value in per_param.items()}
        for index, per_param in state["state"].items()
    }
    return state


def shard_optimizer_state(optimizer: torch.optim.Optimizer) -> None:
    """After ``load_state_dict`` of a full state: slice each state tensor the way its parameter
    is sliced (scalars such as Adam's ``step`` stay as they are)."""
    for group in optimizer.param_groups:
        for param in group["params"]:
            if not is_sharded(param):
                continue
            per_param = optimizer.state.get(param, {})
            for key, value in list(per_param.items()):
                if torch.is_tensor(value) and not is_sharded(value) and value.shape == param.shape:
                    per_param[key] = like(value, param)
