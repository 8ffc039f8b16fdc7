"""The objectives inside the trainer: what a forward-process objective changes about a run (no
window, ODE samples from the old policy), its state in checkpoints, and the refusals."""

import json

import pytest
import torch

from cast_core.config import ConfigError, build_config
from cast_core.errors import CastError
from cast_core.trainer import Trainer
from cast_core.types import Window

from test_trainer import PROMPTS, fake_config, metrics, quiet


def test_a_forward_objective_drops_the_recipes_window_and_refuses_one_the_user_asks_for():
    judge = {"scorer": "constant"}  # the cast recipe names none
    cfg = build_config(recipe="cast", components=judge, sets=['objective="nft"'])
    assert cfg.objective == "nft" and cfg.window is None and cfg.window_kwargs == {}
    assert build_config(recipe="cast", components=judge).window == "clip-curvature"  # the clipped objective keeps it
    with pytest.raises(ConfigError, match="objective 'nft' samples with the plain ODE"):
        build_config(recipe="cast", components={**judge, "window": "fixed", "objective": "nft"})
    with pytest.raises(ConfigError, match="window_kwargs"):
        build_config(recipe="cast", components=judge, sets=['objective="awm"', "window_kwargs.size=2"])


def test_x0_heatmaps_need_a_window_start(tmp_path):
    with pytest.raises(ConfigError, match='heatmap_source = "final"'):
        Trainer(fake_config(objective="nft", heatmap_source="x0"), tmp_path / "run", log=quiet)


def test_unknown_objective_options_are_refused_before_anything_is_built(tmp_path):
    with pytest.raises(ConfigError, match="objective_kwargs.*takes no argument 'betta'.*Did you mean 'beta'"):
        Trainer(fake_config(objective="nft", objective_kwargs={"betta": 1.0}), tmp_path / "run", log=quiet)


def test_nft_samples_with_the_ode_from_its_old_policy(tmp_path, monkeypatch):
    import contextlib

    from cast_core.objectives.nft import NFT

    trainer = Trainer(fake_config(objective="nft", steps=3, sample_every=0), tmp_path / "run", log=quiet)
    trainer.run()
    old = trainer.objective.old
    assert 0 < old.decay < 1 and any(not torch.equal(v, p) for v, p in zip(old.values, trainer.params))
    window = trainer.window_for(3, PROMPTS[:2])
    assert window == Window(0, 0)
    got = trainer.rollout(PROMPTS[:2], window, 3)
    assert got.latents is None and got.log_probs is None and got.final_latents is not None
    monkeypatch.setattr(NFT, "sampling", lambda self, params: contextlib.nullcontext())
    current = trainer.rollout(PROMPTS[:2], window, 3)
    with old.active(trainer.params):
        by_hand = trainer.rollout(PROMPTS[:2], window, 3)
    assert torch.equal(got.final_latents, by_hand.final_latents)  # the old policy drew them
    assert not torch.equal(got.final_latents, current.final_latents)


def test_checkpoints_carry_the_objectives_state_and_a_resume_under_another_objective_is_refused(tmp_path):
    run = tmp_path / "run"
    Trainer(fake_config(objective="nft", steps=2, checkpoint_every=1, sample_every=0), run, log=quiet).run()
    ckpt = run / "checkpoints" / "step-00002"
    state = json.loads((ckpt / "state.json").read_text())
    assert state["objective"]["name"] == "nft" and state["objective"]["state"]["old_decay"] == pytest.approx(0.002)
    blob = torch.load(ckpt / "optimizer.pt", weights_only=True)
    assert sorted(k for k in blob["tensors"] if k.startswith("objective.")) == [f"objective.old.{i}" for i in range(3)]
    with pytest.raises(CastError, match="objective was 'nft', not 'awm'"):
        Trainer(fake_config(objective="awm", steps=3, sample_every=0), run, resume=True, log=quiet)


def test_each_objective_logs_its_own_diagnostics(tmp_path):
    for name, keys in {
        "sde-clipped": ("clip_fraction", "approx_kl", "ratio_min", "ratio_max"),
        "nft": ("positive_loss", "negative_loss", "optimality_mean", "old_decay"),
        "awm": ("fm_error", "ema_kl", "ema_decay", "ratio_mean"),
    }.items():
        run = tmp_path / name
        Trainer(fake_config(objective=name, steps=1, sample_every=0), run, log=quiet).run()
        row = metrics(run)[-1]
        assert all(k in row for k in ("loss", "kl", "grad_norm", *keys)), (name, sorted(row))
        assert row["optimizer_steps"] == 1


def test_cast_signal_refuses_an_objective_without_window_steps(tmp_path):
    from cast_core.gradient_signal import step_signal

    trainer = Trainer(fake_config(objective="awm", sample_every=0), tmp_path / "run", log=quiet)
    with pytest.raises(ConfigError, match="objective 'awm' samples with the plain ODE"):
        step_signal(trainer, batches=2)
