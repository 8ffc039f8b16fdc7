"""The baseline windows: fixed, random (Flow-GRPO-Fast) and sliding (MixGRPO progressive)."""

import json
import subprocess
import sys

import pytest

from cast_core import Window, get_window_selector
from cast_core.testing import FakePolicy, WindowSelectorConformance
from cast_windows.baselines import FixedWindow, RandomWindow, SlidingWindow

POLICY, PROMPTS = FakePolicy(), ["a red circle"]


class TestFixedConformance(WindowSelectorConformance):
    step_counts = (4, 6, 10)  # steps 1..3 need 4; the kit checks that 1-3 are refused, not overrun

    def make_selector(self):
        return FixedWindow(1, 3)


class TestRandomConformance(WindowSelectorConformance):
    step_counts = (5, 6, 10)  # the range [0, 5) needs 5 steps

    def make_selector(self):
        return RandomWindow(size=2, lo=0, hi=5)


class TestRandomOverTheScheduleConformance(WindowSelectorConformance):
    def make_selector(self):
        return RandomWindow(size=1)  # hi=None: the schedule's length, so every schedule fits


class TestSlidingConformance(WindowSelectorConformance):
    step_counts = (3, 4, 6, 10)  # a window of 3 steps

    def make_selector(self):
        return SlidingWindow(size=3, every=2)


def test_fixed():
    w = FixedWindow(2, 3).select(POLICY, PROMPTS, 10)
    assert (w.start, w.size) == (2, 3)
    with pytest.raises(ValueError, match="do not fit"):
        FixedWindow(8, 3).select(POLICY, PROMPTS, 10)
    with pytest.raises(ValueError):
        FixedWindow(0, 0)


def test_random_stays_in_range_and_varies_with_the_step():
    sel = RandomWindow(size=3, lo=1, hi=7)
    windows = [sel.select_for_step(POLICY, PROMPTS, 10, step=s, seed=0) for s in range(200)]
    assert all(w.size == 3 and 1 <= w.start and w.end <= 7 for w in windows)
    assert {w.start for w in windows} == {1, 2, 3, 4}  # randint(lo, hi - size): every start occurs
    assert sel.select_for_step(POLICY, PROMPTS, 10, step=5, seed=0) == windows[5]  # a pure function of (seed, step)
    assert [w.start for w in windows[:20]] != [
        sel.select_for_step(POLICY, PROMPTS, 10, step=s, seed=1).start for s in range(20)
    ]


def test_random_without_a_range_end_uses_the_schedule_and_checks_fit():
    sel = RandomWindow(size=2)
    assert all(sel.select_for_step(POLICY, PROMPTS, 4, step=s, seed=0).end <= 4 for s in range(50))
    assert sel.select(POLICY, PROMPTS, 4) == sel.select_for_step(POLICY, PROMPTS, 4, step=0, seed=0)
    with pytest.raises(ValueError, match="exceeds"):
        RandomWindow(size=2, hi=8).select(POLICY, PROMPTS, 6)
    with pytest.raises(ValueError, match="does not fit"):
        RandomWindow(size=5, lo=3, hi=6).select(POLICY, PROMPTS, 10)


DRAW = """
import json, sys
from cast_windows.baselines import RandomWindow
sel = RandomWindow(size=2, lo=0, hi=8)
out = [sel.select_for_step(None, [], 10, step=s, seed=int(sys.argv[1])).start for s in range(40)]
print(json.dumps(out))
"""


def test_random_is_the_same_in_separate_processes():
    """Every rank of a distributed run must draw the same window for the same step."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", DRAW, "7"],
            stdout=subprocess.PIPE,
            text=True,
            env={"PYTHONHASHSEED": str(h), **_env()},
        )
        for h in (1, 2)
    ]
    outs = [json.loads(p.communicate(timeout=120)[0]) for p in procs]
    here = [RandomWindow(size=2, lo=0, hi=8).select_for_step(None, [], 10, step=s, seed=7).start for s in range(40)]
    assert outs[0] == outs[1] == here
    assert len(set(here)) > 1


def _env():
    import os

    return {k: v for k, v in os.environ.items() if k != "PYTHONHASHSEED"}


def test_sliding_follows_its_schedule_and_wraps():
    sel = SlidingWindow(size=4, start=0, stride=2, every=3, mode="wrap")
    # starts 0, 2, 4, 6 fit a 10-step schedule (6 + 4 = 10); each held for 3 training steps, then back to 0
    starts = [sel.select_for_step(POLICY, PROMPTS, 10, step=s, seed=0).start for s in range(15)]
    assert starts == [0, 0, 0, 2, 2, 2, 4, 4, 4, 6, 6, 6, 0, 0, 0]


def test_sliding_stop_mode_stays_at_the_end():
    sel = SlidingWindow(size=3, start=1, stride=1, every=1, mode="stop", end=6)
    starts = [sel.select_for_step(POLICY, PROMPTS, 10, step=s, seed=0).start for s in range(6)]
    assert starts == [1, 2, 3, 3, 3, 3]
    assert all(sel.select_for_step(POLICY, PROMPTS, 10, step=s, seed=0).end <= 6 for s in range(10))


def test_sliding_mixgrpo_defaults():
    sel = SlidingWindow()  # size 4, stride 1, every 25
    assert [sel.select_for_step(POLICY, PROMPTS, 25, step=s).start for s in (0, 24, 25, 50, 21 * 25, 22 * 25)] == [
        0,
        0,
        1,
        2,
        21,
        0,
    ]
    assert sel.select(POLICY, PROMPTS, 25) == Window(0, 4)


def test_sliding_bad_options():
    with pytest.raises(ValueError, match="mode"):
        SlidingWindow(mode="bounce")
    with pytest.raises(ValueError):
        SlidingWindow(every=0)
    with pytest.raises(ValueError, match="does not fit"):
        SlidingWindow(size=8).select(POLICY, PROMPTS, 6)


def test_registered_names_build_the_baselines():
    assert isinstance(get_window_selector("fixed", start=0, size=2), FixedWindow)
    assert isinstance(get_window_selector("random", size=3, lo=0, hi=3), RandomWindow)
    assert isinstance(get_window_selector("sliding"), SlidingWindow)


def test_trainer_draws_the_random_window_per_step(tmp_path):
    """Through the real trainer: the per-step hook is used and the logged windows are the draws."""
    from cast_core.config import TrainConfig
    from cast_core.trainer import Trainer

    cfg = TrainConfig(
        policy="fake",
        scorer="left-brightness",
        decomposer="fake",
        projector="spatial",
        prompts=["a red circle", "a blue square"],
        group_size=2,
        prompts_per_step=1,
        num_steps=6,
        window="random",
        window_kwargs={"size": 2, "lo": 0, "hi": 6},
        steps=4,
        seed=3,
        sample_every=0,
        checkpoint_every=100,
    )
    trainer = Trainer(cfg, tmp_path / "run", log=lambda m: None)
    logged = [(m["window_start"], m["window_size"]) for m in (trainer.train_step() for _ in range(4))]
    expected = [(RandomWindow(2, 0, 6).select_for_step(None, [], 6, step=s, seed=3).start, 2) for s in range(4)]
    assert logged == expected
