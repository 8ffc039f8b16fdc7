"""Registers the example's components. Only names and lazy factories: no torch import here."""

from cast_core import hookimpl, lazy


@hookimpl
def register_atom_scorers(register):
    register(
        "mean-brightness",
        lazy("cast_plugin_example.scorer:MeanBrightnessScorer"),
        description="example plugin: every atom scored by image brightness",
    )


@hookimpl
def register_objectives(register):
    register(
        "reward-ranked",
        lazy("cast_plugin_example.objective:RewardRankedMatching"),
        description="example plugin: flow matching on the samples better than their group",
    )
