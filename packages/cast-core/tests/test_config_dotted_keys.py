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
