"""The `shapes` recipe end to end: a short CAST run on the shapes policy completes on CPU."""

import json

import pytest

from cast_core.config import build_config
from cast_core.trainer import Trainer


def test_shapes_is_the_default_recipe():
    cfg = build_config()
    assert (cfg.recipe, cfg.policy, cfg.scorer, cfg.decomposer, cfg.projector) == (
        "shapes",
        "shapes",
        "shapes-oracle",
        "template",
        "spatial",
    )


def test_short_cast_run_on_the_shapes_policy(random_weights, tmp_path):
    sets = [
        f'policy_kwargs={{weights = "{random_weights}"}}',
        "group_size=4",
        "prompts_per_step=2",
        "num_steps=4",
        "sample_every=2",
        "checkpoint_every=2",
    ]
    cfg = build_config(recipe="shapes", sets=sets, steps=2)
    run = tmp_path / "run"
    Trainer(cfg, run, log=lambda m: None).run()
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert len(metrics) == 2 and all("reward_gm" in m and "loss" in m for m in metrics)
    assert metrics[0]["ratio_min"] == 1.0 == metrics[0]["ratio_max"]
    assert (run / "checkpoints" / "step-00002" / "adapter" / "pytorch_lora_weights.safetensors").is_file()
    assert (run / "samples" / "step-00002.png").is_file()


def test_demo_writes_the_paired_comparison_and_report(tmp_path):
    """`cast shapes demo`, the main job, on a toy budget: one training step, three held-out prompts."""
    from click.testing import CliRunner

    from cast_core.comparison import LAYOUT
    from cast_core.precision import bf16_is_fast
    from cast_shapes.commands import demo_command

    run = tmp_path / "demo"
    args = [
        "--out",
        str(run),
        "-k",
        "2",
        "--eval-prompts",
        "3",
        "--eval-seeds",
        "0,5",
        "--set",
        "steps=1",
        "--set",
        "group_size=2",
        "--set",
        "prompts_per_step=1",
        "--set",
        "num_steps=4",
        "--set",
        'window="fixed"',
        "--set",
        "window_kwargs={start=1, size=2}",
    ]
    out = CliRunner().invoke(demo_command, args)
    assert out.exit_code == 0, out.output
    assert "trained 1 steps (2 images; a fixed length: the same run on every machine)" in out.output
    assert "(float32)" in out.output  # the default; bf16 is only suggested where it is native
    assert ('--set precision="bf16"' in out.output) == bf16_is_fast("cpu")
    comparison = json.loads((run / "comparison.json").read_text())
    base, trained = (json.loads((run / f"eval-{n}.json").read_text()) for n in ("base", "trained"))
    assert base["prompts"] == trained["prompts"] == 3 and base["images"] == 12  # 2 seeds x 3 prompts x 2
    # the comparison layout of run_dir.py (compare_evaluations), and the demo's own keys beside it
    assert comparison["layout"] == LAYOUT and set(comparison) == {
        "layout",
        "seeds",
        "prompts",
        "images_per_prompt",
        "per_seed",
        "pooled",
        "over_seeds",
        "evaluations",
        "suite",
        "adapter",
    }
    assert (comparison["prompts"], comparison["images_per_prompt"], comparison["suite"]) == (3, 2, "heldout-test")
    row_keys = {"seed", "base", "trained", "gm_difference", "skill_differences"}
    assert all(set(r) == row_keys for r in comparison["per_seed"])
    for name, pooled in (("base", base), ("trained", trained)):  # eval-*.json pools the seeds as the comparison does
        assert comparison["pooled"][name] == {k: pooled[k] for k in ("gm", "am", "by_skill")}
    gm = comparison["pooled"]["gm_difference"]
    assert gm["prompts"] == 3 and gm["delta"] == pytest.approx(trained["gm"] - base["gm"], abs=1e-12)
    # pooling equal-size seeds: the pooled difference is the mean of the per-seed ones
    rows = comparison["per_seed"]
    assert [r["seed"] for r in rows] == [0, 5] and comparison["seeds"] == [0, 5]
    assert gm["delta"] == pytest.approx(sum(r["gm_difference"]["delta"] for r in rows) / 2, abs=1e-12)
    assert "per evaluation seed: 0: " in out.output
    deltas = [r["gm_difference"]["delta"] for r in rows]
    over = comparison["over_seeds"]["gm"]
    assert over["n"] == 2 and over["delta"] == pytest.approx(sum(deltas) / 2, abs=1e-12)
    assert over["se"] == pytest.approx(abs(deltas[0] - deltas[1]) / 2, abs=1e-12)  # sd/√2 of two values
    assert f"mean over the 2 seeds {over['delta']:+.3f} ± {over['se']:.3f} (s.e. over seeds)" in out.output
    assert set(comparison["pooled"]["skill_differences"]) <= set(base["by_skill"])
    assert "paired GM difference" in out.output and "by skill" in out.output
    adapter = run / "checkpoints" / "step-00001" / "adapter"
    assert (
        f"cast compare --policy shapes --adapter {adapter} --steps 4 -k 2 --suite heldout-test --seeds 6-25"
        in out.output
    )
    html = (run / "report.html").read_text()
    assert "Paired GM difference" in html and "evaluation seeds 0, 5 pooled" in html and "Per evaluation seed" in html
    assert "Mean over the 2 seeds" in html
    assert "Paired GM difference" in html and (run / "grid-base.png").is_file() and (run / "grid-trained.png").is_file()


def _demo(tmp_path, name, *extra):
    from click.testing import CliRunner

    from cast_shapes.commands import demo_command

    run = tmp_path / name
    args = [
        "--out",
        str(run),
        "-k",
        "1",
        "--eval-prompts",
        "2",
        "--eval-seeds",
        "0,1",
        "--set",
        "group_size=2",
        "--set",
        "prompts_per_step=1",
        "--set",
        "num_steps=4",
        *extra,
    ]
    out = CliRunner().invoke(demo_command, args)
    assert out.exit_code == 0, out.output
    return run, out.output.replace(str(run), "RUN")


def test_same_seed_same_machine_gives_the_same_adapter_and_numbers(tmp_path):
    """Issue 25: a fixed length makes the demo a function of its seed, not of the machine's load."""
    import hashlib

    (a, out_a), (b, out_b) = _demo(tmp_path, "a", "--steps", "3"), _demo(tmp_path, "b", "--steps", "3")
    files = lambda run: {  # noqa: E731
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in (run / "checkpoints" / "step-00003" / "adapter").iterdir()
    }
    assert files(a) == files(b) and files(a)
    numbers = lambda out: [line for line in out.splitlines() if "img/s" not in line]  # noqa: E731 - speed differs
    assert numbers(out_a) == numbers(out_b) and "trained 3 steps (6 images; a fixed length" in out_a
    assert any("mean over the 2 seeds" in line for line in numbers(out_a))


def test_a_time_budget_is_opt_in_and_the_verdict_says_it_set_the_length(tmp_path):
    _, out = _demo(tmp_path, "t", "--minutes", "0.0001")
    assert "time budget" in out and "the --minutes budget, not the recipe, set this length" in out
