"""The backbones' side of `cast plan`: the shipped architecture facts (package data, the same
numbers as benchmarks/param_counts.py and cast_backbones.tiny), build_for_plan, and the command
on a tiny architecture end to end."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import torch

from cast_backbones.architecture_facts import architecture_names, load_architecture
from cast_backbones.plan_models import DEFAULT_ARCHITECTURES
from conftest import POLICIES, tiny_pipeline

ROOT = Path(__file__).resolve().parents[3]
REAL = ("flux2-dev", "flux2-klein-4b", "flux2-klein-9b", "qwen-image")


def _build(config: dict) -> torch.nn.Module:
    import diffusers

    config = dict(config)
    with torch.device("meta"):
        return getattr(diffusers, config.pop("_class_name"))(**config)


def _count(module) -> int:
    return sum(p.numel() for p in module.parameters())


def test_the_real_architectures_ship_as_package_data():
    import importlib.resources

    shipped = {p.name for p in importlib.resources.files("cast_backbones").joinpath("architectures").iterdir()}
    assert {f"{name}.json" for name in REAL} <= shipped
    assert set(REAL) <= set(architecture_names())
    for name in REAL:
        facts = load_architecture(name)
        assert facts["name"] == name and facts["policy"] in POLICIES
        assert {"transformer", "vae", "text_encoder"} <= set(facts)
        assert {"hidden_size", "out_layers", "parameters", "text_length"} <= set(facts["text_encoder"])


@pytest.mark.parametrize("name", REAL)
def test_the_facts_build_the_counted_models(name):
    """On the meta device the JSON builds exactly the parameter counts of
    benchmarks/results/param_counts.json (which benchmarks/param_counts.py computes from
    diffusers' classes), and the text width is the stacked encoder layers'."""
    counts = json.loads((ROOT / "benchmarks/results/param_counts.json").read_text())
    facts = load_architecture(name)
    assert _count(_build(facts["transformer"])) == counts[name]["transformer"]
    vae = "qwen-image-vae" if name == "qwen-image" else "flux2-vae"
    assert _count(_build(facts["vae"])) == counts[vae]["vae"]
    text = facts["text_encoder"]
    assert facts["transformer"]["joint_attention_dim"] == text["hidden_size"] * len(text["out_layers"])


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_the_tiny_facts_are_the_tiny_pipelines(policy):
    facts = load_architecture(f"{policy}-tiny")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pipe = tiny_pipeline(policy)
    for part in ("transformer", "vae"):
        config = {k: v for k, v in facts[part].items() if k != "_class_name"}
        live = {k: (list(v) if isinstance(v, tuple) else v) for k, v in dict(getattr(pipe, part).config).items()}
        assert {k: live[k] for k in config} == config, part


def test_a_pipeline_directory_gives_its_own_facts(tmp_path):
    """A model directory (save_pretrained's layout) is read, not guessed: its configs and the text
    encoder's size from its safetensors index."""
    facts = load_architecture("flux2-klein-4b")
    (tmp_path / "transformer").mkdir()
    (tmp_path / "vae").mkdir()
    (tmp_path / "text_encoder").mkdir()
    (tmp_path / "model_index.json").write_text(json.dumps({"_class_name": "Flux2KleinPipeline", "is_distilled": True}))
    (tmp_path / "transformer/config.json").write_text(json.dumps(facts["transformer"]))
    (tmp_path / "vae/config.json").write_text(json.dumps(facts["vae"]))
    (tmp_path / "text_encoder/config.json").write_text(json.dumps({"hidden_size": 2560, "torch_dtype": "bfloat16"}))
    index = {"metadata": {"total_size": 8_000_000_000}, "weight_map": {}}
    (tmp_path / "text_encoder/model.safetensors.index.json").write_text(json.dumps(index))
    read = load_architecture(tmp_path)
    assert read["policy"] == "flux2-klein" and read["pipeline"] == {"is_distilled": True}
    assert read["transformer"] == facts["transformer"]
    assert read["text_encoder"]["parameters"] == 4_000_000_000 and read["text_encoder"]["hidden_size"] == 2560


def test_unknown_architectures_and_other_families_are_refused():
    with pytest.raises(ValueError, match="unknown architecture 'flux3'"):
        load_architecture("flux3")
    with pytest.raises(ValueError, match="architecture 'qwen-image' is a 'qwen-image' model; policy 'flux2'"):
        POLICIES["flux2"].build_for_plan("qwen-image")


def test_build_for_plan_is_the_policy_on_the_meta_device():
    subject = POLICIES["flux2-klein"].build_for_plan("flux2-klein-tiny", lora_rank=4, torch_dtype="bfloat16")
    policy = subject.policy
    assert isinstance(policy, POLICIES["flux2-klein"])
    tensors = [t for m in subject.modules.values() for t in [*m.parameters(), *m.buffers()]]
    assert tensors and all(t.device.type == "meta" for t in tensors)
    assert policy.dtype == torch.bfloat16
    assert {p.dtype for p in policy.trainable_parameters()} == {torch.float32}
    assert policy.uses_negative and subject.shard_root is policy.transformer
    assert subject.shard_units == policy.blocks()
    assert any("two transformer passes" in n for n in subject.notes)
    assert DEFAULT_ARCHITECTURES == {"flux2": "flux2-dev", "flux2-klein": "flux2-klein-4b", "qwen-image": "qwen-image"}


def test_cast_plan_on_a_tiny_architecture(tmp_path, monkeypatch):
    """The command end to end on a recipe of this package: the tiny FLUX.2 at 32x32."""
    from click.testing import CliRunner

    from cast_core.cli import cli

    monkeypatch.setenv("CAST_CACHE_DIR", str(tmp_path))
    args = ["plan", "--recipe", "flux2", "--architecture", "flux2-tiny", "--image-size", "32", "--json"]
    out = CliRunner().invoke(cli, args)
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert data["architecture"] == "flux2-tiny" and data["image_size"] == [32, 32] and data["fits"]
    assert data["settings"]["lora_rank"] == 64 and data["settings"]["gradient_checkpointing"] is True
    assert data["settings"]["base_dtype"] == "bfloat16"
    assert data["startup"]["on_gpu"] is True  # the recipe encodes on the GPU
    frozen = data["phases"]["decode"]["bytes"]["weights"]
    assert frozen > 0
    bad = CliRunner().invoke(cli, args[:-1] + ["--architecture", "qwen-image-tiny"])
    assert bad.exit_code == 1 and "is a 'qwen-image' model; policy 'flux2'" in bad.output


@pytest.mark.slow
@pytest.mark.parametrize("gpus", [1, 8])
def test_flux2_dev_plan_takes_minutes_and_fits_one_80gb_gpu(gpus, tmp_path, monkeypatch):
    """The 32B plan at real size (about two minutes for one GPU, three for eight, on 2 CPU cores)."""
    import time

    from cast_core.config import build_config
    from cast_core.memory_plan import plan_memory

    monkeypatch.setenv("CAST_CACHE_DIR", str(tmp_path))
    start = time.perf_counter()
    plan = plan_memory(build_config(recipe="flux2"), gpus=gpus, gpu_memory="79.6GiB", image_size=512)
    assert time.perf_counter() - start < 600
    assert plan.fits
    weights = plan.phases["decode"]["bytes"]["weights"] / 2**30
    assert weights == pytest.approx(60.18 / gpus if gpus == 1 else 60.02 / gpus + 0.16, rel=0.02)
