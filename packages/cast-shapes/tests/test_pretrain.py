"""Pretraining: the refine stage (start from weights, decaying lr, more small scenes) and resuming."""

import random

import pytest
import torch

from cast_shapes.checkpoint_io import load_net, save_net
from cast_shapes.grammar import parse_prompt
from cast_shapes.model import ShapesModelConfig, ShapesNet
from cast_shapes.pretrain import PretrainConfig, Pretrainer, make_batch

TINY = ShapesModelConfig(width=32, heads=2, double_layers=1, single_layers=1, text_layers=1)


def _atoms(prompt: str) -> int:
    from cast_rewards.template import TemplateDecomposer

    return len(TemplateDecomposer().decompose(prompt).atoms)


def test_small_scene_share_zero_leaves_the_stage_one_stream_unchanged():
    """share=0.0 must draw exactly stage 1's stream: per scene one atom count in 2..8, the scene,
    its layout, and nothing else (re-typed below from the stage-1 recipe, no extra rng.random())."""
    from cast_shapes.grammar import prompt_for
    from cast_shapes.render import render_float
    from cast_shapes.suites import sample_scene_in_split
    from cast_shapes.world import sample_layout

    rng = random.Random(3)
    images, prompts = [], []
    for _ in range(4):
        scene = sample_scene_in_split(rng, "train", atoms=rng.randint(2, 8))
        images.append(torch.from_numpy(render_float(sample_layout(scene, rng))))
        prompts.append(prompt_for(scene))
    b = make_batch(random.Random(3), 4, small_scene_share=0.0)
    assert b[1] == prompts and torch.equal(b[0], torch.stack(images))
    # pinned: seed 3's stage-1 prompts, so a change to the stream itself shows up here too
    assert prompts == [
        "a yellow triangle",
        "a triangle and a square",
        "two squares",
        "an orange square and two purple squares",
    ]


def test_small_scene_share_one_draws_only_two_or_three_atom_scenes():
    _, prompts = make_batch(random.Random(0), 24, small_scene_share=1.0)
    for p in prompts:
        parse_prompt(p)  # every prompt is a world prompt
        assert _atoms(p) <= 3, p
    _, mixed = make_batch(random.Random(0), 24)
    assert max(_atoms(p) for p in mixed) > 3


def test_lr_schedule_warms_up_then_decays_linearly_to_zero(tmp_path):
    cfg = PretrainConfig(steps=1000, lr=1e-3, warmup=100, decay_steps=400, checkpoint_every=10**9)
    t = Pretrainer(tmp_path, cfg, TINY)
    assert t.lr_at(0) == pytest.approx(1e-5)
    assert t.lr_at(99) == pytest.approx(1e-3)
    assert t.lr_at(600) == pytest.approx(1e-3)
    assert t.lr_at(800) == pytest.approx(0.5e-3)
    assert t.lr_at(999) == pytest.approx(1e-3 / 400)
    assert t.lr_at(1000) == 0.0
    constant = Pretrainer(tmp_path / "c", PretrainConfig(steps=1000, lr=1e-3, warmup=100), TINY)
    assert constant.lr_at(999) == pytest.approx(1e-3)


def test_refine_starts_from_the_given_weights_and_records_them(tmp_path):
    torch.manual_seed(5)
    start = ShapesNet(TINY)
    save_net(start, tmp_path / "start.safetensors")
    cfg = PretrainConfig(
        steps=1,
        batch=2,
        init_weights=str(tmp_path / "start.safetensors"),
        decay_steps=1,
        small_scene_share=0.5,
        eval_every=10**9,
        checkpoint_every=10**9,
    )
    t = Pretrainer(tmp_path / "run", cfg, TINY)
    for a, b in zip(t.net.state_dict().values(), start.state_dict().values()):
        assert torch.equal(a, b)
    for a, b in zip(t.ema.state_dict().values(), start.state_dict().values()):
        assert torch.equal(a, b)
    t.train_step()
    t.export(tmp_path / "out.safetensors")
    _, meta = load_net(tmp_path / "out.safetensors")
    assert len(meta["init_weights_sha256"]) == 64 and meta["pretrain_steps"] == "1"


def test_refine_refuses_weights_of_another_architecture(tmp_path):
    save_net(
        ShapesNet(ShapesModelConfig(width=64, heads=2, double_layers=1, single_layers=1, text_layers=1)),
        tmp_path / "other.safetensors",
    )
    with pytest.raises(SystemExit, match="model config differs"):
        Pretrainer(tmp_path / "run", PretrainConfig(init_weights=str(tmp_path / "other.safetensors")), TINY)


def test_a_resumed_run_continues_where_it_stopped(tmp_path):
    cfg = PretrainConfig(steps=2, batch=2, checkpoint_every=1, eval_every=10**9, log_every=1)
    first = Pretrainer(tmp_path, cfg, TINY)
    first.train_step()
    first.save()
    again = Pretrainer(tmp_path, cfg, TINY)
    assert again.step == 1
    for a, b in zip(again.net.state_dict().values(), first.net.state_dict().values()):
        assert torch.equal(a, b)
    with pytest.raises(SystemExit, match="different settings"):
        Pretrainer(tmp_path, PretrainConfig(steps=2, batch=3), TINY)
