"""The bench's bookkeeping (no training): equal budgets, what each method changes, the paired
gains and the gain ratio against hand computations, undefined ratios, plan refusal, outputs."""

import json
import math
import statistics
from pathlib import Path

import pytest

from cast_core.comparison import LAYOUT, compare_evaluations
from cast_core.config import ConfigError
from cast_shapes.bench import FULL_SHARED, METHODS, QUICK_METHODS, _check_plan, format_table, overrides_for, plan
from cast_shapes.bench_plot import plot_gains
from cast_shapes.bench_stats import gain_ratio, method_gain, ratio_cell, ratio_text, summarise


def fake_run(method, seed, deltas, skill=None):
    """A result.json with these paired GM differences at evaluation seeds 0..n-1."""
    rows = [
        {
            "seed": i,
            "gm_difference": {"delta": d, "se": 0.01},
            "skill_differences": {"object": {"delta": (skill or deltas)[i], "se": 0.01}},
        }
        for i, d in enumerate(deltas)
    ]
    return {"method": method, "training_seed": seed, "train_wall_s": 60.0, "per_seed": rows}


def test_budgets_and_what_each_method_changes():
    q = plan(quick=True)
    assert q.methods == QUICK_METHODS and len(q.seeds) == 3 and q.images_per_run == 640
    full = plan(quick=False)
    assert full.images_per_run == 12_800 and full.seeds == (0, 1, 2) and full.eval_seeds == tuple(range(10))
    assert full.eval_suite == "heldout-test" and full.methods == ("flow-grpo", "cast")
    allowed = {
        "projector",
        "ratio_mode",
        "window",
        "window_kwargs",
        "heatmap_source",
        "scorer",
        "scorer_kwargs",
        "objective",
    }
    assert all(set(o) <= allowed for o in METHODS.values())
    cast, fg = overrides_for("cast", 1, full), overrides_for("flow-grpo", 1, full)
    assert cast["window_kwargs"] == {"start": 2, "size": 2} and cast["window"] == "fixed"
    assert fg["window"] == "random" and fg["window_kwargs"] == {"size": 3, "lo": 0, "hi": 6}
    same = {k for k in cast.keys() & fg.keys() if cast[k] == fg[k]}
    assert {"prompts", "scorer_kwargs", "seed", "group_size", "prompts_per_step"} <= same
    judged = overrides_for("cast-judge-grid-blur-noise", 0, full)["scorer_kwargs"]
    assert judged == {**FULL_SHARED["scorer_kwargs"], "judge_grid": 4, "judge_blur": 0.5, "judge_noise": 0.2}
    assert overrides_for("flow-grpo-cast-window", 0, full)["window_kwargs"] == {"start": 2, "size": 2}
    learned = overrides_for("cast-learned-judge", 0, full)  # soft-tifa takes none of the oracle's arguments
    assert learned["scorer"] == "shapes-judge" and "scorer_kwargs" not in learned
    cast0 = overrides_for("cast", 0, full)
    assert {k: v for k, v in learned.items() if k != "scorer"} == {
        k: v for k, v in cast0.items() if k != "scorer_kwargs"
    }
    # the forward-process rows drop the shared window (they have none) and keep everything else
    nft = overrides_for("cast-nft", 0, full)
    assert "window" not in nft and "window_kwargs" not in nft
    assert nft["objective"] == "nft" and nft["projector"] == "spatial" and nft["heatmap_source"] == "final"
    assert {k: v for k, v in nft.items() if k not in ("objective", "heatmap_source")} == {
        k: v for k, v in cast0.items() if k not in ("window", "window_kwargs")
    }


def test_method_gain_is_over_training_seeds():
    runs = [fake_run("cast", 0, [0.01, 0.03]), fake_run("cast", 1, [0.02, 0.04]), fake_run("cast", 2, [0.0, 0.02])]
    g = method_gain(runs, "gm")
    assert g["per_run"] == pytest.approx([0.02, 0.03, 0.01])
    assert g["gain"] == pytest.approx(0.02)
    assert g["se"] == pytest.approx(statistics.stdev([0.02, 0.03, 0.01]) / math.sqrt(3))
    one = method_gain(runs[:1], "gm")
    assert one["se_over"] == "evaluation seeds" and one["se"] == pytest.approx(0.01 * math.sqrt(2) / math.sqrt(2))


def test_gain_ratio_point_interval_and_undefined():
    cast = [fake_run("cast", s, [0.040 + 0.002 * s, 0.044, 0.038, 0.042]) for s in range(3)]
    fg = [fake_run("flow-grpo", s, [0.020 + 0.001 * s, 0.021, 0.019, 0.020]) for s in range(3)]
    r = gain_ratio(cast, fg, "gm")
    num = statistics.fmean(statistics.fmean(c["gm_difference"]["delta"] for c in run["per_seed"]) for run in cast)
    den = statistics.fmean(statistics.fmean(c["gm_difference"]["delta"] for c in run["per_seed"]) for run in fg)
    assert r["ratio"] == pytest.approx(num / den)
    assert r["ci"][0] < r["ratio"] < r["ci"][1] and r["den_not_positive_share"] == 0
    assert gain_ratio(cast, fg, "gm") == r  # seeded: the same interval every time
    losing = [fake_run("flow-grpo", s, [-0.01, 0.0, -0.02, 0.005]) for s in range(3)]
    u = gain_ratio(cast, losing, "gm")
    assert u["ratio"] is None and u["ci"] is None
    assert ratio_text(u).startswith("undefined (flow-grpo -0.006")
    noisy = [fake_run("flow-grpo", s, [0.03, -0.02, 0.02, -0.025]) for s in range(3)]
    n = gain_ratio(cast, noisy, "gm")
    assert n["ratio"] is not None and n["ci"] is None
    text = ratio_text(n)  # a gain the data cannot tell from zero gives no ratio, only both gains
    assert text.startswith("not determined (flow-grpo +0.001, ≤ 0 in ") and f"{n['ratio']:.2f}" not in text
    assert ratio_cell(r) == f"{r['ratio']:.2f} [{r['ci'][0]:.2f}, {r['ci'][1]:.2f}]"
    assert ratio_cell(u) == "undefined" and ratio_cell(n) == f"n.d. ({100 * n['den_not_positive_share']:.0f}%)"


def test_summary_table_and_figure(tmp_path):
    full = plan(quick=False)
    results = {
        "flow-grpo": [fake_run("flow-grpo", s, [0.01, 0.012, 0.008], [0.02, 0.01, 0.0]) for s in range(3)],
        "cast": [fake_run("cast", s, [0.02, 0.024, 0.016], [0.04, 0.03, 0.02]) for s in range(3)],
    }
    s = summarise(results)
    assert s["ratio"]["by_metric"]["gm"]["ratio"] == pytest.approx(2.0)
    assert s["ratio"]["by_metric"]["object"]["ratio"] == pytest.approx(3.0)
    summary = {
        "plan": full.identity(),
        "methods": list(results),
        "seeds": [0, 1, 2],
        "images_per_run": 12_800,
        "eval_prompts": 192,
        **s,
    }
    json.dumps(summary)
    table = format_table(summary)
    assert "gain ratio cast/flow-grpo on gm: 2.00 [" in table and "+0.0200 ±" in table
    assert "every method" not in table  # no ablation: no second ratio table
    results["cast-judge-grid"] = [
        fake_run("cast-judge-grid", s, [0.015, 0.018, 0.012], [0.03, 0.02, 0.01]) for s in range(3)
    ]
    s = summarise(results)
    assert s["ratio"]["by_metric"]["gm"]["ratio"] == pytest.approx(2.0)
    assert s["ratios"]["by_method"]["cast-judge-grid"]["gm"]["ratio"] == pytest.approx(1.5)
    assert s["ratios"]["by_method"]["cast-judge-grid"]["object"]["ratio"] == pytest.approx(2.0)
    assert "flow-grpo" not in s["ratios"]["by_method"]
    table = format_table({**summary, **s})
    row = next(line for line in table.splitlines() if line.startswith("cast-judge-grid ") and "[" in line)
    assert row.split()[1:4] == ["1.50", "[1.50,", "1.50]"]  # every cell 1.5x: the interval is a point
    assert row.endswith("n.d. (4%)")  # flow-grpo's object gain has a zero cell: <= 0 in 4% of the draws
    plot_gains(tmp_path / "b.png", summary)
    assert (tmp_path / "b.png").stat().st_size > 1000


def test_progress_counts_only_unfinished_runs_as_time_left(tmp_path, monkeypatch):
    import cast_shapes.bench as bench

    p = plan(quick=True, seeds=2)  # jobs: flow-grpo s0, cast s0, flow-grpo s1, cast s1
    for name in ("flow-grpo-s0", "flow-grpo-s1"):  # finished earlier
        (tmp_path / "runs" / name).mkdir(parents=True)
        (tmp_path / "runs" / name / "result.json").write_text("{}")
    clock = iter(range(0, 10_000, 300))  # every time.time() call moves 5 min on
    monkeypatch.setattr(bench.time, "time", lambda: next(clock))
    monkeypatch.setattr(bench, "run_one", lambda m, s, *_: fake_run(m, s, [0.01, 0.02]))
    lines = []
    bench.run_bench(tmp_path, p, log=lines.append)
    assert lines == [
        "[1/4] flow-grpo training seed 0 (finished earlier)",
        "[2/4] cast training seed 0",
        "[3/4] flow-grpo training seed 1 (finished earlier), about 5 min left",
        "[4/4] cast training seed 1, about 5 min left",
    ]


def test_one_run_end_to_end_records_its_machine_and_is_never_redone(tmp_path):
    """The smallest real run: one training step, one evaluation seed on the quick suite."""
    from dataclasses import replace

    import torch
    from cast_shapes.bench import run_one

    p = replace(
        plan(quick=True, seeds=1, steps=1, eval_seeds=(0,)),
        eval_limit=4,
        images_per_prompt=1,
        prompts_per_step=1,
        group_size=4,
    )
    result = run_one("cast", 0, p, tmp_path, log=lambda line: None)
    assert result["machine"] == {
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
    }
    (row,) = result["per_seed"]
    assert row["gm_difference"]["delta"] == pytest.approx(row["trained"]["gm"] - row["base"]["gm"])
    assert json.loads((tmp_path / "runs" / "cast-s0" / "result.json").read_text()) == result
    # the comparison layout of run_dir.py, made from the cached evaluations, and the run's own keys beside it
    evals = [
        json.loads(f.read_text())
        for f in (tmp_path / "base" / "eval-seed-0.json", tmp_path / "runs" / "cast-s0" / "eval" / "seed-0.json")
    ]
    meta = {
        "method": "cast",
        "training_seed": 0,
        "training_images": 4,
        "train_wall_s": result["train_wall_s"],
        "checkpoint": "step-00001",
        "machine": result["machine"],
    }
    assert result == {**compare_evaluations([0], evals[:1], evals[1:]), **meta} and result["layout"] == LAYOUT
    (tmp_path / "base" / "eval-seed-0.json").unlink()  # a finished run reads result.json, evaluates nothing
    assert run_one("cast", 0, p, tmp_path, log=lambda line: None) == result
    assert not (tmp_path / "base" / "eval-seed-0.json").exists()


def old_result(method, seed, rows):
    """A result.json as the bench wrote it before the comparison layout."""
    return {
        "method": method,
        "seed": seed,
        "images": 12_800,
        "train_wall_s": 60.0,
        "checkpoint": "step-00400",
        "per_eval_seed": rows,
    }


def test_a_result_json_from_before_the_layout_is_read_in_the_layout(tmp_path):
    from cast_shapes.bench import run_one

    def row(seed, base_gm, gm, delta, obj):
        return {
            "eval_seed": seed,
            "base_gm": base_gm,
            "gm": gm,
            "am": 0.5,
            "by_skill": {"object": 0.75},
            "gm_difference": {"delta": delta, "se": 0.01, "z": delta / 0.01, "prompts": 192},
            "skill_differences": {"object": {"delta": obj, "se": 0.02, "z": obj / 0.02, "prompts": 192}},
        }

    rows = [row(0, 0.25, 0.375, 0.125, 0.25), row(1, 0.5, 0.5, 0.0, 0.5)]
    (tmp_path / "runs" / "cast-s1").mkdir(parents=True)
    (tmp_path / "runs" / "cast-s1" / "result.json").write_text(json.dumps(old_result("cast", 1, rows)))
    result = run_one("cast", 1, plan(quick=False), tmp_path, log=lambda line: None)  # read, never trained
    assert result == {
        "layout": LAYOUT,
        "seeds": [0, 1],
        "prompts": 192,
        "images_per_prompt": 2,
        "per_seed": [
            {
                "seed": r["eval_seed"],
                "base": {"gm": r["base_gm"], "am": None, "by_skill": None},
                "trained": {"gm": r["gm"], "am": 0.5, "by_skill": {"object": 0.75}},
                "gm_difference": r["gm_difference"],
                "skill_differences": r["skill_differences"],
            }
            for r in rows
        ],
        "pooled": None,  # the old rows kept no per-prompt numbers to pool
        "over_seeds": {
            "base_gm": 0.375,
            "trained_gm": 0.4375,
            "gm": {"delta": 0.0625, "se": 0.0625, "n": 2, "z": 1.0},
            "skills": {"object": {"delta": 0.375, "se": 0.125, "n": 2, "z": 3.0}},
        },
        "method": "cast",
        "training_seed": 1,
        "training_images": 12_800,
        "train_wall_s": 60.0,
        "checkpoint": "step-00400",
    }
    assert method_gain([result], "gm")["per_run"] == [0.0625] and method_gain([result], "object")["gain"] == 0.375


COMMITTED = Path(__file__).resolve().parents[3] / "benchmarks" / "results"


@pytest.mark.skipif(not (COMMITTED / "bench-12800-runs").is_dir(), reason="the repository's committed bench results")
def test_the_committed_bench_resumes_and_summarises_as_it_did(tmp_path):
    """bench-12800-runs/ holds result.json files from before the layout: a bench directory made of
    them resumes without training and writes the numbers of bench-12800-window.json again."""
    import shutil

    from cast_shapes.bench import run_bench

    before = json.loads((COMMITTED / "bench-12800-window.json").read_text())
    shutil.copy(COMMITTED / "bench-12800-runs" / "plan.json", tmp_path / "plan.json")
    for method in before["methods"]:
        for seed in before["seeds"]:
            (tmp_path / "runs" / f"{method}-s{seed}").mkdir(parents=True)
            shutil.copy(
                COMMITTED / "bench-12800-runs" / f"{method}-s{seed}.json",
                tmp_path / "runs" / f"{method}-s{seed}" / "result.json",
            )
    lines = []
    run_bench(tmp_path, plan(quick=False, methods=tuple(before["methods"])), log=lines.append)
    assert all("(finished earlier)" in line for line in lines)
    assert json.loads((tmp_path / "bench.json").read_text()) == before


def test_a_second_plan_is_refused_but_more_methods_and_seeds_are_not(tmp_path):
    _check_plan(tmp_path, plan(quick=True))
    _check_plan(tmp_path, plan(quick=True, seeds=5, methods=("cast", "cast-judge-grid")))
    with pytest.raises(ConfigError, match="eval_seeds"):
        _check_plan(tmp_path, plan(quick=True, eval_seeds=(0, 1, 2)))
    with pytest.raises(ConfigError, match="steps"):
        _check_plan(tmp_path, plan(quick=True, steps=7))


def test_axis_ticks_are_round_and_include_zero():
    from cast_shapes.bench_plot import nice_ticks

    ticks = nice_ticks(-0.0378, 0.0374)
    assert 0.0 in ticks and ticks == sorted(ticks)
    assert ticks == [-0.02, 0.0, 0.02]  # a quarter of the span is 0.0188: the step is 0.02
    assert nice_ticks(0.0, 1.0) == [0.0, 0.5, 1.0] and nice_ticks(0.001, 0.009) == [0.002, 0.004, 0.006, 0.008]
