"""The repository's shape, checked: the map in docs/architecture.md names every module, every
benchmark is reachable, and the library never imports the command-line layer.

Why tests: a map that misses the newest module, or one import from the library up into the CLI,
goes unnoticed in review and then misleads every newcomer (datasette's documentation test is the
model: the docs are checked against the code, not the other way round).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
SOURCES = sorted(p for p in [*ROOT.glob("packages/*/src/*"), *ROOT.glob("examples/*/src/*")] if p.is_dir())


def _modules() -> list[Path]:
    return sorted(f for src in SOURCES for f in src.rglob("*.py") if f.name != "__init__.py")


@pytest.mark.parametrize("module", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_the_architecture_page_names_every_module(module):
    """Each module appears in docs/architecture.md by its path inside its package (``commands/train.py``,
    ``bench.py``), so a reader can find what every file is for."""
    inside = module.relative_to(next(s for s in SOURCES if s in module.parents)).as_posix()
    text = ARCHITECTURE.read_text(encoding="utf-8")
    if "/" in inside:  # commands/train.py may be listed under its folder as "train.py"
        folder, name = inside.rsplit("/", 1)
        section = text.split(f"{folder}/", 1)[-1] if f"{folder}/" in text else ""
        found = re.search(rf"(?<![\w/]){re.escape(name)}\b", section) is not None
    else:
        found = re.search(rf"(?<![\w/]){re.escape(inside)}\b", text) is not None
    assert found, f"docs/architecture.md does not name {module.relative_to(ROOT)}; add one line saying what it is for"


@pytest.mark.parametrize(
    "script",
    sorted((ROOT / "benchmarks").glob("*.py")) + sorted((ROOT / "benchmarks").glob("*.sh")),
    ids=lambda p: p.name,
)
def test_every_benchmark_is_listed_or_reachable_from_make(script):
    text = ARCHITECTURE.read_text(encoding="utf-8")
    listed = re.search(rf"(?<![\w/]){re.escape(script.name)}\b", text.split("\nbenchmarks/", 1)[-1]) is not None
    in_make = f"benchmarks/{script.name}" in (ROOT / "Makefile").read_text(encoding="utf-8")
    assert listed or in_make, f"benchmarks/{script.name} is neither in the Makefile nor listed in docs/architecture.md"


def _imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names |= {f"{node.module}.{a.name}" for a in node.names}
    return names


def test_only_the_cli_imports_the_command_layer():
    """``cast_core.commands`` is the thin layer over the library: the library, the plugins and the
    benchmarks use the library's own modules (config.build_config, prompts.read_prompt_file, …)."""
    commands = ROOT / "packages/cast-core/src/cast_core/commands"
    cli = ROOT / "packages/cast-core/src/cast_core/cli.py"
    offenders = []
    for path in [*_modules(), *sorted((ROOT / "benchmarks").glob("*.py"))]:
        if path == cli or commands in path.parents:
            continue
        if any(
            name == "cast_core.commands" or name.startswith("cast_core.commands.") for name in _imported_modules(path)
        ):
            offenders.append(str(path.relative_to(ROOT)))
    assert not offenders, f"these import cast_core.commands (the CLI layer): {offenders}"
