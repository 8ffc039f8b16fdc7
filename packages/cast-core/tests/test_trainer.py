"""The training loop end to end on the fake policy: learning, on-policy ratios, guards, run
directory, checkpoints and bit-identical resume (in process and after a real SIGKILL)."""

import json
import math
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import load_file

from cast_core.checkpoints import checkpoint_dirs, latest_checkpoint
from cast_core.cli import cli
from cast_core.config import ConfigError, TrainConfig
from cast_core.sde import sde_step
from cast_core.testing.fakes import fake_run_args
from cast_core.trainer import Trainer

PROMPTS = ["a red circle", "a blue square", "two green triangles"]


def fake_config(**overrides) -> TrainConfig:
    cfg = TrainConfig(
        policy="fake",
        scorer="left-brightness",
        decomposer="fake",
        projector="spatial",
        prompts=list(PROMPTS),
        group_size=8,
        prompts_per_step=2,
        num_steps=6,
        window_start=0,
        window_size=3,
        lr=0.05,
        clip_range=0.2,
        steps=30,
        sample_every=10,
        checkpoint_every=10,
    )
    for k, v in overrides.items():
        setattr(cfg, k, v)
    return cfg


def quiet(msg):
    pass


def metrics(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def adapter(run_dir):
    return load_file(str(latest_checkpoint(run_dir) / "adapter" / "adapter.safetensors"))


def test_spatial_reward_goes_up_and_run_directory_is_complete(tmp_path):
    run = tmp_path / "run"
    Trainer(fake_config(), run, log=quiet).run()
    m = metrics(run)
    assert [r["step"] for r in m] == list(range(1, 31))
    first, last = np.mean([r["reward_gm"] for r in m[:3]]), np.mean([r["reward_gm"] for r in m[-3:]])
    assert last > first + 0.05, (first, last)
    assert (run / "config.toml").is_file()
    assert sorted(p.name for p in (run / "samples").iterdir()) == ["step-00010.png", "step-00020.png", "step-00030.png"]
    assert [p.name for p in checkpoint_dirs(run)] == ["step-00010", "step-00020", "step-00030"]
    for key in (
        "loss",
        "clip_fraction",
        "approx_kl",
        "ratio_mean",
        "reward_am",
        "saturated_fraction",
        "pass_object",
        "pass_count",
        "step_time_s",
        "peak_memory_mb",
        "images_per_s",
    ):
        assert key in m[-1], key


def test_first_inner_epoch_is_exactly_on_policy(tmp_path):
    run = tmp_path / "run"
    Trainer(fake_config(steps=3, inner_epochs=1), run, log=quiet).run()
    for r in metrics(run):
        assert r["ratio_min"] == 1.0 and r["ratio_max"] == 1.0 and r["approx_kl"] == 0.0 and r["clip_fraction"] == 0.0


def test_second_inner_epoch_moves_off_policy(tmp_path):
    run = tmp_path / "run"
    Trainer(fake_config(steps=2, inner_epochs=2), run, log=quiet).run()
    assert metrics(run)[-1]["ratio_max"] > 1.0 or metrics(run)[-1]["ratio_min"] < 1.0


def test_resume_is_bit_identical(tmp_path):
    straight, split = tmp_path / "straight", tmp_path / "split"
    Trainer(fake_config(steps=6, checkpoint_every=3, inner_epochs=2, ema=0.9), straight, log=quiet).run()
    Trainer(fake_config(steps=3, checkpoint_every=3, inner_epochs=2, ema=0.9), split, log=quiet).run()
    Trainer(fake_config(steps=6, checkpoint_every=3, inner_epochs=2, ema=0.9), split, resume=True, log=quiet).run()
    a, b = adapter(straight), adapter(split)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    a, b = ema_adapter(straight), ema_adapter(split)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert [r["step"] for r in metrics(split)] == list(range(1, 7))
    assert [r["reward_gm"] for r in metrics(split)] == [r["reward_gm"] for r in metrics(straight)]


def test_sigkill_then_resume_matches_a_straight_run(tmp_path):
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    args = [
        *fake_run_args(
            prompts=PROMPTS,
            group_size=8,
            num_steps=6,
            window_size=3,
            lr=0.05,
            clip_range=0.2,
            checkpoint_every=1,
            sample_every=0,
            ema=0.99,
        ),
        "--steps",
        "150",
    ]  # 0.99: remembers past the kill
    code = "from cast_core.cli import main; main()"
    subprocess.run(
        [sys.executable, "-c", code, "train", *args, "--out", str(straight)], check=True, capture_output=True
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "train", *args, "--out", str(killed)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 60
    while time.time() < deadline and not (killed / "checkpoints" / "step-00020").exists():
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    at_kill = latest_checkpoint(killed)
    assert at_kill is not None and int(at_kill.name[5:]) < 150, "the run finished before it could be killed"
    out = subprocess.run([sys.executable, "-c", code, "train", "--resume", str(killed)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    a, b = adapter(straight), adapter(killed)
    assert all(torch.equal(a[k], b[k]) for k in a)
    a, b = ema_adapter(straight), ema_adapter(killed)  # the EMA state was restored bit for bit too
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def ema_adapter(run_dir):
    return load_file(str(latest_checkpoint(run_dir) / "ema-adapter" / "adapter.safetensors"))


def test_a_crash_while_saving_leaves_the_previous_checkpoint(tmp_path, monkeypatch):
    run = tmp_path / "run"
    trainer = Trainer(fake_config(steps=4, checkpoint_every=2), run, log=quiet)
    for _ in range(2):
        trainer.train_step()
    trainer.save()
    trainer.train_step()
    trainer.train_step()

    def explode(directory):
        (directory / "adapter").mkdir(parents=True)
        (directory / "adapter" / "adapter.safetensors").write_bytes(b"half a file")
        raise OSError("disk full")

    monkeypatch.setattr(trainer.policy, "save_adapter", explode)
    with pytest.raises(OSError):
        trainer.save()
    assert latest_checkpoint(run).name == "step-00002"
    trainer.files.unlock()  # the crashed process is gone, and its lock with it
    resumed = Trainer(fake_config(steps=4, checkpoint_every=2), run, resume=True, log=quiet)
    assert resumed.step == 2


def test_keep_last_checkpoints(tmp_path):
    run = tmp_path / "run"
    Trainer(fake_config(steps=5, checkpoint_every=1, keep_checkpoints=2, sample_every=0), run, log=quiet).run()
    assert [p.name for p in checkpoint_dirs(run)] == ["step-00004", "step-00005"]


class FlakyScorer:
    """Raises for one prompt, returns NaN for another, works for the rest."""

    def score(self, images, graphs, heatmaps=False):
        from cast_core.testing import LeftBrightnessScorer

        if graphs[0].prompt == "a red circle":
            raise RuntimeError("judge timed out")
        out = LeftBrightnessScorer().score(images, graphs, heatmaps)
        if graphs[0].prompt == "a blue square":
            out.scores = [s * float("nan") for s in out.scores]
        return out


def test_scorer_failures_and_nan_scores_skip_groups_not_runs(tmp_path):
    logs = []
    trainer = Trainer(fake_config(steps=6, prompts_per_step=3, sample_every=0), tmp_path / "run", log=logs.append)
    trainer.judge.scorer = FlakyScorer()
    last = trainer.run()
    assert trainer.counters["scorer_failures"] == 12  # two bad prompts a step, six steps
    assert any("scorer failed on prompt 'a red circle'" in line and "judge timed out" in line for line in logs)
    assert any("non-finite scores for prompt 'a blue square'" in line for line in logs)
    assert math.isfinite(last["loss"])


def test_non_finite_loss_skips_the_update(tmp_path):
    logs = []
    trainer = Trainer(fake_config(steps=2, sample_every=0), tmp_path / "run", log=logs.append)
    before = [p.detach().clone() for p in trainer.params]
    real = trainer.updater.sde_log_prob

    def poisoned(*args):
        step = real(*args)
        step.log_prob = step.log_prob * float("nan")
        return step

    trainer.updater.sde_log_prob = poisoned
    trainer.run()
    assert trainer.counters["skipped_updates"] == 2
    assert all(torch.equal(a, b) for a, b in zip(before, trainer.params))
    assert any("non-finite loss or gradient; update skipped" in line for line in logs)


def test_flow_grpo_recipe_loss_is_flow_grpos_formula(tmp_path):
    from cast_core.registry import get_recipe

    recipe = get_recipe("flow-grpo")
    cfg = fake_config(projector=recipe.projector, steps=1)
    cfg.update(dict(recipe.settings), "recipe")
    cfg.update(
        {
            "group_size": 6,
            "num_steps": 10,
            "beta": 0.0,
            "clip_range": 0.05,
            "window": None,
            "window_start": 0,
            "window_size": 9,
        },
        "test",
    )  # late steps: large ratios, clipping active
    trainer = Trainer(cfg, tmp_path / "run", log=quiet)
    prompts = trainer.pick_prompts(0)
    rollout = trainer.rollout(prompts, trainer.window_for(0, prompts), 0)
    scored = trainer.score_groups(prompts, rollout)
    rows, adv = scored.rows, scored.advantages
    assert rows == list(range(len(rollout.prompts)))
    with torch.no_grad():  # move off-policy so that ratios and clipping matter
        for p in trainer.params:
            p.add_(0.3 * torch.randn(p.shape, generator=torch.Generator().manual_seed(1)))
    expected = []
    a = np.clip(adv.mean(1).numpy(), -5.0, 5.0)
    for t, i in enumerate(rollout.step_indices):
        with torch.no_grad():
            v = trainer.policy.velocity(rollout.latents[:, t], rollout.sigmas[i], rollout.conditioning)
            lp = sde_step(
                v,
                rollout.latents[:, t],
                rollout.sigmas[i],
                rollout.sigmas[i + 1],
                cfg.eta,
                sigma_max=rollout.sigmas[1],
                prev_sample=rollout.next_latents[:, t],
            ).log_prob
        r = np.exp(lp.mean(dim=(1, 2)).numpy().astype(np.float64) - rollout.log_probs[:, t].mean(1).numpy())
        unclipped, clipped = -a * r, -a * np.clip(r, 1 - cfg.clip_range, 1 + cfg.clip_range)
        expected.append(np.mean(np.maximum(unclipped, clipped)))
    got = trainer.update(rollout, scored)
    assert got["loss"] == pytest.approx(float(np.mean(expected)), rel=1e-4, abs=1e-7)
    assert got["clip_fraction"] > 0


@pytest.mark.parametrize(
    "args, message",
    [
        (["--set", "lrr=1"], "--set: unknown config key 'lrr'. Did you mean 'lr'?"),
        (["--set", "lr=-1"], "config key 'lr': value -1.0 is out of range (0.0, 1.0]"),
        (["--set", "group_size=abc"], "--set: config key 'group_size' must be int, got 'abc'"),
        (
            ["--set", "ratio_mode=token"],
            "config key 'ratio_mode': 'token' is not allowed; choose one of 'position', 'sample'",
        ),
        (["--set", "lr"], "--set 'lr': expected KEY=VALUE"),
        (["--config", "nope.toml"], "config file nope.toml does not exist"),
        (["--policy", "flux3"], "Unknown policy 'flux3'. Choose one of: "),
        (["--set", "window_start=9", "--set", "num_steps=10"], "window_start=9 + window_size=2 exceeds num_steps=10"),
    ],
)
def test_config_errors_are_one_clear_line(args, message, tmp_path):
    out = CliRunner().invoke(
        cli,
        ["train", "--plugin", "cast", "--window", "none", "--scorer", "constant", "--out", str(tmp_path / "r"), *args],
    )
    assert out.exit_code != 0
    assert message in out.output, out.output
    assert "Traceback" not in out.output


def test_existing_run_directory_needs_resume(tmp_path):
    run = tmp_path / "run"
    Trainer(fake_config(steps=1), run, log=quiet).run()
    with pytest.raises(Exception, match="already holds a run; continue it with `cast train --resume"):
        Trainer(fake_config(steps=1), run, log=quiet)


def test_config_toml_round_trips(tmp_path):
    from cast_core.config import load_toml

    run = tmp_path / "run"
    cfg = fake_config(steps=1, policy_kwargs={"seed": 3, "rank": 2})
    Trainer(cfg, run, log=quiet).run()
    again = TrainConfig().update(load_toml(run / "config.toml"), "config.toml")
    assert again.to_dict() == cfg.to_dict()


def test_cast_train_cli_with_fake_components(tmp_path):
    run = tmp_path / "run"
    out = CliRunner().invoke(
        cli,
        [
            "train",
            "--plugin",
            "cast",
            "--window",
            "none",
            "--policy",
            "fake",
            "--scorer",
            "left-brightness",
            "--decomposer",
            "fake",
            "--set",
            "group_size=4",
            "--set",
            'prompts=["a dog"]',
            "--set",
            "prompts_per_step=1",
            "--steps",
            "3",
            "--out",
            str(run),
        ],
    )
    assert out.exit_code == 0, out.output
    assert "run directory:" in out.output and len(metrics(run)) == 3


def test_cast_sample_cli(tmp_path):
    target = tmp_path / "s.png"
    out = CliRunner().invoke(cli, ["sample", "--policy", "fake", "--prompt", "a dog", "-n", "3", "--out", str(target)])
    assert out.exit_code == 0, out.output
    from PIL import Image

    assert Image.open(target).size == (48, 16)


def test_policy_opt_reaches_the_policy_factory(tmp_path):
    """`--policy-opt` passes factory arguments (a device, a LoRA rank, here the fake's image size),
    and a malformed one is refused with the expected form."""
    target = tmp_path / "s.png"
    out = CliRunner().invoke(
        cli,
        [
            "sample",
            "--policy",
            "fake",
            "--prompt",
            "a dog",
            "-n",
            "3",
            "--out",
            str(target),
            "--policy-opt",
            "image_size=[8, 8]",
            "--policy-opt",
            "patch=2",
        ],
    )
    assert out.exit_code == 0, out.output
    from PIL import Image

    assert Image.open(target).size == (24, 8)
    bad = CliRunner().invoke(
        cli, ["sample", "--policy", "fake", "--prompt", "a dog", "--out", str(target), "--policy-opt", "image_size"]
    )
    assert bad.exit_code != 0 and "--policy-opt 'image_size': expected KEY=VALUE" in bad.output


class RecordingScorer:
    """Left-brightness verdicts; records which images each call scored and whether maps were asked."""

    def __init__(self):
        from cast_core.registry import get_atom_scorer

        self.inner = get_atom_scorer("left-brightness")
        self.calls = []

    def score(self, images, graphs, heatmaps=False):
        self.calls.append((images.clone(), heatmaps))
        return self.inner.score(images, graphs, heatmaps=heatmaps)


@pytest.mark.parametrize("source", ["final", "x0"])
def test_heatmaps_come_from_the_image_heatmap_source_names(tmp_path, source):
    trainer = Trainer(fake_config(steps=1, prompts_per_step=1, heatmap_source=source), tmp_path / "run", log=quiet)
    trainer.judge.scorer = RecordingScorer()
    window = trainer.window_for(1, ["a red circle"])
    rollout = trainer.rollout(["a red circle"], window, 0)
    trainer.score_groups(["a red circle"], rollout)
    calls = trainer.judge.scorer.calls
    assert torch.equal(calls[0][0], rollout.images)  # verdicts always judge the final images
    if source == "final":
        assert rollout.x0 is None and len(calls) == 1 and calls[0][1] is True
    else:
        # the maps: x̂0 before the window's first action, decoded — a function of the state only
        assert rollout.x0.shape[1] == 1 and len(calls) == 2 and calls[0][1] is False and calls[1][1] is True
        assert torch.equal(calls[1][0], trainer.policy.decode(rollout.x0[:, 0]))
        full = trainer.rollout(["a red circle"], window, 0)
        assert torch.equal(full.images, rollout.images)


def test_x0_heatmaps_train_the_fake_policy(tmp_path):
    run = tmp_path / "run"
    Trainer(fake_config(heatmap_source="x0", window_start=1), run, log=quiet).run()
    m = metrics(run)
    first, last = np.mean([r["reward_gm"] for r in m[:3]]), np.mean([r["reward_gm"] for r in m[-3:]])
    assert last > first + 0.05, (first, last)


@pytest.mark.parametrize("mode", ["independent", "shared"])
def test_group_noise_shares_the_starting_point_of_a_group(tmp_path, mode):
    trainer = Trainer(fake_config(group_noise=mode, group_size=4), tmp_path / mode, log=quiet)
    window = trainer.window_for(0, PROMPTS[:2])
    out = trainer.rollout(PROMPTS[:2], window, 0, x0_steps=(0,))
    x0 = out.x0[:, 0]  # Tweedie estimate at step 0: a function of the starting noise only
    same_in_group = [torch.equal(x0[g * 4], x0[g * 4 + j]) for g in range(2) for j in range(1, 4)]
    assert all(same_in_group) == (mode == "shared") and any(same_in_group) == (mode == "shared")
    assert not torch.equal(x0[0], x0[4])  # groups still start apart
    # the window's SDE noise still makes the images of a shared group differ
    assert not torch.equal(out.images[0], out.images[1])


def test_group_noise_is_validated():
    with pytest.raises(ConfigError, match="group_noise"):
        TrainConfig(group_noise="same").validate()


def test_block_noise_trains_on_policy_and_explores_block_constant_moves(tmp_path):
    """noise_block reaches both the sampler and the re-scoring: the first pass recomputes the
    sampled log-probs exactly, the window's moves are block-constant, and the reward still rises."""
    from cast_core.sde import block_mean

    cfg = fake_config(noise_block=4)
    trainer = Trainer(cfg, tmp_path / "probe", log=quiet)
    window = trainer.window_for(0, PROMPTS[:2])
    out = trainer.rollout(PROMPTS[:2], window, 0)
    sig = out.sigmas
    for t, si in enumerate(out.step_indices):
        step = trainer.updater.sde_log_prob(
            out.latents[:, t], out.next_latents[:, t], sig[si], sig[si + 1], out.conditioning, sig[1]
        )
        move = (out.next_latents[:, t] - step.mean).detach()
        torch.testing.assert_close(move, block_mean(move, 4), atol=1e-5, rtol=0)
        assert float(move.abs().max()) > 0
    run = tmp_path / "run"
    Trainer(fake_config(noise_block=4, steps=30), run, log=quiet).run()
    m = metrics(run)
    assert all(r["ratio_min"] == 1.0 and r["ratio_max"] == 1.0 for r in m)
    first, last = np.mean([r["reward_gm"] for r in m[:3]]), np.mean([r["reward_gm"] for r in m[-3:]])
    assert last > first + 0.05, (first, last)


def test_progress_projects_the_step_a_time_budget_ends_at(monkeypatch):
    """A budgeted run shows the step it will stop at, not its huge step cap."""
    from cast_core import progress as progress_mod
    from cast_core.progress import TrainingProgress

    now = [100.0]
    monkeypatch.setattr(progress_mod.time, "monotonic", lambda: now[0])
    lines: list[str] = []
    progress = TrainingProgress(100000, 0, lines.append, minutes=1.0)
    progress.tty = False
    now[0] += 6.0  # two steps took 6 s; 54 s of the budget are left: 18 more steps
    assert progress.expected_total(2) == 20
    progress.update(2, {"reward_gm": 0.5, "reward_am": 0.6, "loss": 0.1, "images_per_s": 1.0})
    assert lines[-1].startswith("step 2/20 ") and lines[-1].endswith(" 0.1/1 min")
    now[0] += 55.0  # past the budget: the current step is the last
    assert progress.expected_total(3) == 3
    assert TrainingProgress(50, 0, lines.append, minutes=1.0).expected_total(0) == 50
    assert TrainingProgress(50, 0, lines.append).expected_total(10) == 50  # no budget: the step cap


def test_bf16_precision_autocasts_sampling_and_update_and_stays_on_policy(tmp_path):
    """``precision = "bf16"`` used to reach accelerate only and change nothing: the policy ran in
    float32. Now sampling and the update's forward both autocast, so the rollout moves (a little)
    and the first pass still recomputes the sampled log-probs exactly."""
    from cast_core import Window

    rollouts = {}
    for precision in ("no", "bf16"):
        trainer = Trainer(fake_config(precision=precision), tmp_path / precision, log=quiet)
        rollouts[precision] = trainer.rollout(PROMPTS[:2], Window(0, 3), 0).log_probs
    assert not torch.equal(rollouts["no"], rollouts["bf16"])
    assert torch.allclose(rollouts["no"], rollouts["bf16"], rtol=0.05, atol=0.5)
    run = tmp_path / "run"
    Trainer(fake_config(steps=2, inner_epochs=1, precision="bf16"), run, log=quiet).run()
    for r in metrics(run):
        assert r["ratio_min"] == 1.0 and r["ratio_max"] == 1.0 and r["approx_kl"] == 0.0


def test_ema_adapter_is_written_next_to_the_live_one(tmp_path):
    run = tmp_path / "run"
    trainer = Trainer(fake_config(steps=3, checkpoint_every=3, ema=0.5), run, log=quiet)
    trainer.run()
    ckpt = latest_checkpoint(run)
    ema = load_file(str(ckpt / "ema-adapter" / "adapter.safetensors"))
    live = adapter(run)
    names = ["lora_A", "lora_B", "position_delta"]  # FakePolicy's trainable_parameters() order
    for name, e, p in zip(names, trainer.ema, trainer.params):
        assert torch.equal(ema[name], e) and torch.equal(live[name], p.detach())
    assert not torch.equal(ema["position_delta"], live["position_delta"])  # the average lags the live weights
    no_ema = tmp_path / "plain"
    Trainer(fake_config(steps=1, checkpoint_every=1), no_ema, log=quiet).run()
    assert not (latest_checkpoint(no_ema) / "ema-adapter").exists()
