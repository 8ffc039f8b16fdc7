"""``--set policy_kwargs.path=DIR``: a dotted key sets one entry of a dict option and keeps the
entries the recipe gave it (the backbone recipes set LoRA rank, devices and sizes there)."""

import pytest
import torch

from cast_core.config import build_config
from cast_core.config import ConfigError, TrainConfig, parse_set


def test_dotted_keys_merge_into_the_recipe_dict():
    cfg = build_config(
        recipe="cast",
        components={"policy": "fake", "scorer": "constant"},
        sets=[
            "policy_kwargs={lora = 4, size = {h = 1, w = 2}}",
            "policy_kwargs.path=/models/x",
            "policy_kwargs.size.w=3",
            'window_kwargs.embedder="pixels"',
        ],
    )
    assert cfg.policy_kwargs == {"lora": 4, "size": {"h": 1, "w": 3}, "path": "/models/x"}
    assert cfg.window_kwargs["embedder"] == "pixels"


def test_a_plain_key_still_replaces_the_dict():
    cfg = (
        TrainConfig()
        .update({"policy_kwargs": {"a": 1}}, "recipe")
        .update(parse_set(["policy_kwargs={b = 2}"]), "--set")
    )
    assert cfg.policy_kwargs == {"b": 2}


def test_the_recipe_dict_is_not_mutated():
    recipe = {"a": {"b": 1}}
    cfg = TrainConfig().update({"policy_kwargs": recipe}, "recipe")
    cfg.update({"policy_kwargs.a.c": 2}, "--set")
    assert recipe == {"a": {"b": 1}} and cfg.policy_kwargs == {"a": {"b": 1, "c": 2}}


@pytest.mark.parametrize(
    "item,message",
    [
        ("lr.x=1", "config key 'lr' is not a table"),
        ("policy_kwargs..a=1", "has an empty part"),
        ("policy_kwargs.a.b=1", r"policy_kwargs.a is 1, not a table"),
        ("polcy_kwargs.a=1", "unknown config key 'polcy_kwargs.a'"),
    ],
)
def test_bad_dotted_keys_say_what_is_wrong(item, message):
    cfg = TrainConfig().update({"policy_kwargs": {"a": 1}}, "recipe")
    with pytest.raises(ConfigError, match=message):
        cfg.update(parse_set([item]), "--set")


def test_window_keys_a_selector_would_ignore_are_refused():
    """With a window selector (the recipes' default) window_start / window_size do nothing: say so."""
    with pytest.raises(
        ConfigError,
        match="window_size and window_start would be ignored: this run.s window comes "
        "from the 'random' selector \\(recipe 'flow-grpo'\\)",
    ):
        build_config(
            recipe="flow-grpo",
            components={"policy": "fake", "scorer": "constant"},
            sets=["window_start=1", "window_size=3"],
        )
    cfg = build_config(
        recipe="flow-grpo",
        components={"policy": "fake", "scorer": "constant"},
        sets=["window=none", "window_start=1", "window_size=3"],
    )
    assert (cfg.window, cfg.window_start, cfg.window_size) == (None, 1, 3)  # without the selector they apply


def test_a_huge_seed_range_is_refused_before_it_is_built():
    import click

    from cast_core.seeding import MAX_SEEDS, parse_seed_list

    assert parse_seed_list("0-4,777", "--seeds") == [0, 1, 2, 3, 4, 777]
    with pytest.raises(click.BadParameter, match=f"more than {MAX_SEEDS} seeds"):
        parse_seed_list("0-1000000000", "--seeds")


class _Scores:
    """A scorer returning what a test needs."""

    def __init__(self, make):
        self.make = make

    def score(self, images, graphs, heatmaps=False):
        from cast_core.types import AtomScores

        h, w = images.shape[-2:]
        return AtomScores(
            graphs=list(graphs),
            scores=[self.make(len(g.atoms)) for g in graphs],
            heatmaps=[torch.ones(len(g.atoms), h, w) for g in graphs] if heatmaps else None,
        )


@pytest.mark.parametrize(
    "make,message",
    [
        (lambda k: torch.full((k,), 16.5), r"scores outside \[0, 1\] \(from 16.5 to 16.5\)"),
        (lambda k: torch.full((k,), -0.2), r"scores outside \[0, 1\]"),
        (lambda k: torch.zeros(k + 1), r"scores shaped \(3,\) for 2 atoms"),
    ],
)
def test_a_scorer_breaking_its_contract_stops_the_run_by_name(tmp_path, monkeypatch, make, message):
    import cast_core.registry as registry_module
    from cast_core.errors import ScorerContractError
    from cast_core.trainer import Trainer

    monkeypatch.setattr(registry_module, "get_atom_scorer", lambda name, **kw: _Scores(make))
    cfg = TrainConfig(
        policy="fake",
        scorer="x",
        decomposer="fake",
        prompts=["a red circle"],
        group_size=2,
        prompts_per_step=1,
        num_steps=4,
        window_start=0,
        window_size=2,
        steps=1,
        sample_every=0,
    ).validate()
    with pytest.raises(ScorerContractError, match="scorer _Scores returned " + message):
        Trainer(cfg, tmp_path / "r", log=lambda m: None).run()


def test_a_run_whose_every_update_was_skipped_exits_non_zero(tmp_path, monkeypatch):
    from click.testing import CliRunner

    import cast_core.registry as registry_module
    from cast_core.cli import cli

    monkeypatch.setattr(
        registry_module, "get_atom_scorer", lambda name, **kw: _Scores(lambda k: torch.full((k,), float("nan")))
    )
    out = CliRunner().invoke(
        cli,
        [
            "train",
            "--plugin",
            "cast",
            "--window",
            "none",
            "--policy",
            "fake",
            "--scorer",
            "constant",
            "--decomposer",
            "fake",
            "--set",
            'prompts=["a red circle"]',
            "--set",
            "group_size=2",
            "--set",
            "prompts_per_step=1",
            "--set",
            "num_steps=4",
            "--steps",
            "2",
            "--set",
            "sample_every=0",
            "--out",
            str(tmp_path / "r"),
        ],
    )
    assert out.exit_code == 1 and "every one of the 2 update(s) was skipped" in out.output


def test_resume_changes_only_how_long_and_how_often(tmp_path):
    from click.testing import CliRunner

    from cast_core.cli import cli

    run = tmp_path / "r"
    base = [
        "train",
        "--plugin",
        "cast",
        "--window",
        "none",
        "--policy",
        "fake",
        "--scorer",
        "left-brightness",
        "--decomposer",
        "fake",
        "--set",
        'prompts=["a red circle"]',
        "--set",
        "group_size=2",
        "--set",
        "prompts_per_step=1",
        "--set",
        "num_steps=4",
        "--set",
        "sample_every=0",
        "--set",
        "checkpoint_every=1",
    ]
    assert CliRunner().invoke(cli, [*base, "--steps", "2", "--out", str(run)]).exit_code == 0
    config = (run / "config.toml").read_text()
    for sets, message in (
        (["--set", "seed=5"], "--resume cannot change seed"),
        (["--set", "policy_kwargs.seed=1"], "--resume cannot change policy_kwargs.seed"),
        (["--steps", "1"], "is already at step 2; give --steps above 2"),
    ):
        out = CliRunner().invoke(cli, ["train", "--resume", str(run), *sets])
        assert out.exit_code == 2 and message in out.output, out.output
    same = CliRunner().invoke(cli, ["train", "--resume", str(run)])  # finished: a no-op, said so, exit 0
    assert same.exit_code == 0 and "is complete at step 2; nothing to do" in same.output
    assert (run / "config.toml").read_text() == config  # nothing was rewritten
    out = CliRunner().invoke(cli, ["train", "--resume", str(run), "--steps", "3", "--set", "log_every=1"])
    assert out.exit_code == 0, out.output


def test_a_typo_in_a_factory_option_fails_before_anything_is_built(tmp_path):
    from cast_core.trainer import Trainer

    cfg = TrainConfig(
        policy="fake",
        scorer="constant",
        decomposer="fake",
        prompts=["a red circle"],
        group_size=2,
        prompts_per_step=1,
        num_steps=4,
        window_start=0,
        window_size=2,
        steps=1,
        policy_kwargs={"sed": 1},
    ).validate()
    with pytest.raises(
        ConfigError,
        match="config key 'policy_kwargs': policy 'fake' takes no argument 'sed'. Did you mean 'seed'\\? It accepts: ",
    ):
        Trainer(cfg, tmp_path / "r", log=lambda m: None)
    cfg.policy_kwargs, cfg.scorer_kwargs = {}, {"valeu": 0.3}
    with pytest.raises(
        ConfigError, match="config key 'scorer_kwargs': atom scorer 'constant' takes no argument 'valeu'"
    ):
        Trainer(cfg, tmp_path / "r2", log=lambda m: None)


def test_recipe_is_the_option_and_plugin_still_works():
    """``--recipe`` names what ``--plugin`` selected; scripts written with ``--plugin`` keep working."""
    from cast_core.commands.signal import signal_command
    from cast_core.commands.train import train_command

    for command in (train_command, signal_command):
        for flag in ("--recipe", "--plugin"):
            ctx = command.make_context(command.name, [flag, "flow-grpo"])
            assert ctx.params["recipe"] == "flow-grpo", (command.name, flag)
