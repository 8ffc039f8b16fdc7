"""The shapes policy refuses, when a run starts, a prompt longer than its text encoder reads
(16 tokens): before this check such a prompt passed every check, failed only after the window
was measured, and left a run that `--resume` crashed on too."""

import pytest
from click.testing import CliRunner

from cast_core.cli import cli
from cast_core.config import ConfigError
from cast_core.protocols import ChecksPrompts
from cast_shapes.policy import ShapesPolicy

LONG = "two red circles left of a blue square , a green triangle above three small yellow squares"  # 17 tokens


def test_the_shapes_policy_names_the_prompt_its_token_count_and_the_limit(random_weights):
    policy = ShapesPolicy(random_weights)
    assert isinstance(policy, ChecksPrompts)
    policy.check_prompts(["a red circle", "two blue squares left of a green triangle"])
    with pytest.raises(ConfigError, match=r"has 17 tokens; the shapes policy reads at most 16"):
        policy.check_prompts(["a red circle", LONG])
    with pytest.raises(ConfigError) as err:  # a very long prompt is quoted cut to ~80 characters
        policy.check_prompts(["red " * 500])
    assert "has 500 tokens" in str(err.value) and len(str(err.value)) < 250


def test_cast_train_refuses_it_before_writing_anything(tmp_path):
    out = tmp_path / "run"
    result = CliRunner().invoke(
        cli, ["train", "--recipe", "shapes", "--set", f'prompts=["a red circle", "{LONG}"]', "--out", str(out)]
    )
    assert result.exit_code == 1, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and LONG[:40] in errors[0] and "17 tokens" in errors[0] and "at most 16" in errors[0]
    assert "Traceback" not in result.output
    assert not (out / "config.toml").exists() and not (out / "window.json").exists()
