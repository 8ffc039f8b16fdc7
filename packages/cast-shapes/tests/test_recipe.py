"""The `shapes` recipe end to end: a short CAST run on the shapes policy completes on CPU."""

import json

import pytest
import torch

from cast_core.commands.train import build_config
from cast_core.trainer import Trainer




def test_shapes_is_the_default_recipe():
    cfg = build_config(None, None, None, None, None, None, None, [], None)
    assert (cfg.recipe, cfg.policy, cfg.scorer, cfg.decomposer, cfg.projector) == (
        "shapes", "shapes", "shapes-oracle", "template", "spatial")


def test_short_cast_run_on_the_shapes_policy(random_weights, tmp_path):
    sets = [f'policy_kwargs={{weights = "{random_weights}"}}', "group_size=4", "prompts_per_step=2",
            "num_steps=4", "window_size=2", "sample_every=2", "checkpoint_every=2"]
    cfg = build_config("shapes", None, None, None, None, None, None, sets, 2)
    run = tmp_path / "run"
    Trainer(cfg, run, log=lambda m: None).run()
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert len(metrics) == 2 and all("reward_gm" in m and "loss" in m for m in metrics)
    assert metrics[0]["ratio_min"] == 1.0 == metrics[0]["ratio_max"]
    assert (run / "checkpoints" / "step-00002" / "adapter" / "pytorch_lora_weights.safetensors").is_file()
    assert (run / "samples" / "step-00002.png").is_file()
