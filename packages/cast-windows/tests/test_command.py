"""``cast window`` end to end on the fake policy, through the real CLI group."""

import json

import pytest
from click.testing import CliRunner
from PIL import Image

from cast_core.cli import cli, install_plugin_commands


@pytest.fixture(scope="module")
def cast():
    install_plugin_commands(cli)
    runner = CliRunner()
    return lambda *args: runner.invoke(cli, list(args), catch_exceptions=False)


def test_window_json_and_png(cast, tmp_path):
    out = cast(
        "window",
        "--policy",
        "fake",
        "--embedder",
        "pixels",
        "--json",
        "--out",
        str(tmp_path / "w"),
        "--cache-dir",
        str(tmp_path / "cache"),
        "--seeds",
        "0",
    )
    assert out.exit_code == 0, out.output
    printed = json.loads(out.stdout)
    written = json.loads((tmp_path / "w" / "window.json").read_text())
    assert printed == written
    win, d = written["window"], written["diagnostics"]
    assert win["start"] == 0 and win["size"] == written["formation_step"] + 1 == d["knee_step"] + 1
    assert win["steps"] == list(range(win["start"], win["start"] + win["size"]))
    assert written["num_steps"] == 10 and len(d["curve_mean"]) == 10 and len(d["curvature"]) == 10
    assert written["prompts_source"] == "cast-windows' default prompts" and d["samples"] == 8
    with Image.open(tmp_path / "w" / "window.png") as png:
        assert png.format == "PNG" and png.width >= 600 and png.height >= 400


def test_summary_prompts_file_and_cache(cast, tmp_path):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("a red circle\ntwo blue squares\n")
    args = [
        "window",
        "--policy",
        "fake",
        "--prompts",
        str(prompts),
        "--steps",
        "6",
        "--window-size",
        "2",
        "--out",
        str(tmp_path / "w"),
        "--cache-dir",
        str(tmp_path / "cache"),
    ]
    first = cast(*args)
    assert first.exit_code == 0, first.output
    assert (
        "window: steps" in first.output and "size 2) of 6" in first.output and "formation point: step" in first.output
    )
    assert "(cached)" not in first.output and "(cached)" in cast(*args).output
    assert json.loads((tmp_path / "w" / "window.json").read_text())["diagnostics"]["calibration_prompts"] == [
        "a red circle",
        "two blue squares",
    ]


def test_suite_as_module_callable(cast, tmp_path):
    out = cast(
        "window",
        "--policy",
        "fake",
        "--suite",
        "cast_windows.commands:no_such_callable",
        "--steps",
        "4",
        "--out",
        str(tmp_path),
        "--no-cache",
        "--json",
    )
    assert out.exit_code == 1 and "cannot load" in out.output and "Traceback" not in out.output
    out = cast(
        "window",
        "--policy",
        "fake",
        "--suite",
        "tiny_clip:suite_for_tests",
        "--steps",
        "4",
        "--out",
        str(tmp_path),
        "--no-cache",
        "--json",
    )
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout)["prompts_source"] == "suite tiny_clip:suite_for_tests"


def test_unknown_suite_and_conflicting_inputs_are_clear_errors(cast, tmp_path):
    out = cast("window", "--policy", "fake", "--suite", "no-such-suite", "--out", str(tmp_path), "--no-cache")
    assert out.exit_code != 0 and "no-such-suite" in out.output and "Traceback" not in out.output
    prompts = tmp_path / "p.txt"
    prompts.write_text("a red circle\n")
    out = cast("window", "--policy", "fake", "--suite", "x", "--prompts", str(prompts), "--out", str(tmp_path))
    assert out.exit_code == 2 and "not both" in out.output


def test_embedder_options_are_passed_through(cast, tmp_path):
    out = cast(
        "window",
        "--policy",
        "fake",
        "--embedder-opt",
        "size=4",
        "--embedder-opt",
        "center=false",
        "--steps",
        "4",
        "--out",
        str(tmp_path),
        "--no-cache",
        "--json",
    )
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout)["diagnostics"]["embedder"] == 'pixels:{"center": false, "size": 4}'
    bad = cast("window", "--policy", "fake", "--embedder-opt", "size", "--out", str(tmp_path))
    assert bad.exit_code == 2 and "KEY=VALUE" in bad.output


def test_a_flat_curve_is_a_warning_not_a_crash(cast, tmp_path, monkeypatch):
    import torch

    from cast_windows.embedders import PixelsEmbedder

    monkeypatch.setattr(PixelsEmbedder, "embed", lambda self, images: torch.ones(images.shape[0], 4))
    out = cast("window", "--policy", "fake", "--steps", "5", "--out", str(tmp_path), "--no-cache", "--json")
    assert out.exit_code == 0, out.output
    assert "warning: no knee in the similarity curve: the curve is flat" in out.stderr
    record = json.loads(out.stdout)
    assert record["fallback"] is True and record["formation_step"] == 2 and record["window"]["size"] == 3
    assert (tmp_path / "window.png").is_file()


def test_truth_scorer_adds_the_judges_formation_step(cast, tmp_path):
    out = cast(
        "window",
        "--policy",
        "fake",
        "--steps",
        "5",
        "--seeds",
        "0",
        "--num-prompts",
        "3",
        "--truth-scorer",
        "left-brightness",
        "--truth-decomposer",
        "fake",
        "--out",
        str(tmp_path),
        "--no-cache",
        "--json",
    )
    assert out.exit_code == 0, out.output
    truth = json.loads(out.stdout)["truth"]
    assert len(truth["agreement"]) == 5 and truth["agreement"][-1] == 1.0 and truth["samples"] == 3
    assert truth["step"] is not None and truth["scorer"] == "left-brightness"
    assert isinstance(truth["within_one_step"], bool)
    summary = cast(
        "window",
        "--policy",
        "fake",
        "--steps",
        "5",
        "--seeds",
        "0",
        "--num-prompts",
        "3",
        "--truth-scorer",
        "left-brightness",
        "--truth-decomposer",
        "fake",
        "--out",
        str(tmp_path),
        "--no-cache",
    )
    assert "left-brightness formation step:" in summary.stdout


def test_commitment_adds_the_causal_step_and_needs_a_judge(cast, tmp_path):
    out = cast(
        "window",
        "--policy",
        "fake",
        "--steps",
        "4",
        "--seeds",
        "0",
        "--num-prompts",
        "2",
        "--truth-scorer",
        "left-brightness",
        "--truth-decomposer",
        "fake",
        "--commitment",
        "--out",
        str(tmp_path),
        "--no-cache",
        "--json",
    )
    assert out.exit_code == 0, out.output
    c = json.loads(out.stdout)["commitment"]
    assert len(c["unchanged"]) == 4 and c["samples"] == 2 and c["eta"] == 0.7
    assert isinstance(c["within_one_step"], bool)
    bad = cast("window", "--policy", "fake", "--steps", "4", "--commitment", "--out", str(tmp_path), "--no-cache")
    assert bad.exit_code != 0 and "--commitment needs --truth-scorer" in bad.output


def test_the_policy_chooses_the_default_embedder_and_rule(cast, tmp_path, monkeypatch):
    from cast_core.testing.fakes import FakePolicy

    monkeypatch.setattr(
        FakePolicy, "window_defaults", {"embedder": "pixels", "method": "settle", "level": 0.5}, raising=False
    )
    common = ["--policy", "fake", "--json", "--cache-dir", str(tmp_path / "cache"), "--seeds", "0"]
    out = cast("window", *common, "--out", str(tmp_path / "a"))
    assert out.exit_code == 0, out.output
    d = json.loads(out.stdout)["diagnostics"]
    assert d["knee_method"] == "settle" and "level=0.5" in d["reason"] and d["embedder"] == "pixels"
    normalised = d["normalised"]
    assert all(v >= 0.5 - 1e-9 for v in normalised[d["knee_step"] :]) and normalised[d["knee_step"] - 1] < 0.5
    # explicit options win over the policy's defaults
    out = cast("window", *common, "--method", "kneedle", "--out", str(tmp_path / "b"))
    assert json.loads(out.stdout)["diagnostics"]["knee_method"] == "kneedle"
