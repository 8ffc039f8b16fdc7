"""Mixed precision for the policy's forward passes (``precision`` in the training config).

Our own autocast rather than accelerate's: accelerate keeps mixed precision in process-global
state, so a second trainer with another precision in the same process (a benchmark comparing
the two, a test) would be refused. Only the policy's forward passes autocast; weights, optimizer
state and the SDE's log-prob arithmetic stay float32.
"""

from __future__ import annotations

import warnings
from functools import cache

import torch

PRECISIONS = ("no", "bf16")


@cache
def _quiet_unfused_norm_warning() -> None:
    """float32 norm weights on bf16 activations take torch's unfused path: slower, not wrong.
    Installed once, the first time bf16 is asked for (not at import: it is process-wide)."""
    warnings.filterwarnings("ignore", message="Mismatch dtype between input and weight", category=UserWarning)


def autocast(precision: str, device: torch.device | str | None = None):
    """A bf16 autocast context on ``device``'s type for ``precision == "bf16"``, else a no-op.
    Sampling and the update must both run under it, so that the update's first pass recomputes
    the sampled log-probs exactly."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    device_type = torch.device(device).type if device is not None else "cpu"
    if precision == "bf16":
        _quiet_unfused_norm_warning()
    return torch.autocast(device_type=device_type, dtype=torch.bfloat16, enabled=precision == "bf16")


def bf16_is_fast(device: torch.device | str | None = None) -> bool:
    """Whether bf16 matmuls run natively here (a CUDA device with bf16, or a CPU with
    avx512_bf16 / AMX). Elsewhere bf16 may be emulated and slower than float32; we measured only
    a CPU with avx512_bf16 (1.46x, benchmarks/overhead.py)."""
    device_type = torch.device(device).type if device is not None else "cpu"
    if device_type == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    if device_type != "cpu":
        return False
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False
