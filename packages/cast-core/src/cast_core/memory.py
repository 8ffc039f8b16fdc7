"""What a run reports about memory: the peak where the policy computes.

Its own module because the number means different things by device (the CUDA allocator's peak on
a GPU, the process's resident set on the CPU), and the memory planning that scale work adds
belongs beside it.
"""

from __future__ import annotations

import torch

__all__ = ["peak_memory_mb"]


def peak_memory_mb(device: torch.device) -> float:
    """Peak memory where the policy computes: the CUDA allocator's on a GPU, the process's
    resident set on the CPU (a CPU run on a GPU machine must not report the idle GPU's ~0 MB)."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    try:
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    except ImportError:  # pragma: no cover - Windows
        return float("nan")
