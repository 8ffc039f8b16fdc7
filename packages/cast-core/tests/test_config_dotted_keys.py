"""``--set policy_kwargs.path=DIR``: a dotted key sets one entry of a dict option and keeps the
entries the recipe gave it (the backbone recipes set LoRA rank, devices and sizes there)."""

import pytest

from cast_core.commands.train import build_config
from cast_core.config import ConfigError, TrainConfig, parse_set


def test_dotted_keys_merge_into_the_recipe_dict():
    cfg = build_config("cast", "fake", None, None, None, None, None,
                       ["policy_kwargs={lora = 4, size = {h = 1, w = 2}}", "policy_kwargs.path=/models/x",
                        "policy_kwargs.size.w=3", 'window_kwargs.embedder="pixels"'], None)
    assert cfg.policy_kwargs == {"lora": 4, "size": {"h": 1, "w": 3}, "path": "/models/x"}
    assert cfg.window_kwargs["embedder"] == "pixels"


def test_a_plain_key_still_replaces_the_dict():
    cfg = TrainConfig().update({"policy_kwargs": {"a": 1}}, "recipe").update(parse_set(["policy_kwargs={b = 2}"]), "--set")
    assert cfg.policy_kwargs == {"b": 2}


def test_the_recipe_dict_is_not_mutated():
    recipe = {"a": {"b": 1}}
    cfg = TrainConfig().update({"policy_kwargs": recipe}, "recipe")
    cfg.update({"policy_kwargs.a.c": 2}, "--set")
    assert recipe == {"a": {"b": 1}} and cfg.policy_kwargs == {"a": {"b": 1, "c": 2}}


@pytest.mark.parametrize("item,message", [
    ("lr.x=1", "config key 'lr' is not a table"),
    ("policy_kwargs..a=1", "has an empty part"),
    ("policy_kwargs.a.b=1", r"policy_kwargs.a is 1, not a table"),
    ("polcy_kwargs.a=1", "unknown config key 'polcy_kwargs.a'"),
])
def test_bad_dotted_keys_say_what_is_wrong(item, message):
    cfg = TrainConfig().update({"policy_kwargs": {"a": 1}}, "recipe")
    with pytest.raises(ConfigError, match=message):
        cfg.update(parse_set([item]), "--set")


def test_window_keys_a_selector_would_ignore_are_refused():
    """With a window selector (the recipes' default) window_start / window_size do nothing: say so."""
    with pytest.raises(ConfigError, match="window_size and window_start would be ignored: this run.s window comes "
                                          "from the 'random' selector \\(recipe 'flow-grpo'\\)"):
        build_config("flow-grpo", "fake", None, None, None, None, None, ["window_start=1", "window_size=3"], None)
    cfg = build_config("flow-grpo", "fake", None, None, None, None, None,
                       ["window=none", "window_start=1", "window_size=3"], None)
    assert (cfg.window, cfg.window_start, cfg.window_size) == (None, 1, 3)  # without the selector they apply
