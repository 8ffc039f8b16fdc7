"""Conformance kit for a plugin *distribution*: it is discoverable and cheap to load.

Every ``cast`` invocation imports every plugin module, so a plugin that imports torch at module
level makes ``cast --help`` slow for everyone. This kit checks, in fresh interpreters (so nothing
the test session imported can hide the problem), that the entry point is declared in the installed
metadata, that ``cast plugins --json`` lists the distribution without failures, and that the plugin
module does not import heavy libraries.
"""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import metadata
from typing import Sequence

HEAVY_MODULES: Sequence[str] = ("torch", "diffusers", "transformers", "open_clip", "peft", "accelerate")


class PluginPackageConformance:
    """Set ``distribution`` (e.g. ``"cast-rewards"``) and ``plugin_module``; optionally
    ``expected_components`` as ``{kind: [names]}`` that must be listed."""

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
        for kind, names in self.expected_components.items():
            assert set(names) <= set(entry["components"].get(kind, [])), entry["components"]

    def test_plugin_module_imports_nothing_heavy(self):
        code = f"import sys, {self.plugin_module}; print(','.join(m for m in {list(HEAVY_MODULES)!r} if m in sys.modules))"
        heavy = self._run(code).strip()
        assert not heavy, f"importing {self.plugin_module} imported {heavy}; move it behind cast_core.lazy(...)"
