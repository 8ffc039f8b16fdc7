"""The bench's bookkeeping: equal budgets, the gain ratio, the table and the plot (no training)."""

import json

from cast_shapes.bench import METHODS, QUICK_METHODS, format_table, plan, plot, summarise


def fake_run(method, seed, final_gm):
    curve = [{"step": 5, "images": 80, "gm": final_gm / 2, "am": 0.5},
             {"step": 10, "images": 160, "gm": final_gm, "am": 0.6}]
    return {"method": method, "seed": seed, "train_wall_s": 60.0, "curve": curve, "final": curve[-1]}


def test_every_method_gets_the_same_budget_and_changes_only_its_own_keys():
    p = plan(quick=True)
    assert p.methods == QUICK_METHODS and len(p.seeds) >= 3
    # the quick preset: 40 steps × 2 prompts × 8 images per group = 640 images per run
    assert (p.steps, p.prompts_per_step, p.group_size, p.images_per_run) == (40, 2, 8, 640)
    allowed = {"projector", "ratio_mode", "window_start", "window_size", "window", "window_kwargs", "heatmap_source"}
    assert all(set(overrides) <= allowed for overrides in METHODS.values())


def test_gain_ratio_and_outputs(tmp_path):
    p = plan(quick=True)
    base = {"gm": 0.10, "am": 0.40}
    results = {"flow-grpo": [fake_run("flow-grpo", s, g) for s, g in enumerate([0.14, 0.16, 0.15])],
               "cast": [fake_run("cast", s, g) for s, g in enumerate([0.19, 0.21, 0.20])]}
    summary = summarise(p, base, results, {"flow-grpo": 180.0, "cast": 190.0})
    assert abs(summary["flow_grpo_gm"] - 0.15) < 1e-12 and abs(summary["cast_gm"] - 0.20) < 1e-12
    assert abs(summary["gain_ratio"] - 2.0) < 1e-9
    assert abs(summary["cast_gm_std"] - 0.01) < 1e-9
    json.dumps(summary)
    table = format_table(summary)
    assert "gain ratio (cast − base) / (flow-grpo − base) = 2.00" in table
    plot(tmp_path / "b.png", base, results)
    assert (tmp_path / "b.png").stat().st_size > 1000
