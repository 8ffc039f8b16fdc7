"""docs/design.md §7 performance contracts, measured side by side in one run on the shapes policy.

1. Sampling with log-probs vs the model's own plain ODE sampler, same steps and batch:
   target ratio <= ~1.05.
2. A CAST training step vs a Flow-GRPO-recipe step on the same policy, prompts, window and
   budget: target ratio <= ~1.10.
3. A CAST training step with ``precision = "bf16"`` (autocast) vs float32, the shapes recipe's
   own batch (32 images, window 2-3 of 10): no target; the speed-up is what bf16 buys on this
   machine's CPU (measured on one with avx512_bf16; without native bf16 it may be slower).

Run: `python benchmarks/overhead.py [--repeats N] [--json FILE]` (after `make install`).
Timings are medians over repeats, interleaved so that machine load hits both sides alike.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time

import torch


def timed(fn, repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def median_step_times(trainers: dict, repeats: int) -> dict[str, float]:
    """Median seconds per ``train_step`` of each trainer, interleaved, after one warm-up step
    each (decomposition cache, first-call overheads)."""
    for t in trainers.values():
        t.train_step()
    times: dict[str, list[float]] = {k: [] for k in trainers}
    for _ in range(repeats):
        for name, t in trainers.items():
            times[name] += timed(t.train_step, 1)
    return {k: statistics.median(v) for k, v in times.items()}


def sampling(repeats: int, batch: int, steps: int) -> dict:
    from cast_core import Window
    from cast_core.registry import get_policy
    from cast_core.sampling import sample
    from cast_shapes.sampling_ode import ode_sample

    policy = get_policy("shapes")
    prompts = ["two red circles left of a blue square"] * batch
    plain, ours = [], []
    for _ in range(repeats):  # interleave
        plain += timed(lambda: ode_sample(policy.net, prompts, num_steps=steps, guidance=policy.guidance, seed=0), 1)
        ours += timed(
            lambda: sample(
                policy,
                prompts,
                num_steps=steps,
                window=Window(0, steps),
                eta=0.7,
                generator=torch.Generator().manual_seed(0),
            ),
            1,
        )
    p, o = statistics.median(plain), statistics.median(ours)
    return {"plain_ode_s": p, "sde_with_logprobs_s": o, "ratio": o / p, "target": 1.05}


def train_steps(repeats: int) -> dict:
    from cast_core.config import build_config
    from cast_core.trainer import Trainer

    common = [
        'window="none"',
        "window_start=0",
        "window_size=3",
        "prompts_per_step=2",
        "group_size=8",
        "sample_every=0",
        "checkpoint_every=1000000",
    ]
    trainers = {}
    for name, extra in (("flow-grpo", ['ratio_mode="sample"']), ("cast", ['ratio_mode="position"'])):
        projector = "scalar" if name == "flow-grpo" else "spatial"
        cfg = build_config(recipe="shapes", components={"projector": projector}, sets=common + extra, steps=1000)
        trainers[name] = Trainer(cfg, tempfile.mkdtemp(prefix=f"bench-{name}-"), log=lambda m: None)
    times = median_step_times(trainers, repeats)
    f, c = times["flow-grpo"], times["cast"]
    return {"flow_grpo_step_s": f, "cast_step_s": c, "ratio": c / f, "target": 1.10}


def precision_steps(repeats: int) -> dict:
    from cast_core.config import build_config
    from cast_core.trainer import Trainer

    common = ['window="fixed"', "window_kwargs={start=2, size=2}", "sample_every=0", "checkpoint_every=1000000"]
    trainers = {
        p: Trainer(
            build_config(recipe="shapes", sets=common + [f'precision="{p}"'], steps=1000),
            tempfile.mkdtemp(prefix=f"bench-{p}-"),
            log=lambda m: None,
        )
        for p in ("no", "bf16")
    }
    times = median_step_times(trainers, repeats)
    f, b = times["no"], times["bf16"]
    images = trainers["no"].config.prompts_per_step * trainers["no"].config.group_size
    return {"images_per_step": images, "float32_step_s": f, "bf16_step_s": b, "speedup": f / b}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", dest="json_path")
    a = ap.parse_args()
    s = sampling(a.repeats, batch=32, steps=10)
    print(
        f"sampling 32 images x 10 steps: plain ODE {s['plain_ode_s']:.3f} s, SDE + log-probs "
        f"{s['sde_with_logprobs_s']:.3f} s, ratio {s['ratio']:.3f} (target <= {s['target']})"
    )
    t = train_steps(a.repeats)
    print(
        f"training step (16 images, 3 window steps): flow-grpo {t['flow_grpo_step_s']:.3f} s, "
        f"cast {t['cast_step_s']:.3f} s, ratio {t['ratio']:.3f} (target <= {t['target']})"
    )
    p = precision_steps(a.repeats)
    print(
        f"shapes training step ({p['images_per_step']} images, window 2-3 of 10): float32 {p['float32_step_s']:.3f} s, "
        f"bf16 autocast {p['bf16_step_s']:.3f} s, speed-up {p['speedup']:.2f}x"
    )
    if a.json_path:
        with open(a.json_path, "w") as f:
            json.dump({"sampling": s, "train_step": t, "precision": p}, f, indent=2)


if __name__ == "__main__":
    main()
