"""The conformance kit of an :class:`~cast_core.protocols.Objective`: what the trainer relies on,
checked on the built-in fake policy (cast-core alone, seconds per run).

A plugin's tests subclass it and name their registered objective::

    from cast_core.testing import ObjectiveConformance

    class TestMyObjective(ObjectiveConformance):
        objective = "my-objective"
        objective_kwargs = {"temperature": 0.5}

It trains the objective with scalar and with CAST's per-position credit, checks that micro-
batching does not change the update, that a run killed with SIGKILL and resumed ends with the
adapter of the uninterrupted run, bit for bit (state the objective keeps — an old policy —
included), and that two processes train as one. The last two launch ``cast train`` in
subprocesses (about 10–30 s each).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

#: the fake run the kit trains: tiny enough for seconds, large enough for two groups per step
_PROMPTS = ["a red circle", "a blue square", "a green triangle", "a yellow star"]
_SETTINGS: dict[str, Any] = {
    "prompts": _PROMPTS,
    "group_size": 4,
    "prompts_per_step": 2,
    "num_steps": 6,
    "window_size": 3,
    "lr": 0.05,
    "clip_range": 0.2,
    "checkpoint_every": 1,
    "sample_every": 0,
    "heatmap_source": "final",
}


def _adapter(run: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    from cast_core.checkpoints import latest_checkpoint

    return load_file(str(latest_checkpoint(run) / "adapter" / "adapter.safetensors"))


class ObjectiveConformance:
    """Set ``objective`` (the registered name) and, if needed, ``objective_kwargs``."""

    objective: str = ""
    objective_kwargs: dict = {}

    # -- helpers -----------------------------------------------------------------------------------
    def settings(self, **extra: Any) -> dict[str, Any]:
        from cast_core.registry import objective_uses_window

        out = {**_SETTINGS, "objective": self.objective, **extra}
        if not objective_uses_window(self.objective):  # an ODE-sampling objective has no window to size
            out.pop("window_size")
        if self.objective_kwargs:
            out["objective_kwargs"] = dict(self.objective_kwargs)
        return out

    def args(self, projector: str = "spatial", **extra: Any) -> list[str]:
        from cast_core.testing.fakes import fake_run_args

        args = fake_run_args(**self.settings(**extra))
        args[args.index("--projector") + 1] = projector
        return args

    def trainer(self, run_dir: Path, projector: str = "spatial", **extra: Any):
        from cast_core.config import build_config
        from cast_core.trainer import Trainer

        steps = extra.pop("steps", 2)
        args = self.args(projector, **extra)
        components = {args[i][2:]: args[i + 1] for i in range(0, len(args), 2) if args[i] not in ("--set", "--recipe")}
        sets = [args[i + 1] for i in range(0, len(args), 2) if args[i] == "--set"]
        cfg = build_config(recipe="cast", components=components, sets=sets, steps=steps)
        return Trainer(cfg, run_dir, log=lambda msg: None)

    def cast_train(self, n: int, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
        cmd = [sys.executable, "-m", "cast_core.cli", "train", *args, "--num-processes", str(n)]
        done = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout, env={**os.environ, "OMP_NUM_THREADS": "1"}
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return done

    # -- the contract ------------------------------------------------------------------------------
    def test_is_objective(self):
        from cast_core.protocols import Objective
        from cast_core.registry import build_objective
        from cast_core.config import TrainConfig

        obj = build_objective(TrainConfig(objective=self.objective, objective_kwargs=dict(self.objective_kwargs)))
        assert isinstance(obj, Objective)
        assert isinstance(obj.uses_window, bool)

    def test_optional_features_keep_their_contracts(self, tmp_path):
        from cast_core.protocols import KeepsState, SamplesWithOwnPolicy

        trainer = self.trainer(tmp_path / "run")
        obj = trainer.objective
        before = [p.detach().clone() for p in trainer.params]
        if isinstance(obj, SamplesWithOwnPolicy):
            with obj.sampling(trainer.params):
                pass
            assert all(torch.equal(p, b) for p, b in zip(trainer.params, before)), "sampling() must restore the params"
        if isinstance(obj, KeepsState):
            trainer.run()
            values, tensors = obj.state()
            saved = {k: v.detach().clone() for k, v in tensors.items()}
            obj.after_update(trainer.params, 10_000)  # moves the state
            obj.restore(values, saved)
            again = obj.state()[1]
            assert set(again) == set(saved) and all(torch.equal(again[k], saved[k]) for k in saved)

    def _trains(self, run_dir: Path, projector: str) -> None:
        trainer = self.trainer(run_dir, projector)
        before = [p.detach().clone() for p in trainer.params]
        last = trainer.run()
        assert trainer.step == 2 and "skipped" not in last
        assert torch.isfinite(torch.tensor(last["loss"])), last
        assert any(not torch.equal(p, b) for p, b in zip(trainer.params, before)), "the adapter did not move"

    def test_trains_with_scalar_credit(self, tmp_path):
        self._trains(tmp_path / "scalar", "scalar")

    def test_trains_with_per_position_credit(self, tmp_path):
        self._trains(tmp_path / "spatial", "spatial")

    def test_micro_batches_do_not_change_the_update(self, tmp_path):
        whole = self.trainer(tmp_path / "whole", steps=1)
        whole.run()
        micro = self.trainer(tmp_path / "micro", micro_batch_size=1, steps=1)
        micro.run()
        for a, b in zip(whole.params, micro.params):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)

    def test_sigkill_then_resume_is_bit_identical(self, tmp_path):
        straight, killed = tmp_path / "straight", tmp_path / "killed"
        args = self.args()
        self.cast_train(1, *args, "--steps", "8", "--out", str(straight))
        proc = subprocess.Popen(
            [sys.executable, "-m", "cast_core.cli", "train", *args, "--steps", "8", "--out", str(killed)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
        )
        deadline = time.time() + 120
        while time.time() < deadline and not (killed / "checkpoints" / "step-00003").exists():
            time.sleep(0.02)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        self.cast_train(1, "--resume", str(killed))
        a, b = _adapter(straight), _adapter(killed)
        assert all(torch.equal(a[k], b[k]) for k in a), {k: float((a[k] - b[k]).abs().max()) for k in a}

    def test_two_processes_train_as_one(self, tmp_path):
        one, two = tmp_path / "one", tmp_path / "two"
        self.cast_train(1, *self.args(), "--steps", "2", "--out", str(one))
        self.cast_train(2, *self.args(), "--steps", "2", "--out", str(two))
        a, b = _adapter(one), _adapter(two)
        for k in a:
            torch.testing.assert_close(a[k], b[k], atol=1e-5, rtol=1e-4)
