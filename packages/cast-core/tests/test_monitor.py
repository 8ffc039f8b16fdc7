"""The drift / reward-hacking monitor: its stop rules on a synthetic stream of evaluations, and a
short run that records the monitor, stops on a rule with a checkpoint, and resumes."""

from __future__ import annotations

import json

import pytest
import torch

from cast_core.config import ConfigError, TrainConfig
from cast_core.monitor import image_statistics
from cast_core.monitor_rules import first_broken, parse_rules
from cast_core.run_dir import read_metrics
from cast_core.trainer import Trainer
from test_trainer import fake_config


def _stream(oracle, reward):
    """Evaluation rows as the monitor writes them: the base policy first (no training yet)."""
    rows = [{"step": 0, "monitor/shapes-oracle": oracle[0]}]
    for i, (o, r) in enumerate(zip(oracle[1:], reward), 1):
        rows.append({"step": 10 * i, "monitor/shapes-oracle": o, "train/reward_gm": r})
    return rows


HACKING = [{"metric": "shapes-oracle", "drop": 0.1, "while_rising": "reward_gm"}]


def test_a_drop_while_the_training_reward_rises_stops():
    rows = _stream([0.40, 0.39, 0.33, 0.27], [0.50, 0.60, 0.70])
    rules = parse_rules(HACKING)
    assert first_broken(rules, rows[:3]) is None  # 0.33 is 0.07 below 0.40: within the limit
    reason = first_broken(rules, rows)
    assert reason == (
        "monitor/shapes-oracle fell from 0.4 to 0.27 (limit 0.1) while the training reward_gm rose from 0.5 to 0.7"
    )


def test_a_drop_while_the_training_reward_falls_too_is_not_hacking():
    assert first_broken(parse_rules(HACKING), _stream([0.40, 0.35, 0.25], [0.50, 0.45])) is None


def test_without_while_rising_the_drop_alone_stops():
    rows = _stream([0.40, 0.25], [0.5])
    assert "fell from 0.4 to 0.25" in first_broken(parse_rules([{"metric": "shapes-oracle", "drop": 0.1}]), rows)


def test_patience_needs_that_many_evaluations_in_a_row():
    rules = parse_rules([{"metric": "monitor/diversity", "below": 0.05, "patience": 2}])
    rows = [{"step": 0, "monitor/diversity": 0.2}, {"step": 5, "monitor/diversity": 0.04}]
    assert first_broken(rules, rows) is None
    rows.append({"step": 10, "monitor/diversity": 0.06})
    assert first_broken(rules, rows) is None  # the run recovered in between
    rows.append({"step": 15, "monitor/diversity": 0.03})
    assert first_broken(rules, rows) is None
    rows.append({"step": 20, "monitor/diversity": 0.02})
    assert first_broken(rules, rows) == "monitor/diversity is 0.02, below 0.05, 2 evaluations in a row"


@pytest.mark.parametrize(
    "condition, value, stops",
    [("rise", 0.05, True), ("rise", 0.2, False), ("above", 0.3, True), ("above", 0.5, False), ("below", 0.1, False)],
)
def test_each_condition(condition, value, stops):
    rows = [{"step": 0, "monitor/kl": 0.2}, {"step": 5, "monitor/kl": 0.35}]
    assert (first_broken(parse_rules([{"metric": "kl", condition: value}]), rows) is not None) == stops


def test_a_scorer_added_at_a_resume_measures_from_its_first_evaluation():
    rows = [{"step": 0, "monitor/kl": 0.0}, {"step": 10, "monitor/pick": 0.30}, {"step": 20, "monitor/pick": 0.15}]
    reason = first_broken(parse_rules([{"metric": "pick", "drop": 0.1}]), rows)
    assert reason == "monitor/pick fell from 0.3 to 0.15 (limit 0.1)"


def test_the_base_evaluation_alone_never_stops():
    rules = parse_rules([{"metric": "kl", "above": -1.0}])
    assert first_broken(rules, [{"step": 0, "monitor/kl": 0.0}]) is None


@pytest.mark.parametrize(
    "rule, says",
    [
        ({"drop": 0.1}, "names no metric"),
        ({"metric": "kl"}, "needs exactly one of drop, rise, below, above, got none"),
        ({"metric": "kl", "drop": 0.1, "below": 0.2}, "got drop, below"),
        ({"metric": "kl", "drop": -0.1}, "must be a number (>= 0 for drop/rise)"),
        ({"metric": "kl", "above": 1, "patience": 0}, "patience 0 must be a whole number >= 1"),
        ({"metric": "kl", "above": 1, "when": "x"}, "unknown key 'when'"),
        ("kl > 1", "not a table"),
    ],
)
def test_bad_rules_are_one_line_naming_the_item(rule, says):
    with pytest.raises(ConfigError, match="config key 'monitor_stop_if': item 0") as err:
        parse_rules([rule])
    assert says in str(err.value)


def test_rules_without_the_monitor_are_refused():
    with pytest.raises(ConfigError, match="the monitor is off"):
        TrainConfig(monitor_stop_if=[{"metric": "kl", "above": 1}]).validate()


def test_image_statistics_on_known_images():
    white, black, red = torch.ones(3, 4, 4), torch.zeros(3, 4, 4), torch.zeros(3, 4, 4)
    red[0] = 1.0
    stats = image_statistics(torch.stack([white, black, red, red]), [[0, 1], [2, 3]])
    assert stats["monitor/diversity"] == pytest.approx(0.5)  # |white - black| = 1, red twice = 0
    assert stats["monitor/saturation"] == pytest.approx(0.5)  # grey 0, grey 0, red 1, red 1
    assert stats["monitor/contrast"] == pytest.approx(0.0)  # every image is one colour


# -- a run --------------------------------------------------------------------------------------------
TRAIN = ["a red circle", "two blue squares", "a green triangle"]
HELD_OUT = ["a purple star", "three yellow moons", "one orange cube"]


def _cfg(**overrides) -> TrainConfig:
    """test_trainer's fake run, small, watched by a monitor on held-out prompts."""
    small = dict(prompts=list(TRAIN), group_size=4, num_steps=4, window_start=1, window_size=2, steps=6,
                 sample_every=0, checkpoint_every=2, monitor_every=2, monitor_prompts=list(HELD_OUT), monitor_size=2,
                 monitor_group_size=2, monitor_scorers=[{"name": "brightness"}])  # fmt: skip
    return fake_config(**{**small, **overrides})


def test_the_monitor_records_every_evaluation_and_leaves_training_alone(tmp_path):
    watched = Trainer(_cfg(), tmp_path / "watched", log=lambda m: None)
    watched.run()
    plain = Trainer(_cfg(monitor_every=0, monitor_scorers=[]), tmp_path / "plain", log=lambda m: None)
    plain.run()
    assert all(torch.equal(p, q) for p, q in zip(watched.params, plain.params))  # it only watches
    rows = read_metrics(tmp_path / "watched" / "monitor.jsonl")
    assert [r["step"] for r in rows] == [0, 2, 4, 6]
    for key in ("monitor/left-brightness", "monitor/brightness", "monitor/kl", "monitor/diversity"):
        assert all(isinstance(r[key], float) for r in rows), key
    assert rows[0]["monitor/kl"] == 0.0  # the base policy is its own reference (LoRA starts at zero)
    assert rows[-1]["monitor/kl"] > 0 and "train/reward_gm" in rows[-1]
    logged = read_metrics(tmp_path / "watched" / "metrics.jsonl")
    assert "monitor/brightness" in logged[1] and "monitor/brightness" not in logged[0]
    from cast_core.report import write_report

    assert "monitor: held-out rewards beside the training reward" in write_report(tmp_path / "watched").read_text()


def test_a_rule_ends_the_run_with_a_checkpoint_and_the_reason(tmp_path):
    logs: list[str] = []
    rule = [{"metric": "kl", "above": 0.0}]  # any movement away from the reference
    trainer = Trainer(_cfg(monitor_stop_if=rule, checkpoint_every=100), tmp_path / "run", log=logs.append)
    trainer.run()
    assert trainer.step == 2 and trainer.stopped_by_monitor.startswith("monitor/kl is ")
    assert (tmp_path / "run" / "checkpoints" / "step-00002").is_dir()
    assert any(m.startswith("monitor: stopped at step 2: monitor/kl is") for m in logs)


def test_resume_keeps_the_history_and_judges_as_the_straight_run(tmp_path):
    straight = Trainer(_cfg(), tmp_path / "a", log=lambda m: None)
    straight.run()
    Trainer(_cfg(steps=3), tmp_path / "b", log=lambda m: None).run()  # stops between two evaluations
    resumed = Trainer(_cfg(), tmp_path / "b", resume=True, log=lambda m: None)
    resumed.run()
    a = [json.loads(line) for line in (tmp_path / "a" / "monitor.jsonl").read_text().splitlines()]
    b = [json.loads(line) for line in (tmp_path / "b" / "monitor.jsonl").read_text().splitlines()]
    assert a == b


def test_monitor_prompts_must_be_held_out(tmp_path):
    with pytest.raises(ConfigError, match="1 of them are training prompts .*'a red circle'"):
        Trainer(_cfg(monitor_prompts=["a red circle", "a purple star"]), tmp_path / "run", log=lambda m: None)
    with pytest.raises(ConfigError, match="needs held-out prompts"):
        Trainer(_cfg(monitor_prompts=None), tmp_path / "run2", log=lambda m: None)


def test_every_evaluation_draws_the_same_noise(tmp_path):
    """Two evaluations of an unchanged policy are equal: the monitor's differences are training's."""
    trainer = Trainer(_cfg(), tmp_path / "run", log=lambda m: None)
    first = {k: v for k, v in trainer.monitor.evaluate(0).items() if k != "step"}
    later = {k: v for k, v in trainer.monitor.evaluate(7).items() if k != "step"}
    assert first == later


def test_a_crash_between_logged_rows_resumes_to_the_same_monitor(tmp_path):
    """metrics.jsonl holds every log_every-th step only: the training rewards since the last
    evaluation come back from the checkpoint, so the resumed monitor equals the straight one."""
    settings = dict(steps=8, log_every=2, checkpoint_every=3, monitor_every=4)
    Trainer(_cfg(**settings), tmp_path / "a", log=lambda m: None).run()
    crashing = Trainer(_cfg(**settings), tmp_path / "b", log=lambda m: None)
    step = crashing.train_step

    def crash_at_step_five():
        if crashing.step == 4:
            raise RuntimeError("killed")
        return step()

    crashing.train_step = crash_at_step_five
    with pytest.raises(RuntimeError, match="killed"):
        crashing.run()
    crashing.files.unlock()
    assert [r["step"] for r in read_metrics(tmp_path / "b" / "metrics.jsonl")] == [2, 4]
    Trainer(_cfg(**settings), tmp_path / "b", resume=True, log=lambda m: None).run()
    a, b = (read_metrics(tmp_path / run / "monitor.jsonl") for run in ("a", "b"))
    assert a == b


def test_monitor_settings_are_refused_before_anything_is_built(tmp_path):
    with pytest.raises(ConfigError, match=r"config key 'monitor_scorers': item 0 .* has no scorer name"):
        _cfg(monitor_scorers=[{"weight": 1}]).validate()
    with pytest.raises(ConfigError, match=r"config key 'monitor_scorers\[0\]'.*takes no argument 'valu'"):
        Trainer(_cfg(monitor_scorers=[{"name": "constant", "valu": 1}]), tmp_path / "r", log=lambda m: None)
    assert not (tmp_path / "r").exists()
    with pytest.raises(ConfigError, match="would hide the monitor's own monitor/kl"):
        Trainer(_cfg(scorers=[{"name": "left-brightness", "label": "kl"}]), tmp_path / "r2", log=lambda m: None)


def test_cast_train_exits_3_when_the_monitor_stops_it(tmp_path):
    from click.testing import CliRunner

    from cast_core.cli import cli
    from cast_core.monitor import stopped_reason
    from cast_core.testing.fakes import fake_run_args

    args = fake_run_args(
        prompts=TRAIN, group_size=4, num_steps=4, window_start=1, window_size=2, lr=0.05, sample_every=0,
        monitor_every=2, monitor_prompts=HELD_OUT, monitor_size=2, monitor_group_size=2,
        monitor_stop_if=[{"metric": "kl", "above": 0.0}],
    )  # fmt: skip
    out = CliRunner().invoke(cli, ["train", *args, "--steps", "6", "--out", str(tmp_path / "run")])
    assert out.exit_code == 3, out.output
    assert "stopped by the monitor at step 2: monitor/kl is" in out.output
    assert stopped_reason(tmp_path / "run").startswith("monitor/kl is")


@pytest.mark.slow
def test_two_processes_stopped_by_the_monitor_exit_3(tmp_path):
    import os
    import subprocess
    import sys

    from cast_core.testing.fakes import fake_run_args

    args = fake_run_args(
        prompts=TRAIN, group_size=4, num_steps=4, window_start=1, window_size=2, lr=0.05, sample_every=0,
        monitor_every=2, monitor_prompts=HELD_OUT, monitor_size=2, monitor_group_size=2,
        monitor_stop_if=[{"metric": "kl", "above": 0.0}],
    )  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "cast_core.cli", "train", *args, "--steps", "6", "--out", str(tmp_path / "run"),
         "--num-processes", "2"],
        capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert done.returncode == 3, done.stderr[-2000:]
    assert "stopped by the monitor at step 2" in done.stderr
