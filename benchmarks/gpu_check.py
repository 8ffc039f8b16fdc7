"""The GPU check: a real-size backbone with random bf16 weights measured on one GPU, beside
``cast plan``'s prediction for the same configuration.

For each model (FLUX.2-klein-4B always; FLUX.2-dev when the card has at least 140 GB):

1. ``cast plan`` for the recipe at 512² on one GPU (fake tensors on the CPU, as ``cast plan``
   runs it), before the GPU is touched;
2. the same :class:`~cast_core.types.PlanSubject` (the recipe's LoRA, dtype, checkpointing) made
   real on the GPU with random weights, and the plan's own phase code run on it —
   :class:`cast_core.memory_trace.Tracer`'s sampling batch, decode and training micro-step
   (forward, backward, clipped objective, AdamW) with the run's state on the device — outside
   the fake mode, with CUDA's own kernels (flash attention where SDPA picks it);
3. peak memory per phase (``torch.cuda.max_memory_allocated``) against the plan's per-phase
   total: the ratio measured / planned is the headline; and step times (median of 3 after one
   warm-up), eager and with every transformer block compiled (``compile = true``).

Writes ``--json`` (default ``benchmarks/results/gpu_check.json``) after each model, so a run
cut short keeps what it measured. Budget: under 8 minutes on one H100 for klein-4B.

``--cpu-smoke``: the same code on the CPU with the tiny klein architecture (no CUDA peaks, a few
seconds): what keeps this script working on machines without a GPU (a slow test runs it).

Run: ``python benchmarks/gpu_check.py [--models klein-4b dev] [--image-size 512]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch

MODELS = {  # model -> (recipe, architecture, the card memory it needs)
    "klein-4b": ("flux2-klein", "flux2-klein-4b", 0),
    "dev": ("flux2", "flux2-dev", 140 * 10**9),
    "klein-tiny": ("flux2-klein", "flux2-klein-tiny", 0),
}
PHASES = ("sample", "decode", "train")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@torch.no_grad()
def randomize_(module: torch.nn.Module, seed: int) -> None:
    """Random weights in place of the uninitialised ones (values do not change memory or time,
    but NaNs would slow some kernels): N(0, 0.02) matrices, unit norm scales, zero biases; the
    LoRA ``B`` small but non-zero so that the adapter's gradients flow as after a first step."""
    gens: dict[torch.device, torch.Generator] = {}
    for name, p in module.named_parameters():
        if p.ndim >= 2:  # drawn where the weight lives: 4B draws on a CPU take a minute
            gen = gens.setdefault(p.device, torch.Generator(device=p.device).manual_seed(seed))
            p.copy_(torch.randn(tuple(p.shape), generator=gen, device=p.device, dtype=torch.float32).mul_(0.02))
        elif "norm" in name or name.endswith("scale"):
            p.fill_(1.0)
        else:
            p.zero_()
    for name, b in module.named_buffers():
        if b.is_floating_point():
            b.fill_(1.0 if "var" in name else 0.0)


def build(recipe: str, architecture: str, image_size: int, device: torch.device):
    """The plan of the recipe and the measured run of the same configuration."""
    from cast_core.config import build_config
    from cast_core.memory_plan import _policy_kwargs, _run_shape, _shape, plan_memory, plannable_factory
    from cast_core.memory_trace import Tracer
    from cast_core.protocols import self_shards

    cfg = build_config(recipe=recipe)
    size = [image_size, image_size]
    memory = torch.cuda.get_device_properties(device).total_memory if device.type == "cuda" else 80 * 2**30
    plan = plan_memory(cfg, gpus=1, gpu_memory=memory, image_size=size, architecture=architecture)
    subject = plannable_factory(cfg.policy).build_for_plan(architecture, **_policy_kwargs(cfg, size))
    shape = _run_shape(cfg, _shape(cfg, 1, self_shards(subject.policy)), size)
    run = Tracer(subject, shape)
    run.device = device
    return cfg, plan, run


def measure(run, phase: str, batch: int, device: torch.device, repeats: int = 3) -> dict:
    """One phase as the tracer runs it, for real: peak bytes on the device and the median time."""
    times, peak = [], None
    for i in range(repeats + 1):  # the first is the warm-up
        for p in run.params:
            p.grad = None
        if phase == "train" and run.shape.passes > 1:
            run._train_pass(batch, sync=False)  # an earlier micro-step: its gradients stay, as in the plan
        _sync(device)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        start = time.perf_counter()
        if phase == "sample":
            run._sample(batch)
        elif phase == "decode":
            run._decode(batch)
        else:
            run._train_pass(batch, sync=True)
            run._optimizer_step()
        _sync(device)
        if i:
            times.append(time.perf_counter() - start)
        if device.type == "cuda":
            peak = max(peak or 0, torch.cuda.max_memory_allocated(device))
    for p in run.params:
        p.grad = None
    return {"batch": batch, "peak_bytes": peak, "seconds": statistics.median(times)}


def check(model: str, image_size: int, device: torch.device, compile_blocks: bool, repeats: int = 3) -> dict:
    recipe, architecture, _ = MODELS[model]
    t0 = time.perf_counter()
    print(f"{model}: planning (cast plan, fake tensors) …", file=sys.stderr)
    cfg, plan, run = build(recipe, architecture, image_size, device)
    print(f"{model}: planned in {time.perf_counter() - t0:.0f} s; building on {device} …", file=sys.stderr)
    planned_at = time.perf_counter()
    with torch.device(device):  # the phase code's torch.empty lands on the device
        run._build(None)  # outside any fake mode: real, uninitialised tensors on the device
        for module in run.subject.modules.values():
            randomize_(module, 0)
        for p in run.params:
            run.optimizer.state[p]["exp_avg_sq"].fill_(1e-4)
        built_at = time.perf_counter()
        result = {
            "model": model,
            "recipe": recipe,
            "architecture": architecture,
            "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
            "image_size": [image_size, image_size],
            "settings": plan.settings,
            "seconds": {"plan": round(planned_at - t0, 1), "build": round(built_at - planned_at, 1)},
            "eager": {},
        }
        for phase in PHASES:
            batch = plan.phases[phase]["batch"]
            got = measure(run, phase, batch, device, repeats)
            got["planned_bytes"] = plan.phases[phase]["total"]
            if got["peak_bytes"]:
                got["measured_over_planned"] = round(got["peak_bytes"] / got["planned_bytes"], 3)
            result["eager"][phase] = got
            print(f"{model} {phase} (batch {batch}): {got}", file=sys.stderr)
        if compile_blocks:
            for block in run.policy.blocks():
                block.compile()
            result["compiled"] = {}
            for phase in ("sample", "train"):
                got = measure(run, phase, plan.phases[phase]["batch"], device, repeats)
                got["speedup"] = round(result["eager"][phase]["seconds"] / got["seconds"], 3)
                result["compiled"][phase] = got
                print(f"{model} {phase} compiled: {got}", file=sys.stderr)
        result["seconds"]["total"] = round(time.perf_counter() - t0, 1)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", choices=sorted(MODELS), default=["klein-4b", "dev"])
    parser.add_argument("--image-size", type=int, default=512)
    parser.add_argument("--json", type=Path, default=Path("benchmarks/results/gpu_check.json"))
    parser.add_argument("--no-compile", action="store_true", help="skip the compiled timings")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per phase after one warm-up")
    parser.add_argument("--cpu-smoke", action="store_true", help="the tiny klein architecture on the CPU")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    if args.cpu_smoke:
        device, models = torch.device("cpu"), ["klein-tiny"]
        args.image_size, args.repeats = min(args.image_size, 64), 1
    else:
        if not torch.cuda.is_available():
            parser.error("no CUDA device: run with --cpu-smoke on a machine without a GPU")
        device, models = torch.device("cuda", 0), args.models
    results = json.loads(args.json.read_text()) if args.json.is_file() else {}
    for model in models:
        need = MODELS[model][2]
        if device.type == "cuda" and torch.cuda.get_device_properties(device).total_memory < need:
            print(f"{model}: skipped, needs a card of {need / 1e9:.0f} GB", file=sys.stderr)
            continue
        results[model] = check(model, args.image_size, device, not args.no_compile, args.repeats)
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=1) + "\n")
        torch.cuda.empty_cache() if device.type == "cuda" else None
    print(json.dumps({m: {p: r["eager"][p].get("measured_over_planned") for p in PHASES} for m, r in results.items()}))


if __name__ == "__main__":
    main()
