"""`cast decompose` and `cast score` against test components (the real ones are plugins)."""

import json
import re

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

from cast_core import hookimpl
from cast_core.aggregate import arithmetic_mean, geometric_mean
from cast_core.cli import cli
from cast_core.testing import ConstantScorer
from helpers import WordsDecomposer


class Components:
    @hookimpl
    def register_atom_decomposers(self, register):
        register("words", WordsDecomposer)

    @hookimpl
    def register_atom_scorers(self, register):
        register("quarter", lambda: ConstantScorer(0.25))


@pytest.fixture
def components(add_plugin):
    add_plugin(Components())


def test_decompose_json_lines(components, tmp_path):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("# comment\ncat dog\n\nbird\n")
    out = CliRunner().invoke(cli, ["decompose", "fish", "--file", str(prompts), "-d", "words", "--json"])
    assert out.exit_code == 0, out.output
    graphs = [json.loads(line) for line in out.output.splitlines()]
    assert [g["prompt"] for g in graphs] == ["fish", "cat dog", "bird"]
    assert [e["noun"] for e in graphs[1]["entities"]] == ["cat", "dog"]


def test_decompose_reports_failures_with_their_line(add_plugin, tmp_path):
    class Picky:
        @hookimpl
        def register_atom_decomposers(self, register):
            register("picky", WordsDecomposer)

    add_plugin(Picky())
    prompts = tmp_path / "p.txt"
    prompts.write_text("ok\n\n   \n")  # one prompt, then a prompt that is all spaces is skipped
    empty = tmp_path / "empty.txt"
    empty.write_text("# nothing\n")
    out = CliRunner().invoke(cli, ["decompose", "--file", str(empty), "-d", "picky"])
    assert out.exit_code == 1 and f"prompt file {empty} has no prompts" in out.output
    out = CliRunner().invoke(cli, ["decompose", "--file", str(tmp_path / "nope.txt"), "-d", "picky"])
    assert out.exit_code == 1 and "does not exist" in out.output


def test_decompose_unknown_decomposer_lists_choices(only_builtins, components):
    out = CliRunner().invoke(cli, ["decompose", "a cat", "-d", "wrds"])
    assert (
        out.exit_code == 1
        and "Unknown decomposer 'wrds'. Choose one of: fake, words. Did you mean 'words'?" in out.output
    )


def test_score_json_and_heatmaps(components, tmp_path):
    img = tmp_path / "red.png"
    Image.fromarray(np.full((8, 8, 3), (255, 0, 0), dtype=np.uint8)).save(img)
    out = CliRunner().invoke(
        cli,
        [
            "score",
            str(img),
            "--prompt",
            "cat dog",
            "-s",
            "quarter",
            "-d",
            "words",
            "--json",
            "--heatmaps",
            str(tmp_path / "maps"),
        ],
    )
    assert out.exit_code == 0, out.output
    record = json.loads(out.output)
    assert record["prompt"] == "cat dog" and len(record["atoms"]) == 4
    assert {a["score"] for a in record["atoms"]} == {0.25}
    assert record["am"] == 0.25 and record["gm"] == 0.25
    grid = Image.open(record["heatmaps"])
    assert grid.size == (5 * 128, 128 + 28)  # the image + one tile per atom, 16x upscaled, captions


def test_score_human_output_and_bad_image(components, tmp_path):
    bad = tmp_path / "notes.png"
    bad.write_text("not an image")
    out = CliRunner().invoke(cli, ["score", str(bad), "-p", "cat", "-s", "quarter", "-d", "words"])
    assert out.exit_code == 1 and "is not an image Pillow can read" in out.output
    img = tmp_path / "ok.png"
    Image.fromarray(np.zeros((4, 4, 3), dtype=np.uint8)).save(img)
    out = CliRunner().invoke(cli, ["score", str(img), "-p", "cat", "-s", "quarter", "-d", "words"])
    assert out.exit_code == 0 and "GM 0.250" in out.output and "FAIL 0.250" in out.output


def test_means_follow_soft_tifa():
    assert arithmetic_mean([1.0, 0.5]) == 0.75
    assert geometric_mean([1.0, 0.25]) == pytest.approx(0.5)
    assert geometric_mean([0.9, 0.0, 1.0]) == 0.0
    with pytest.raises(ValueError):
        geometric_mean([])


def test_eval_baseline_pairs_and_refuses_mismatches(tmp_path):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("a red circle\ntwo blue squares\na green triangle\n")
    common = [
        "eval",
        "--policy",
        "fake",
        "--prompts",
        str(prompts),
        "--scorer",
        "left-brightness",
        "--decomposer",
        "fake",
        "-k",
        "2",
        "--steps",
        "3",
    ]
    base = tmp_path / "base.json"
    first = CliRunner().invoke(cli, [*common, "--out", str(base)])
    assert first.exit_code == 0, first.output
    again = CliRunner().invoke(cli, [*common, "--baseline", str(base), "--json"])
    assert again.exit_code == 0, again.output
    vs = json.loads(again.stdout)["vs_baseline"]
    assert "sampling and scoring" in again.stderr  # the progress bar, off stdout so --json parses
    # the same policy, prompts and noise: every paired difference is exactly zero
    assert vs["gm_difference"]["delta"] == 0.0 and vs["gm_difference"]["z"] == 0.0
    assert set(vs["skill_differences"]) == set(json.loads(base.read_text())["by_skill"])
    assert all(d["delta"] == 0.0 for d in vs["skill_differences"].values())
    text = CliRunner().invoke(cli, [*common, "--baseline", str(base)]).output
    assert "GM +0.000 ± 0.000 over 3 prompts: not distinguishable" in text
    other_seed = CliRunner().invoke(cli, [*common, "--seed", "1", "--baseline", str(base)])
    assert other_seed.exit_code == 2 and "seed 0 there, 1 here" in other_seed.output
    other = tmp_path / "other.txt"
    other.write_text("a red circle\ntwo blue squares\na green square\n")
    other_prompts = CliRunner().invoke(cli, [*common[:4], str(other), *common[5:], "--baseline", str(base)])
    assert other_prompts.exit_code == 2 and "other prompts" in other_prompts.output
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"gm": 0.3, "per_prompt_gm": [0.3, 0.3, 0.3]}))
    stale = CliRunner().invoke(cli, [*common, "--baseline", str(old)])
    assert stale.exit_code == 2 and "per_prompt_skill" in stale.output and str(old) in stale.output


def test_compare_over_seeds_matches_per_seed_evals_and_summarises_over_seeds(tmp_path):
    import statistics

    import torch

    from cast_core.comparison import LAYOUT
    from cast_core.testing.fakes import FakePolicy

    prompts = tmp_path / "prompts.txt"
    prompts.write_text("a red circle\ntwo blue squares\na green triangle\n")
    trained = FakePolicy()
    with torch.no_grad():
        trained.position_delta.add_(
            0.3 * torch.randn(trained.position_delta.shape, generator=torch.Generator().manual_seed(5))
        )
    adapter = tmp_path / "adapter"
    trained.save_adapter(adapter)
    common = [
        "--policy",
        "fake",
        "--prompts",
        str(prompts),
        "--scorer",
        "left-brightness",
        "--decomposer",
        "fake",
        "-k",
        "2",
        "--steps",
        "3",
    ]
    out = tmp_path / "compare.json"
    run = CliRunner().invoke(
        cli, ["compare", *common, "--adapter", str(adapter), "--seeds", "0,1,2", "--json", "--out", str(out)]
    )
    assert run.exit_code == 0, run.output
    result = json.loads(run.stdout)
    assert json.loads(out.read_text()) == result
    # the comparison layout of run_dir.py (compare_evaluations), and cast compare's own keys beside it
    assert result["layout"] == LAYOUT and set(result) == {
        "layout",
        "seeds",
        "prompts",
        "images_per_prompt",
        "per_seed",
        "pooled",
        "over_seeds",
        "policy",
        "adapter",
        "base_adapter",
        "suite",
        "steps",
        "prompts_digest",
    }
    assert (result["seeds"], result["prompts"], result["images_per_prompt"]) == ([0, 1, 2], 3, 2)
    assert set(result["pooled"]) == {"base", "trained", "gm_difference", "skill_differences"}
    assert [r["seed"] for r in result["per_seed"]] == [0, 1, 2]
    # each seed's row is exactly what `cast eval --baseline` pairs at that seed
    for row in result["per_seed"][:2]:
        base = tmp_path / f"base-{row['seed']}.json"
        seed = ["--seed", str(row["seed"])]
        assert CliRunner().invoke(cli, ["eval", *common, *seed, "--out", str(base)]).exit_code == 0
        ev = CliRunner().invoke(
            cli, ["eval", *common, *seed, "--adapter", str(adapter), "--baseline", str(base), "--json"]
        )
        vs = json.loads(ev.stdout)["vs_baseline"]
        assert row["gm_difference"] == vs["gm_difference"] and row["skill_differences"] == vs["skill_differences"]
        trained_eval = json.loads(ev.stdout)
        assert row["trained"] == {k: trained_eval[k] for k in ("gm", "am", "by_skill")}
    deltas = [r["gm_difference"]["delta"] for r in result["per_seed"]]
    assert len(set(deltas)) == 3  # the adapter changes the images, differently per seed
    summary = result["over_seeds"]["gm"]
    assert summary["delta"] == pytest.approx(statistics.mean(deltas), abs=1e-12)
    assert summary["se"] == pytest.approx(statistics.stdev(deltas) / 3**0.5, abs=1e-12)
    assert summary["n"] == 3 and summary["z"] == pytest.approx(summary["delta"] / summary["se"])
    text = CliRunner().invoke(cli, ["compare", *common, "--adapter", str(adapter), "--seeds", "0,1,2"]).output
    assert "mean over 3 seeds" in text and f"{summary['delta']:+.3f} ± {summary['se']:.3f} (s.e. over seeds)" in text
    # the adapter against itself: every difference is exactly zero
    same = CliRunner().invoke(
        cli, ["compare", *common, "--adapter", str(adapter), "--base-adapter", str(adapter), "--seeds", "3,4", "--json"]
    )
    assert same.exit_code == 0, same.output
    assert json.loads(same.stdout)["over_seeds"]["gm"] == {"delta": 0.0, "se": 0.0, "n": 2, "z": 0.0}
    one = CliRunner().invoke(cli, ["compare", *common, "--adapter", str(adapter), "--seeds", "7"])
    assert one.exit_code == 2 and "at least two distinct seeds" in one.output


@pytest.mark.parametrize(
    "value, seeds", [("0,1,2", [0, 1, 2]), ("0-3,777", [0, 1, 2, 3, 777]), (" 5 , 2-3 ", [5, 2, 3])]
)
def test_seed_lists_take_ranges(value, seeds):
    from cast_core.seeding import parse_seed_list

    assert parse_seed_list(value, "--seeds") == seeds


@pytest.mark.parametrize(
    "value, message",
    [
        ("0,x", "'x' is not a seed or a range"),
        ("3-1", "runs backwards; write 1-3"),
        ("0-2,1", "distinct seeds"),
        ("-1", "'-1' is not a seed"),
    ],
)
def test_bad_seed_lists_say_what_is_wrong(value, message):
    import click

    from cast_core.seeding import parse_seed_list

    with pytest.raises(click.BadParameter, match=re.escape(message)):
        parse_seed_list(value, "--seeds")


@pytest.mark.parametrize("command", ["eval", "compare", "sample"])
def test_a_directory_without_an_adapter_is_a_usage_error(tmp_path, command):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("a red circle\na blue square\n")
    args = {
        "eval": ["--prompts", str(prompts), "--scorer", "left-brightness", "--decomposer", "fake"],
        "compare": ["--prompts", str(prompts), "--scorer", "left-brightness", "--decomposer", "fake"],
        "sample": ["--prompt", "a red circle", "--out", str(tmp_path / "grid.png")],
    }[command]
    out = CliRunner().invoke(cli, [command, "--policy", "fake", "--adapter", str(tmp_path), *args])
    assert out.exit_code == 2, out.output
    assert "Invalid value for --adapter" in out.output and "checkpoints/step-N/adapter" in out.output
