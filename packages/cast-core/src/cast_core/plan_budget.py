"""What fits: the largest batch sizes a GPU allows, the memory the tracer cannot see, and the host
RAM a node needs to load the model — the arithmetic ``cast plan`` puts beside its traces.

Why a module of its own: the traces (:mod:`cast_core.memory_trace`) are measurements of one
configuration; turning them into advice ("micro_batch_size 3 fits, 4 does not") needs a model of
how memory grows with the batch and of what lives outside PyTorch's allocator. Both are stated
here, in one place, so the docs and the numbers cannot drift apart.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

from cast_core.errors import ConfigError

__all__ = [
    "CUDA_ALLOWANCE",
    "GIB",
    "LinearFit",
    "largest_that_fits",
    "parse_memory",
    "format_gib",
    "host_ram",
]

GIB = 2**30
#: memory on the GPU that no tensor accounts for: the CUDA context (about 0.5 GiB with torch 2.x
#: on an H100), cuBLAS / cuDNN workspaces, NCCL's buffers under several processes, and some
#: fragmentation of the caching allocator. A fixed allowance, to be calibrated by the GPU check
#: (benchmarks/gpu_check.py, issue 39 part E).
CUDA_ALLOWANCE = 2 * GIB

_UNITS = {"": 1, "b": 1, "kib": 2**10, "mib": 2**20, "gib": GIB, "tib": 2**40, "kb": 10**3, "mb": 10**6, "gb": 10**9}
_UNITS["tb"] = 10**12


def parse_memory(text: str | int | float) -> int:
    """``"80GiB"``, ``"80GB"`` (decimal), ``"79.6 GiB"`` or a byte count, as bytes. A GPU sold as
    "80 GB" reports 79.6 GiB to torch: ``--gpu-memory 80GB`` means 74.5 GiB, ``80GiB`` 80 GiB."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value, unit = float(text), ""
    else:
        match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", str(text))
        if not match:
            raise ConfigError(f"--gpu-memory {text!r}: expected a size such as 80GiB, 141GB or 85899345920")
        value, unit = float(match.group(1)), match.group(2).lower()
        if unit not in _UNITS:
            raise ConfigError(f"--gpu-memory {text!r}: unknown unit {match.group(2)!r}; use GiB, GB, MiB or bytes")
    size = int(value * _UNITS[unit])
    if size <= CUDA_ALLOWANCE:
        raise ConfigError(f"--gpu-memory {text!r} is not more than the {format_gib(CUDA_ALLOWANCE)} CUDA allowance")
    return size


def format_gib(n: float) -> str:
    return f"{n / GIB:.2f} GiB"


@dataclass
class LinearFit:
    """A phase's peak as ``intercept + slope·n`` from traces at two batch sizes (activations grow
    linearly with the batch; weights and optimizer state do not)."""

    intercept: float
    slope: float

    @classmethod
    def through(cls, n1: int, total1: int, n2: int, total2: int) -> "LinearFit":
        slope = max(0.0, (total2 - total1) / (n2 - n1)) if n2 != n1 else 0.0
        return cls(total1 - slope * n1, slope)

    def at(self, n: int) -> float:
        return self.intercept + self.slope * n

    def largest(self, budget: float, cap: int) -> int:
        """The largest ``n`` in ``[0, cap]`` with ``at(n) <= budget`` (0: not even one fits)."""
        if self.at(1) > budget:
            return 0
        if self.slope <= 0:
            return cap
        return max(1, min(cap, int((budget - self.intercept) // self.slope)))


def largest_that_fits(total_at: Callable[[int], float], budget: float, cap: int, *, extra: int = 3) -> tuple[int, bool]:
    """The largest batch ``n`` in ``[0, cap]`` whose traced peak ``total_at(n)`` fits ``budget``,
    and whether that answer is exact (else it is a safe lower bound).

    Why not just the line through two traces: a phase's peak is the largest of its moments, each
    linear in the batch (weights and states fixed, activations per sample), so it is a *convex*
    piecewise-linear function of ``n``. Under FSDP2 the peak at batch 1 is where two blocks are
    gathered, at batch 8 where the activations pile up: the line through 1 and 2 then
    underestimates batch 8. Convexity gives the search its two rules: beyond the largest traced
    size the line through the two largest underestimates the peak (its answer is an upper bound,
    confirmed by one trace), and between two traced sizes the chord overestimates it (its answer
    is safe). ``total_at`` traces on demand (memoise it); at most ``extra`` traces beyond those
    already known are made."""
    points: dict[int, float] = {}

    def f(n: int) -> float:
        if n not in points:
            points[n] = total_at(n)
        return points[n]

    if f(1) > budget:
        return 0, True
    if cap <= 1:
        return 1, True
    f(2)
    tries = extra
    while True:
        lo = max(n for n, t in points.items() if t <= budget)
        if lo >= cap:
            return cap, True
        above = [n for n, t in points.items() if n > lo and t > budget]
        if not above:  # beyond every trace: the line through the two largest is a lower bound on the peak
            a, b = sorted(points)[-2:]
            candidate = max(lo, LinearFit.through(a, points[a], b, points[b]).largest(budget, cap))
            if candidate == lo:
                return lo, True
            if tries == 0:
                return lo, False
            tries -= 1
            f(candidate)
            continue
        hi = min(above)  # between lo and hi the chord lies above the peak: its answer is safe
        candidate = max(lo, LinearFit.through(lo, points[lo], hi, points[hi]).largest(budget, hi - 1))
        if candidate + 1 == hi:
            return candidate, True
        if tries == 0:
            return candidate, False
        tries -= 1
        if f(candidate + 1) > budget:
            return candidate, True


def host_ram(
    *,
    transformer_bytes: int,
    vae_bytes: int,
    text_encoder_bytes: int,
    processes: int,
    sharded_load: bool,
    encoder_on_gpu: bool,
    offload_text_encoder: bool,
    prompt_rows_bytes: int | None,
) -> dict[str, Any]:
    """Host RAM per node (the ``processes`` of one node) for both loading paths, the chosen one
    first. Arithmetic from the model's bytes, not traced:

    * **full copy per process** (today's default): every process loads the whole pipeline into host
      RAM (``from_pretrained`` on the CPU), then ``prepare()`` moves the transformer to its GPU;
    * **sharded** (``policy_kwargs.load_sharded``, which the trainer turns on for several
      processes under ``sharding = "fsdp2"`` / ``"auto"``): each process builds the transformer on
      the meta device and reads only its 1/N slice of each weight from the safetensors files, and
      loads the text encoder and VAE straight onto their GPU (``device_map``) — so host RAM holds
      at most the slice while it is read, not the model.

    In both, ``offload_text_encoder`` then moves each process's encoder into host RAM for the rest
    of the run, and each process keeps every training prompt's conditioning rows there (the
    prompt cache; ``prompt_rows_bytes``, when the prompts could be counted). The page cache of the
    files is shared by the processes and not counted."""
    n = max(1, int(processes))
    encoder_at_load = 0 if encoder_on_gpu else text_encoder_bytes
    full_peak = transformer_bytes + vae_bytes + text_encoder_bytes
    sharded_peak = -(-transformer_bytes // n) + (0 if encoder_on_gpu else text_encoder_bytes)
    after = (text_encoder_bytes if offload_text_encoder else encoder_at_load) + (prompt_rows_bytes or 0)

    def path(name: str, load_peak: int, steady: int) -> dict[str, Any]:
        return {
            "path": name,
            "per_process_load_peak_bytes": load_peak,
            "per_process_steady_bytes": steady,
            "per_node_bytes": n * max(load_peak, steady),
        }

    full = path("full copy per process", full_peak, after)
    sharded = path("sharded (meta device, each process reads its slice)", sharded_peak, after)
    chosen, other = (sharded, full) if sharded_load else (full, sharded)
    if n == 1:  # one process reads the whole model either way: no second path to compare
        other = None
    notes = [f"{n} process(es) on the node; the files' page cache is shared and not counted"]
    if offload_text_encoder:
        notes.append("offload_text_encoder moves each process's text encoder into host RAM after encoding")
    if prompt_rows_bytes is None:
        notes.append("the prompt cache's rows are not counted (the prompts could not be listed without running code)")
    else:
        notes.append(f"the prompt cache keeps {format_gib(prompt_rows_bytes)} of conditioning rows per process")
    return {**chosen, "other_path": other, "notes": notes}
