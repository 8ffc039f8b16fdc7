"""The objective variants of every recipe through the installed CLI: DiffusionNFT and AWM, each
with the scalar and with CAST's per-position credit, train the shapes policy and each backbone's
tiny random pipeline (saved by save_pretrained, as a user's model directory), and the adapter a
backbone run writes loads in diffusers. By default two shapes variants and two backbone runs (one
scalar, one spatial each); every combination is a slow test.

On the backbones only what a CPU cannot do is overridden (as test_backbones_cli.py does): size,
batch, float32, and the scorer (the recipes' soft-tifa needs a VLM; the left-brightness fake judge
gives real heatmaps, so the spatial credit is not flat)."""

import json
import warnings

import pytest

from conftest import run_cast

VARIANTS = ("nft", "awm", "cast-nft", "cast-awm")

BACKBONE_CPU = [
    "--set", 'base_dtype="float32"',
    "--set", 'precision="no"',
    "--set", "policy_kwargs.image_size=[32, 32]",
    "--set", 'policy_kwargs.text_encoder_device="cpu"',
    "--set", "group_size=2",
    "--set", "prompts_per_step=1",
    "--set", "num_steps=4",
    "--set", 'prompts=["a photo of a red cat", "a photo of two dogs"]',
    "--scorer", "left-brightness",
]  # fmt: skip


@pytest.mark.parametrize(
    "variant",
    ["nft", "cast-awm", pytest.param("awm", marks=pytest.mark.slow), pytest.param("cast-nft", marks=pytest.mark.slow)],
)
def test_shapes_variants_train(variant, tmp_path):
    run = tmp_path / "run"
    out = run_cast(
        "train", "--plugin", f"shapes-{variant}", "--steps", "2", "--out", str(run),
        "--set", "prompts_per_step=1", "--set", "group_size=4",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    config = (run / "config.toml").read_text()
    objective = variant.removeprefix("cast-")
    assert f'objective = "{objective}"' in config and "# window = (unset)" in config
    assert ('projector = "spatial"' in config) == variant.startswith("cast-")
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and rows[-1]["window_size"] == 0 and rows[-1]["optimizer_steps"] == 2


def _backbone(name: str, variant: str, tmp_path):
    from cast_backbones.tiny import TINY_PIPELINES

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        TINY_PIPELINES[name]().save_pretrained(tmp_path / "model")
    model, run = tmp_path / "model", tmp_path / "run"
    out = run_cast(
        "train", "--plugin", f"{name}-{variant}", "--set", f"policy_kwargs.path={model}",
        "--steps", "2", "--out", str(run), *BACKBONE_CPU,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    adapter = run / "checkpoints" / "step-00002" / "adapter"
    pipe = type(TINY_PIPELINES[name]()).from_pretrained(str(model))
    pipe.load_lora_weights(str(adapter))
    assert [c.r for c in pipe.transformer.peft_config.values()] == [64]


@pytest.mark.parametrize("name,variant", [("flux2-klein", "cast-nft"), ("qwen-image", "awm")])
def test_backbone_variants_train_and_their_adapters_load_in_diffusers(name, variant, tmp_path):
    _backbone(name, variant, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["flux2", "flux2-klein", "qwen-image"])
@pytest.mark.parametrize("variant", VARIANTS)
def test_every_backbone_variant_trains(name, variant, tmp_path):
    _backbone(name, variant, tmp_path)
