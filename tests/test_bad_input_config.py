"""Bad input around configuration, component overrides, plugins and seeds: each answered by one
``Error:`` line that names the problem and the fix, no traceback, nothing changed on disk; and the
fixes those lines suggest, run to show that they work.

Most cases run in-process (click's CliRunner on ``cast_core.cli.cli``, or build_config itself);
the few that depend on the real entry point (its plugin discovery, exit codes) use ``run_cast``."""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from cast_core import hookimpl
from cast_core.cli import cli, install_plugin_commands
from cast_core.config import ConfigError, TrainConfig, build_config, load_toml
from cast_core.plugins import load_plugins, pm
from cast_core.testing.fakes import fake_run_args
from conftest import plugins_json, run_cast

#: a fake run small enough to train in about a second
TINY = dict(prompts=["a red circle", "two blue squares"], group_size=2, num_steps=4, sample_every=0)
#: the shapes recipe cut to one prompt of two images per step
SMALL_SHAPES = ["--set", "group_size=2", "--set", "prompts_per_step=1", "--set", "sample_every=0"]


def snapshot(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def one_error(output: str, pattern: str) -> str:
    """The output's only ``Error:`` line, which must match ``pattern``; no traceback anywhere."""
    assert "Traceback" not in output, output[-3000:]
    errors = [line for line in output.splitlines() if line.startswith("Error")]
    assert len(errors) == 1, output[-3000:]
    assert re.search(pattern, errors[0]), errors[0]
    assert len(errors[0]) < 600, errors[0]
    return errors[0]


def invoke(*args: str):
    result = CliRunner().invoke(cli, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return result


@pytest.fixture
def add_plugin():
    """``add_plugin(obj)`` registers an object with ``@hookimpl`` methods for one test."""
    load_plugins()
    names: list[str] = []

    def _add(plugin: object, name: str) -> None:
        pm.register(plugin, name=name)
        names.append(name)

    yield _add
    for name in names:
        with contextlib.suppress(ValueError):
            pm.unregister(name=name)


# -- 1. config files that are not UTF-8 ----------------------------------------------------------
@pytest.mark.parametrize(
    "content",
    [bytes(range(256)) * 4, "steps = 3\n".encode("utf-16"), "lr = 1e-4 # café\n".encode("latin-1")],
    ids=["binary", "utf-16", "latin-1"],
)
def test_a_config_file_that_is_not_utf8_is_one_line(tmp_path, content):
    path = tmp_path / "run.toml"
    path.write_bytes(content)
    before = snapshot(tmp_path)
    out = invoke("train", "--config", str(path), "--out", str(tmp_path / "new"))
    assert out.exit_code == 1
    one_error(out.output, r"config file .*run\.toml is not UTF-8 text .*must be a UTF-8 TOML file")
    assert snapshot(tmp_path) == before


def test_a_binary_config_toml_of_a_run_is_one_line_on_resume(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.toml").write_bytes(b"\x89\xff\x00binary" * 50)
    before = snapshot(tmp_path)
    out = run_cast("train", "--resume", str(run), "--steps", "3")
    assert out.returncode == 1, out.stderr[-2000:]
    one_error(out.stderr, r"run/config\.toml is not UTF-8 text")
    assert snapshot(tmp_path) == before


def test_a_utf8_byte_order_mark_is_accepted(tmp_path):
    path = tmp_path / "bom.toml"
    path.write_bytes("\ufeffsteps = 3\n".encode("utf-8"))
    assert load_toml(path) == {"steps": 3}


# -- 2. a component flag over a recipe's options for the component it replaces -------------------
def test_a_component_flag_drops_the_recipes_options_for_the_component_it_replaces():
    notes: list[str] = []
    cfg = build_config(components={"window": "fixed"}, log=notes.append)  # the shapes recipe: clip-curvature
    assert cfg.window == "fixed" and cfg.window_kwargs == {}
    (note,) = notes
    assert "--window fixed replaces 'clip-curvature' of recipe 'shapes'" in note and "embedder" in note
    notes.clear()
    cfg = build_config(components={"window": "fixed"}, sets=["window_kwargs.start=3"], log=notes.append)
    assert cfg.window_kwargs == {"start": 3} and "yours (start) are kept" in notes[0]
    notes.clear()
    cfg = build_config(components={"window": "clip-curvature"}, log=notes.append)  # not a replacement
    assert cfg.window_kwargs["embedder"] == "shapes-scene" and notes == []


def test_a_scorer_flag_drops_the_recipes_scorer_kwargs(add_plugin):
    class Judged:
        @hookimpl
        def register_recipes(self, register):
            from cast_core.types import Recipe

            register("judged", Recipe(scorer="constant", settings={"scorer_kwargs": {"value": 0.3}}))

    add_plugin(Judged(), "judged-recipe")
    notes: list[str] = []
    cfg = build_config(recipe="judged", components={"scorer": "left-brightness"}, log=notes.append)
    assert cfg.scorer_kwargs == {} and "scorer_kwargs (value) are dropped" in notes[0]
    assert build_config(recipe="judged", log=notes.append).scorer_kwargs == {"value": 0.3}


def test_options_the_user_gives_the_new_component_are_still_checked(tmp_path):
    out = invoke(
        "train", "--window", "fixed", "--set", 'window_kwargs.embedder="pixels"', *SMALL_SHAPES,
        "--steps", "1", "--out", str(tmp_path / "run"),
    )  # fmt: skip
    assert out.exit_code == 1
    one_error(out.output, r"window_kwargs'.*window selector 'fixed' takes no argument 'embedder'")


# -- 3. options for a class without its own __init__ --------------------------------------------
class _Bare:
    """A selector without ``__init__``: ``object.__init__`` takes no argument."""

    def select(self, policy, prompts, num_steps):
        from cast_core.types import Window

        return Window(0, 2)


class _Sized:
    def __init__(self, size: int = 2):
        self.size = size

    def select(self, policy, prompts, num_steps):
        from cast_core.types import Window

        return Window(0, self.size)


class _InheritsInit(_Sized):
    pass


@pytest.fixture
def bare_selectors(add_plugin):
    class Selectors:
        @hookimpl
        def register_window_selectors(self, register):
            register("bare", _Bare)
            register("inherits", _InheritsInit)

    add_plugin(Selectors(), "bare-selectors")


def test_options_for_a_class_without_init_are_refused_in_one_line(bare_selectors, tmp_path):
    from cast_core.registry import check_factory_kwargs, factory_takes, get_window_selector

    with pytest.raises(ConfigError, match=r"window selector 'bare' takes no argument 'size'\. It accepts: none"):
        check_factory_kwargs("window_selector", "bare", {"size": 2}, "window_kwargs")
    with pytest.raises(ConfigError, match="takes no argument 'size'"):
        get_window_selector("bare", size=2)
    assert not factory_takes("window_selector", "bare", "size")
    check_factory_kwargs("window_selector", "inherits", {"size": 3}, "window_kwargs")  # its base's __init__
    with pytest.raises(ConfigError, match="'inherits' takes no argument 'sise'.*Did you mean 'size'"):
        check_factory_kwargs("window_selector", "inherits", {"sise": 3}, "window_kwargs")
    out = invoke(
        "train", *fake_run_args(**TINY), "--window", "bare", "--set", "window_kwargs.size=2",
        "--out", str(tmp_path / "run"),
    )  # fmt: skip
    assert out.exit_code == 1
    one_error(out.output, r"window selector 'bare' takes no argument 'size'")


# -- 4. a recipe that names no scorer --------------------------------------------------------------
def test_a_recipe_without_a_scorer_makes_the_user_choose_one(tmp_path):
    out = run_cast(
        "train", "--plugin", "flow-grpo", "--policy", "shapes", "--set", "prompts=suite:train",
        "--steps", "1", *SMALL_SHAPES, "--out", str(tmp_path / "run"),
    )  # fmt: skip
    assert out.returncode == 1, out.stderr[-2000:]
    line = one_error(out.stderr, r"recipe 'flow-grpo' names no scorer.*--scorer NAME")
    assert "shapes-oracle" in line and "constant" in line  # the installed scorers are listed
    assert not (tmp_path / "run").exists()
    for recipe in ("cast", "nft", "cast-awm"):  # the other policy-less recipes
        with pytest.raises(ConfigError, match=f"recipe '{recipe}' names no scorer"):
            build_config(recipe=recipe, components={"policy": "fake"})
    signal = invoke("signal", "--recipe", "cast", "--policy", "fake")
    assert signal.exit_code == 1
    one_error(signal.output, "names no scorer")


def test_a_named_scorer_or_a_recipes_own_is_enough(tmp_path):
    assert build_config(recipe="flow-grpo", components={"scorer": "constant"}).scorer == "constant"
    assert build_config(recipe="flow-grpo", sets=['scorer="left-brightness"']).scorer == "left-brightness"
    (tmp_path / "judge.toml").write_text('scorer = "constant"\n')
    assert build_config(recipe="cast", config_file=tmp_path / "judge.toml").scorer == "constant"
    assert build_config().scorer == "shapes-oracle"  # the default shapes recipe names its own
    assert build_config(recipe="cast", require_scorer=False).recipe == "cast"  # cast plan judges nothing


# -- 5. a run's config.toml as --config ----------------------------------------------------------
def test_a_runs_config_toml_configures_a_new_run(tmp_path):
    old, new = tmp_path / "old", tmp_path / "new"
    assert invoke("train", *fake_run_args(**TINY), "--steps", "1", "--out", str(old)).exit_code == 0
    out = invoke("train", "--config", str(old / "config.toml"), "--steps", "2", "--out", str(new))
    assert out.exit_code == 0, out.output[-3000:]
    again, first = load_toml(new / "config.toml"), load_toml(old / "config.toml")
    assert again.pop("steps") == 2 and first.pop("steps") == 1
    assert again == first and "window" not in again  # unset stays unset (no selector came back)


def test_a_resolved_config_with_a_selector_loads_as_it_was(tmp_path):
    """A shapes run's config.toml names a selector and window_start / window_size both: neither is
    the user's wish, so neither is refused, and nothing of the default recipe leaks back in."""
    from cast_core.config import dump_toml

    for cfg in (build_config(), build_config(components={"window": "none"}, log=lambda m: None)):
        path = tmp_path / "config.toml"
        path.write_text(dump_toml(cfg.to_dict()))
        assert build_config(config_file=path).to_dict() == cfg.to_dict()
    with pytest.raises(ConfigError, match=r"resolved configuration .* drop --recipe"):
        build_config(recipe="cast", config_file=path)


# -- 6. the fix that the window_start error suggests -----------------------------------------------
def test_the_fixes_the_window_start_error_suggests_run(tmp_path):
    before = snapshot(tmp_path)
    out = invoke("train", "--set", "window_start=5", "--out", str(tmp_path / "refused"))
    line = one_error(out.output, r"window_start would be ignored")
    assert out.exit_code == 1 and snapshot(tmp_path) == before
    fixed = re.search(r"with (--window fixed .*?), or drop", line)[1]
    drop = re.search(r"(--set window=none)", line)[1]
    for i, suggestion in enumerate((shlex.split(fixed), [*shlex.split(drop), "--set", "window_start=5"])):
        run = tmp_path / f"run{i}"
        done = invoke("train", *suggestion, *SMALL_SHAPES, "--steps", "1", "--out", str(run))
        assert done.exit_code == 0, done.output[-3000:]
        (row,) = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        assert row["window_start"] == 5, row


def test_a_start_past_the_schedule_is_moved_inside_it_in_the_suggestion():
    with pytest.raises(ConfigError, match=r"--window fixed --set window_kwargs\.start=8 --set window_kwargs\.size=2"):
        build_config(sets=["window_start=9"])  # 10 steps: 9 + 2 would not fit


# -- 7. --window's help ------------------------------------------------------------------------------
def test_the_window_help_names_none():
    text = " ".join(invoke("train", "--help").output.split())
    assert re.search(r"--window TEXT Window selector component \(see `cast plugins`\), or none", text)


# -- 8. two plugins registering one name ---------------------------------------------------------------
TWIN = """
from cast_core import hookimpl, lazy

@hookimpl
def register_atom_scorers(register):
    register("twin", lazy("cast_core.testing.fakes:ConstantScorer"))
"""


def test_a_name_clash_is_listed_by_cast_plugins_and_refused_elsewhere(fake_install):
    fake_install("twin-a", TWIN)
    path = fake_install("twin-b", TWIN)
    data = plugins_json(extra_path=path)
    by_name = {p["name"]: p["components"] for p in data["plugins"]}
    assert by_name["twin-a"]["atom_scorer"] == ["twin"] and by_name["twin-b"]["atom_scorer"] == ["twin"]
    (failure,) = data["failed"]
    assert failure["distribution"] == "twin-b"
    assert re.search(r"scorer 'twin' is registered twice: by twin-a .* and by twin-b", failure["error"])
    table = run_cast("plugins", extra_path=path, env={"COLUMNS": "400"})
    assert table.returncode == 0, table.stderr
    assert re.search(r"failed: .*twin-b.*scorer 'twin' is registered twice: by twin-a", table.stdout)
    refused = run_cast("score", "x.png", "-p", "a red circle", "--scorer", "twin", extra_path=path)
    assert refused.returncode == 1
    one_error(refused.stderr, r"scorer 'twin' is registered twice: by twin-a .* and by twin-b")
    run = path / "run"
    train = run_cast("train", *fake_run_args(**TINY), "--scorer", "twin", "--out", str(run), extra_path=path)
    assert train.returncode == 1 and not run.exists()  # refused before the run directory is made
    one_error(train.stderr, r"scorer 'twin' is registered twice")


# -- 9. seeds: one syntax --------------------------------------------------------------------------
@pytest.mark.parametrize(
    "value, seeds", [("3", [3]), ("0,1,5", [0, 1, 5]), ("0-4", [0, 1, 2, 3, 4]), ("0-2,9", [0, 1, 2, 9])]
)
def test_every_seed_form_is_read(value, seeds):
    from cast_core.seeding import parse_seed_list

    assert parse_seed_list(value, "--seeds") == seeds


@pytest.mark.parametrize(
    "value, message",
    [
        ("-3", "'-3' is not a seed; seeds are 0 or more"),
        ("0,-1", "'-1' is not a seed"),
        (str(2**63), "is too large; seeds are below 2\\*\\*63"),
        ("1-" + "9" * 5000, "is too large"),
    ],
)
def test_negative_and_63_bit_seeds_are_refused(value, message):
    import click

    from cast_core.seeding import parse_seed_list

    with pytest.raises(click.BadParameter, match=message) as err:
        parse_seed_list(value, "--seeds")
    assert len(err.value.format_message()) < 300


@pytest.mark.parametrize("seed", ["-3", "99999999999999999999999", "0,1"])
def test_sample_refuses_a_bad_seed_before_sampling(tmp_path, seed):
    out = invoke("sample", "--policy", "fake", "-p", "a red circle", "-o", str(tmp_path / "x.png"), "--seed", seed)
    assert out.exit_code == 2
    one_error(out.output, r"Invalid value for --seed")
    assert list(tmp_path.iterdir()) == []


def test_compare_and_window_take_the_same_forms_and_say_so():
    install_plugin_commands(cli)  # `cast window` comes from cast-windows
    for command in ("compare", "window"):
        assert "0-4" in " ".join(invoke(command, "--help").output.split())
    common = ["--policy", "fake", "--adapter", ".", "--prompts", "p.txt"]
    one_error(invoke("compare", *common, "--seeds", "0,-1").output, r"Invalid value for --seeds: .*'-1' is not a seed")
    bad = invoke("window", "--policy", "fake", "--seeds", "-1")
    assert bad.exit_code == 2
    one_error(bad.output, r"Invalid value for --seeds: .*'-1' is not a seed")
    ranged = invoke("window", "--policy", "nosuch", "--seeds", "0-2")  # the seeds pass, then the policy is refused
    assert ranged.exit_code == 1
    one_error(ranged.output, r"Unknown policy 'nosuch'")


def test_the_config_seed_has_the_same_range():
    for value in ("-1", str(2**63), "9" * 5000):
        with pytest.raises(ConfigError, match="config key 'seed'") as err:
            build_config(sets=[f"seed={value}"])
        assert len(str(err.value)) < 300
    assert build_config(sets=[f"seed={2**63 - 1}"]).seed == 2**63 - 1
    assert TrainConfig(seed=5).validate().seed == 5


# -- 10. an --out name the file system refuses ------------------------------------------------------
def test_an_out_name_over_255_bytes_is_one_line(tmp_path):
    long = tmp_path / ("r" * 300)
    out = invoke("train", *fake_run_args(**TINY), "--steps", "1", "--out", str(long))
    assert out.exit_code == 1
    one_error(out.output, r"the path is too long .*longest name is 300 bytes.*255 bytes.*shorter --out")
    assert list(tmp_path.iterdir()) == []
    sample = run_cast("sample", "--policy", "fake", "-p", "a red circle", "-o", str(tmp_path / ("é" * 200)) + ".png")
    assert sample.returncode == 1
    one_error(sample.stderr, r"longest name is 404 bytes")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "args",
    [
        ["eval", "--policy", "fake", "--suite", "nosuch", "--seed", "99999999999999999999999"],
        ["shapes", "render", "a red circle", "-o", "x.png", "--seed", "-3"],
    ],
    ids=["eval", "shapes-render"],
)
def test_eval_and_shapes_render_take_the_same_seed_rule(tmp_path, monkeypatch, args):
    from cast_core.cli import install_plugin_commands

    install_plugin_commands(cli)  # `cast shapes` is the shapes plugin's command
    monkeypatch.chdir(tmp_path)
    out = invoke(*args)
    assert out.exit_code == 2, out.output
    one_error(out.output, r"Invalid value for --seed")
    assert not (tmp_path / "x.png").exists()
