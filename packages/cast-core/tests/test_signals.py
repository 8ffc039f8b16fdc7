"""Signals end a run the way the docs promise, in a real process (signals and exit codes need
one): SIGTERM, what schedulers send before they kill, is the first Ctrl-C — the step finishes, a
checkpoint is written, the exit code is 143 and ``--resume`` continues bit-identically — on every
process of a multi-process run; a signal before the loop, or a second one, ends the command at
once with 130 (SIGINT) or 143 (SIGTERM) and one line, never click's "Aborted!" and exit 1."""

import os
import signal
import subprocess
import sys
import time

import pytest

from cast_core.checkpoints import step_dirs, verify_checkpoint
from cast_core.run_dir import read_metrics
from cast_core.testing.fakes import fake_run_args
from resume_check import assert_resume_matches_a_straight_run
from test_trainer import PROMPTS

ARGS = fake_run_args(
    prompts=PROMPTS, group_size=8, num_steps=6, window_size=3, lr=0.05, clip_range=0.2,
    checkpoint_every=1000, sample_every=0,
)  # fmt: skip
MAIN = "from cast_core.cli import main; main()"


def start(code: str, *args: str, **popen) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        **popen,
    )


def wait_for(condition, what: str, timeout: float = 120) -> None:
    deadline = time.time() + timeout
    while not condition():
        assert time.time() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def one_error_line(err: str) -> str:
    assert "Traceback" not in err and "Aborted!" not in err, err
    lines = [line for line in err.splitlines() if line.startswith("Error:")]
    assert len(lines) == 1, err
    return lines[0]


def test_sigterm_ends_with_a_checkpoint_and_exit_143_then_resumes_identically(tmp_path):
    run = tmp_path / "run"
    proc = start(MAIN, "train", *ARGS, "--steps", "100000", "--out", str(run))
    wait_for(lambda: read_metrics(run / "metrics.jsonl"), "the first metrics row")
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    step = read_metrics(run / "metrics.jsonl")[-1]["step"]
    line = one_error_line(err)
    assert f"interrupted at step {step}; checkpoint written" in line and f"--resume {run}" in line
    assert "interrupted (SIGTERM): finishing this step" in err
    assert [p.name for p in step_dirs(run)] == [f"step-{step:05d}"] and verify_checkpoint(step_dirs(run)[0]) is None
    assert_resume_matches_a_straight_run(tmp_path, run, step, MAIN, ARGS)


#: the model build of a run made slow, with a marker saying it has begun
SLOW_BUILD = """
import pathlib, time, sys
from cast_core.trainer import Trainer
build = Trainer._build_policy
def slow(self):
    pathlib.Path(sys.argv[-1]).with_suffix(".building").touch()
    time.sleep(60)
    return build(self)
Trainer._build_policy = slow
from cast_core.cli import main; main(sys.argv[1:])
"""


@pytest.mark.parametrize("sig, code, name", [(signal.SIGINT, 130, "Ctrl-C (SIGINT)"), (signal.SIGTERM, 143, "SIGTERM")])
def test_a_signal_before_the_loop_exits_with_the_signals_code_and_one_line(tmp_path, sig, code, name):
    run = tmp_path / "run"
    proc = start(SLOW_BUILD, "train", *ARGS, "--steps", "3", "--out", str(run))
    wait_for(run.with_suffix(".building").exists, "the model build")
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    assert f"aborted by {name} before training started; nothing was written" in one_error_line(err)
    assert not (run / "config.toml").exists()


#: the second step of a run made slow (after the first step's checkpoint), with a marker
SLOW_SECOND_STEP = """
import pathlib, time, sys
from cast_core.trainer import Trainer
step = Trainer.train_step
def slow(self):
    if self.step == 1:
        pathlib.Path(sys.argv[-1]).with_suffix(".second").touch()
        time.sleep(60)
    return step(self)
Trainer.train_step = slow
from cast_core.cli import main; main(sys.argv[1:])
"""


def test_a_second_signal_aborts_at_once_with_its_code(tmp_path):
    run = tmp_path / "run"
    args = [a if a != "checkpoint_every=1000" else "checkpoint_every=1" for a in ARGS]
    proc = start(SLOW_SECOND_STEP, "train", *args, "--steps", "5", "--out", str(run))
    wait_for(run.with_suffix(".second").exists, "the second step")
    proc.send_signal(signal.SIGTERM)  # finish the step...
    time.sleep(0.5)
    t0 = time.time()
    proc.send_signal(signal.SIGINT)  # ...no: now
    out, err = proc.communicate(timeout=60)
    assert time.time() - t0 < 30, "the second signal did not abort at once"
    assert proc.returncode == 130, err
    line = one_error_line(err)
    assert "aborted by Ctrl-C (SIGINT); nothing after checkpoint step 1 was kept" in line and f"--resume {run}" in line
    assert [p.name for p in step_dirs(run)] == ["step-00001"]


def test_sigterm_stops_every_process_of_a_two_process_run_at_one_step(tmp_path):
    """SIGTERM to `cast train --num-processes 2` reaches both ranks once (through torchrun's
    agent); they agree on the step, rank 0 checkpoints it, and the command exits 143."""
    run = tmp_path / "run"
    args = [a if a != "group_size=8" else "group_size=4" for a in ARGS]
    proc = start(MAIN, "train", *args, "--num-processes", "2", "--steps", "100000", "--out", str(run))
    wait_for(lambda: read_metrics(run / "metrics.jsonl"), "the first metrics row", timeout=240)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 143, err
    step = read_metrics(run / "metrics.jsonl")[-1]["step"]
    # rank 0 says it once (rank 1 exits alike, silently); no launcher traceback; nobody aborted
    assert f"interrupted at step {step}; checkpoint written" in one_error_line(err)
    assert [p.name for p in step_dirs(run)] == [f"step-{step:05d}"] and verify_checkpoint(step_dirs(run)[0]) is None
    resumed = start(MAIN, "train", "--resume", str(run), "--num-processes", "2", "--steps", str(step + 1))
    out, err = resumed.communicate(timeout=240)
    assert resumed.returncode == 0, err
    assert [r["step"] for r in read_metrics(run / "metrics.jsonl")] == list(range(1, step + 2))


def test_sigkill_of_the_launching_command_stops_the_processes_with_a_checkpoint(tmp_path):
    """`cast train --num-processes N` runs torchrun in a session of its own (so that one Ctrl-C
    reaches each process once); if the command itself is SIGKILLed, its launcher hears that as
    SIGTERM, so the processes checkpoint and stop instead of training on unseen."""
    run = tmp_path / "run"
    args = [a if a != "group_size=8" else "group_size=4" for a in ARGS]
    proc = start(MAIN, "train", *args, "--num-processes", "2", "--steps", "100000", "--out", str(run))
    wait_for(lambda: read_metrics(run / "metrics.jsonl"), "the first metrics row", timeout=240)
    proc.kill()
    proc.communicate(timeout=60)
    wait_for(lambda: step_dirs(run), "the checkpoint of the step in progress", timeout=120)
    wait_for(lambda: not (run / ".lock").exists() or _unlocked(run / ".lock"), "the processes to end", timeout=120)
    rows = len(read_metrics(run / "metrics.jsonl"))
    time.sleep(2)
    assert len(read_metrics(run / "metrics.jsonl")) == rows, "the processes train on without their command"
    step = read_metrics(run / "metrics.jsonl")[-1]["step"]
    assert [p.name for p in step_dirs(run)] == [f"step-{step:05d}"] and verify_checkpoint(step_dirs(run)[0]) is None


def _unlocked(lock) -> bool:
    import fcntl

    with open(lock) as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False
        fcntl.flock(f, fcntl.LOCK_UN)
        return True


def test_ctrl_c_in_any_command_or_while_plugins_load_exits_130_with_one_line(monkeypatch, capsys):
    """Not only `cast train`: click would print "Aborted!" and exit 1 for a Ctrl-C anywhere else."""
    import click
    from click.testing import CliRunner

    import cast_core.cli as cli_module
    from cast_core.interrupt import Aborted

    group = cli_module.CastGroup("probe")

    @group.command("stop")
    @click.option("--term", is_flag=True)
    def stop(term):
        raise Aborted(signal.SIGTERM) if term else KeyboardInterrupt

    out = CliRunner().invoke(group, ["stop"])
    assert out.exit_code == 130 and out.output == "Error: interrupted by Ctrl-C (SIGINT)\n", out.output
    out = CliRunner().invoke(group, ["stop", "--term"])
    assert out.exit_code == 143 and out.output == "Error: interrupted by SIGTERM\n", out.output

    def interrupted_import(group=None):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli_module, "install_plugin_commands", interrupted_import)
    with pytest.raises(SystemExit) as exit_:
        cli_module.main(["plugins"])
    assert exit_.value.code == 130
    assert capsys.readouterr().err == "Error: interrupted by Ctrl-C (SIGINT)\n"
