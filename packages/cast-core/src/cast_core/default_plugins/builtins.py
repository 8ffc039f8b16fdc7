"""cast-core's own components. Only factories are named here; torch loads when one is built."""

from __future__ import annotations

from cast_core.hookspecs import hookimpl
from cast_core.lazy import lazy


@hookimpl
def register_policies(register):
    register(
        "fake",
        lazy("cast_core.testing.fakes:FakePolicy"),
        description="tiny linear-velocity policy on patchified 16x16 pixels (tests, examples)",
    )


@hookimpl
def register_atom_scorers(register):
    register(
        "constant",
        lazy("cast_core.testing.fakes:ConstantScorer"),
        description="scores every atom with one constant, flat heatmaps (tests, examples)",
    )
