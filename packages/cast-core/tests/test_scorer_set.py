"""Several scorers in one run (config ``scorers``): how the parts combine, pinned on numbers.

The rule (cast_core/scorer_set.py, docs/rewards.md): each scorer's atoms are z-scored on their
own, each scorer's map is projected as a one-scorer run would project it (a prompt-level scorer's
by its prompt-level advantage, without heatmaps), and the maps add up weighted.
"""

from __future__ import annotations

import pytest
import torch

from cast_core.config import ConfigError, TrainConfig, build_config
from cast_core.distributed import Distributed
from cast_core.judging import Judge, multi_reward_stats
from cast_core.projectors import ScalarProjector, SpatialProjector
from cast_core.scene_graph import prompt_level_graph
from cast_core.scorer_set import ScorerSlot, scorer_specs
from cast_core.testing.fakes import FakeDecomposer, LeftBrightnessScorer, MeanBrightnessScorer
from cast_core.trainer import Trainer
from cast_core.types import Rollout
from test_trainer import fake_config

G, GRID = 4, (2, 2)


class _Dist(Distributed):
    def __init__(self):  # one process, no accelerator
        self.accelerator = None

    @property
    def active(self):
        return False

    @property
    def is_main(self):
        return True

    def gather_objects(self, obj):
        return [obj]


class Recording:
    """Wraps a scorer and records whether heatmaps were asked for."""

    def __init__(self, inner, prompt_level=False):
        self.inner, self.asked, self.prompt_level = inner, [], prompt_level

    def score(self, images, graphs, heatmaps=False):
        self.asked.append(heatmaps)
        return self.inner.score(images, graphs, heatmaps)


def _rollout(images):
    return Rollout(
        prompts=["a circle"] * len(images),
        images=images,
        sigmas=torch.zeros(1),
        step_indices=[],
        sample_ids=[(0, g) for g in range(len(images))],
    )


def _images(seed=0):
    return torch.rand(G, 3, 8, 8, generator=torch.Generator().manual_seed(seed))


def _judge(slots, projector=None):
    return Judge(slots, FakeDecomposer(), projector or SpatialProjector(), _Dist(), group_size=G, log=lambda m: None)


def test_maps_add_up_weighted_each_scorer_projected_on_its_own():
    images = _images()
    left, mean = Recording(LeftBrightnessScorer()), Recording(MeanBrightnessScorer(), prompt_level=True)
    judge = _judge([ScorerSlot("left", left, 1.5), ScorerSlot("mean", mean, 0.25, prompt_level=True)])
    verdicts, failures = judge.verdicts(["a circle"], _rollout(images))
    scored = judge.advantages(verdicts, _rollout(images), GRID)
    assert failures == 0 and len(scored.kept) == 1
    graph = FakeDecomposer().decompose("a circle")
    own = LeftBrightnessScorer().score(images, [graph] * G, heatmaps=True)
    a_left = SpatialProjector().project(torch.stack(own.scores), torch.stack(own.heatmaps), graph, GRID).values
    one = prompt_level_graph("a circle")
    m = torch.stack(MeanBrightnessScorer().score(images, [one] * G).scores)
    a_mean = ScalarProjector().project(m, None, one, GRID).values
    torch.testing.assert_close(scored.advantages, (1.5 * a_left + 0.25 * a_mean).reshape(G, -1), rtol=0, atol=0)
    # heatmaps only from the scorer that has them; the prompt-level one scored one atom
    assert left.asked == [True] and mean.asked == [False]
    assert scored.kept[0].by_scorer["mean"].scores.shape == (G, 1)
    assert scored.projector_stats[0]["total_atoms"] == len(graph.atoms)  # the atom-level scorer's atoms only


def test_each_scorers_z_scores_ignore_its_scale():
    """A second reward moved by an affine map (another scale, another offset) leaves the map as
    it was: its z-scores are its own, never pooled with the first scorer's."""
    images = _images(1)

    class Squashed(MeanBrightnessScorer):
        def score(self, images, graphs, heatmaps=False):
            out = super().score(images, graphs, heatmaps)
            out.scores = [0.2 + 0.5 * s for s in out.scores]
            return out

    def advantages(second):
        judge = _judge([ScorerSlot("left", LeftBrightnessScorer()), ScorerSlot("b", second, 0.5, prompt_level=True)])
        verdicts, _ = judge.verdicts(["a circle"], _rollout(images))
        return judge.advantages(verdicts, _rollout(images), GRID).advantages

    torch.testing.assert_close(advantages(Squashed()), advantages(MeanBrightnessScorer()), rtol=0, atol=2e-4)


def test_a_group_counts_only_when_every_scorer_judged_it():
    class Broken:
        prompt_level = True

        def score(self, images, graphs, heatmaps=False):
            raise RuntimeError("judge fell over")

    logs = []
    judge = Judge(
        [ScorerSlot("left", LeftBrightnessScorer()), ScorerSlot("broken", Broken(), prompt_level=True)],
        FakeDecomposer(),
        SpatialProjector(),
        _Dist(),
        group_size=G,
        log=logs.append,
    )
    verdicts, failures = judge.verdicts(["a circle"], _rollout(_images()))
    assert verdicts == [] and failures == 1
    assert "scorer 'broken' failed" in logs[0]


def test_reward_statistics_per_scorer_and_weighted_mix():
    images = _images(2)
    slots = [ScorerSlot("left", LeftBrightnessScorer(), 3.0), ScorerSlot("mean", MeanBrightnessScorer(), 1.0, True)]
    judge = _judge(slots)
    verdicts, _ = judge.verdicts(["a circle"], _rollout(images))
    scored = judge.advantages(verdicts, _rollout(images), GRID)
    stats = multi_reward_stats(scored.kept, slots, scored.projector_stats)
    left = images[..., :4].mean(dim=(1, 2, 3)).double()  # every atom scores it: GM = AM = it
    mean = images.mean(dim=(1, 2, 3)).double()
    mix = 0.75 * left + 0.25 * mean
    assert stats["reward_gm/left"] == pytest.approx(float(left.mean()), abs=1e-6)
    assert stats["reward_gm/mean"] == pytest.approx(float(mean.mean()), abs=1e-6)
    assert stats["reward_gm"] == pytest.approx(float(mix.mean()), abs=1e-6)
    assert stats["reward_std"] == pytest.approx(float(mix.std(unbiased=False)), abs=1e-6)
    assert "pass_object" in stats and "pass_count" in stats  # from the atom-level scorer only


@pytest.mark.parametrize(
    "entry, says",
    [
        ({"weight": 1.0}, "has no scorer name"),
        ({"name": "constant", "weight": 0}, "must be a number > 0"),
        ({"name": "constant", "weight": "high"}, "must be a number > 0"),
        ({"name": "constant", "label": "a/b"}, "without '/'"),
        ({"name": "constant", "prompt_level": "yes"}, "must be true or false"),
        ("constant", "not a table"),
    ],
)
def test_bad_entries_are_one_line_naming_the_item(entry, says):
    with pytest.raises(ConfigError, match="config key 'scorers': item 1") as err:
        TrainConfig(scorers=[{"name": "left-brightness"}, entry]).validate()
    assert says in str(err.value)


def test_two_scorers_with_one_label_are_refused():
    with pytest.raises(ConfigError, match="two scorers are labelled 'remote'"):
        scorer_specs(TrainConfig(scorers=[{"name": "remote"}, {"name": "remote"}]))


def test_options_go_to_their_scorer_and_a_typo_names_the_item(tmp_path):
    specs = scorer_specs(TrainConfig(scorers=[{"name": "constant", "value": 0.3, "weight": 2, "label": "c"}]))
    assert specs[0].options == {"value": 0.3} and specs[0].weight == 2.0 and specs[0].label == "c"
    cfg = _fake(scorers=[{"name": "left-brightness"}, {"name": "constant", "valu": 0.3}])
    with pytest.raises(ConfigError, match=r"config key 'scorers\[1\]'.*takes no argument 'valu'.*Did you mean 'value'"):
        Trainer(cfg, tmp_path / "run", log=lambda m: None)
    assert not (tmp_path / "run").exists()


def test_the_short_form_and_the_list_do_not_mix():
    with pytest.raises(ConfigError, match="scorer would be ignored: this run lists its scorers"):
        build_config(
            recipe="cast",
            components={"scorer": "constant"},
            sets=['scorers=[{name="left-brightness"}, {name="brightness"}]'],
        )
    cfg = build_config(recipe="cast", sets=['scorers=[{name="left-brightness"}]'])  # no --scorer needed
    assert [s.name for s in scorer_specs(cfg)] == ["left-brightness"]


def _fake(**overrides) -> TrainConfig:
    """test_trainer's fake run, smaller: 3 steps of 2 prompts x 4 images, a checkpoint each step."""
    small = dict(prompts=["a red circle", "two blue squares", "a green triangle"], group_size=4, num_steps=4,
                 window_size=2, steps=3, sample_every=0, checkpoint_every=1)  # fmt: skip
    return fake_config(**{**small, **overrides})


def test_one_listed_scorer_of_weight_one_trains_as_the_short_form(tmp_path):
    """``scorers = [{name = X}]`` with an atom-level scorer is the run ``scorer = X`` makes."""
    short = Trainer(_fake(), tmp_path / "a", log=lambda m: None)
    short.run()
    listed = Trainer(_fake(scorers=[{"name": "left-brightness"}]), tmp_path / "b", log=lambda m: None)
    listed.run()
    for p, q in zip(short.params, listed.params):
        assert torch.equal(p, q)


def test_a_run_with_two_scorers_logs_each_and_resumes_to_the_same_adapter(tmp_path):
    both = [{"name": "left-brightness"}, {"name": "brightness", "weight": 0.5, "label": "bright"}]
    straight = Trainer(_fake(scorers=both, steps=4), tmp_path / "a", log=lambda m: None)
    straight.run()
    first = Trainer(_fake(scorers=both, steps=2), tmp_path / "b", log=lambda m: None)
    first.run()
    again = Trainer(_fake(scorers=both, steps=4), tmp_path / "b", resume=True, log=lambda m: None)
    last = again.run()
    for p, q in zip(straight.params, again.params):
        assert torch.equal(p, q)
    for key in ("reward_gm/left-brightness", "reward_gm/bright", "reward_am/bright", "reward_gm"):
        assert key in last
    from cast_core.report import write_report

    page = write_report(tmp_path / "b").read_text()
    assert "reward GM per scorer" in page and "bright" in page
