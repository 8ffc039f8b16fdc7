"""Plugin discovery: one pluggy manager, one entry-point group (``cast``), built-ins included.

Each entry point is loaded on its own so that one broken plugin cannot take the CLI down: its
failure is recorded (entry point, distribution, error) and shown by ``cast plugins``. Two
environment variables change that:

* ``CAST_STRICT_PLUGINS=1`` — re-raise the first failure as :class:`PluginLoadError`;
* ``CAST_LOAD_PLUGINS=dist-a,dist-b`` — load only these distributions' entry points (empty:
  none). Built-in components of cast-core are always registered.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from importlib import import_module, metadata
from typing import Any

import pluggy

from cast_core import hookspecs
from cast_core.errors import PluginLoadError
from cast_core.version import __version__

ENTRY_POINT_GROUP = "cast"
CORE_DISTRIBUTION = "cast-core"
DEFAULT_PLUGINS = ("cast_core.default_plugins.builtins",)

pm = pluggy.PluginManager("cast")
pm.add_hookspecs(hookspecs)


@dataclass(frozen=True)
class PluginSource:
    """Where a registered plugin module came from (for attribution in errors and listings)."""

    distribution: str
    version: str
    entry_point: str


@dataclass(frozen=True)
class PluginFailure:
    """A plugin that could not be loaded or whose registration raised."""

    name: str
    distribution: str
    version: str
    error: str

    def to_dict(self) -> dict[str, str]:
        return {"name": self.name, "distribution": self.distribution, "version": self.version, "error": self.error}

    def describe(self) -> str:
        return f"plugin {self.name!r} from {self.distribution} {self.version} failed: {self.error}"


_state: dict[str, Any] = {"loaded": False}
_sources: dict[str, PluginSource] = {}
_failures: list[PluginFailure] = []


def strict_mode() -> bool:
    return os.environ.get("CAST_STRICT_PLUGINS", "").strip().lower() in ("1", "true", "yes", "on")


def normalize_distribution(name: str) -> str:
    """PEP 503 normalisation, so ``Cast_Rewards`` and ``cast-rewards`` name the same thing."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _allowed_distributions() -> set[str] | None:
    raw = os.environ.get("CAST_LOAD_PLUGINS")
    if raw is None:
        return None
    return {normalize_distribution(p.strip()) for p in raw.split(",") if p.strip()}


def record_failure(failure: PluginFailure, err: BaseException) -> None:
    """Remember a failure, or raise it in strict mode."""
    if strict_mode():
        raise PluginLoadError(
            f"{failure.describe()} (CAST_STRICT_PLUGINS is set; unset it to skip broken plugins)"
        ) from err
    if failure not in _failures:
        _failures.append(failure)


def _register(module: Any, name: str, source: PluginSource) -> None:
    if pm.is_registered(module):  # two entry points onto one module: register once
        return
    pm.register(module, name=name)
    try:
        pm.check_pending()  # a misspelled hook name is a plugin bug, not a silent no-op
    except Exception:
        pm.unregister(name=name)
        raise
    _sources[name] = source


def load_plugins() -> None:
    """Load built-ins and every ``cast`` entry point once; idempotent."""
    if _state["loaded"]:
        return
    _state["loaded"] = True
    core = PluginSource(CORE_DISTRIBUTION, __version__, "builtins")
    for module_name in DEFAULT_PLUGINS:
        _register(import_module(module_name), module_name, core)

    allowed = _allowed_distributions()
    eps = sorted(metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: (_dist_name(e), e.name))
    if allowed:
        installed = {normalize_distribution(_dist_name(ep)) for ep in eps}
        unknown = sorted(allowed - installed)
        if unknown:  # a typo here would otherwise load nothing, in silence
            raise PluginLoadError(
                f"CAST_LOAD_PLUGINS names {', '.join(unknown)}, which no installed distribution "
                f"provides; installed: {', '.join(sorted(installed))}"
            )
    for ep in eps:
        dist, version = _dist_name(ep), _dist_version(ep)
        if allowed is not None and normalize_distribution(dist) not in allowed:
            continue
        source = PluginSource(dist, version, ep.name)
        try:
            _register(ep.load(), f"{dist}:{ep.name}", source)
        except (Exception, SystemExit) as err:  # noqa: BLE001 - not even sys.exit() at import may end `cast` silently
            record_failure(PluginFailure(ep.name, dist, version, f"{type(err).__name__}: {err}"), err)


def _dist_name(ep: metadata.EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    return dist.metadata["Name"] if dist is not None else "unknown"


def _dist_version(ep: metadata.EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    return dist.version if dist is not None else "unknown"


def source_of(plugin_name: str) -> PluginSource:
    """The distribution behind a registered plugin; test-registered plugins are 'local'."""
    return _sources.get(plugin_name) or PluginSource(f"local plugin {plugin_name!r}", "", plugin_name)


def failures() -> list[PluginFailure]:
    load_plugins()
    return list(_failures)


def loaded_sources() -> dict[str, PluginSource]:
    load_plugins()
    return dict(_sources)


def reset_for_tests() -> None:
    """Forget everything loaded so far (tests use this to reload under new env vars)."""
    for name, _ in list(pm.list_name_plugin()):
        pm.unregister(name=name)
    _sources.clear()
    _failures.clear()
    _state["loaded"] = False
