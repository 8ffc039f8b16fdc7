"""Shared fixtures: register throw-away plugins on the real plugin manager, then remove them."""

from __future__ import annotations

import contextlib
import itertools

import pytest

from cast_core import plugins
from cast_core.plugins import load_plugins, pm

_counter = itertools.count()


@pytest.fixture
def add_plugin():
    """``add_plugin(obj)`` registers an object with ``@hookimpl`` methods for one test."""
    load_plugins()
    names: list[str] = []

    def _add(plugin: object, name: str | None = None) -> str:
        name = name or f"test-plugin-{next(_counter)}"
        pm.register(plugin, name=name)
        names.append(name)
        return name

    yield _add
    for name in names:
        with contextlib.suppress(ValueError):
            pm.unregister(name=name)
    plugins._failures.clear()  # failures recorded by this test's plugins go with them


@pytest.fixture
def only_builtins(monkeypatch):
    """Reload the registry with cast-core's built-ins only (whatever else is installed)."""
    monkeypatch.setenv("CAST_LOAD_PLUGINS", "")
    plugins.reset_for_tests()
    load_plugins()
    yield
    monkeypatch.delenv("CAST_LOAD_PLUGINS")
    plugins.reset_for_tests()
    load_plugins()
