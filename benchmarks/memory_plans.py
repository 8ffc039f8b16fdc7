"""The memory plans behind docs/backbones.md: `cast plan` for the three backbone recipes (flux2 =
FLUX.2-dev, flux2-klein = klein 4B, qwen-image) on 1 and 8 GPUs of 80 GB (79.6 GiB, what an H100
reports), at 512² and 1024², each written to ``benchmarks/results/plan-<recipe>-<gpus>gpu-<size>.json``
with the per-GPU peak by category, and a markdown table of them on stdout.

Run: ``python benchmarks/memory_plans.py [--recipes flux2,...] [--gpus 1,8] [--sizes 512,1024]``
after ``make install`` (CPU only; about 2 minutes a FLUX.2-dev plan on one GPU and 3-4 on eight,
on 2 cores; traces are cached in $CAST_CACHE_DIR/plans, so a rerun is quick).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
GPU_MEMORY = "79.6GiB"


def _gib(n: float) -> str:
    return f"{n / 2**30:.1f}"


def main() -> None:
    from cast_core.config import build_config
    from cast_core.memory_plan import plan_memory

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--recipes", default="flux2,flux2-klein,qwen-image")
    ap.add_argument("--gpus", default="1,8")
    ap.add_argument("--sizes", default="512,1024")
    ap.add_argument("--out", default=str(RESULTS))
    a = ap.parse_args()
    rows = []
    for recipe in a.recipes.split(","):
        for gpus in (int(g) for g in a.gpus.split(",")):
            for size in (int(s) for s in a.sizes.split(",")):
                start = time.perf_counter()
                plan = plan_memory(build_config(recipe=recipe), gpus=gpus, gpu_memory=GPU_MEMORY, image_size=size)
                path = Path(a.out) / f"plan-{recipe}-{gpus}gpu-{size}.json"
                path.write_text(json.dumps(plan.to_dict(), indent=2, default=str) + "\n")
                rows.append((recipe, plan, time.perf_counter() - start))
                need = plan.peak["total"] + plan.cuda_allowance
                print(f"{path.name}: peak {_gib(need)} GiB, {time.perf_counter() - start:.0f} s", flush=True)
    print()
    print(
        "| recipe | GPUs | size | weights | gathered | adapter | activations | inputs | peak (phase) + CUDA "
        "| fits 79.6 | largest micro / sample / decode |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for recipe, plan, _ in rows:
        b = plan.peak["bytes"]
        largest = plan.largest
        print(
            f"| {recipe} ({plan.architecture}) | {plan.gpus} | {plan.image_size[0]}² | {_gib(b['weights'])} | "
            f"{_gib(b['gathered'])} | {_gib(b['adapter'])} | {_gib(b['activations'] + b['temporaries'])} | "
            f"{_gib(b['inputs'])} | {_gib(plan.peak['total'] + plan.cuda_allowance)} ({plan.peak['phase']}) | "
            f"{'yes' if plan.fits else 'no'} | {largest['micro_batch_size']} / {largest['sample_batch_size']} / "
            f"{largest['decode_batch_size']} |"
        )


if __name__ == "__main__":
    main()
