"""The backbone recipes from disk through the installed CLI, as a user runs them on a GPU
machine — here with tiny random pipelines saved by save_pretrained, on the CPU.

Only what a CPU cannot do is overridden: the size and batch (32² images, groups of 2), float32
weights, the window's embedder (CLIP weights cannot be downloaded in a test, so the measured
window runs on pixels) and the scorer (the recipes' soft-tifa judge is a later issue; the
constant scorer stands in). Everything else is the recipe: the measured clip-curvature
window, the template decomposer, the spatial projector, checkpointing, text-encoder offload,
and the `--set policy_kwargs.path=DIR` that merges into the recipe's policy_kwargs."""

import warnings

import pytest

from conftest import run_cast

CPU = [
    "--set",
    'base_dtype="float32"',
    "--set",
    'precision="no"',
    "--set",
    "policy_kwargs.image_size=[32, 32]",
    "--set",
    'policy_kwargs.text_encoder_device="cpu"',
    "--set",
    'window_kwargs.embedder="pixels"',
    "--set",
    "group_size=2",
    "--set",
    "prompts_per_step=1",
    "--set",
    "num_steps=4",
    "--set",
    'prompts=["a photo of a red cat", "a photo of two dogs"]',
]


@pytest.mark.parametrize("name", ["flux2", "flux2-klein", "qwen-image"])
def test_train_from_a_saved_pipeline_then_sample(name, tmp_path):
    from cast_backbones.tiny import TINY_PIPELINES

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        TINY_PIPELINES[name]().save_pretrained(tmp_path / "model")
    model, run = tmp_path / "model", tmp_path / "run"
    out = run_cast(
        "train",
        "--plugin",
        name,
        "--set",
        f"policy_kwargs.path={model}",
        "--scorer",
        "constant",
        "--steps",
        "2",
        "--out",
        str(run),
        *CPU,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    config = (run / "config.toml").read_text()
    assert "lora_rank" in config and str(model) in config  # the dotted --set merged into the recipe's dict
    adapter = run / "checkpoints" / "step-00002" / "adapter"
    assert (adapter / "pytorch_lora_weights.safetensors").is_file()

    pipe = type(TINY_PIPELINES[name]()).from_pretrained(str(model))
    pipe.load_lora_weights(str(adapter))  # diffusers accepts the file (rank 64, alpha 128 from its metadata)
    assert [c.r for c in pipe.transformer.peft_config.values()] == [64]

    picture = tmp_path / "sample.png"
    drawn = run_cast(
        "sample",
        "--policy",
        name,
        "--set",
        f"policy_kwargs.path={model}",
        "--set",
        "policy_kwargs.image_size=[32, 32]",
        "--set",
        'policy_kwargs.text_encoder_device="cpu"',
        "--set",
        "policy_kwargs.lora_rank=64",
        "--prompt",
        "a photo of a red cat",
        "--steps",
        "3",
        "--adapter",
        str(adapter),
        "-o",
        str(picture),
    )
    assert drawn.returncode == 0, drawn.stderr[-3000:]
    assert picture.is_file()
