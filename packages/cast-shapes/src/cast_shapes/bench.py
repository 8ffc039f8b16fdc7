"""``cast bench``: base vs Flow-GRPO vs CAST on the shapes world at an equal sampling budget.

Every method trains the same pretrained shapes policy from the same seeds for the same number of
steps with the same group size and prompts per step — so the same number of sampled images —
and differs only in what the method changes (advantage structure, ratio granularity, window).
Each run is evaluated on the held-out hard prompts (``heldout-hard``: >= 5 atoms, never seen in
pretraining or RL) at the midpoint and the end, giving GM against images sampled.

Resumable: every finished run leaves ``runs/<method>-s<seed>/result.json``; running the bench
again skips finished runs (a killed bench loses at most the run in progress).
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

#: method -> config overrides on top of the `shapes` recipe (what the method changes, nothing else)
METHODS: dict[str, dict] = {
    "flow-grpo": {"projector": "scalar", "ratio_mode": "sample", "window": "random",
                  "window_kwargs": {"size": 3, "lo": 0, "hi": 6}},
    "cast": {"projector": "spatial", "ratio_mode": "position"},  # the recipe's measured window
    # ablations: which part of CAST matters
    "cast-final-maps": {"projector": "spatial", "ratio_mode": "position", "heatmap_source": "final"},  # the paper's maps
    "cast-atoms-no-heatmaps": {"projector": "atoms", "ratio_mode": "position"},
    "cast-scalar-per-position": {"projector": "scalar", "ratio_mode": "position"},
    # the measured window is 2 steps (6-7 of 10): the fixed ones are 2 steps too, at either end
    "cast-window-early": {"projector": "spatial", "ratio_mode": "position", "window": "none", "window_start": 0, "window_size": 2},
    "cast-window-late": {"projector": "spatial", "ratio_mode": "position", "window": "none", "window_start": 8, "window_size": 2},
}
QUICK_METHODS = ("flow-grpo", "cast")


@dataclass(frozen=True)
class BenchPlan:
    methods: tuple[str, ...]
    seeds: tuple[int, ...]
    steps: int
    prompts_per_step: int
    group_size: int
    images_per_prompt: int
    eval_limit: int | None  # first N held-out prompts (None: all)
    settings: tuple[str, ...] = ()  # extra `key=value` config overrides applied to every method

    @property
    def images_per_run(self) -> int:
        return self.steps * self.prompts_per_step * self.group_size


def plan(quick: bool, seeds: int | None = None, steps: int | None = None, methods: tuple[str, ...] | None = None,
         settings: tuple[str, ...] = ()) -> BenchPlan:
    if quick:
        return BenchPlan(methods or QUICK_METHODS, tuple(range(seeds or 3)), steps or 40, 2, 8, 2, 48, tuple(settings))
    return BenchPlan(methods or tuple(METHODS), tuple(range(seeds or 3)), steps or 150, 4, 8, 4, None, tuple(settings))


def _evaluate(adapter: Path | None, plan_: BenchPlan, num_steps: int, policy_kwargs: dict | None = None) -> dict:
    from cast_core.evaluation import evaluate
    from cast_core.registry import get_atom_decomposer, get_atom_scorer, get_policy
    from cast_shapes.suites import suite

    policy = get_policy("shapes", **(policy_kwargs or {}))
    if adapter is not None:
        policy.load_adapter(adapter)
    prompts = suite("heldout-hard")[: plan_.eval_limit] if plan_.eval_limit else suite("heldout-hard")
    return evaluate(policy, prompts, get_atom_scorer("shapes-oracle"), get_atom_decomposer("template"),
                    images_per_prompt=plan_.images_per_prompt, num_steps=num_steps, seed=12345)


def run_one(method: str, seed: int, plan_: BenchPlan, root: Path, log: Callable[[str], None]) -> dict:
    """Train one (method, seed) run, evaluating at the midpoint and the end; cached in result.json."""
    from cast_core.checkpoints import checkpoint_dirs
    from cast_core.commands.train import build_config
    from cast_core.trainer import Trainer

    run = root / "runs" / f"{method}-s{seed}"
    done = run / "result.json"
    if done.exists():
        return json.loads(done.read_text())
    overrides = {**METHODS[method], "seed": seed, "prompts_per_step": plan_.prompts_per_step,
                 "group_size": plan_.group_size, "sample_every": 0, "checkpoint_every": max(1, plan_.steps // 2),
                 "keep_checkpoints": 2}
    from cast_core.config import toml_value

    sets = [*plan_.settings, *(f"{k}={toml_value(v)}" for k, v in overrides.items() if k != "projector")]
    cfg = build_config("shapes", None, None, None, None, overrides["projector"], None, sets, plan_.steps)
    started = time.time()
    trainer = Trainer(cfg, run, resume=run.exists(), log=lambda m: None)
    trainer.run()
    train_s = time.time() - started
    curve = []
    for ckpt in checkpoint_dirs(run):
        step = int(ckpt.name[5:])
        ev = _evaluate(ckpt / "adapter", plan_, cfg.num_steps, cfg.policy_kwargs)
        curve.append({"step": step, "images": step * plan_.prompts_per_step * plan_.group_size, "gm": ev["gm"], "am": ev["am"],
                      "by_atom_count": ev["by_atom_count"], "by_skill": ev["by_skill"]})
    result = {"method": method, "seed": seed, "train_wall_s": train_s, "curve": curve, "final": curve[-1]}
    done.write_text(json.dumps(result, indent=2))
    log(f"  {method} seed {seed}: GM {curve[-1]['gm']:.3f} after {curve[-1]['images']} images ({train_s / 60:.1f} min)")
    return result


def summarise(plan_: BenchPlan, base: dict, results: dict[str, list[dict]], wall: dict[str, float]) -> dict:
    def stats(xs):
        return statistics.fmean(xs), (statistics.stdev(xs) if len(xs) > 1 else 0.0)

    out: dict = {"suite": "heldout-hard", "settings": list(plan_.settings), "eval_prompts": plan_.eval_limit or "all",
                 "images_per_prompt": plan_.images_per_prompt, "seeds": list(plan_.seeds),
                 "steps": plan_.steps, "images_per_method": plan_.images_per_run,
                 "base_gm": base["gm"], "base_gm_std": 0.0, "base_am": base["am"], "methods": {}}
    for method, runs in results.items():
        gm, gm_std = stats([r["final"]["gm"] for r in runs])
        am, am_std = stats([r["final"]["am"] for r in runs])
        out["methods"][method] = {"gm": gm, "gm_std": gm_std, "am": am, "am_std": am_std,
                                  "per_seed_gm": [r["final"]["gm"] for r in runs], "wall_s": wall.get(method, 0.0)}
    if "flow-grpo" in out["methods"] and "cast" in out["methods"]:
        fg, ca = out["methods"]["flow-grpo"], out["methods"]["cast"]
        out.update({"flow_grpo_gm": fg["gm"], "flow_grpo_gm_std": fg["gm_std"], "cast_gm": ca["gm"], "cast_gm_std": ca["gm_std"],
                    "flow_grpo_wall_s": fg["wall_s"], "cast_wall_s": ca["wall_s"]})
        denom = fg["gm"] - base["gm"]
        out["gain_ratio"] = (ca["gm"] - base["gm"]) / denom if abs(denom) > 1e-9 else None
    return out


def plot(path: Path, base: dict, results: dict[str, list[dict]]) -> None:
    """GM on held-out hard prompts against images sampled: mean over seeds, ±1 std bars."""
    from PIL import Image, ImageDraw

    colours = [(200, 40, 40), (40, 90, 200), (40, 150, 60), (150, 60, 180), (220, 140, 20), (90, 90, 90)]
    W, H, pad = 640, 400, 50
    curves = {}
    for method, runs in results.items():
        pts = {}
        for r in runs:
            for c in r["curve"]:
                pts.setdefault(c["images"], []).append(c["gm"])
        curves[method] = [(0, [base["gm"]])] + sorted(pts.items())
    xmax = max(x for c in curves.values() for x, _ in c) or 1
    ys = [y for c in curves.values() for _, v in c for y in v] + [base["gm"]]
    ymin, ymax = min(ys), max(ys)
    ymin, ymax = max(0.0, ymin - 0.05), min(1.0, ymax + 0.05)
    img = Image.new("RGB", (W, H), "white")
    d = ImageDraw.Draw(img)
    sx = lambda x: pad + x / xmax * (W - 2 * pad)  # noqa: E731
    sy = lambda y: H - pad - (y - ymin) / ((ymax - ymin) or 1) * (H - 2 * pad)  # noqa: E731
    d.line([(pad, H - pad), (W - pad, H - pad)], fill=(0, 0, 0))
    d.line([(pad, pad), (pad, H - pad)], fill=(0, 0, 0))
    d.text((W // 2 - 60, H - pad + 20), "images sampled", fill=(0, 0, 0))
    d.text((5, pad - 20), "GM on heldout-hard", fill=(0, 0, 0))
    for t in range(5):
        y = ymin + (ymax - ymin) * t / 4
        d.text((5, sy(y) - 6), f"{y:.2f}", fill=(80, 80, 80))
    d.text((W - pad - 40, H - pad + 5), f"{xmax}", fill=(80, 80, 80))
    for i, (method, pts) in enumerate(curves.items()):
        col = colours[i % len(colours)]
        xy = [(sx(x), sy(statistics.fmean(v))) for x, v in pts]
        d.line(xy, fill=col, width=2)
        for x, v in pts:
            m, s = statistics.fmean(v), (statistics.stdev(v) if len(v) > 1 else 0.0)
            d.line([(sx(x), sy(m - s)), (sx(x), sy(m + s))], fill=col)
        d.text((W - pad - 150, pad + 14 * i), method, fill=col)
    img.save(path)


def run_bench(out: Path, plan_: BenchPlan, log: Callable[[str], None] = print) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    base_file = out / "base.json"
    from cast_core.commands.train import build_config

    # the base is sampled as the runs are evaluated: the same steps and policy arguments (device)
    shared = build_config("shapes", None, None, None, None, None, None, list(plan_.settings), 1)
    if base_file.exists():
        base = json.loads(base_file.read_text())
    else:
        log("evaluating the base policy")
        base = _evaluate(None, plan_, shared.num_steps, shared.policy_kwargs)
        base_file.write_text(json.dumps(base, indent=2))
    log(f"base GM {base['gm']:.3f} on heldout-hard")
    results: dict[str, list[dict]] = {}
    wall: dict[str, float] = {}
    for method in plan_.methods:
        for seed in plan_.seeds:
            r = run_one(method, seed, plan_, out, log)
            results.setdefault(method, []).append(r)
            wall[method] = wall.get(method, 0.0) + r["train_wall_s"]
    summary = summarise(plan_, base, results, wall)
    (out / "bench.json").write_text(json.dumps(summary, indent=2))
    plot(out / "bench.png", base, results)
    return summary


def format_table(summary: dict) -> str:
    lines = [f"held-out hard prompts ({summary['eval_prompts']} prompts x {summary['images_per_prompt']} images), "
             f"{len(summary['seeds'])} seeds, {summary['images_per_method']} sampled images per run",
             f"{'method':28s} {'GM':>14s} {'AM':>14s} {'train min/run':>14s}",
             f"{'base':28s} {summary['base_gm']:14.3f} {summary['base_am']:14.3f} {'-':>14s}"]
    for m, s in summary["methods"].items():
        lines.append(f"{m:28s} {s['gm']:7.3f} ± {s['gm_std']:.3f} {s['am']:7.3f} ± {s['am_std']:.3f} "
                     f"{s['wall_s'] / 60 / max(1, len(summary['seeds'])):14.1f}")
    if summary.get("gain_ratio") is not None:
        lines.append(f"gain ratio (cast − base) / (flow-grpo − base) = {summary['gain_ratio']:.2f}")
        if summary["flow_grpo_gm"] <= summary["base_gm"]:
            lines.append("  (Flow-GRPO did not improve on the base, so this ratio is not a speed-up: read the GM column)")
    return "\n".join(lines)
