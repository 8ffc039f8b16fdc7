"""Name -> factory tables per component kind, built from the plugin hooks on demand.

Every registration is attributed to the plugin (and distribution) that made it, so a duplicate
name can name both providers and a factory that builds the wrong kind of object can be blamed
precisely ("constant from cast-core is not an AtomScorer").
"""

from __future__ import annotations

import difflib
import inspect
import re
from dataclasses import dataclass
from typing import Any, Callable

from cast_core.errors import (
    ComponentTypeError,
    ConfigError,
    DuplicateComponentError,
    PluginError,
    UnknownComponentError,
)
from cast_core.plugins import PluginFailure, load_plugins, pm, record_failure, source_of
from cast_core.protocols import PROTOCOLS
from cast_core.types import Recipe

NAME_RE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")


@dataclass(frozen=True)
class Kind:
    key: str  # JSON / registry key
    hook: str  # hookspec name
    label: str  # what users call it in messages and CLI flags
    protocol: type | None  # None for recipes (checked by type instead)


KINDS: dict[str, Kind] = {
    "policy": Kind("policy", "register_policies", "policy", PROTOCOLS["policy"]),
    "window_selector": Kind(
        "window_selector", "register_window_selectors", "window selector", PROTOCOLS["window_selector"]
    ),
    "atom_decomposer": Kind("atom_decomposer", "register_atom_decomposers", "decomposer", PROTOCOLS["atom_decomposer"]),
    "atom_scorer": Kind("atom_scorer", "register_atom_scorers", "scorer", PROTOCOLS["atom_scorer"]),
    "advantage_projector": Kind(
        "advantage_projector", "register_advantage_projectors", "projector", PROTOCOLS["advantage_projector"]
    ),
    "embedder": Kind("embedder", "register_embedders", "embedder", PROTOCOLS["embedder"]),
    "objective": Kind("objective", "register_objectives", "objective", PROTOCOLS["objective"]),
    "prompt_suite": Kind("prompt_suite", "register_prompt_suites", "prompt suite", None),
    "recipe": Kind("recipe", "register_recipes", "recipe", None),
}


@dataclass(frozen=True)
class Registration:
    kind: str
    name: str
    factory: Any  # a factory callable, or the Recipe itself for kind "recipe"
    plugin: str
    distribution: str
    description: str = ""


def _kind(kind: str) -> Kind:
    try:
        return KINDS[kind]
    except KeyError:
        raise ValueError(f"unknown component kind {kind!r}; kinds are {', '.join(KINDS)}") from None


def registrations(kind: str) -> dict[str, Registration]:
    """All registrations of ``kind`` keyed by name. Raises on duplicates; a plugin whose hook
    raises is recorded as failed (or re-raised in strict mode) and skipped."""
    table, clashes = registrations_and_clashes(kind)
    if clashes:
        raise DuplicateComponentError(clashes[0][1])
    return table


def registrations_and_clashes(kind: str) -> tuple[dict[str, Registration], list[tuple[Registration, str]]]:
    """:func:`registrations` that keeps going past a name registered twice: the table holds the
    first registration of each name, and each later one comes back with the message naming both
    providers (``cast plugins`` lists everything and shows the clash instead of refusing)."""
    spec = _kind(kind)
    load_plugins()
    table: dict[str, Registration] = {}
    clashes: list[tuple[Registration, str]] = []
    for impl in getattr(pm.hook, spec.hook).get_hookimpls():
        source = source_of(impl.plugin_name)
        found: dict[str, Registration] = {}

        def register(name: str, factory: Any, *, description: str = "") -> None:
            _check_registration(spec, name, factory, source.distribution)
            reg = Registration(kind, name, factory, impl.plugin_name, source.distribution, description)
            if name in found or name in table:
                first = found.get(name) or table[name]
                clashes.append(
                    (
                        reg,
                        f"{spec.label} {name!r} is registered twice: by {first.distribution} "
                        f"(plugin {first.plugin}) and by {source.distribution} (plugin {impl.plugin_name}). "
                        f"Uninstall one of them or restrict loading with CAST_LOAD_PLUGINS.",
                    )
                )
                return
            found[name] = reg

        register_fn: Callable[..., None] = register
        if kind == "recipe":
            register_fn = lambda name, recipe: register(name, recipe, description=getattr(recipe, "description", ""))  # noqa: E731
        try:
            impl.function(**({"register": register_fn} if "register" in impl.argnames else {}))
        except PluginError:  # our own checks (names, types) are errors, not skips
            raise
        except Exception as err:  # noqa: BLE001 - a plugin's bug must not break the others
            record_failure(
                PluginFailure(
                    source.entry_point,
                    source.distribution,
                    source.version,
                    f"{spec.hook} raised {type(err).__name__}: {err}",
                ),
                err,
            )
            continue
        table.update(found)
    return table, clashes


def _check_registration(spec: Kind, name: Any, factory: Any, dist: str) -> None:
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise PluginError(
            f"{dist} registered a {spec.label} named {name!r}; names must be lowercase kebab-case such as 'soft-tifa'"
        )
    if spec.key == "prompt_suite":
        if not callable(factory):
            raise PluginError(f"prompt suite {name!r} from {dist}: {factory!r} is not callable")
    elif spec.protocol is None:
        if not isinstance(factory, Recipe):
            raise PluginError(f"recipe {name!r} from {dist} is a {type(factory).__name__}, not a cast_core.Recipe")
    elif not callable(factory):
        raise PluginError(f"{spec.label} {name!r} from {dist}: the factory {factory!r} is not callable")


def list_components(kind: str) -> list[str]:
    return sorted(registrations(kind))


def lookup(kind: str, name: str) -> Registration:
    """The registration of ``name``, or an :class:`UnknownComponentError` listing the choices."""
    spec = _kind(kind)
    table = registrations(kind)
    key = name.strip().lower()
    if key in table:
        return table[key]
    choices = sorted(table)
    if not choices:
        raise UnknownComponentError(
            f"Unknown {spec.label} {name!r}: no {spec.label} is registered. "
            f"Install a plugin that provides one (see `cast plugins`)."
        )
    msg = f"Unknown {spec.label} {name!r}. Choose one of: {', '.join(choices)}."
    close = difflib.get_close_matches(key, choices, n=1)
    if close:
        msg += f" Did you mean {close[0]!r}?"
    raise UnknownComponentError(msg)


def build(kind: str, name: str, **kwargs: Any) -> Any:
    """Build component ``name`` of ``kind`` with ``kwargs`` and check it against its protocol."""
    reg = lookup(kind, name)
    spec = KINDS[kind]
    if spec.key == "prompt_suite":
        prompts = list(reg.factory())
        if not prompts or not all(isinstance(p, str) for p in prompts):
            raise PluginError(f"prompt suite {reg.name!r} from {reg.distribution} did not return a list of prompts")
        return prompts
    if spec.protocol is None:
        return reg.factory
    if kwargs:  # an unknown option is one line naming it, not a TypeError from deep inside the factory
        names, complete = _keywords(reg.factory.resolve() if hasattr(reg.factory, "resolve") else reg.factory)
        unknown = sorted(set(kwargs) - names)
        if complete and unknown:
            raise ConfigError(
                f"{spec.label} {reg.name!r} takes no argument {unknown[0]!r}. "
                f"It accepts: {', '.join(sorted(names)) or 'none'}"
            )
    obj = reg.factory(**kwargs)
    if not isinstance(obj, spec.protocol):
        missing = [m for m in protocol_members(spec.protocol) if not hasattr(obj, m)]
        raise ComponentTypeError(
            f"{reg.name} from {reg.distribution} is not an {spec.protocol.__name__}"
            + (f": it lacks {', '.join(missing)}" if missing else "")
        )
    return obj


def _factory_target(kind: str, name: str) -> Any:
    """What a registration calls: a lazy factory (``module:attr``) is resolved first."""
    factory = lookup(kind, name).factory
    return factory.resolve() if hasattr(factory, "resolve") else factory


def _keywords(target: Any) -> tuple[set[str], bool]:
    """The keyword names ``target`` accepts, and whether that list is complete: a class whose
    ``__init__`` passes ``**options`` up to its base is followed up the MRO (the backbone
    policies do this) until an ``__init__`` without ``**`` closes the list. A class with no
    ``__init__`` of its own (nor a base's) takes none: ``object.__init__``'s ``*args, **kwargs``
    and a protocol's placeholder are not read as "takes anything"."""
    if not inspect.isclass(target):
        chain = [target]
    else:
        chain = [
            c.__init__
            for c in target.__mro__
            if "__init__" in vars(c) and c is not object and not vars(c).get("_is_protocol", False)
        ]
        if not chain:  # object.__init__ takes no argument, unless a __new__ of the tree takes them
            own_new = any("__new__" in vars(c) for c in target.__mro__ if c is not object)
            return set(), not own_new
    names: set[str] = set()
    for fn in chain:
        try:
            params = inspect.signature(fn).parameters
        except (TypeError, ValueError):
            return names, False
        names |= {n for n, p in params.items() if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL) and n != "self"}
        if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
            return names, True
    return names, False


def check_factory_kwargs(kind: str, name: str, kwargs: dict[str, Any], key: str) -> None:
    """A typo in ``policy_kwargs`` / ``scorer_kwargs`` / … fails in the first second, naming the
    key and what the factory accepts — not after a 64 GB model has loaded, as a TypeError."""
    if not kwargs:
        return
    names, complete = _keywords(_factory_target(kind, name))
    unknown = sorted(set(kwargs) - names)
    if complete and unknown:
        close = difflib.get_close_matches(unknown[0], sorted(names), n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ConfigError(
            f"config key '{key}': {kind.replace('_', ' ')} {name!r} takes no argument {unknown[0]!r}.{hint} "
            f"It accepts: {', '.join(sorted(names)) or 'none'}"
        )


def factory_takes(kind: str, name: str, key: str) -> bool:
    """Whether component ``name``'s factory may take the keyword ``key``: named in its signature, or
    passed on through ``**options`` that no ``__init__`` up the class tree closes."""
    names, complete = _keywords(_factory_target(kind, name))
    return key in names or not complete


def objective_uses_window(name: str) -> bool:
    """Whether objective ``name`` samples an SDE window (its class's ``uses_window``), read
    without building it: the config decides whether a recipe's window applies."""
    return bool(getattr(_factory_target("objective", name), "uses_window", True))


def build_offering(kind: str, name: str, offered: dict[str, Any]) -> Any:
    """:func:`build` with only those of ``offered`` the factory accepts (all of them when its
    ``**kwargs`` stay open): run-wide settings reach the components that use them."""
    names, complete = _keywords(_factory_target(kind, name))
    return build(kind, name, **({k: v for k, v in offered.items() if k in names} if complete else offered))


def protocol_members(protocol: type) -> list[str]:
    """The attribute and method names a runtime-checkable protocol requires."""
    names: list[str] = []
    for klass in protocol.__mro__:
        if klass is object or klass.__name__ in ("Protocol", "Generic"):
            continue
        for attr in list(getattr(klass, "__annotations__", {})) + list(vars(klass)):
            if not attr.startswith("_") and attr not in names:
                names.append(attr)
    return names


def get_policy(name: str, **kwargs: Any) -> Any:
    return build("policy", name, **kwargs)


def get_window_selector(name: str, **kwargs: Any) -> Any:
    return build("window_selector", name, **kwargs)


def get_atom_decomposer(name: str, **kwargs: Any) -> Any:
    return build("atom_decomposer", name, **kwargs)


def get_atom_scorer(name: str, **kwargs: Any) -> Any:
    return build("atom_scorer", name, **kwargs)


def get_advantage_projector(name: str, **kwargs: Any) -> Any:
    return build("advantage_projector", name, **kwargs)


def get_embedder(name: str, **kwargs: Any) -> Any:
    return build("embedder", name, **kwargs)


def get_objective(name: str, **kwargs: Any) -> Any:
    return build("objective", name, **kwargs)


def build_objective(config: Any) -> Any:
    """The run's objective: ``objective_kwargs``, plus the run-wide settings it accepts and the
    user did not give (``adv_clip``), so that nft's advantage scale follows the run's clip."""
    names, complete = _keywords(_factory_target("objective", config.objective))
    offered = {"adv_clip": config.adv_clip}
    kwargs = {k: v for k, v in offered.items() if k in names and complete}
    kwargs.update(config.objective_kwargs)
    return build("objective", config.objective, **kwargs)


def get_prompt_suite(name: str) -> list[str]:
    return build("prompt_suite", name)


def get_recipe(name: str) -> Recipe:
    return build("recipe", name)
