"""Deferred imports for component factories.

A plugin module is imported by every ``cast`` invocation (``cast --help`` included), so it must
not import torch or diffusers. ``lazy("pkg.module:Class")`` names the factory without importing
it; the import happens when the component is built.
"""

from __future__ import annotations

import importlib
from typing import Any

from cast_core.errors import PluginError


class LazyFactory:
    """A factory that imports ``module:attribute`` on first call and then calls it."""

    def __init__(self, target: str) -> None:
        module, sep, attr = target.partition(":")
        if not sep or not module or not attr:
            raise PluginError(f"lazy target {target!r} must look like 'package.module:Attribute'")
        self.target = target
        self._module, self._attr = module, attr
        self._resolved: Any = None

    def resolve(self) -> Any:
        if self._resolved is None:
            try:
                module = importlib.import_module(self._module)
            except ImportError as err:
                raise PluginError(f"cannot import {self._module!r} for component {self.target!r}: {err}") from err
            try:
                self._resolved = getattr(module, self._attr)
            except AttributeError:
                raise PluginError(f"module {self._module!r} has no attribute {self._attr!r}") from None
        return self._resolved

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.resolve()(*args, **kwargs)

    def __repr__(self) -> str:
        return f"lazy({self.target!r})"


def lazy(target: str) -> LazyFactory:
    """``lazy("cast_core.testing.fakes:FakePolicy")`` — import at build time, not at load time."""
    return LazyFactory(target)
