"""A trained adapter is a diffusers LoRA: two CAST steps, then the stock pipeline loaded from
the same directory with ``load_lora_weights`` draws the trained policy's images."""

import warnings

import pytest
import torch

from cast_core.checkpoints import latest_checkpoint
from cast_core.config import TrainConfig
from cast_core.sampling import sample
from cast_core.trainer import Trainer
from conftest import NAMES, POLICIES, pipeline_kwargs, tiny_pipeline

PROMPTS = ["a red cat", "a blue dog"]


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """Each tiny pipeline written with save_pretrained, as a user's model directory is."""
    root = tmp_path_factory.mktemp("models")
    for name in NAMES:
        tiny_pipeline(name).save_pretrained(root / name)
    return root


def train_two_steps(path, run_dir, name):
    cfg = TrainConfig(
        policy=name,
        policy_kwargs={"path": str(path), "image_size": [32, 32], "lora_rank": 4},
        scorer="left-brightness",
        decomposer="fake",
        projector="spatial",
        prompts=list(PROMPTS),
        group_size=4,
        prompts_per_step=1,
        num_steps=4,
        window_start=0,
        window_size=2,
        lr=0.05,
        clip_range=0.2,
        steps=2,
        sample_every=0,
        checkpoint_every=2,
        image_size=[32, 32],
    ).validate()
    trainer = Trainer(cfg, run_dir, log=lambda m: None)
    trainer.run()
    trainer.close()
    return trainer.policy, latest_checkpoint(run_dir) / "adapter"


def load_pipeline(name, path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return POLICIES[name].pipeline_class().from_pretrained(str(path))


@pytest.mark.parametrize("name", NAMES)
def test_trained_adapter_loads_into_the_stock_pipeline(name, saved, tmp_path):
    policy, adapter = train_two_steps(saved / name, tmp_path / "run", name)
    assert (adapter / "pytorch_lora_weights.safetensors").is_file()
    assert any(float(p.detach().abs().max()) > 1e-3 for n, p in policy.transformer.named_parameters() if "lora_B" in n)

    pipe = load_pipeline(name, saved / name)
    base = pipe(
        prompt=PROMPTS,
        num_inference_steps=4,
        height=32,
        width=32,
        output_type="pt",
        generator=torch.Generator().manual_seed(5),
        **pipeline_kwargs(name, 2),
    ).images
    pipe.load_lora_weights(str(adapter))
    tuned = pipe(
        prompt=PROMPTS,
        num_inference_steps=4,
        height=32,
        width=32,
        output_type="pt",
        generator=torch.Generator().manual_seed(5),
        **pipeline_kwargs(name, 2),
    ).images
    ours = sample(policy, PROMPTS, num_steps=4, image_size=(32, 32), generator=torch.Generator().manual_seed(5)).images
    assert float((ours - tuned).abs().max()) <= 2e-5
    assert float((tuned - base).abs().max()) > 1e-3, "two steps at lr 0.05 must change the images"

    fresh = POLICIES[name].from_pretrained(saved / name, image_size=(32, 32), lora_rank=4)
    fresh.load_adapter(adapter)
    again = sample(fresh, PROMPTS, num_steps=4, image_size=(32, 32), generator=torch.Generator().manual_seed(5)).images
    assert float((again - ours).abs().max()) <= 2e-5


def test_an_adapter_of_another_rank_is_refused_by_name(saved, tmp_path):
    policy = POLICIES["qwen-image"].from_pretrained(saved / "qwen-image", image_size=(32, 32), lora_rank=4)
    policy.save_adapter(tmp_path / "a")
    other = POLICIES["qwen-image"].from_pretrained(saved / "qwen-image", image_size=(32, 32), lora_rank=2)
    with pytest.raises(ValueError, match="trained with r = 4, this policy has 2"):
        other.load_adapter(tmp_path / "a")
    with pytest.raises(FileNotFoundError, match="no LoRA weights at"):
        other.load_adapter(tmp_path / "nothing")


def test_alpha_survives_the_file(saved, tmp_path):
    """diffusers reads rank and alpha from the file's metadata; without it, alpha = rank and a
    rank-4 alpha-16 adapter would load at a quarter of its strength."""
    import json

    from safetensors import safe_open

    policy = POLICIES["flux2"].from_pretrained(saved / "flux2", image_size=(32, 32), lora_rank=4, lora_alpha=16)
    policy.save_adapter(tmp_path)
    with safe_open(str(tmp_path / "pytorch_lora_weights.safetensors"), "pt") as f:
        meta = json.loads(f.metadata()["lora_adapter_metadata"])
    assert (meta["transformer.r"], meta["transformer.lora_alpha"]) == (4, 16)


def test_an_adapter_of_another_alpha_is_refused(saved, tmp_path):
    POLICIES["flux2"].from_pretrained(saved / "flux2", image_size=(32, 32), lora_rank=4, lora_alpha=16).save_adapter(
        tmp_path
    )
    other = POLICIES["flux2"].from_pretrained(saved / "flux2", image_size=(32, 32), lora_rank=4, lora_alpha=8)
    with pytest.raises(ValueError, match="trained with lora_alpha = 16.0, this policy has 8"):
        other.load_adapter(tmp_path)
