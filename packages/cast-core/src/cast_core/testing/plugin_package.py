"""Conformance kit for a plugin *distribution*: it is discoverable and cheap to load.

Every ``cast`` invocation imports every plugin module, so a plugin that imports torch at module
level makes ``cast --help`` slow for everyone. This kit checks, in fresh interpreters (so nothing
the test session imported can hide the problem), that the entry point is declared in the installed
metadata, that ``cast plugins --json`` lists the distribution without failures and with at least one
component (``expected_components`` names the ones it must list), and that the plugin module does
not import heavy libraries. One check runs in this process: every hook function of the plugin
module carries ``@hookimpl``; pluggy skips an unmarked one in silence, so no listing shows it.
"""

from __future__ import annotations

import importlib
import inspect
import json
import subprocess
import sys
from importlib import metadata
from typing import Sequence

from cast_core import hookspecs

HEAVY_MODULES: Sequence[str] = ("torch", "diffusers", "transformers", "open_clip", "peft", "accelerate")


class PluginPackageConformance:
    """Set ``distribution`` (e.g. ``"cast-rewards"``) and ``plugin_module``, and name what you
    register in ``expected_components`` as ``{kind: [names]}`` (``{"atom_scorer": ["my-judge"]}``):
    only that catches one of several hooks being skipped."""

    distribution: str = ""
    plugin_module: str = ""
    expected_components: dict[str, Sequence[str]] = {}

    def _run(self, code: str) -> str:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert out.returncode == 0, f"{code!r} failed:\n{out.stderr}"
        return out.stdout

    def test_entry_point_is_declared_in_installed_metadata(self):
        eps = [ep for ep in metadata.entry_points(group="cast") if ep.value == self.plugin_module]
        assert eps, f"no 'cast' entry point points at {self.plugin_module}; is {self.distribution} installed?"
        assert {ep.dist.metadata["Name"] for ep in eps} == {self.distribution}

    def test_cast_plugins_lists_it_without_failures(self):
        data = json.loads(self._run("from cast_core.cli import main; main(['plugins', '--json'])"))
        entry = next((p for p in data["plugins"] if p["name"] == self.distribution), None)
        assert entry is not None, [p["name"] for p in data["plugins"]]
        assert not [f for f in data["failed"] if f["distribution"] == self.distribution], data["failed"]
        assert entry["components"], f"{self.distribution} registers nothing: is a hook missing @hookimpl?"
        for kind, names in self.expected_components.items():
            missing = sorted(set(names) - set(entry["components"].get(kind, [])))
            assert not missing, f"{self.distribution} does not list {kind} {missing}; it lists {entry['components']}"

    def test_every_hook_carries_hookimpl(self):
        module = importlib.import_module(self.plugin_module)
        specs = {name for name, fn in vars(hookspecs).items() if hasattr(fn, "cast_spec")}
        unmarked = sorted(
            name
            for name, fn in vars(module).items()
            if inspect.isfunction(fn)
            and fn.__module__ == module.__name__
            and (name in specs or name.startswith("register_"))
            and not hasattr(fn, "cast_impl")
        )
        assert not unmarked, f"{self.plugin_module}: {', '.join(unmarked)} lack @hookimpl, so cast never calls them"

    def test_plugin_module_imports_nothing_heavy(self):
        code = (
            f"import sys, {self.plugin_module}; print(','.join(m for m in {list(HEAVY_MODULES)!r} if m in sys.modules))"
        )
        heavy = self._run(code).strip()
        assert not heavy, f"importing {self.plugin_module} imported {heavy}; move it behind cast_core.lazy(...)"
