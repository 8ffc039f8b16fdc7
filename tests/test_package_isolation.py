"""Each package imports only what its own pyproject declares.

The packages share one venv while developing, so an undeclared import would pass `make test`
and then break `pip install packages/cast-rewards` on a user's machine. This scans every module's
imports (including function-level ones) and maps them to distributions.
"""

from __future__ import annotations

import ast
import re
import sys
from importlib import metadata
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parents[1]
PROJECTS = sorted(p.parent for p in [*ROOT.glob("packages/*/pyproject.toml"), *ROOT.glob("examples/*/pyproject.toml")])


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _local_owners() -> dict[str, list[str]]:
    """Editable installs don't record their top-level modules, so map our own by their src dirs."""
    owners: dict[str, list[str]] = {}
    for project in PROJECTS:
        name = tomllib.loads((project / "pyproject.toml").read_text())["project"]["name"]
        for pkg in (project / "src").iterdir():
            if pkg.is_dir() and (pkg / "__init__.py").exists():
                owners.setdefault(pkg.name, []).append(name)
    return owners


def _imports(src: Path) -> dict[str, str]:
    """top-level module -> first file:line that imports it (absolute imports only)."""
    found: dict[str, str] = {}
    for path in sorted(src.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                found.setdefault(name.split(".")[0], f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


@pytest.mark.parametrize("project", PROJECTS, ids=lambda p: p.name)
def test_imports_are_declared(project):
    meta = tomllib.loads((project / "pyproject.toml").read_text())["project"]
    runtime = list(meta.get("dependencies", []))
    # optional extras a user opts into (e.g. cast-windows[clip]) count; test-only `dev` does not
    runtime += [d for extra, deps in meta.get("optional-dependencies", {}).items() if extra != "dev" for d in deps]
    declared = {_norm(re.split(r"[\s<>=!~;\[]", d, maxsplit=1)[0]) for d in runtime}
    own = {p.name for p in (project / "src").iterdir() if p.is_dir()}
    owners = {**metadata.packages_distributions(), **_local_owners()}
    undeclared = []
    for module, where in _imports(project / "src").items():
        if module in own or module in sys.stdlib_module_names or module == "__future__":
            continue
        dists = {_norm(d) for d in owners.get(module, [])} or {_norm(module)}  # not installed here: assume same name
        if not dists & declared:
            undeclared.append(f"{where} imports {module!r} (from {sorted(dists) or 'no installed distribution'})")
    assert not undeclared, f"{meta['name']} must declare these in its dependencies:\n" + "\n".join(undeclared)
