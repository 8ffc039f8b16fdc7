"""What ``cast train`` checks before it trains, so that neither an edited file nor a lost
checkpoint nor a prompt the policy cannot read turns into a wrong or lost run: config.toml must
agree with what the checkpoints were trained with, a run without checkpoints but with logged
steps is not restarted, config.toml records the window a selector chose, prompts are checked by
the policy at start-up, and a judge that gives every image of a group the same reward is named.
In process (click's CliRunner); the signal tests are in test_signals.py."""

import json
import shutil

import pytest
from click.testing import CliRunner

from cast_core import Window, hookimpl
from cast_core.checkpoints import step_dirs, write_manifest
from cast_core.cli import cli
from cast_core.config import ConfigError, load_toml
from cast_core.errors import CastError
from cast_core.run_dir import read_metrics
from cast_core.testing import FakePolicy
from cast_core.testing.fakes import fake_run_args
from cast_core.trainer import Trainer
from test_run_dir_guarantees import snapshot
from test_trainer import PROMPTS, fake_config, quiet

FAKE = fake_run_args(prompts=PROMPTS, group_size=4, num_steps=4, window_size=2, sample_every=0, checkpoint_every=1)


def train(*args):
    return CliRunner().invoke(cli, ["train", *args])


def errors(result) -> list[str]:
    return [line for line in result.output.splitlines() if line.startswith("Error:")]


@pytest.fixture
def run(tmp_path):
    """A 2-step fake run with a checkpoint at each step."""
    out = tmp_path / "run"
    result = train(*FAKE, "--steps", "2", "--out", str(out))
    assert result.exit_code == 0, result.output
    return out


def edit(path, old, new):
    text = path.read_text()
    assert old in text, (old, text)
    path.write_text(text.replace(old, new))


# -- 1: config.toml against the configuration the checkpoint was trained with -----------------
@pytest.mark.parametrize(
    "old, new, named",
    [
        ("group_size = 4", "group_size = 2", "group_size 4 → 2"),  # used to train on with the new value
        ("lr = 0.0003", "lr = 0.1", "lr 0.0003 → 0.1"),  # used to be ignored (the optimizer keeps its lr)
    ],
)
def test_an_edited_config_toml_is_refused_naming_each_change(run, old, new, named):
    edit(run / "config.toml", old, new)
    before = snapshot(run)
    result = train("--resume", str(run), "--steps", "3")
    assert result.exit_code == 1, result.output
    [line] = errors(result)
    assert f"{run}/config.toml was edited after checkpoint step-00002" in line and named in line
    assert "--set KEY=VALUE" in line and "log_every" in line and "--out" in line
    assert "Traceback" not in result.output and snapshot(run) == before


def test_resumable_keys_change_through_set_and_config_toml_records_them(run):
    result = train("--resume", str(run), "--steps", "3", "--set", "log_every=2", "--set", "keep_checkpoints=5")
    assert result.exit_code == 0, result.output
    cfg = load_toml(run / "config.toml")
    assert cfg["steps"] == 3 and cfg["log_every"] == 2 and cfg["keep_checkpoints"] == 5
    state = json.loads((step_dirs(run)[-1] / "state.json").read_text())
    assert state["step"] == 3 and state["config"]["log_every"] == 2  # the checkpoint carries them too
    # a run continued that way resumes again without a false "edited" refusal
    result = train("--resume", str(run), "--steps", "4")
    assert result.exit_code == 0, result.output


def test_a_resumable_key_killed_before_its_next_checkpoint_is_no_edit(run):
    """`--set steps=…` rewrites config.toml before the next checkpoint: a run killed in between
    holds a file that differs from its checkpoint in resumable keys only, and resumes."""
    edit(run / "config.toml", "log_every = 1", "log_every = 3")
    result = train("--resume", str(run), "--steps", "3")
    assert result.exit_code == 0, result.output


def test_a_checkpoint_without_the_record_resumes_with_one_warning(run):
    for ckpt in step_dirs(run):  # as an older cast wrote them (the manifest rewritten to match)
        state = json.loads((ckpt / "state.json").read_text())
        del state["config"]
        (ckpt / "state.json").write_text(json.dumps(state))
        write_manifest(ckpt)
    result = train("--resume", str(run), "--steps", "3")
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.output.splitlines() if "does not record the configuration" in line]
    assert len(warnings) == 1 and "step-00002" in warnings[0] and "older cast" in warnings[0]


# -- 2: no checkpoint left ------------------------------------------------------------------------
def test_resume_with_every_checkpoint_deleted_is_refused_and_keeps_the_metrics(run):
    for ckpt in step_dirs(run):
        shutil.rmtree(ckpt)
    before = snapshot(run)
    result = train("--resume", str(run))
    assert result.exit_code == 1, result.output
    [line] = errors(result)
    assert f"{run} has no checkpoint left" in line and "metrics.jsonl logs 2 step(s)" in line
    assert "start a new run with --out" in line
    assert snapshot(run) == before and len(read_metrics(run / "metrics.jsonl")) == 2


def test_the_trainer_refuses_it_too(run):
    """The same guard where the trainer restores (a script that builds Trainer itself)."""
    shutil.rmtree(run / "checkpoints")
    with pytest.raises(CastError, match="has no checkpoint left"):
        Trainer(fake_config(steps=3, group_size=4, num_steps=4, window_size=2), run, resume=True, log=quiet)


def test_a_run_killed_before_its_first_step_starts_from_zero(run):
    shutil.rmtree(run / "checkpoints")
    (run / "metrics.jsonl").unlink()  # killed after config.toml, before any step was logged
    result = train("--resume", str(run), "--steps", "2")
    assert result.exit_code == 0, result.output
    assert [r["step"] for r in read_metrics(run / "metrics.jsonl")] == [1, 2]


# -- 6: the window a selector chose is what config.toml records -----------------------------------
class LateWindow:
    """A measured (not per-step) window the fixed keys do not describe."""

    def select(self, policy, prompts, num_steps):
        return Window(1, 3)


class PromptChecking(FakePolicy):
    """The fake policy with the optional ChecksPrompts feature: at most 3 words."""

    def check_prompts(self, prompts):
        for p in prompts:
            if len(p.split()) > 3:
                raise ConfigError(f"prompt {p[:80]!r} has {len(p.split())} tokens; this policy reads at most 3")


class Components:
    @hookimpl
    def register_window_selectors(self, register):
        register("late-window", LateWindow)

    @hookimpl
    def register_policies(self, register):
        register("prompt-checking", lambda seed=0: PromptChecking(seed=seed))


def test_config_toml_records_the_window_a_selector_measured(tmp_path, add_plugin):
    add_plugin(Components())
    out = tmp_path / "run"
    args = fake_run_args(prompts=PROMPTS, group_size=4, num_steps=4, sample_every=0, checkpoint_every=1)
    result = train(*args, "--window", "late-window", "--steps", "2", "--out", str(out))
    assert result.exit_code == 0, result.output
    lines = (out / "config.toml").read_text().splitlines()
    [size] = [line for line in lines if line.startswith("window_size = ")]
    assert size.startswith("window_size = 2  # unused:") and "steps 1..3" in size and "window_size = 3" in size
    assert [r["window_start"] for r in read_metrics(out / "metrics.jsonl")] == [1, 1]
    assert load_toml(out / "config.toml")["window_size"] == 2  # a comment: the file loads as before
    result = train("--resume", str(out), "--steps", "3")  # and resumes (the comparison is not fooled)
    assert result.exit_code == 0, result.output
    assert "steps 1..3" in (out / "config.toml").read_text()


# -- 4: prompts the policy cannot read are refused before anything is written -------------------
def test_a_prompt_the_policy_cannot_read_is_refused_at_start(tmp_path, add_plugin):
    add_plugin(Components())
    out = tmp_path / "run"
    long = "two red circles left of a blue square"
    args = fake_run_args(prompts=[PROMPTS[0], long], group_size=4, num_steps=4, window_size=2, sample_every=0)
    result = train(*args, "--policy", "prompt-checking", "--steps", "2", "--out", str(out))
    assert result.exit_code == 1, result.output
    [line] = errors(result)
    assert long in line and "8 tokens" in line and "at most 3" in line
    assert not (out / "config.toml").exists() and not (out / "metrics.jsonl").exists()


# -- 5: a judge that cannot tell the images of a group apart --------------------------------------
def test_a_judge_without_reward_spread_is_named_once(tmp_path):
    result = train(*FAKE, "--scorer", "constant", "--steps", "3", "--out", str(tmp_path / "flat"))
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.output.splitlines() if "same reward" in line]
    assert len(warnings) == 1 and "scorer 'constant'" in warnings[0] and "nothing is learned" in warnings[0]
    result = train(*FAKE, "--steps", "3", "--out", str(tmp_path / "spread"))  # left-brightness: spread
    assert result.exit_code == 0 and "same reward" not in result.output


def test_spread_in_one_of_the_first_two_steps_is_enough():
    trainer = Trainer.__new__(Trainer)
    heard = []
    trainer.log, trainer.zero_spread_steps = heard.append, 0
    trainer.config = fake_config(scorer="constant")
    for flat in (True, False, True, True):
        trainer.no_reward_spread = flat
        trainer._warn_if_no_reward_spread()
    assert heard == []


# -- a new run refused while it is built leaves no directory behind ----------------------------
def test_a_setting_refused_while_building_leaves_no_run_directory(tmp_path):
    """The trainer makes and locks the directory before it builds the components (a reused
    directory must be refused in seconds); a setting refused after that must not leave a
    directory holding only ``.lock``, or the corrected command would meet it."""
    out = tmp_path / "new"
    result = train(*FAKE, "--set", "policy_kwargs.no_such_option=1", "--out", str(out))
    assert result.exit_code == 1 and len(errors(result)) == 1 and "no_such_option" in errors(result)[0], result.output
    assert not out.exists()
    # a directory the user made beforehand is theirs: it stays, empty
    out.mkdir()
    result = train(*FAKE, "--set", "policy_kwargs.no_such_option=1", "--out", str(out))
    assert result.exit_code == 1 and out.is_dir() and list(out.iterdir()) == [], result.output
    assert train(*FAKE, "--steps", "1", "--out", str(out)).exit_code == 0  # the corrected command runs there
