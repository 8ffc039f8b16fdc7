"""What is installed: every plugin distribution with its components by kind, and the failures.

This is the data behind ``cast plugins`` (and its ``--json`` form, a stable machine interface).
It never refuses: two plugins registering one name are listed under both distributions, with the
clash among the failures, so the user sees which two to choose between.
"""

from __future__ import annotations

from typing import Any

from cast_core.plugins import failures, loaded_sources, source_of
from cast_core.registry import KINDS, registrations_and_clashes


def inventory(commands: dict[str, list[str]] | None = None) -> dict[str, Any]:
    """``{"plugins": [{"name", "version", "components": {kind: [names]}}], "failed": [...]}``.

    ``commands`` maps a plugin name to the CLI commands it added (known only to the CLI).
    """
    by_dist: dict[str, dict[str, Any]] = {}
    for source in loaded_sources().values():
        by_dist.setdefault(
            source.distribution, {"name": source.distribution, "version": source.version, "components": {}}
        )
    clashes = []  # a name registered twice is listed under both providers and shown as a failure
    for kind in KINDS:
        table, duplicates = registrations_and_clashes(kind)
        for reg in [*table.values(), *(reg for reg, _ in duplicates)]:
            source = source_of(reg.plugin)
            entry = by_dist.setdefault(
                source.distribution, {"name": source.distribution, "version": source.version, "components": {}}
            )
            entry["components"].setdefault(kind, []).append(reg.name)
        for reg, message in duplicates:
            source = source_of(reg.plugin)
            failure = {"name": source.entry_point, "distribution": source.distribution, "version": source.version}
            clashes.append({**failure, "error": message})
    for plugin_name, names in (commands or {}).items():
        source = source_of(plugin_name)
        entry = by_dist.setdefault(
            source.distribution, {"name": source.distribution, "version": source.version, "components": {}}
        )
        entry["components"].setdefault("command", []).extend(names)
    for entry in by_dist.values():
        entry["components"] = {k: sorted(v) for k, v in sorted(entry["components"].items())}
    return {
        "plugins": sorted(by_dist.values(), key=lambda e: (e["name"] != "cast-core", e["name"])),
        "failed": [f.to_dict() for f in failures()] + clashes,
    }
