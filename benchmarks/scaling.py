"""Scaling of the shapes recipe on this machine: images/s with 1 and 2 processes, the bytes
each process sends per step, and the update's activation memory with micro-batch 1 against the
whole batch.

    python benchmarks/scaling.py [--steps 6] [--out benchmarks/results/scaling.json]

Throughput: `cast train --plugin shapes` runs side by side with a fixed window (steps 6-7, the
recipe's measured one, so no run pays for measuring it), 4 prompts x 8 images a step; the first
step is dropped (start-up), the median images/s of the rest is reported. The 2-process run uses
one intra-op thread per process and the 1-process run all cores, so the ratio says what
splitting the same cores into processes costs or gains (on 2 cores: little, by design; on GPUs
each process has its own device).

Memory: the bytes of tensors saved for backward by one forward pass of the update (what
micro-batching bounds; on a GPU it dominates the update's peak), measured with
``torch.autograd.graph.saved_tensors_hooks``, for micro_batch_size = 1 and 0 (the whole batch).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ARGS = [
    "--plugin",
    "shapes",
    "--window",
    "none",
    "--set",
    "window_start=6",
    "--set",
    "window_size=2",
    "--set",
    "sample_every=0",
    "--set",
    "checkpoint_every=1000",
]


def throughput(processes: int, steps: int, workdir: Path) -> dict:
    run = workdir / f"p{processes}"
    env = {**os.environ, "OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 1) // processes))}
    cmd = [
        sys.executable,
        "-m",
        "cast_core.cli",
        "train",
        *ARGS,
        "--steps",
        str(steps),
        "--out",
        str(run),
        "--num-processes",
        str(processes),
    ]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, capture_output=True)
    wall = time.perf_counter() - t0
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    later = rows[1:]
    return {
        "processes": processes,
        "threads_per_process": int(env["OMP_NUM_THREADS"]),
        "images_per_s": statistics.median(r["images_per_s"] for r in later),
        "step_time_s": statistics.median(r["step_time_s"] for r in later),
        "comm_bytes_per_step": statistics.median(r.get("comm_bytes", 0) for r in later),
        "wall_s": wall,
        "steps": steps,
    }


def activation_bytes(micro: int, workdir: Path) -> int:
    import torch

    from cast_core.config import TrainConfig
    from cast_core.registry import get_recipe
    from cast_core.trainer import Trainer

    recipe = get_recipe("shapes")
    cfg = TrainConfig()
    cfg.update(
        {k: getattr(recipe, k) for k in ("policy", "scorer", "decomposer", "projector") if getattr(recipe, k)}, "recipe"
    )
    cfg.update(dict(recipe.settings), "recipe")
    cfg.update(
        {"window": None, "window_start": 6, "window_size": 2, "micro_batch_size": micro, "steps": 1, "sample_every": 0},
        "benchmark",
    )
    trainer = Trainer(cfg, workdir / f"mem-{micro}", log=lambda m: None)
    peak = [0]
    real = trainer.updater._loss

    def measured(*args, **kwargs):
        total = [0]

        def pack(t):
            total[0] += t.numel() * t.element_size()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = real(*args, **kwargs)
        peak[0] = max(peak[0], total[0])
        return out

    trainer.updater._loss = measured
    trainer.train_step()
    return peak[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "scaling.json"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        one = throughput(1, args.steps, work)
        two = throughput(2, args.steps, work)
        full = activation_bytes(0, work)
        micro = activation_bytes(1, work)
    result = {
        "cores": os.cpu_count(),
        "batch": "4 prompts x 8 images, 10 steps, window 6-7",
        "one_process": one,
        "two_processes": two,
        "throughput_ratio_2_over_1": two["images_per_s"] / one["images_per_s"],
        "update_activation_bytes": {
            "micro_batch_1": micro,
            "whole_batch_32": full,
            "ratio_whole_over_micro": full / micro,
        },
    }
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"cores: {result['cores']}")
    print(f"1 process : {one['images_per_s']:.2f} img/s ({one['threads_per_process']} threads)")
    print(
        f"2 processes: {two['images_per_s']:.2f} img/s ({two['threads_per_process']} thread each), "
        f"{two['comm_bytes_per_step'] / 1e3:.1f} kB sent per process per step"
    )
    print(f"ratio 2/1: {result['throughput_ratio_2_over_1']:.2f}x")
    print(
        f"update activations per forward: whole batch {full / 2**20:.1f} MiB, micro-batch 1 {micro / 2**20:.2f} MiB "
        f"({full / micro:.1f}x)"
    )


if __name__ == "__main__":
    main()
