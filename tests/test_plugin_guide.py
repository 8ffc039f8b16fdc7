"""docs/plugins.md's worked example, as written: its files are taken from the page (every block
whose first line names a path), installed, and its own tests run, so the guide cannot drift from
code that works."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "plugins.md"
BLOCK = re.compile(r"```(?:python|toml)\n# ((?:pyproject\.toml|src/\S+\.py|tests/\S+\.py))\n(.*?)```", re.S)


def write_example(root: Path) -> dict[str, str]:
    """The page's files under ``root`` plus an installed-looking ``*.dist-info`` in ``src``."""
    files = {path: f"# {path}\n{body}" for path, body in BLOCK.findall(GUIDE.read_text())}
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    project = tomllib.loads(files["pyproject.toml"])["project"]
    package = root / "src" / project["name"].replace("-", "_")
    (package / "__init__.py").touch()
    info = root / "src" / f"{package.name}-{project['version']}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n")
    points = "".join(f"{k} = {v}\n" for k, v in project["entry-points"]["cast"].items())
    (info / "entry_points.txt").write_text(f"[cast]\n{points}")
    return files


def run(args, root: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAST_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root / "src"), env.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, *args], cwd=root, env=env, capture_output=True, text=True, timeout=600)


def test_the_worked_example_installs_lists_and_passes_its_tests(tmp_path):
    files = write_example(tmp_path)
    assert {
        "pyproject.toml",
        "src/cast_my_judge/judge.py",
        "src/cast_my_judge/window.py",
        "src/cast_my_judge/plugin.py",
        "tests/test_my_plugin.py",
    } <= set(files)
    listed = run(["-m", "cast_core.cli", "plugins", "--json"], tmp_path)
    assert listed.returncode == 0, listed.stderr
    entry = next(p for p in json.loads(listed.stdout)["plugins"] if p["name"] == "cast-my-judge")
    assert entry["components"] == {"atom_scorer": ["my-judge"], "window_selector": ["high-noise"]}
    tests = run(["-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"], tmp_path)
    # every kit test ran (the kits grow; a collection error or a skipped module would show as fewer)
    ran = re.search(r"(\d+) passed", tests.stdout)
    assert tests.returncode == 0 and ran and int(ran.group(1)) >= 17, tests.stdout[-3000:] + tests.stderr[-2000:]
