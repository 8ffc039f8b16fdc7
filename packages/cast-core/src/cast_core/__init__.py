"""cast-core: protocols, plugin registry and CLI of the CAST RL fine-tuning toolkit.

Importing this package is cheap (no torch): plugin modules import ``hookimpl`` and ``lazy`` from
here on every ``cast`` invocation.
"""

from cast_core.errors import (
    CastError,
    ComponentTypeError,
    DuplicateComponentError,
    PluginError,
    PluginLoadError,
    SceneGraphError,
    UnknownComponentError,
)
from cast_core.hookspecs import hookimpl
from cast_core.lazy import lazy
from cast_core.protocols import (
    AdvantageProjector,
    AtomDecomposer,
    AtomScorer,
    Embedder,
    Policy,
    WindowSelector,
)
from cast_core.registry import (
    get_advantage_projector,
    get_atom_decomposer,
    get_atom_scorer,
    get_embedder,
    get_policy,
    get_recipe,
    get_window_selector,
    list_components,
)
from cast_core.scene_graph import Atom, Entity, SceneGraph
from cast_core.types import AdvantageMap, AtomScores, Recipe, Rollout, Window
from cast_core.version import __version__

__all__ = [
    "__version__",
    "hookimpl",
    "lazy",
    "Policy",
    "WindowSelector",
    "AtomDecomposer",
    "AtomScorer",
    "AdvantageProjector",
    "Embedder",
    "get_embedder",
    "Atom",
    "Entity",
    "SceneGraph",
    "AtomScores",
    "Window",
    "Rollout",
    "AdvantageMap",
    "Recipe",
    "get_policy",
    "get_window_selector",
    "get_atom_decomposer",
    "get_atom_scorer",
    "get_advantage_projector",
    "get_recipe",
    "list_components",
    "CastError",
    "PluginError",
    "PluginLoadError",
    "DuplicateComponentError",
    "ComponentTypeError",
    "UnknownComponentError",
    "SceneGraphError",
]
