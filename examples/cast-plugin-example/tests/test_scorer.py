"""The example plugin passes cast's conformance kits and is found via its installed metadata."""

import torch

from cast_core.testing import AtomScorerConformance, PluginPackageConformance, simple_graph
from cast_plugin_example.scorer import MeanBrightnessScorer


class TestMeanBrightness(AtomScorerConformance):
    def make_scorer(self):
        return MeanBrightnessScorer()


class TestExamplePackage(PluginPackageConformance):
    distribution = "cast-plugin-example"
    plugin_module = "cast_plugin_example.plugin"
    expected_components = {"atom_scorer": ["mean-brightness"], "objective": ["reward-ranked"]}


def test_white_scores_one_and_black_scores_zero():
    images = torch.stack([torch.ones(3, 8, 8), torch.zeros(3, 8, 8)])
    out = MeanBrightnessScorer().score(images, [simple_graph(), simple_graph()], heatmaps=True)
    torch.testing.assert_close(out.scores[0], torch.ones(3))
    torch.testing.assert_close(out.scores[1], torch.zeros(3))
    assert out.heatmaps[0].shape == (3, 8, 8)


def test_builds_through_the_registry():
    from cast_core import get_atom_scorer

    assert isinstance(get_atom_scorer("mean-brightness"), MeanBrightnessScorer)
