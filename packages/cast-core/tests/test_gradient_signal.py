"""The per-step gradient-signal diagnostic: the cosine statistics, the step rule, and a run on
the fake policy (whose reward, left-half brightness, is steerable by the noise of its steps)."""

import math

import pytest
import torch
from click.testing import CliRunner

from cast_core.gradient_signal import StepSignal, pairwise_cosine, signal_steps, step_signal
from cast_core.trainer import Trainer

from test_trainer import RecordingScorer, fake_config, quiet


def test_pairwise_cosine_of_known_vectors():
    e1, e2 = torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0])
    assert pairwise_cosine([e1, 2 * e1, 3 * e1])[0] == pytest.approx(1.0)
    assert pairwise_cosine([e1, e2])[0] == pytest.approx(0.0)
    # pairs: (e1, e1+e2) = 1/sqrt2, (e1, e2) = 0, (e1+e2, e2) = 1/sqrt2
    mean, se = pairwise_cosine([e1, e1 + e2, e2])
    assert mean == pytest.approx(2 / 3 / math.sqrt(2))
    # leave-one-out means: 0, 1/sqrt2, 0 -> jackknife se = sqrt(2/3 * sum((x - m)^2))
    m = 1 / (3 * math.sqrt(2))
    assert se == pytest.approx(math.sqrt(2 / 3 * (2 * m**2 + (1 / math.sqrt(2) - m) ** 2)))
    with pytest.raises(ValueError):
        pairwise_cosine([e1])


def test_signal_steps_need_z_standard_errors_and_noise_floors():
    s = StepSignal(
        cosine=[0.0, 0.05, 0.02, 0.05],
        cosine_sem=[0.01, 0.01, 0.01, 0.02],
        grad_norm=[1] * 4,
        noise_floor=0.005,
        batches=8,
        images_per_batch=32,
    )
    assert signal_steps(s) == [1]  # 0.02 < 3·0.01; 0.05 < 3·0.02
    assert signal_steps(s, z=2.0) == [1, 3]


def test_step_signal_on_the_fake_policy(tmp_path):
    trainer = Trainer(fake_config(num_steps=4), tmp_path / "run", log=quiet)
    before = [p.detach().clone() for p in trainer.params]
    result = step_signal(trainer, batches=4)
    assert len(result.cosine) == len(result.cosine_sem) == len(result.grad_norm) == 4
    assert all(math.isfinite(c) and -1 <= c <= 1 for c in result.cosine)
    assert all(g > 0 for g in result.grad_norm)
    assert result.noise_floor == pytest.approx(1 / math.sqrt(sum(p.numel() for p in trainer.params)))
    assert all(torch.equal(a, b) for a, b in zip(before, trainer.params))  # a measurement, not an update
    assert all(p.grad is None for p in trainer.params)
    assert result.images_per_batch == 16 and len(result.reward_gm) == 4


def test_identical_batches_agree_exactly_at_every_step(tmp_path, monkeypatch):
    """Same prompts and noise for every batch: each step's gradients are the same vector, so the
    cosine is 1 — what separates the steps in a real run is the batches' independence only."""
    import cast_core.seeding as seeding

    trainer = Trainer(fake_config(num_steps=3), tmp_path / "run", log=quiet)
    monkeypatch.setattr(trainer, "pick_prompts", lambda step: ["a red circle", "a blue square"])
    real = seeding.seed_for
    monkeypatch.setattr(
        seeding, "seed_for", lambda seed, step, *rest: real(seed, 1234, *rest)
    )  # every batch is step 1234
    result = step_signal(trainer, batches=3)
    assert result.cosine == pytest.approx([1.0, 1.0, 1.0], abs=1e-6)
    assert signal_steps(result) == [0, 1, 2]


def test_cast_signal_cli_writes_json_and_png(tmp_path):
    from cast_core.cli import cli

    out = tmp_path / "sig"
    res = CliRunner().invoke(
        cli,
        [
            "signal",
            "--policy",
            "fake",
            "--scorer",
            "left-brightness",
            "--projector",
            "spatial",
            "--set",
            "decomposer=fake",
            "--set",
            "window=",
            "--set",
            "num_steps=3",
            "--set",
            "prompts_per_step=2",
            "--set",
            "group_size=4",
            "--set",
            'prompts=["a red circle", "a blue square"]',
            "--batches",
            "3",
            "--out",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    assert "steps with signal" in res.output
    data = __import__("json").loads((out / "signal.json").read_text())
    assert len(data["cosine"]) == 3 and data["batches"] == 3 and data["images_per_batch"] == 8
    assert (out / "signal.png").stat().st_size > 0


def test_x0_heatmaps_are_scored_per_step(tmp_path):
    """With heatmaps from x̂0 each step's map is scored on the x̂0 just before it: the scorer
    sees a map call per sampling step, each on that step's x̂0."""
    cfg = fake_config(heatmap_source="x0", prompts_per_step=1)
    trainer = Trainer(cfg, tmp_path / "run", log=quiet)
    trainer.judge.scorer = RecordingScorer()
    calls = trainer.judge.scorer.calls
    step_signal(trainer, batches=2)
    per_batch = calls[: len(calls) // 2]  # two batches, the same calls each
    maps = [images for images, wants_maps in per_batch if wants_maps]
    verdicts = [images for images, wants_maps in per_batch if not wants_maps]
    assert len(maps) == cfg.num_steps and len(verdicts) == 1  # verdicts once a batch, maps per step
    assert all(torch.equal(v, verdicts[0]) for v in verdicts)  # the final images
    assert not any(torch.equal(maps[t], maps[t + 1]) for t in range(cfg.num_steps - 1))


def test_window_signal_compares_whole_window_gradients(tmp_path, monkeypatch):
    """Independent batches give a finite cosine and leave the parameters alone; identical
    batches give the same whole-window gradient, cosine exactly 1."""
    import cast_core.seeding as seeding
    from cast_core.gradient_signal import window_signal
    from cast_core.types import Window

    trainer = Trainer(fake_config(num_steps=4, group_noise="shared"), tmp_path / "run", log=quiet)
    before = [p.detach().clone() for p in trainer.params]
    result = window_signal(trainer, Window(1, 2), batches=3)
    assert -1 <= result["cosine"] <= 1 and result["grad_norm"] > 0 and result["window"] == [1, 2]
    assert all(torch.equal(a, b) for a, b in zip(before, trainer.params))
    assert all(p.grad is None for p in trainer.params)
    monkeypatch.setattr(trainer, "pick_prompts", lambda step: ["a red circle", "a blue square"])
    real = seeding.seed_for
    monkeypatch.setattr(seeding, "seed_for", lambda seed, step, *rest: real(seed, 99, *rest))
    assert window_signal(trainer, Window(1, 2), batches=3)["cosine"] == pytest.approx(1.0, abs=1e-6)
    with pytest.raises(ValueError, match="do not fit"):
        window_signal(trainer, Window(3, 2), batches=2)


@pytest.mark.parametrize("value, ok", [("0:2", True), ("2", False), ("1:0", False), ("3:2", False)])
def test_cast_signal_window_steps_option(tmp_path, value, ok):
    from cast_core.cli import cli

    res = CliRunner().invoke(
        cli,
        [
            "signal",
            "--policy",
            "fake",
            "--scorer",
            "left-brightness",
            "--projector",
            "spatial",
            "--set",
            "decomposer=fake",
            "--set",
            "window=",
            "--set",
            "num_steps=4",
            "--set",
            "prompts_per_step=2",
            "--set",
            "group_size=4",
            "--set",
            'prompts=["a red circle", "a blue square"]',
            "--batches",
            "2",
            "--window-steps",
            value,
            "--out",
            str(tmp_path / "o"),
        ],
    )
    if ok:
        assert res.exit_code == 0, res.output
        assert "whole-window gradient cosine" in res.output and "window 0..1 of 4" in res.output
        assert (tmp_path / "o" / "window-signal.json").is_file()
    else:
        assert res.exit_code == 2 and "--window-steps" in res.output, res.output
