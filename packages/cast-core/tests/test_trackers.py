"""Experiment trackers through accelerate: `log_with = "tensorboard"` writes event files whose
scalars are the metrics.jsonl values, step for step; a tracker that is not installed or not
known is one clear error before anything is built."""

import json
import math

import pytest

from cast_core.config import ConfigError
from cast_core.trainer import Trainer

from test_trainer import fake_config, quiet


def test_tensorboard_gets_the_metrics_jsonl_scalars(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run = tmp_path / "run"
    Trainer(fake_config(steps=3, sample_every=0, log_with="tensorboard", tracker_project="demo"), run, log=quiet).run()
    events = list((run / "trackers" / "demo").glob("events.out.tfevents.*"))
    assert events, list(run.rglob("*"))
    acc = EventAccumulator(str(run / "trackers" / "demo"))
    acc.Reload()
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    for key in ("reward_gm", "loss", "grad_norm"):
        got = [(e.step, e.value) for e in acc.Scalars(key)]
        want = [(r["step"], r[key]) for r in rows]
        assert [s for s, _ in got] == [1, 2, 3]
        assert all(math.isclose(g, w, rel_tol=1e-6, abs_tol=1e-9) for (_, g), (_, w) in zip(got, want)), (got, want)


def _missing_tracker():
    import importlib.util

    return next((n for n in ("wandb", "mlflow", "aim", "comet_ml") if importlib.util.find_spec(n) is None), None)


@pytest.mark.parametrize(
    "value, message",
    [
        ("nosuchtracker", "Unsupported logging capability"),
        ([1], "must be a tracker name"),
        (_missing_tracker(), "not available .* pip install"),
    ],
)
def test_bad_trackers_are_one_clear_error(tmp_path, value, message):
    with pytest.raises(ConfigError, match=message):
        Trainer(fake_config(steps=1, log_with=value), tmp_path / "run", log=quiet)
    assert not (tmp_path / "run").exists() or not any((tmp_path / "run").iterdir())
