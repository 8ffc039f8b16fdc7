"""The trainer's start-up memory check (``memory_check``): on a CUDA device the main process plans
the run, every process gets the verdict, and a configuration that cannot fit ends the run in one
line before any weight is loaded. No GPU here: the device is faked for the check only."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from click.testing import CliRunner

import cast_core.trainer as trainer_module
from cast_core.cli import cli
from cast_core.config import build_config
from cast_core.distributed import Distributed
from cast_core.errors import ConfigError
from cast_core.memory_plan import plan_memory, refuse_if_unfit
from cast_core.plan_budget import CUDA_ALLOWANCE
from cast_core.testing.fakes import fake_run_args

SETS = ["prompts_per_step=2", "group_size=4", "micro_batch_size=8"]


def room_for_two_samples() -> int:
    """GPU memory where the fake policy's micro-batch of 2 fits and the configured 8 does not."""
    cfg = build_config(recipe="cast", components={"scorer": "constant"}, sets=SETS)
    train = plan_memory(cfg, gpu_memory=80 * 2**30).phases["train"]
    return CUDA_ALLOWANCE + train["at_1"] + train["per_item"]


@pytest.fixture(autouse=True)
def plan_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CAST_CACHE_DIR", str(tmp_path / "cache"))


class Group:
    """A stand-in for Distributed: rank, world, and a broadcast that delivers the main's object."""

    def __init__(self, rank=0, world=1, from_main=None):
        self.rank, self.world, self.from_main = rank, world, from_main

    is_main = property(lambda self: self.rank == 0)
    active = property(lambda self: self.world > 1)

    def broadcast_object(self, obj):
        return obj if self.is_main else self.from_main


def test_a_plan_that_fits_is_logged_and_one_that_does_not_is_refused():
    cfg = build_config(recipe="cast", components={"scorer": "constant"}, sets=SETS)
    lines = []
    refuse_if_unfit(cfg, Group(), 80 * 2**30, lines.append)
    assert len(lines) == 1 and lines[0].startswith("memory plan: peak ") and "of 80.00 GiB" in lines[0]
    with pytest.raises(ConfigError, match="memory_check = false skips this check") as err:
        refuse_if_unfit(cfg, Group(), room_for_two_samples(), lines.append)
    assert "\n" not in str(err.value) and "micro_batch_size" in str(err.value)


def test_other_processes_follow_the_main_processs_verdict_without_planning(monkeypatch):
    def no_plan(*args, **kwargs):
        raise AssertionError("only the main process plans")

    monkeypatch.setattr("cast_core.memory_plan.check_fits", no_plan)
    cfg = build_config(recipe="cast", components={"scorer": "constant"}, sets=SETS)
    with pytest.raises(ConfigError, match="too small"):
        refuse_if_unfit(cfg, Group(rank=1, world=2, from_main=("refuse", "too small")), 2**20)
    refuse_if_unfit(cfg, Group(rank=1, world=2, from_main=None), 2**20)  # a policy that cannot plan


def _fake_cuda(monkeypatch, total_memory):
    class CudaDistributed(Distributed):
        def __init__(self, accelerator=None):
            super().__init__(accelerator)
            self.device = torch.device("cuda", 0)

    monkeypatch.setattr(trainer_module, "Distributed", CudaDistributed)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: SimpleNamespace(total_memory=total_memory))


def test_on_a_cuda_device_the_trainer_refuses_a_run_that_cannot_fit(tmp_path, monkeypatch):
    _fake_cuda(monkeypatch, room_for_two_samples())
    sets = [a for s in SETS for a in ("--set", s)]
    out = CliRunner().invoke(cli, ["train", *fake_run_args(**RUN), *sets, "--out", str(tmp_path / "run")])
    assert out.exit_code != 0
    assert "memory_check = false" in out.output and "micro_batch_size" in out.output
    assert "Traceback" not in out.output
    assert not (tmp_path / "run" / "checkpoints").exists()  # nothing was trained


RUN = dict(prompts=["a red cat", "a blue dog"], group_size=4, prompts_per_step=2, sample_every=0)


def test_the_check_runs_only_on_cuda_and_only_when_asked(tmp_path, monkeypatch):
    def refuse(*args, **kwargs):
        raise ConfigError("refused by the test")

    monkeypatch.setattr(trainer_module, "refuse_if_unfit", refuse)
    cpu = CliRunner().invoke(cli, ["train", *fake_run_args(**RUN), "--steps", "1", "--out", str(tmp_path / "cpu")])
    assert cpu.exit_code == 0, cpu.output  # the CPU: no check
    _fake_cuda(monkeypatch, 2**20)
    on = CliRunner().invoke(cli, ["train", *fake_run_args(**RUN), "--out", str(tmp_path / "on")])
    assert "refused by the test" in on.output
    off = CliRunner().invoke(cli, ["train", *fake_run_args(**RUN, memory_check=False), "--out", str(tmp_path / "off")])
    assert "refused by the test" not in off.output
