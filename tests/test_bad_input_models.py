"""The README's GPU command on a machine without a GPU, through the installed `cast`: one line
that names the setting wanting CUDA and the way to run on the CPU, and that way (`--cpu`)
training a tiny saved pipeline with the recipe's own settings otherwise.

Two processes only (a real entry point, the real absence of CUDA); the per-key refusals are
tested in-process in packages/cast-backbones/tests/test_user_errors.py and
packages/cast-rewards/tests/test_user_errors.py."""

import warnings

import pytest

from conftest import run_cast


@pytest.fixture(scope="module")
def qwen_dir(tmp_path_factory):
    from cast_backbones.tiny import TINY_PIPELINES

    model = tmp_path_factory.mktemp("models") / "qwen-image"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        TINY_PIPELINES["qwen-image"]().save_pretrained(model)
    return model


SMALL = [
    "--scorer", "constant", "--steps", "1", "--window", "fixed",
    "--set", "window_kwargs.start=0", "--set", "window_kwargs.size=1", "--set", "num_steps=2",
    "--set", "group_size=2", "--set", "prompts_per_step=1", "--set", "sample_every=0",
    "--set", "policy_kwargs.image_size=[32, 32]", "--set", 'prompts=["a photo of a red cat"]',
]  # fmt: skip


def test_the_gpu_recipe_without_a_gpu_says_which_setting_and_how_to_run_on_the_cpu(qwen_dir, tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the recipe's text_encoder_device is satisfied")
    out = run_cast("train", "--plugin", "qwen-image", "--set", f"policy_kwargs.path={qwen_dir}", "--out",
                   str(tmp_path / "run"), *SMALL)  # fmt: skip
    assert out.returncode == 1, out.stderr[-2000:]
    assert "Traceback" not in out.stderr
    errors = [line for line in out.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, out.stderr[-2000:]
    assert "'policy_kwargs.text_encoder_device' = 'cuda' needs a CUDA GPU" in errors[0]
    assert "--cpu" in errors[0] and '--set policy_kwargs.text_encoder_device="cpu"' in errors[0]


def test_cpu_trains_the_recipe_on_a_tiny_model_and_a_resume_keeps_it(qwen_dir, tmp_path):
    from cast_core.cpu_overrides import cpu_sets
    from cast_core.errors import ConfigError

    run = tmp_path / "run"
    out = run_cast("train", "--plugin", "qwen-image", "--cpu", "--set", f"policy_kwargs.path={qwen_dir}", "--out",
                   str(run), *SMALL)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    config = (run / "config.toml").read_text()
    for line in ("cpu = true", 'base_dtype = "float32"', 'precision = "no"', "gradient_checkpointing = true"):
        assert line in config, line  # --cpu's keys, and the recipe's others kept
    assert '"text_encoder_device" = "cpu"' in config and '"lora_rank" = 64' in config
    assert (run / "checkpoints" / "step-00001" / "adapter" / "pytorch_lora_weights.safetensors").is_file()

    assert cpu_sets(("steps=2",), resume_dir=str(run)) == ("steps=2",)  # already a CPU run: nothing to change
    (run / "config.toml").write_text(config.replace('base_dtype = "float32"', 'base_dtype = "bfloat16"'))
    with pytest.raises(ConfigError, match="--cpu cannot change a resumed run: .* has base_dtype = 'bfloat16'"):
        cpu_sets((), resume_dir=str(run))


@pytest.mark.parametrize("rank", [0, 129, 100000, 2.5])
def test_the_shapes_policy_refuses_a_lora_rank_it_cannot_use(rank):
    from cast_core.errors import ConfigError
    from cast_core.registry import get_policy

    with pytest.raises(ConfigError, match=rf"policy_kwargs.lora_rank = {rank}: .* from 1 to 128 \(its narrowest"):
        get_policy("shapes", lora_rank=rank)


def test_a_truncated_shapes_adapter_is_one_line_on_the_option(tmp_path):
    """The shapes policy reads its adapter file itself: cast-core's --adapter handling names it."""
    import click

    from cast_core.commands.inputs import load_adapter_option
    from cast_core.registry import get_policy

    policy = get_policy("shapes")
    policy.save_adapter(tmp_path / "adapter")
    weights = next((tmp_path / "adapter").glob("*.safetensors"))
    weights.write_bytes(weights.read_bytes()[:100])
    with pytest.raises(click.BadParameter) as err:
        load_adapter_option(policy, str(tmp_path / "adapter"), "--base-adapter")
    message = err.value.format_message()
    assert f"{tmp_path / 'adapter'}: its adapter file is truncated or damaged" in message and "\n" not in message
    assert err.value.param_hint == "--base-adapter"
