"""``cast bench``: base vs Flow-GRPO vs CAST on the shapes world at an equal sampling budget.

Every method trains the same pretrained shapes policy from the same training seeds for the same
number of steps, prompts per step and group size — so the same number of sampled images — and
differs only in what the method changes (advantage structure, ratio granularity, window). Every
trained adapter and the base are evaluated at the same evaluation seeds (the same starting
noise), so each evaluation seed gives a paired difference; :mod:`cast_shapes.bench_stats` turns
those into gains and the gain ratio.

The full plan reports on ``heldout-test``, a suite no configuration choice looked at; the
configuration it trains (``FULL_SHARED``: ``train-hard`` prompts, window 2-3, surplus count maps)
was chosen on ``heldout-hard``, the validation suite. ``--quick`` is a smoke run on part of
``heldout-hard``: its budget is too small for any method to gain.

Resumable at every level: each (method, training seed) run is a training run directory that
``Trainer(resume=True)`` continues from its last checkpoint; each evaluation seed's result is
its own file; a finished run (``result.json``, in the comparison layout of :mod:`cast_core.run_dir`)
is never redone. ``plan.json`` records what the numbers depend on, and a second invocation with a
different plan into the same directory is refused instead of mixing two benches.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from cast_core.objectives.recipes import VARIANTS

#: config overrides on top of the `shapes` recipe: what each method changes, nothing else
_CAST = {"projector": "spatial", "ratio_mode": "position"}
METHODS: dict[str, dict] = {
    "flow-grpo": {
        "projector": "scalar",
        "ratio_mode": "sample",
        "window": "random",
        "window_kwargs": {"size": 3, "lo": 0, "hi": 6},
    },  # Flow-GRPO-Fast's random window
    "cast": dict(_CAST),
    # estimator only: Flow-GRPO's scalar advantage in CAST's window
    "flow-grpo-cast-window": {"projector": "scalar", "ratio_mode": "sample"},
    # ablations: which part of CAST matters
    "cast-final-maps": {**_CAST, "heatmap_source": "final"},  # the paper's maps
    "cast-atoms-no-heatmaps": {"projector": "atoms", "ratio_mode": "position"},
    "cast-scalar-per-position": {"projector": "scalar", "ratio_mode": "position"},
    # the measured window is 2 steps (6-7 of 10): fixed 2-step windows at either end
    "cast-window-early": {**_CAST, "window": "fixed", "window_kwargs": {"start": 0, "size": 2}},
    "cast-window-late": {**_CAST, "window": "fixed", "window_kwargs": {"start": 8, "size": 2}},
    # judge resolution: the oracle's masks as a VLM would give them (cast_shapes.judge_maps)
    "cast-judge-grid": {**_CAST, "scorer_kwargs": {"judge_grid": 4}},
    "cast-judge-grid-blur": {**_CAST, "scorer_kwargs": {"judge_grid": 4, "judge_blur": 0.5}},
    "cast-judge-grid-blur-noise": {**_CAST, "scorer_kwargs": {"judge_grid": 4, "judge_blur": 0.5, "judge_noise": 0.2}},
    # the learned judge (issue 26): soft-tifa on the shipped tiny Qwen3-VL gives the rewards and
    # the heatmaps; the evaluation is still the oracle's
    "cast-learned-judge": {**_CAST, "scorer": "shapes-judge"},
}
# the forward-process objectives (issue 40), scalar and CAST's credit: the variants' own settings
# (cast_core.objectives.recipes), with no window (None drops the shared one) and the world's
# learning rate, group size and steps, as every row here; DiffusionNFT's and AWM's other numbers
# are their published defaults (the objectives' own defaults)
for _suffix, (_objective, _projector, _ratio) in VARIANTS.items():
    METHODS[_suffix] = {
        "objective": _objective,
        "projector": _projector,
        "ratio_mode": _ratio,
        "window": None,
        "heatmap_source": "final",
    }
QUICK_METHODS = ("flow-grpo", "cast")
FULL_METHODS = ("flow-grpo", "cast")
#: the demo's configuration (cast_shapes.commands.DEMO_SETTINGS), chosen on heldout-hard
FULL_SHARED = {
    "prompts": "cast_shapes.suites:train_hard_prompts",
    "window": "fixed",
    "window_kwargs": {"start": 2, "size": 2},
    "scorer_kwargs": {"count_maps": "surplus"},
}


@dataclass(frozen=True)
class BenchPlan:
    methods: tuple[str, ...]
    seeds: tuple[int, ...]
    steps: int
    prompts_per_step: int
    group_size: int
    images_per_prompt: int
    eval_suite: str
    eval_limit: int | None  # first N prompts of the suite (None: all)
    eval_seeds: tuple[int, ...]
    shared: dict = field(default_factory=dict)  # config overrides for every method
    settings: tuple[str, ...] = ()  # extra `key=value` overrides (--set), applied last

    @property
    def images_per_run(self) -> int:
        return self.steps * self.prompts_per_step * self.group_size

    def identity(self) -> dict:
        """What every number depends on; methods and training seeds may grow between invocations."""
        from cast_shapes.suites import suite_digest

        d = asdict(self)
        d.pop("methods"), d.pop("seeds")
        d["settings"], d["eval_seeds"] = list(self.settings), list(self.eval_seeds)
        d["eval_suite_digest"] = suite_digest(self.eval_suite)
        return d


def plan(
    quick: bool,
    seeds: int | None = None,
    steps: int | None = None,
    methods: tuple[str, ...] | None = None,
    settings: tuple[str, ...] = (),
    eval_seeds: tuple[int, ...] | None = None,
) -> BenchPlan:
    if quick:
        return BenchPlan(
            methods or QUICK_METHODS,
            tuple(range(seeds or 3)),
            steps or 40,
            2,
            8,
            2,
            "heldout-hard",
            48,
            eval_seeds or (0, 1),
            {},
            tuple(settings),
        )
    return BenchPlan(
        methods or FULL_METHODS,
        tuple(range(seeds or 3)),
        steps or 400,
        4,
        8,
        2,
        "heldout-test",
        None,
        eval_seeds or tuple(range(10)),
        dict(FULL_SHARED),
        tuple(settings),
    )


def overrides_for(method: str, seed: int, plan_: BenchPlan) -> dict:
    """The config overrides of one run: shared, then the method's (dict options merged key by key)."""
    method_keys = METHODS[method]
    out = {**plan_.shared, **method_keys}
    for key in ("scorer_kwargs", "policy_kwargs"):
        if key in plan_.shared or key in method_keys:
            out[key] = {**plan_.shared.get(key, {}), **method_keys.get(key, {})}
    if "window" in method_keys and "window_kwargs" not in method_keys:
        out.pop("window_kwargs", None)  # a method's own selector does not inherit the shared one's arguments
    if "window" in method_keys and method_keys["window"] is None:
        out.pop("window")  # no window at all (a forward-process objective): the recipe's is dropped too
    if "scorer" in method_keys and "scorer_kwargs" not in method_keys:
        out.pop("scorer_kwargs", None)  # nor its own scorer the shared scorer's (the oracle's count_maps)
    out.update(
        {
            "seed": seed,
            "prompts_per_step": plan_.prompts_per_step,
            "group_size": plan_.group_size,
            "sample_every": 0,
            "checkpoint_every": max(1, min(50, plan_.steps // 2)),
            "keep_checkpoints": 2,
        }
    )
    return out


def _build_config(method: str, seed: int, plan_: BenchPlan):
    from cast_core.config import build_config, toml_value

    overrides = overrides_for(method, seed, plan_)
    sets = [*(f"{k}={toml_value(v)}" for k, v in overrides.items() if k != "projector"), *plan_.settings]
    return build_config(
        recipe="shapes", components={"projector": overrides.get("projector")}, sets=sets, steps=plan_.steps
    )


def _eval_prompts(plan_: BenchPlan) -> list[str]:
    from cast_shapes.suites import suite

    prompts = suite(plan_.eval_suite)
    return prompts[: plan_.eval_limit] if plan_.eval_limit else prompts


def _evaluate_cached(path: Path, adapter: Path | None, plan_: BenchPlan, eval_seed: int, cfg) -> dict:
    """One evaluation seed of one model, read back if already on disk (written atomically)."""
    if path.exists():
        return json.loads(path.read_text())
    from cast_core.evaluation import evaluate
    from cast_core.registry import get_atom_decomposer, get_atom_scorer, get_policy

    policy = get_policy("shapes", **(cfg.policy_kwargs or {}))
    if adapter is not None:
        policy.load_adapter(adapter)
    result = evaluate(
        policy,
        _eval_prompts(plan_),
        get_atom_scorer("shapes-oracle"),
        get_atom_decomposer("template"),
        images_per_prompt=plan_.images_per_prompt,
        num_steps=cfg.num_steps,
        seed=eval_seed,
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result))
    tmp.replace(path)
    return result


def read_result(path: Path, plan_: BenchPlan) -> dict:
    """A finished run's ``result.json`` in the comparison layout (:mod:`cast_core.run_dir`). One
    written before that layout (``per_eval_seed`` rows of ``eval_seed``, ``base_gm`` and the
    trained model's numbers; the committed ``benchmarks/results/bench-*-runs/`` among them) is
    converted, so that its bench directory resumes and summarises as it did: each row's paired
    differences are kept as written, ``over_seeds`` is recomputed from them, and what the old
    rows never held (the base's AM and skills, the pooled comparison) is null."""
    from cast_core.comparison import LAYOUT, summarise_seeds

    result = json.loads(path.read_text())
    if "layout" in result:
        return result
    rows = [
        {
            "seed": r["eval_seed"],
            "base": {"gm": r["base_gm"], "am": None, "by_skill": None},
            "trained": {"gm": r["gm"], "am": r["am"], "by_skill": r["by_skill"]},
            "gm_difference": r["gm_difference"],
            "skill_differences": r["skill_differences"],
        }
        for r in result.pop("per_eval_seed")
    ]
    meta = {"training_seed": result.pop("seed"), "training_images": result.pop("images"), **result}
    return {
        "layout": LAYOUT,
        "seeds": [r["seed"] for r in rows],
        "prompts": rows[0]["gm_difference"]["prompts"],
        "images_per_prompt": plan_.images_per_prompt,
        "per_seed": rows,
        "pooled": None,
        "over_seeds": summarise_seeds(rows) if len(rows) > 1 else None,
        **meta,
    }


def machine() -> dict:
    """What trained the run: another CPU's kernels (AVX2 against AVX-512) train a different adapter
    from the same seed, as far from it as another training seed (docs/shapes-rl.md), so a run's
    record says which kernels it had."""
    import torch

    return {
        "torch": torch.__version__,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "threads": torch.get_num_threads(),
    }


def _run_dir(root: Path, method: str, seed: int) -> Path:
    return root / "runs" / f"{method}-s{seed}"


def run_one(method: str, seed: int, plan_: BenchPlan, root: Path, log: Callable[[str], None]) -> dict:
    """Train one (method, training seed) run and evaluate its final adapter at every evaluation
    seed, paired with the base; cached in ``result.json``."""
    from cast_core.checkpoints import latest_checkpoint, step_of
    from cast_core.comparison import compare_evaluations
    from cast_core.trainer import Trainer

    run = _run_dir(root, method, seed)
    done = run / "result.json"
    if done.exists():
        return read_result(done, plan_)
    cfg = _build_config(method, seed, plan_)
    started = time.time()
    every = max(1, plan_.steps // 8)

    def quiet(line: str) -> None:  # the trainer's step lines, thinned to about eight per run
        done = line.split()[1].split("/")[0] if line.startswith("step ") else ""
        if not done.isdigit() or int(done) % every == 0:
            log(f"    {line}")

    Trainer(cfg, run, resume=run.exists(), log=quiet).run()
    ckpt = latest_checkpoint(run)
    if ckpt is None or step_of(ckpt) != plan_.steps:
        raise RuntimeError(
            f"{run}: training stopped before step {plan_.steps} (latest checkpoint {ckpt}); run the bench again"
        )
    train_s = time.time() - started
    base = [_evaluate_cached(root / "base" / f"eval-seed-{s}.json", None, plan_, s, cfg) for s in plan_.eval_seeds]
    trained = [
        _evaluate_cached(run / "eval" / f"seed-{s}.json", ckpt / "adapter", plan_, s, cfg) for s in plan_.eval_seeds
    ]
    result = {
        **compare_evaluations(plan_.eval_seeds, base, trained),
        "method": method,
        "training_seed": seed,
        "training_images": plan_.images_per_run,
        "train_wall_s": train_s,
        "checkpoint": ckpt.name,
        "machine": machine(),
    }
    tmp = done.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=2))
    tmp.replace(done)
    rows = result["per_seed"]
    mean = sum(r["gm_difference"]["delta"] for r in rows) / len(rows)
    log(f"  {method} seed {seed}: paired GM gain {mean:+.4f} over {len(rows)} evaluation seeds")
    return result


def _check_plan(out: Path, plan_: BenchPlan) -> None:
    from cast_core.config import ConfigError

    path, ident = out / "plan.json", plan_.identity()
    if path.exists():
        old = json.loads(path.read_text())
        changed = sorted(k for k in ident.keys() | old.keys() if ident.get(k) != old.get(k))
        if changed:
            raise ConfigError(
                f"{out} holds a bench with another plan ({', '.join(changed)} differ): its numbers "
                "would mix with these. Use another --out, or the same options as before"
            )
    else:
        out.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(ident, indent=2))


def run_bench(out: Path, plan_: BenchPlan, log: Callable[[str], None] = print) -> dict:
    from cast_shapes.bench_plot import plot_gains
    from cast_shapes.bench_stats import summarise

    _check_plan(out, plan_)
    jobs = [(m, s) for s in plan_.seeds for m in plan_.methods]  # seed-major: early stops still compare methods
    results: dict[str, list[dict]] = {m: [] for m in plan_.methods}
    pending = [not (_run_dir(out, m, s) / "result.json").exists() for m, s in jobs]
    fresh_s, fresh_n = 0.0, 0
    for i, (method, seed) in enumerate(jobs):
        finished, left = not pending[i], sum(pending[i:])  # a finished run costs no time: not in the estimate
        eta = f", about {fresh_s / fresh_n * left / 60:.0f} min left" if fresh_n and left else ""
        log(f"[{i + 1}/{len(jobs)}] {method} training seed {seed}{' (finished earlier)' if finished else ''}{eta}")
        t0 = time.time()
        results[method].append(run_one(method, seed, plan_, out, log))
        if not finished:
            fresh_s, fresh_n = fresh_s + time.time() - t0, fresh_n + 1
    summary = {
        "plan": plan_.identity(),
        "methods": list(plan_.methods),
        "seeds": list(plan_.seeds),
        "images_per_run": plan_.images_per_run,
        "eval_prompts": len(_eval_prompts(plan_)),
        **summarise(results),
        "train_wall_s": {m: [r["train_wall_s"] for r in rs] for m, rs in results.items()},
    }
    (out / "bench.json").write_text(json.dumps(summary, indent=2))
    plot_gains(out / "bench.png", summary)
    return summary


def format_table(summary: dict) -> str:
    from cast_shapes.bench_stats import METRICS_ORDER, ratio_cell, ratio_text

    p = summary["plan"]
    metrics = [k for k in METRICS_ORDER if any(k in g for g in summary["gains"].values())]
    lines = [
        f"{p['eval_suite']} ({summary['eval_prompts']} prompts x {p['images_per_prompt']} images x "
        f"{len(p['eval_seeds'])} evaluation seeds), {len(summary['seeds'])} training seeds, "
        f"{summary['images_per_run']} sampled images per run; paired gain over the base ± s.e.",
        f"{'method':28s} " + " ".join(f"{k:>16s}" for k in metrics),
    ]
    for m, g in summary["gains"].items():
        lines.append(
            f"{m:28s} "
            + " ".join(f"{g[k]['gain']:+8.4f} ± {g[k]['se']:.4f}" if k in g else f"{'-':>16s}" for k in metrics)
        )
    r = summary["ratio"]
    for k, v in r["by_metric"].items():
        lines.append(f"gain ratio {r['numerator']}/{r['denominator']} on {k}: {ratio_text(v)}")
    others = {m: by for m, by in summary.get("ratios", {}).get("by_method", {}).items() if m != r["numerator"]}
    if others:
        lines.append(
            f"gain ratio of every method to {r['denominator']} (95% bootstrap interval; undefined: "
            f"{r['denominator']} did not gain; n.d.: its gain is <= 0 in that share of the draws)"
        )
        lines += [
            f"{m:28s} " + " ".join(f"{ratio_cell(by[k]) if k in by else '-':>18s}" for k in metrics)
            for m, by in others.items()
        ]
    return "\n".join(lines)
