"""Test helpers for cast and for plugin authors: conformance kits and small fakes.

A plugin's test module subclasses a kit and says how to build its component::

    from cast_core.testing import AtomScorerConformance

    class TestMyJudge(AtomScorerConformance):
        def make_scorer(self):
            return MyJudge(device="cpu")
"""

from cast_core.testing.conformance import (
    AdvantageProjectorConformance,
    AtomDecomposerConformance,
    AtomScorerConformance,
    EmbedderConformance,
    PolicyConformance,
    WindowSelectorConformance,
)
from cast_core.testing.objective_conformance import ObjectiveConformance
from cast_core.testing.fakes import ConstantScorer, FakeDecomposer, FakePolicy, LeftBrightnessScorer, simple_graph
from cast_core.testing.plugin_package import PluginPackageConformance

__all__ = [
    "PolicyConformance",
    "WindowSelectorConformance",
    "AtomDecomposerConformance",
    "AtomScorerConformance",
    "AdvantageProjectorConformance",
    "EmbedderConformance",
    "ObjectiveConformance",
    "FakePolicy",
    "ConstantScorer",
    "FakeDecomposer",
    "LeftBrightnessScorer",
    "simple_graph",
    "PluginPackageConformance",
]
