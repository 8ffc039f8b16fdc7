"""The clip-curvature selector end to end on the fake policy: the curve, the knee, the window
rule, the calibration prompts and the cache."""

import json

import pytest
import torch

from cast_core import Window, get_window_selector
from cast_core.testing import FakePolicy, WindowSelectorConformance
from cast_windows import clip_curvature
from cast_windows.clip_curvature import ClipCurvatureSelector, spread, window_up_to
from cast_windows.curve import SimilarityCurve, measure_curve
from cast_windows.embedders import ClipEmbedder, PixelsEmbedder

from test_knee import logistic, true_knee
from tiny_clip import make_tiny_clip

PROMPTS = ["a red circle", "two blue squares", "a green triangle above a square"]


def selector(tmp_path, **kw):
    kw.setdefault("seeds", (0,))
    return ClipCurvatureSelector("pixels", cache_dir=tmp_path / "cache", **kw)


class TestClipCurvatureConformance(WindowSelectorConformance):
    def make_selector(self):
        return ClipCurvatureSelector("pixels", num_prompts=2, seeds=(0,), use_cache=False)


def test_end_to_end_on_the_fake_policy(tmp_path, monkeypatch):
    w = selector(tmp_path, seeds=(0, 1)).select(FakePolicy(), PROMPTS, 10)
    d = w.diagnostics
    assert isinstance(w, Window) and w.start == 0 and w.size == d["knee_step"] + 1 and w.end <= 10
    for key in ("curve_mean", "curve_std", "curvature", "smoothed", "sigmas"):
        assert len(d[key]) == 10, key
    assert d["curve_mean"][-1] == pytest.approx(1.0, abs=1e-5)  # x0-hat of the last step is the final image
    assert d["curve_mean"][0] < d["curve_mean"][-1]
    # the 6 samples differ early (std ≈ 2e-3 at step 0) and all end at cos ≈ 1 (std ≈ 2e-7)
    assert d["curve_std"][0] > 1e-4 > d["curve_std"][-1]
    assert d["samples"] == 6 and d["calibration_prompts"] == PROMPTS and d["seeds"] == [0, 1]
    assert not d["fallback"]
    assert d["embedder"] == "pixels" and isinstance(d["reason"], str) and d["cached"] is False
    json.dumps(d)  # diagnostics are JSON-ready (window.json, metrics)

    # the same selector on a curve whose knee is known: a 10-step logistic (midpoint 2.7, width
    # 0.5) bends hardest at t ≈ 4.31 (test_knee.true_knee), so the knee is step 4, window 0..4
    known = logistic(10, 2.7, 0.5).tolist()
    curve = SimilarityCurve(known, [0.0] * 10, [1 - i / 10 for i in range(10)], 6)
    monkeypatch.setattr(clip_curvature, "measure_curve", lambda *a, **k: curve)
    k = selector(tmp_path, use_cache=False).select(FakePolicy(), PROMPTS, 10)
    assert k.diagnostics["knee_step"] == round(true_knee(10, 2.7, 0.5)) == 4
    assert (k.start, k.size) == (0, 5) and not k.diagnostics["fallback"]


def test_curve_is_the_mean_of_per_sample_cosines():
    policy = FakePolicy()
    curve = measure_curve(policy, PROMPTS[:2], PixelsEmbedder(), num_steps=4, seeds=(3,))
    per = torch.tensor(curve.per_sample)
    assert per.shape == (2, 4)
    torch.testing.assert_close(per.mean(0), torch.tensor(curve.mean, dtype=per.dtype))
    assert curve.sigmas == pytest.approx([1.0, 0.75, 0.5, 0.25])


def test_end_to_end_with_a_tiny_clip_model(tmp_path):
    emb = ClipEmbedder(model=make_tiny_clip(), device="cpu")
    # an untrained CLIP barely tells the fake's images apart (the curve rises by ~4e-4), so the
    # flatness threshold is lowered to exercise the knee rather than the fallback
    w = ClipCurvatureSelector(emb, seeds=(0,), cache_dir=tmp_path, min_rise=1e-5).select(FakePolicy(), PROMPTS, 6)
    assert w.end <= 6 and w.size == w.diagnostics["knee_step"] + 1 and not w.diagnostics["fallback"]
    assert w.diagnostics["embedder"].startswith("clip:custom-CLIP:sha256-")
    assert w.diagnostics["curve_mean"][-1] == pytest.approx(1.0, abs=1e-4)


@pytest.mark.parametrize(
    "knee,steps,size,expected",
    [
        (3, 10, None, (0, 4)),
        (0, 10, None, (0, 1)),
        (9, 10, None, (0, 10)),
        (5, 10, 3, (3, 3)),
        (1, 10, 3, (0, 3)),
        (9, 10, 3, (7, 3)),
        (2, 4, 8, (0, 4)),
    ],
)
def test_window_rule(knee, steps, size, expected):
    w = window_up_to(knee, steps, size)
    assert (w.start, w.size) == expected and knee in w


def test_window_size_option_ends_the_window_at_the_knee(tmp_path):
    full = selector(tmp_path).select(FakePolicy(), PROMPTS, 10)
    short = selector(tmp_path, window_size=2).select(FakePolicy(), PROMPTS, 10)
    assert short.size == 2 and short.end - 1 == full.diagnostics["knee_step"] == full.end - 1


def test_calibration_prompts_precedence(tmp_path):
    class Calibrated(FakePolicy):
        calibration_prompts = ["a purple circle", "four orange squares"]

    used = lambda sel, pol: sel.select(pol, PROMPTS, 4).diagnostics["calibration_prompts"]  # noqa: E731
    assert used(selector(tmp_path), FakePolicy()) == PROMPTS
    assert used(selector(tmp_path), Calibrated()) == Calibrated.calibration_prompts
    assert used(selector(tmp_path, calibration_prompts=["a red square"]), Calibrated()) == ["a red square"]
    prompt_file = tmp_path / "p.txt"
    prompt_file.write_text("# calibration\na blue circle\na blue circle\na red square\n")
    assert used(selector(tmp_path, calibration_prompts=str(prompt_file)), FakePolicy()) == [
        "a blue circle",
        "a red square",
    ]


def test_num_prompts_spreads_over_the_list():
    items = [f"p{i}" for i in range(24)]
    assert spread(items, 4) == ["p0", "p6", "p12", "p18"]
    assert spread(items[:3], 8) == items[:3]


def test_second_call_reads_the_cache(tmp_path, monkeypatch):
    first = selector(tmp_path).select(FakePolicy(), PROMPTS, 6)
    files = list((tmp_path / "cache").glob("curve-*.json"))
    assert len(files) == 1 and first.diagnostics["cache_file"] == str(files[0])
    stored = json.loads(files[0].read_text())
    assert stored["key"]["num_steps"] == 6 and stored["key"]["embedder"] == "pixels"

    def no_sampling(*a, **k):
        raise AssertionError("the cached curve should have been used")

    monkeypatch.setattr(clip_curvature, "measure_curve", no_sampling)
    again = selector(tmp_path).select(FakePolicy(), PROMPTS, 6)  # a fresh selector, as in a new run
    assert again.diagnostics["cached"] is True
    assert (again.start, again.size) == (first.start, first.size)
    assert again.diagnostics["curve_mean"] == first.diagnostics["curve_mean"]
    # the knee rule and window length are applied to the cached curve, not part of its key
    assert selector(tmp_path, window_size=1).select(FakePolicy(), PROMPTS, 6).size == 1


def test_cache_entries_are_per_steps_embedder_and_policy(tmp_path):
    selector(tmp_path).select(FakePolicy(), PROMPTS, 6)
    selector(tmp_path).select(FakePolicy(), PROMPTS, 8)
    selector(tmp_path, embedder_kwargs={"size": 8}).select(FakePolicy(), PROMPTS, 6)
    selector(tmp_path).select(FakePolicy(seed=1), PROMPTS, 6)
    selector(tmp_path).select(FakePolicy(), PROMPTS[:2], 6)
    assert len(list((tmp_path / "cache").glob("curve-*.json"))) == 5


def test_a_policy_identity_attribute_keys_the_cache(tmp_path):
    class Named(FakePolicy):
        identity = "fake-v1"

    w = selector(tmp_path).select(Named(), PROMPTS, 4)
    assert w.diagnostics["policy"] == "fake-v1"


def test_a_corrupt_cache_file_is_measured_again(tmp_path):
    first = selector(tmp_path).select(FakePolicy(), PROMPTS, 4)
    (path := first.diagnostics["cache_file"]) and open(path, "w").write("{not json")
    again = selector(tmp_path).select(FakePolicy(), PROMPTS, 4)
    assert again.diagnostics["cached"] is False and (again.start, again.size) == (first.start, first.size)
    assert json.loads(open(path).read())["curve"]["mean"] == first.diagnostics["curve_mean"]


def test_no_cache_writes_nothing(tmp_path):
    selector(tmp_path, use_cache=False).select(FakePolicy(), PROMPTS, 4)
    assert not (tmp_path / "cache").exists()


def test_registered_and_built_with_trainer_style_kwargs(tmp_path):
    sel = get_window_selector("clip-curvature", embedder="pixels", seeds=[0], num_prompts=2, cache_dir=str(tmp_path))
    assert isinstance(sel, ClipCurvatureSelector)
    assert sel.select(FakePolicy(), PROMPTS, 6).end <= 6


def test_bad_options_raise():
    with pytest.raises(ValueError, match="num_prompts"):
        ClipCurvatureSelector(num_prompts=0)
    with pytest.raises(ValueError, match="seeds"):
        ClipCurvatureSelector(seeds=())
    with pytest.raises(ValueError, match="window_size"):
        ClipCurvatureSelector(window_size=0)
    with pytest.raises(ValueError, match="calibration prompts"):
        ClipCurvatureSelector(use_cache=False).select(FakePolicy(), [], 4)


def test_trainer_measures_once_and_reuses_the_window(tmp_path):
    from cast_core.config import TrainConfig
    from cast_core.trainer import Trainer

    cfg = TrainConfig(
        policy="fake",
        scorer="left-brightness",
        decomposer="fake",
        projector="spatial",
        prompts=PROMPTS,
        group_size=2,
        prompts_per_step=2,
        num_steps=6,
        window="clip-curvature",
        window_kwargs={"seeds": [0], "cache_dir": str(tmp_path / "cache")},
        steps=3,
        sample_every=0,
        checkpoint_every=100,
    )
    trainer = Trainer(cfg, tmp_path / "run", log=lambda m: None)
    logged = {(m["window_start"], m["window_size"]) for m in (trainer.train_step() for _ in range(3))}
    assert len(logged) == 1 and len(list((tmp_path / "cache").glob("curve-*.json"))) == 1
    expected = selector(tmp_path).select(FakePolicy(), list(trainer.prompts), 6)  # the trainer shows all prompts
    assert logged == {(expected.start, expected.size)} and expected.diagnostics["cached"] is True
    recorded = json.loads((tmp_path / "run" / "window.json").read_text())  # kept for --resume
    assert (recorded["start"], recorded["size"]) == (expected.start, expected.size)
