"""compare_evaluations(): the one layout of base vs trained over evaluation seeds (cast compare, the
shapes demo's comparison.json, the shapes bench's result.json), pinned against a hand computation,
and the report that reads it (and the demo's comparison.json from before the layout had a name)."""

import json

import pytest

from cast_core.comparison import LAYOUT, compare_evaluations
from cast_core.report import write_report


def result(per_prompt_gm, per_prompt_object):
    """An evaluate() result of two prompts x two images, one skill, numbers exact in binary."""
    gm, am = sum(per_prompt_gm) / 2, sum(per_prompt_object) / 2
    return {
        "gm": gm,
        "am": am,
        "by_atom_count": {"1": gm},
        "by_skill": {"object": am},
        "images": 4,
        "prompts": 2,
        "per_prompt_gm": per_prompt_gm,
        "per_prompt_skill": [{"object": x} for x in per_prompt_object],
    }


BASE = [result([0.25, 0.5], [0.5, 0.75]), result([0.5, 0.5], [0.5, 0.5])]
TRAINED = [result([0.5, 0.5], [0.75, 0.75]), result([0.5, 1.0], [1.0, 0.5])]


def stats(delta, se, prompts=None, n=None):
    return {"delta": delta, "se": se, "z": delta / se, **({"prompts": prompts} if prompts else {"n": n})}


def test_the_layout_against_a_hand_computation():
    out = compare_evaluations([0, 7], BASE, TRAINED)
    # seed 0: GM differences (.25, 0) -> mean .125, sd .25/√2, s.e. .125; object the same
    # seed 7: GM (0, .5) -> .25 ± .25; object (.5, 0) -> .25 ± .25
    # pooled: base GM per prompt (.375, .5), trained (.5, .75) -> (.125, .25): .1875 ± .0625;
    #         object base (.5, .625), trained (.875, .625) -> (.375, 0): .1875 ± .1875
    # over seeds: GM (.125, .25) -> .1875 ± .0625, and so is object
    assert out == {
        "layout": "cast-comparison/1",
        "seeds": [0, 7],
        "prompts": 2,
        "images_per_prompt": 2,
        "per_seed": [
            {
                "seed": 0,
                "base": {"gm": 0.375, "am": 0.625, "by_skill": {"object": 0.625}},
                "trained": {"gm": 0.5, "am": 0.75, "by_skill": {"object": 0.75}},
                "gm_difference": stats(0.125, 0.125, prompts=2),
                "skill_differences": {"object": stats(0.125, 0.125, prompts=2)},
            },
            {
                "seed": 7,
                "base": {"gm": 0.5, "am": 0.5, "by_skill": {"object": 0.5}},
                "trained": {"gm": 0.75, "am": 0.75, "by_skill": {"object": 0.75}},
                "gm_difference": stats(0.25, 0.25, prompts=2),
                "skill_differences": {"object": stats(0.25, 0.25, prompts=2)},
            },
        ],
        "pooled": {
            "base": {"gm": 0.4375, "am": 0.5625, "by_skill": {"object": 0.5625}},
            "trained": {"gm": 0.625, "am": 0.75, "by_skill": {"object": 0.75}},
            "gm_difference": stats(0.1875, 0.0625, prompts=2),
            "skill_differences": {"object": stats(0.1875, 0.1875, prompts=2)},
        },
        "over_seeds": {
            "base_gm": 0.4375,
            "trained_gm": 0.625,
            "gm": stats(0.1875, 0.0625, n=2),
            "skills": {"object": stats(0.1875, 0.0625, n=2)},
        },
    }
    assert out["layout"] == LAYOUT
    json.dumps(out, allow_nan=False)  # a file, not only a dict


def test_one_seed_has_no_spread_over_seeds_and_bad_inputs_are_refused():
    one = compare_evaluations([3], BASE[:1], TRAINED[:1])
    assert one["over_seeds"] is None and one["seeds"] == [3]
    assert one["pooled"] == {k: v for k, v in one["per_seed"][0].items() if k != "seed"}
    with pytest.raises(ValueError, match="distinct"):
        compare_evaluations([1, 1], BASE, TRAINED)
    with pytest.raises(ValueError, match="one evaluation per seed"):
        compare_evaluations([0, 1], BASE, TRAINED[:1])


def _run_dir(path, comparison):
    path.mkdir()
    for name, evals in (("base", BASE), ("trained", TRAINED)):
        (path / f"eval-{name}.json").write_text(json.dumps({**evals[0], "suite": "s"}))
    (path / "comparison.json").write_text(json.dumps(comparison))
    return path


def test_report_renders_the_layout_and_the_demo_file_from_before_it(tmp_path):
    new = compare_evaluations([0, 7], BASE, TRAINED) | {"suite": "s"}
    html = write_report(_run_dir(tmp_path / "new", new)).read_text()
    assert (
        "<b>+0.188 ± 0.062</b> (standard error over 2 prompts, evaluation seeds 0, 7 pooled, z = 3.0): "
        "better than the base"
    ) in html
    assert "Per evaluation seed: 0: +0.125 ± 0.125, 7: +0.250 ± 0.250" in html
    assert "Mean over the 2 seeds: +0.188 ± 0.062 (standard error over seeds, z = 3.0): better" in html
    assert "<td>object</td><td>+0.188 ± 0.188</td><td>2</td><td>1.0</td>" in html
    # what `cast shapes demo` wrote before the layout: the same numbers give the same report
    old = {
        "base": "eval-base.json",
        "trained": "eval-trained.json",
        "seeds": [0, 7],
        "gm_difference": new["pooled"]["gm_difference"],
        "skill_differences": new["pooled"]["skill_differences"],
        "per_seed": [{"seed": r["seed"], "gm_difference": r["gm_difference"]} for r in new["per_seed"]],
        "over_seeds": new["over_seeds"]["gm"],
    }
    assert write_report(_run_dir(tmp_path / "old", old)).read_text().replace("cast run: old", "cast run: new") == html


def test_report_says_when_it_cannot_read_a_comparison(tmp_path):
    heard = []
    future = compare_evaluations([0, 7], BASE, TRAINED) | {"layout": "cast-comparison/2"}
    html = write_report(_run_dir(tmp_path / "future", future), warn=heard.append).read_text()
    assert (
        "No paired difference shown: comparison.json has layout &#x27;cast-comparison/2&#x27;, which this "
        "version of cast cannot read" in html
    )
    assert heard == ["comparison.json has layout 'cast-comparison/2', which this version of cast cannot read"]
    assert "Paired GM difference" not in html and "Evaluation on s" in html
