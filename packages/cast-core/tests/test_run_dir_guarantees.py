"""Run directories that survive anything: reused directories refused, damaged checkpoints
detected by their manifest and skipped for the newest intact one (the resumed run still ends
bit-identical to an uninterrupted one), no silent restart from step 0, torn metrics tolerated,
one writer at a time, Ctrl-C ending with a checkpoint, and SIGKILL at every point of a
checkpoint write."""

import hashlib
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import torch

from cast_core.checkpoints import find_intact_checkpoint, step_dirs, verify_checkpoint
from cast_core.errors import CastError
from cast_core.report import write_report
from cast_core.run_dir import read_metrics
from cast_core.testing.fakes import fake_run_args
from cast_core.trainer import Trainer
from tests.resume_check import assert_resume_matches_a_straight_run
from tests.test_trainer import PROMPTS, adapter, fake_config, quiet


def snapshot(root):
    """Every file under ``root`` with its sha256: a refused command must change none of them."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != ".lock"
    }


def cfg(**kw):
    return fake_config(**{"steps": 6, "checkpoint_every": 2, "sample_every": 0, "keep_checkpoints": 3, **kw})


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    """The uninterrupted 6-step run every damaged-and-resumed run must reproduce."""
    run = tmp_path_factory.mktemp("straight") / "run"
    Trainer(cfg(), run, log=quiet).run()
    return adapter(run)


def run_to(run, steps):
    Trainer(cfg(steps=steps), run, log=quiet).run()


def test_a_non_empty_directory_without_a_run_is_refused(tmp_path):
    run = tmp_path / "run"
    (run / "checkpoints" / "step-00400" / "adapter").mkdir(parents=True)
    (run / "checkpoints" / "step-00400" / "state.json").write_text('{"step": 400}')
    (run / "metrics.jsonl").write_text('{"step": 1}\n')
    before = snapshot(run)
    with pytest.raises(CastError, match=r"is not empty \(2 entries.*new or empty --out"):
        Trainer(cfg(), run, log=quiet)
    assert snapshot(run) == before
    (tmp_path / "file").write_text("x")
    with pytest.raises(CastError, match="is a file"):
        Trainer(cfg(), tmp_path / "file", log=quiet)


def _truncate(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _flip_last(path):
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x40
    path.write_bytes(bytes(data))


DAMAGE = {
    "truncated adapter": lambda c: _truncate(c / "adapter" / "adapter.safetensors"),
    "truncated optimizer": lambda c: _truncate(c / "optimizer.pt"),
    "flipped byte": lambda c: (c / "optimizer.pt").write_bytes(b"\x00" + (c / "optimizer.pt").read_bytes()[1:]),
    # loads without complaint but holds other weights: only the checksum can tell
    "flipped weight byte": lambda c: _flip_last(c / "adapter" / "adapter.safetensors"),
    "broken state.json": lambda c: (c / "state.json").write_text('{"step": 6, "coun'),
    "deleted state.json": lambda c: (c / "state.json").unlink(),
    "deleted adapter": lambda c: (c / "adapter" / "adapter.safetensors").unlink(),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_damaged_latest_checkpoint_falls_back_and_still_ends_identical(tmp_path, straight, damage):
    run = tmp_path / "run"
    run_to(run, 6)
    latest = step_dirs(run)[-1]
    DAMAGE[damage](latest)
    assert verify_checkpoint(latest) is not None
    found, skipped = find_intact_checkpoint(run)
    assert found.name == "step-00004" and [p.name for p, _ in skipped] == ["step-00006"]
    lines = []
    resumed = Trainer(cfg(), run, resume=True, log=lines.append)
    assert resumed.step == 4
    assert any(line.startswith("warning: skipping checkpoint step-00006:") for line in lines), lines
    resumed.run()
    b = adapter(run)
    assert all(torch.equal(straight[k], b[k]) for k in straight)
    assert verify_checkpoint(step_dirs(run)[-1]) is None


def test_no_intact_checkpoint_refuses_instead_of_restarting_from_zero(tmp_path):
    run = tmp_path / "run"
    run_to(run, 4)
    for c in step_dirs(run):
        (c / "state.json").unlink()
    before = snapshot(run)
    with pytest.raises(CastError, match=r"2 checkpoint\(s\) but none is intact .*state.json is missing.*refusing"):
        Trainer(cfg(), run, resume=True, log=quiet)
    assert snapshot(run) == before


def test_torn_metrics_line_is_skipped_on_resume_and_in_the_report(tmp_path, straight):
    run = tmp_path / "run"
    run_to(run, 4)
    with open(run / "metrics.jsonl", "a") as f:
        f.write('{"step": 5, "reward_gm": 0.')
    warnings = []
    assert [r["step"] for r in read_metrics(run / "metrics.jsonl", warnings.append)] == [1, 2, 3, 4]
    assert "skipped 1 unreadable line(s) (line 5)" in warnings[0]
    write_report(run)
    Trainer(cfg(), run, resume=True, log=quiet).run()
    assert [r["step"] for r in read_metrics(run / "metrics.jsonl")] == list(range(1, 7))
    b = adapter(run)
    assert all(torch.equal(straight[k], b[k]) for k in straight)


def test_a_second_writer_is_refused_while_the_first_holds_the_run(tmp_path):
    run = tmp_path / "run"
    first = Trainer(cfg(), run, log=quiet)
    with pytest.raises(CastError, match=f"in use by another cast process \\(pid {os.getpid()}\\)"):
        Trainer(cfg(), run, resume=True, log=quiet)
    first.run()  # the holder can still train; when it ends the run is free
    Trainer(cfg(steps=8), run, resume=True, log=quiet).run()


TRAIN_SCRIPT = textwrap.dedent("""
    import os, shutil, signal, sys
    sys.path.insert(0, {root!r})
    from tests.test_trainer import fake_config
    import cast_core.checkpoints as ck
    from cast_core.trainer import Trainer

    kill_at, calls = {kill_at!r}, {{}}

    def maybe_kill(name):
        calls[name] = calls.get(name, 0) + 1
        if kill_at and kill_at[0] == name and calls[name] == kill_at[1]:
            os.kill(os.getpid(), signal.SIGKILL)

    def killer(name, fn, after):
        def wrapped(*a, **k):
            if not after:
                maybe_kill(name)
            out = fn(*a, **k)
            if after:
                maybe_kill(name)
            return out
        return wrapped

    ck.write_manifest = killer("manifest", ck.write_manifest, after=False)
    ck.os = type("os", (), {{"replace": staticmethod(killer("replace", os.replace, after=True))}})
    ck.shutil = type("shutil", (), {{"rmtree": staticmethod(killer("rmtree", shutil.rmtree, after=False))}})
    cfg = fake_config(steps=6, checkpoint_every=2, sample_every=0, keep_checkpoints=2)
    Trainer(cfg, sys.argv[1], resume=os.path.isdir(sys.argv[1]), log=lambda m: None).run()
""")


@pytest.mark.parametrize("kill_at", [("manifest", 2), ("replace", 2), ("rmtree", 4), ("manifest", 3)])
def test_sigkill_inside_a_checkpoint_write_then_resume_matches_a_straight_run(tmp_path, straight, kill_at):
    """Kill the process inside a checkpoint write: before the second's manifest (files written,
    not yet renamed), right after the second's rename into place, as the third's rotation
    deletes the oldest, and before the third's manifest."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    run = tmp_path / "run"
    script = tmp_path / "train.py"
    script.write_text(TRAIN_SCRIPT.format(root=root, kill_at=list(kill_at)))
    killed = subprocess.run([sys.executable, str(script), str(run)], capture_output=True, text=True)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    script.write_text(TRAIN_SCRIPT.format(root=root, kill_at=None))
    out = subprocess.run([sys.executable, str(script), str(run)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    b = adapter(run)
    assert all(torch.equal(straight[k], b[k]) for k in straight)


def test_ctrl_c_ends_with_a_checkpoint_and_exit_130_then_resumes_identically(tmp_path):
    args = fake_run_args(
        prompts=PROMPTS,
        group_size=8,
        num_steps=6,
        window_size=3,
        lr=0.05,
        clip_range=0.2,
        checkpoint_every=1000,
        sample_every=0,
    )
    code = "from cast_core.cli import main; main()"
    run = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "train", *args, "--steps", "100000", "--out", str(run)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 120
    while time.time() < deadline and len(read_metrics(run / "metrics.jsonl")) < 3:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    step = read_metrics(run / "metrics.jsonl")[-1]["step"]
    assert f"interrupted at step {step}; checkpoint written" in err and "Traceback" not in err
    assert [p.name for p in step_dirs(run)] == [f"step-{step:05d}"] and verify_checkpoint(step_dirs(run)[0]) is None
    assert_resume_matches_a_straight_run(tmp_path, run, step, code, args)


def test_a_second_ctrl_c_aborts_at_once():
    from cast_core.interrupt import GracefulInterrupt

    heard = []
    before = signal.getsignal(signal.SIGINT)  # SIG_IGN where the suite runs as a background job
    with GracefulInterrupt(heard.append) as stop:
        os.kill(os.getpid(), signal.SIGINT)
        assert stop.requested and "Ctrl-C again to abort" in heard[0]
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
    assert signal.getsignal(signal.SIGINT) is before  # the caller's handler is back
