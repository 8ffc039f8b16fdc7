"""``async_scoring = true`` changes timing, never numbers: the same samples, verdicts, advantages
and adapter as the synchronous run, bit for bit — on the fake and the shapes policies, with
groups that fit a chunk and groups split over two, after a SIGKILL and resume, and over two
processes (cast_core/async_scoring.py says why the overlap is inside a step)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from cast_core.checkpoints import latest_checkpoint
from cast_core.config import TrainConfig, build_config
from cast_core.run_dir import read_metrics
from cast_core.testing.fakes import fake_run_args
from cast_core.trainer import Trainer

TIMING = {"step_time_s", "images_per_s", "peak_memory_mb", "judge_wait_s"}


def _fake(**overrides) -> TrainConfig:
    cfg = TrainConfig(
        policy="fake",
        scorer="left-brightness",
        decomposer="fake",
        prompts=["a red circle", "two blue squares", "a green triangle", "one yellow star"],
        group_size=4,
        prompts_per_step=3,
        num_steps=4,
        window_start=1,
        window_size=2,
        lr=0.05,
        clip_range=0.2,
        steps=3,
        sample_every=0,
        checkpoint_every=10,
        sample_batch_size=4,
    )
    for k, v in overrides.items():
        setattr(cfg, k, v)
    return cfg


class Recorder:
    """Keeps what each step's update was given: the rows, ids and advantage maps."""

    def __init__(self, trainer: Trainer):
        self.seen: list[tuple] = []
        update = trainer.update

        def recording(rollout, scored):
            self.seen.append((rollout.images.clone(), list(scored.ids), scored.advantages.clone()))
            return update(rollout, scored)

        trainer.update = recording


def _train(cfg: TrainConfig, run: Path) -> tuple[Trainer, Recorder, list[dict]]:
    trainer = Trainer(cfg, run, log=lambda m: None)
    recorder = Recorder(trainer)
    trainer.run()
    trainer.close()
    rows = [{k: v for k, v in r.items() if k not in TIMING} for r in read_metrics(run / "metrics.jsonl")]
    return trainer, recorder, rows


def _same(a, b) -> None:
    (ta, ra, ma), (tb, rb, mb) = a, b
    assert ma == mb  # every logged number but the clocks
    assert len(ra.seen) == len(rb.seen) == ta.step
    for (ia, ida, aa), (ib, idb, ab) in zip(ra.seen, rb.seen):
        assert torch.equal(ia, ib) and ida == idb and torch.equal(aa, ab)
    assert all(torch.equal(p, q) for p, q in zip(ta.params, tb.params))


@pytest.mark.parametrize("chunk", [4, 3], ids=["group-per-chunk", "groups-split-over-chunks"])
def test_fake_policy_async_equals_sync(tmp_path, chunk):
    sync = _train(_fake(sample_batch_size=chunk), tmp_path / "sync")
    overlapped = _train(_fake(sample_batch_size=chunk, async_scoring=True), tmp_path / "async")
    _same(sync, overlapped)
    assert any(not torch.equal(p, torch.zeros_like(p)) for p in overlapped[0].params)


def test_two_scorers_async_equals_sync(tmp_path):
    both = [{"name": "left-brightness"}, {"name": "brightness", "weight": 0.5}]
    _same(
        _train(_fake(scorers=both), tmp_path / "sync"),
        _train(_fake(scorers=both, async_scoring=True), tmp_path / "async"),
    )


def test_shapes_policy_async_equals_sync(tmp_path):
    def cfg(**extra):
        sets = ["steps=2", "prompts_per_step=2", "sample_batch_size=8", "sample_every=0"]
        sets += [f"{k}={str(v).lower()}" for k, v in extra.items()]
        return build_config(recipe="shapes", sets=sets)

    _same(_train(cfg(), tmp_path / "sync"), _train(cfg(async_scoring=True), tmp_path / "async"))


def test_one_chunk_overlaps_nothing_and_says_so(tmp_path):
    logs: list[str] = []
    Trainer(_fake(sample_batch_size=0, async_scoring=True), tmp_path / "run", log=logs.append)
    assert any("nothing overlaps" in m and "sample_batch_size=4" in m for m in logs)


# -- whole runs through `cast train`: SIGKILL and resume, two processes ------------------------------
ARGS = fake_run_args(
    prompts=["a red circle", "two blue squares", "a green triangle"],
    prompts_per_step=3,
    group_size=4,
    num_steps=4,
    window_start=1,
    window_size=2,
    sample_batch_size=4,
    sample_every=0,
    checkpoint_every=1,
    lr=0.05,
)


def _cast_train(*args: str, n: int = 1) -> None:
    cmd = [sys.executable, "-m", "cast_core.cli", "train", *args]
    if n > 1:
        cmd += ["--num-processes", str(n)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-3000:]


def _adapter(run: Path) -> dict[str, torch.Tensor]:
    return load_file(str(latest_checkpoint(run) / "adapter" / "adapter.safetensors"))


def _equal(a: Path, b: Path) -> None:
    x, y = _adapter(a), _adapter(b)
    assert set(x) == set(y) and all(torch.equal(x[k], y[k]) for k in x)
    assert [r["reward_gm"] for r in read_metrics(a / "metrics.jsonl")] == [
        r["reward_gm"] for r in read_metrics(b / "metrics.jsonl")
    ]


def test_async_killed_and_resumed_equals_sync_straight(tmp_path):
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    _cast_train(*ARGS, "--steps", "30", "--out", str(straight))
    proc = subprocess.Popen(
        [sys.executable, "-m", "cast_core.cli", "train", *ARGS, "--set", "async_scoring=true", "--steps", "30",
         "--out", str(killed)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    deadline = time.time() + 120
    while time.time() < deadline and not (killed / "checkpoints" / "step-00002").exists():
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert 2 <= int(latest_checkpoint(killed).name.split("-")[1]) < 30  # killed in the middle of the run
    _cast_train("--resume", str(killed))
    _equal(straight, killed)


def test_two_processes_async_equals_two_processes_sync(tmp_path):
    _cast_train(*ARGS, "--steps", "2", "--out", str(tmp_path / "sync"), n=2)
    _cast_train(*ARGS, "--set", "async_scoring=true", "--steps", "2", "--out", str(tmp_path / "async"), n=2)
    _equal(tmp_path / "sync", tmp_path / "async")
