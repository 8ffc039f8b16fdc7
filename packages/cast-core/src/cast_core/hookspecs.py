"""The hooks a cast plugin implements.

Every ``register_*`` hook receives a ``register`` callback (the simonw/llm style): call it once per
component with a lowercase kebab-case name and a *factory* — a class or a callable returning the
component. Factories run only when a component is built, so a plugin module must stay cheap to
import (no torch / diffusers / transformers at import time; use :func:`cast_core.lazy`).

A minimal plugin module::

    from cast_core import hookimpl, lazy

    @hookimpl
    def register_atom_scorers(register):
        register("my-judge", lazy("my_pkg.judge:MyJudge"), description="VLM judge")

declared in the plugin's ``pyproject.toml`` as::

    [project.entry-points.cast]
    my-plugin = "my_pkg.plugin"
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Protocol

import pluggy

if TYPE_CHECKING:  # pragma: no cover
    import click

    from cast_core.types import Recipe

hookspec = pluggy.HookspecMarker("cast")
hookimpl = pluggy.HookimplMarker("cast")


class RegisterFn(Protocol):
    """The callback handed to every ``register_*`` hook."""

    def __call__(self, name: str, factory: Callable[..., Any], *, description: str = "") -> None: ...


class RegisterRecipeFn(Protocol):
    """The callback handed to :func:`register_recipes`."""

    def __call__(self, name: str, recipe: "Recipe") -> None: ...


@hookspec
def register_policies(register: RegisterFn) -> None:
    """Register Policy factories: ``register("flux2", lazy("cast_backbones.flux2:Flux2Policy"))``."""


@hookspec
def register_window_selectors(register: RegisterFn) -> None:
    """Register WindowSelector factories: ``register("fixed", FixedWindow)``."""


@hookspec
def register_atom_decomposers(register: RegisterFn) -> None:
    """Register AtomDecomposer factories: ``register("template", TemplateDecomposer)``."""


@hookspec
def register_atom_scorers(register: RegisterFn) -> None:
    """Register AtomScorer factories: ``register("soft-tifa", lazy("cast_rewards.soft_tifa:SoftTifa"))``."""


@hookspec
def register_advantage_projectors(register: RegisterFn) -> None:
    """Register AdvantageProjector factories: ``register("spatial", SpatialProjector)``."""


@hookspec
def register_embedders(register: RegisterFn) -> None:
    """Register image Embedder factories for window selection: ``register("clip", ClipEmbedder)``."""


@hookspec
def register_objectives(register: RegisterFn) -> None:
    """Register Objective factories (the update's loss): ``register("nft", lazy("cast_core.objectives.nft:NFT"))``."""


@hookspec
def register_prompt_suites(register: RegisterFn) -> None:
    """Register named prompt lists for eval and training: ``register("heldout-hard", lambda: [...])``."""


@hookspec
def register_recipes(register: RegisterRecipeFn) -> None:
    """Register named bundles of defaults: ``register("flux2", Recipe(policy="flux2", scorer="soft-tifa"))``."""


@hookspec
def register_commands(cli: "click.Group") -> None:
    """Add sub-commands to ``cast``: ``@cli.command() def hello(): click.echo("hi")``."""
