"""The shapes world's stand-in rewards (shapes-quality, the hackable shapes-colour) and a shapes run
with two scorers that trains, resumes to the straight run's adapter, and reports both."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from cast_core.config import build_config
from cast_core.report import write_report
from cast_core.scene_graph import prompt_level_graph
from cast_core.trainer import Trainer
from cast_shapes.render import render_float
from cast_shapes.stand_in_scorers import ShapesColourScorer, ShapesQualityScorer
from cast_shapes.world import PALETTE, sample_layout
from cast_shapes.grammar import parse_prompt


def _render(prompt: str, seed: int = 0) -> torch.Tensor:
    layout = sample_layout(parse_prompt(prompt), seed)
    return torch.from_numpy(np.ascontiguousarray(render_float(layout)))[None]  # [1, 3, H, W]


def test_a_render_is_clean_and_blur_or_noise_is_not():
    image = _render("two red circles left of a blue square")
    graph = [prompt_level_graph("x")]
    quality = ShapesQualityScorer()
    assert float(quality.score(image, graph).scores[0][0]) == pytest.approx(1.0)
    blurred = torch.nn.functional.avg_pool2d(image, 3, stride=1, padding=1, count_include_pad=False)
    noisy = (image + 0.2 * torch.randn(image.shape, generator=torch.Generator().manual_seed(0))).clamp(0, 1)
    assert float(quality.score(blurred, graph).scores[0][0]) < 0.97
    assert float(quality.score(noisy, graph).scores[0][0]) < 0.5


def test_the_colour_score_is_the_share_of_that_colour_whatever_the_prompt():
    red = torch.tensor(PALETTE["red"], dtype=torch.float32) / 255
    image = torch.ones(1, 3, 8, 8)
    image[..., :, :2] = red[:, None, None]  # a quarter of the image red
    graph = [prompt_level_graph("a blue square")]
    assert float(ShapesColourScorer().score(image, graph).scores[0][0]) == pytest.approx(0.25)
    assert float(ShapesColourScorer(colour="blue").score(image, graph).scores[0][0]) == pytest.approx(0.0, abs=1e-6)
    with pytest.raises(Exception, match="colour 'pink' is not in the world"):
        ShapesColourScorer(colour="pink")


def test_a_shapes_run_with_the_oracle_and_a_quality_stand_in_trains_resumes_and_reports_both(tmp_path):
    def cfg(steps):
        scorers = '[{name = "shapes-oracle"}, {name = "shapes-quality", weight = 0.5, label = "quality"}]'
        sets = [f"scorers={scorers}", f"steps={steps}", "prompts_per_step=2", "sample_every=0", "checkpoint_every=1"]
        return build_config(recipe="shapes", sets=sets, log=lambda m: None)

    straight = Trainer(cfg(3), tmp_path / "straight", log=lambda m: None)
    straight.run()
    Trainer(cfg(2), tmp_path / "resumed", log=lambda m: None).run()
    resumed = Trainer(cfg(3), tmp_path / "resumed", resume=True, log=lambda m: None)
    last = resumed.run()
    assert all(torch.equal(p, q) for p, q in zip(straight.params, resumed.params))
    assert 0 < last["reward_gm/quality"] <= 1 and 0 <= last["reward_gm/shapes-oracle"] <= 1
    page = write_report(tmp_path / "resumed").read_text()
    assert "reward GM per scorer" in page and "quality" in page and "shapes-oracle" in page
