"""evaluate() (GenEval 2's layout plus per-prompt GMs and skills), paired_difference(),
paired_skill_differences() and the report's paired lines."""

import json
import math

import pytest

from cast_core.evaluation import evaluate, paired_difference, paired_skill_differences
from cast_core.testing import ConstantScorer, FakeDecomposer, FakePolicy, LeftBrightnessScorer

PROMPTS = ["a red circle", "two blue squares", "a green triangle"]


def test_evaluate_layout_and_per_prompt_gm():
    out = evaluate(
        FakePolicy(), PROMPTS, LeftBrightnessScorer(), FakeDecomposer(), images_per_prompt=3, num_steps=4, batch_size=4
    )  # batches cut across prompts on purpose
    assert out["images"] == 9 and out["prompts"] == 3 and len(out["per_prompt_gm"]) == 3
    # equal images per prompt: the image-level GM is the mean of the per-prompt means
    assert math.isclose(out["gm"], sum(out["per_prompt_gm"]) / 3, rel_tol=1e-9)
    assert set(out["by_skill"]) == {"object", "count"} and list(out["by_atom_count"]) == ["2"]
    again = evaluate(
        FakePolicy(), PROMPTS, LeftBrightnessScorer(), FakeDecomposer(), images_per_prompt=3, num_steps=4, batch_size=4
    )
    assert again == out  # seeded: the same images, so comparisons can be paired
    # per-prompt skill means weight images equally, so their mean over prompts is the skill AM
    for skill in ("object", "count"):
        per_prompt = [row[skill] for row in out["per_prompt_skill"]]
        assert math.isclose(sum(per_prompt) / 3, out["by_skill"][skill], rel_tol=1e-9)


def test_constant_scorer_gives_its_value_everywhere():
    out = evaluate(FakePolicy(), PROMPTS, ConstantScorer(0.25), FakeDecomposer(), images_per_prompt=2, num_steps=2)
    assert out["am"] == pytest.approx(0.25)
    assert out["per_prompt_gm"] == pytest.approx([0.25] * 3)  # the GM of equal scores is that score


def test_paired_difference_exact_numbers():
    before = {"per_prompt_gm": [0.2, 0.4, 0.6, 0.8]}
    after = {"per_prompt_gm": [0.3, 0.4, 0.7, 0.8]}  # diffs .1 0 .1 0: mean .05, sd sqrt(1/300)
    d = paired_difference(before, after)
    assert d["prompts"] == 4 and d["delta"] == pytest.approx(0.05)
    assert d["se"] == pytest.approx(math.sqrt(0.01 / 3) / 2)
    assert d["z"] == pytest.approx(0.05 / d["se"])
    shifted = paired_difference(before, {"per_prompt_gm": [x + 0.1 for x in before["per_prompt_gm"]]})
    assert shifted["se"] == pytest.approx(0.0, abs=1e-12) and shifted["z"] > 1e6
    assert paired_difference(before, before)["z"] == 0.0


def test_paired_difference_refuses_unpaired_inputs():
    with pytest.raises(ValueError, match="per_prompt_gm"):
        paired_difference({"gm": 0.3}, {"per_prompt_gm": [0.1, 0.2]})
    with pytest.raises(ValueError, match="same >= 2 prompts"):
        paired_difference({"per_prompt_gm": [0.1, 0.2]}, {"per_prompt_gm": [0.1, 0.2, 0.3]})


def test_paired_skill_differences_exact_numbers():
    before = {
        "per_prompt_skill": [
            {"object": 0.5, "position": 0.2},
            {"object": 0.7},
            {"object": 0.9, "position": 0.4},
            {"count": 0.3},
        ]
    }
    after = {
        "per_prompt_skill": [
            {"object": 0.6, "position": 0.3},
            {"object": 0.7},
            {"object": 0.8, "position": 0.6},
            {"count": 0.5},
        ]
    }
    d = paired_skill_differences(before, after)
    assert set(d) == {"object", "position"}  # count is in one prompt only: no standard error
    assert d["object"]["prompts"] == 3 and d["object"]["delta"] == pytest.approx(0.0, abs=1e-12)
    # object diffs .1 0 -.1: sd .1, se .1/sqrt(3); position diffs .1 .2: mean .15, sd sqrt(.005), se .05
    assert d["object"]["se"] == pytest.approx(0.1 / math.sqrt(3))
    assert d["position"]["delta"] == pytest.approx(0.15) and d["position"]["se"] == pytest.approx(0.05)
    assert d["position"]["z"] == pytest.approx(3.0)
    with pytest.raises(ValueError, match="per_prompt_skill"):
        paired_skill_differences({"per_prompt_gm": [0.1, 0.2]}, after)
    with pytest.raises(ValueError, match="same prompts"):
        paired_skill_differences(before, {"per_prompt_skill": after["per_prompt_skill"][:3]})


def test_report_shows_the_paired_difference(tmp_path):
    from cast_core.report import write_report

    for name, gm in (("base", 0.30), ("trained", 0.27)):
        (tmp_path / f"eval-{name}.json").write_text(json.dumps({"gm": gm, "am": 0.5, "suite": "s"}))
    (tmp_path / "comparison.json").write_text(
        json.dumps(
            {
                "gm_difference": {"delta": -0.03, "se": 0.02, "prompts": 96, "z": -1.5},
                "skill_differences": {"position": {"delta": 0.057, "se": 0.006, "prompts": 72, "z": 9.5}},
            }
        )
    )
    html = write_report(tmp_path).read_text()
    assert "-0.030 ± 0.020" in html and "not distinguishable" in html
    assert "<td>position</td><td>+0.057 ± 0.006</td><td>72</td>" in html and "better than the base" in html


def test_paired_verdict_boundaries():
    from cast_core.evaluation import paired_verdict

    assert paired_verdict(2.0).startswith("better") and paired_verdict(-2.0).startswith("worse")
    assert paired_verdict(1.99).startswith("not distinguishable") and paired_verdict(-1.99).startswith("not")


def test_pool_evaluations_averages_equal_size_seeds_exactly():
    from cast_core.comparison import pool_evaluations

    def result(gm, am, pg, ps):
        return {
            "gm": gm,
            "am": am,
            "by_atom_count": {"2": gm},
            "by_skill": {"object": am},
            "images": 4,
            "prompts": 2,
            "per_prompt_gm": pg,
            "per_prompt_skill": ps,
        }

    a = result(0.5, 0.75, [0.25, 0.75], [{"object": 0.5}, {"object": 1.0}])
    b = result(0.25, 0.5, [0.0, 0.5], [{"object": 0.25}, {"object": 0.75}])
    pooled = pool_evaluations([a, b])
    assert pooled == {
        "gm": 0.375,
        "am": 0.625,
        "by_atom_count": {"2": 0.375},
        "by_skill": {"object": 0.625},
        "images": 8,
        "prompts": 2,
        "per_prompt_gm": [0.125, 0.625],
        "per_prompt_skill": [{"object": 0.375}, {"object": 0.875}],
    }
    with pytest.raises(ValueError, match="different sizes"):
        pool_evaluations([a, {**b, "images": 6}])
