"""Cross-package helpers: run the installed `cast` in a fresh interpreter, and fake installs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

CAST = [sys.executable, "-c", "from cast_core.cli import main; main()"]


def run_cast(
    *args: str, env: dict[str, str] | None = None, extra_path: Path | None = None
) -> subprocess.CompletedProcess:
    """Run `cast ARGS` as a new process, like a user would (real entry-point metadata)."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("CAST_")}
    full_env.update(env or {})
    if extra_path is not None:
        full_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(extra_path), full_env.get("PYTHONPATH")]))
    return subprocess.run(CAST + list(args), capture_output=True, text=True, env=full_env)


def load_benchmark(name: str):
    """A script of benchmarks/ as a module (they are scripts, not a package)."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"benchmark_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def plugins_json(**kwargs) -> dict:
    out = run_cast("plugins", "--json", **kwargs)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.fixture
def fake_install(tmp_path):
    """``fake_install(dist, module_source, entry_name)`` writes an installed-looking distribution
    (a ``*.dist-info`` with METADATA and entry_points.txt, plus its module) into a directory that
    the test puts on PYTHONPATH — discovered through real importlib.metadata, no monkeypatching."""

    def _install(dist: str, module_source: str, entry_name: str = "plugin") -> Path:
        module = dist.replace("-", "_")
        info = tmp_path / f"{module}-0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
        (info / "entry_points.txt").write_text(f"[cast]\n{entry_name} = {module}\n")
        (tmp_path / f"{module}.py").write_text(textwrap.dedent(module_source))
        return tmp_path

    return _install
