"""Every error cast raises on purpose derives from :class:`CastError`.

One root class lets the CLI turn any of them into a single clean line (no traceback) while
programming errors still surface as tracebacks.
"""

from __future__ import annotations


class CastError(Exception):
    """Base class of the errors cast raises deliberately; the CLI prints them as one line."""


class Interrupted(CastError):
    """Ctrl-C or SIGTERM ended a run (after a checkpoint, or at once before training or on a
    second signal); the CLI exits with the shell's code for the signal, 130 for SIGINT and 143
    for SIGTERM, so scripts and schedulers can tell it from a failure."""

    exit_code = 130

    def __init__(self, message: str, signum: int = 2):
        super().__init__(message)
        self.signum = int(signum)
        self.exit_code = 128 + self.signum


class PluginError(CastError):
    """A plugin is broken or misbehaves (bad registration, wrong type, ...)."""


class PluginLoadError(PluginError):
    """A plugin's entry point failed to import (raised only in strict mode)."""


class DuplicateComponentError(PluginError):
    """Two providers registered the same component name for the same kind."""


class ComponentTypeError(PluginError, TypeError):
    """A factory built an object that does not satisfy its kind's protocol."""


class UnknownComponentError(CastError, KeyError):
    """No component of that kind is registered under the requested name."""

    def __str__(self) -> str:  # KeyError would otherwise print the message in quotes
        return str(self.args[0]) if self.args else ""


class SceneGraphError(CastError, ValueError):
    """A scene graph is malformed; the message names the offending atom or entity."""


class ScorerUnavailable(CastError):
    """The judge cannot be reached (a remote scorer's server is down or silent after its
    retries). Unlike a scorer failing on one batch, which skips that group, this stops the run:
    every later group would fail the same way."""


class ScorerContractError(PluginError):
    """A scorer returned what the AtomScorer contract forbids (scores outside [0, 1], a score
    count that does not match the scene graph's atoms, heatmaps of the wrong shape). A plugin
    bug, so the run stops and names the scorer instead of training on nonsense."""


class InputError(CastError):
    """A user-supplied file (prompt list, image) is missing or malformed."""


class ConfigError(CastError, ValueError):
    """A configuration key or value is invalid; the message says which and what is allowed.
    Defined here, not in :mod:`cast_core.config`, so that the registry can raise it without
    importing the module that builds configs from recipes (a loop)."""
