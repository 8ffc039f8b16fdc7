"""`make test-alone`: each package's own tests in a fresh venv that holds only what it declares.

`make test` runs every package in the one `.venv` that holds all of them, so a library that one
package uses but only another declares is invisible there. Here each package gets its own venv
under `.venv-alone/<name>` with: the package itself and its `[dev]` extra, the local cast packages
it declares (cast-core always, cast-rewards for cast-shapes) and what pip resolves for those
declarations. Nothing else. The local packages are installed non-editable, so a file missing from
a wheel fails here too; they are reinstalled (without their dependencies) on every run so the
tests see the current source.

Torch is the one exception, for disk: one copy installed is about 5.5 GB, six would not fit a CI
machine. It is installed once, with `pip install --target`, into `.venv-alone/_torch/site-packages`.
THAT DIRECTORY EXPOSES EXACTLY torch AND ITS OWN REQUIREMENTS (their closure as pip resolves it:
for torch 2.14.1 on Linux: filelock, fsspec, jinja2, markupsafe, networkx, sympy, mpmath,
setuptools, typing-extensions, triton, cuda-bindings, cuda-pathfinder, cuda-toolkit and the
nvidia-* CUDA libraries; `.venv-alone/_torch/CONTENTS` lists them after an install), no pip and
nothing any cast package declares apart from torch. Every package here depends on torch, so
each of those libraries would be in its venv anyway: sharing them hides no missing declaration.
Each package venv reaches the directory through one `.pth` file; its own site-packages comes
first on sys.path, so anything a package resolves for itself (torchvision, transformers, ...) is
installed in, and found in, its own venv. Before installing, the script checks that pip sees the
shared torch as installed, and after, that pip did not install a second torch into the venv.

A venv is rebuilt when its key changes: the pyproject.toml of the package or of a local cast
package it pulls in, the shared torch, the Python, or KEY_SCHEMA below. pip's cache is kept.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    try:
        import tomli as tomllib
    except ModuleNotFoundError:
        sys.exit("make test-alone reads pyproject.toml files: run it with Python >= 3.11, or pip install tomli")

ROOT = Path(__file__).resolve().parent.parent
ALONE = ROOT / ".venv-alone"
TORCH_DIR = ALONE / "_torch"
TORCH_SITE = TORCH_DIR / "site-packages"
PIP_TOOL = ALONE / "_pip"  # a bare venv whose pip installs the shared torch (--target needs one)
PTH_NAME = "_cast_shared_torch.pth"
KEY_SCHEMA = "1"
DEFAULT_PACKAGES = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "packages").iterdir() if p.is_dir()) + [
    "examples/cast-plugin-example"
]


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(req: str) -> str:
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", req)
    if not match:
        raise SystemExit(f"test-alone: cannot read the requirement {req!r}")
    return normalize(match.group(1))


def read_project(pkg_dir: Path) -> dict:
    with open(pkg_dir / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]


def local_packages() -> dict[str, Path]:
    """Every cast package in this repository, by its distribution name."""
    found = {}
    for parent in (ROOT / "packages", ROOT / "examples"):
        for d in sorted(parent.iterdir()):
            if (d / "pyproject.toml").is_file():
                found[normalize(read_project(d)["name"])] = d
    return found


def local_closure(pkg_dir: Path, local: dict[str, Path]) -> list[Path]:
    """The local cast packages that pkg_dir's base dependencies pull in, recursively."""
    seen: list[Path] = []
    todo = [pkg_dir]
    while todo:
        project = read_project(todo.pop())
        for req in project.get("dependencies", []):
            dep = local.get(requirement_name(req))
            if dep is not None and dep != pkg_dir and dep not in seen:
                seen.append(dep)
                todo.append(dep)
    return seen


def site_packages(venv: Path) -> Path:
    return venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"


# pip's config here lists local indexes that lack most projects; it warns once per project it looks up.
PIP_NOISE = re.compile(r"^WARNING: Location '.*' is ignored: it is neither a file nor a directory\.$")


def run(cmd: list, **kw) -> None:
    print("+", " ".join(str(c) for c in cmd), flush=True)
    proc = subprocess.run([str(c) for c in cmd], stderr=subprocess.PIPE, text=True, **kw)
    sys.stderr.write("".join(line for line in proc.stderr.splitlines(True) if not PIP_NOISE.match(line.rstrip())))
    if proc.returncode != 0:
        raise subprocess.CalledProcessError(proc.returncode, cmd)


def clean_env(venv: Path | None) -> dict[str, str]:
    """The caller's environment without another venv or import path leaking in."""
    env = {
        k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONUSERBASE"}
    }
    shared_bin = str(ROOT / ".venv" / "bin")
    path = [p for p in env.get("PATH", "").split(os.pathsep) if p and p != shared_bin]
    if venv is not None:
        env["VIRTUAL_ENV"] = str(venv)
        path.insert(0, str(venv / "bin"))
    env["PATH"] = os.pathsep.join(path)
    env["PYTHONNOUSERSITE"] = "1"
    return env


def torch_specs(pkg_dirs: list[Path]) -> list[str]:
    specs = set()
    for d in pkg_dirs:
        for req in read_project(d).get("dependencies", []):
            if requirement_name(req) == "torch":
                specs.add(req.strip())
    return sorted(specs) or ["torch"]


def digest(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def ensure_shared_torch(specs: list[str]) -> str:
    """Install torch (and only its requirements) into TORCH_SITE once; returns its key."""
    constraints = ""
    for path in os.environ.get("PIP_CONSTRAINT", "/etc/xdg/pip/constraints.txt").split():
        if Path(path).is_file():
            constraints += Path(path).read_text()
    key = digest(KEY_SCHEMA, sys.version, *specs, constraints)
    stamp = TORCH_DIR / ".key"
    if stamp.is_file() and stamp.read_text() == key and TORCH_SITE.is_dir():
        return key
    started = time.monotonic()
    print(f"== shared torch: installing {' '.join(specs)} into {TORCH_SITE.relative_to(ROOT)}", flush=True)
    if not (PIP_TOOL / "bin" / "python").exists():
        run([sys.executable, "-m", "venv", PIP_TOOL])
    shutil.rmtree(TORCH_DIR, ignore_errors=True)
    staging = ALONE / "_torch.partial"
    shutil.rmtree(staging, ignore_errors=True)
    run(
        [PIP_TOOL / "bin" / "python", "-m", "pip", "install", "--quiet", "--target", staging, *specs],
        env=clean_env(None),
    )
    TORCH_DIR.mkdir(parents=True)
    staging.rename(TORCH_SITE)
    contents = sorted(p.name.split("-")[0] for p in TORCH_SITE.glob("*.dist-info"))
    (TORCH_DIR / "CONTENTS").write_text("\n".join(contents) + "\n")
    stamp.write_text(key)
    print(f"== shared torch: {', '.join(contents)}", flush=True)
    print(f"== shared torch: installed in {time.monotonic() - started:.0f} s", flush=True)
    return key


def create_venv(venv: Path, pkg_dir: Path, deps: list[Path]) -> None:
    shutil.rmtree(venv, ignore_errors=True)
    run([sys.executable, "-m", "venv", venv])
    (site_packages(venv) / PTH_NAME).write_text(str(TORCH_SITE) + "\n")
    py = venv / "bin" / "python"
    env = clean_env(venv)
    # pip must count the shared torch as installed, or it would put a 5.5 GB copy in this venv.
    shown = subprocess.run([py, "-m", "pip", "show", "torch"], capture_output=True, text=True, env=env)
    if shown.returncode != 0 or str(TORCH_SITE) not in shown.stdout:
        raise RuntimeError(
            f"pip in {venv} does not see the shared torch in {TORCH_SITE}:\n{shown.stdout}{shown.stderr}"
        )
    run([py, "-m", "pip", "install", "--quiet", f"{pkg_dir}[dev]", *deps], env=env)


def refresh_local(venv: Path, pkg_dir: Path, deps: list[Path]) -> None:
    """Reinstall the cast packages themselves (not their dependencies) so the current source is tested."""
    py = venv / "bin" / "python"
    run([py, "-m", "pip", "install", "--quiet", "--no-deps", "--force-reinstall", pkg_dir, *deps], env=clean_env(venv))


def check_venv(venv: Path) -> None:
    own = site_packages(venv)
    if (own / "torch").exists():
        raise RuntimeError(f"pip installed its own torch into {own}: the shared one did not satisfy a requirement")
    py = venv / "bin" / "python"
    run([py, "-m", "pip", "check"], env=clean_env(venv))


def test_package(pkg_dir: Path, local: dict[str, Path], torch_key: str, recreate: bool) -> dict:
    name = normalize(read_project(pkg_dir)["name"])
    deps = local_closure(pkg_dir, local)
    venv = ALONE / name
    pyprojects = [d.name + (d / "pyproject.toml").read_text() for d in [pkg_dir, *deps]]
    key = digest(KEY_SCHEMA, sys.version, torch_key, str(TORCH_SITE), *pyprojects)
    stamp = venv / ".cast-alone-key"
    result = {"package": name, "install_s": 0.0, "test_s": 0.0, "result": "fail", "how": ""}
    print(
        f"\n== {name} ({pkg_dir.relative_to(ROOT)}), with {', '.join(d.name for d in deps) or 'nothing local'}",
        flush=True,
    )
    started = time.monotonic()
    try:
        if not recreate and stamp.is_file() and stamp.read_text() == key and (venv / "bin" / "python").exists():
            result["how"] = "reused"
            refresh_local(venv, pkg_dir, deps)
        else:
            result["how"] = "created"
            create_venv(venv, pkg_dir, deps)
        check_venv(venv)
        stamp.write_text(key)
    except (subprocess.CalledProcessError, RuntimeError) as exc:
        stamp.unlink(missing_ok=True)
        result["install_s"] = time.monotonic() - started
        result["result"] = "install failed"
        print(f"test-alone: {name}: install failed: {exc}", flush=True)
        return result
    result["install_s"] = time.monotonic() - started
    started = time.monotonic()
    code = subprocess.run(
        [venv / "bin" / "python", "-m", "pytest", "-q", "-m", "not slow"], cwd=pkg_dir, env=clean_env(venv)
    ).returncode
    result["test_s"] = time.monotonic() - started
    result["result"] = "pass" if code == 0 else f"fail (pytest exit {code})"
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("packages", nargs="*", default=DEFAULT_PACKAGES, help="package directories (default: all)")
    parser.add_argument("--recreate", action="store_true", help="rebuild every package venv")
    args = parser.parse_args()
    local = local_packages()
    pkg_dirs = [(ROOT / p).resolve() for p in args.packages]
    ALONE.mkdir(exist_ok=True)
    total = time.monotonic()
    torch_key = ensure_shared_torch(torch_specs(list(local.values())))
    results = [test_package(d, local, torch_key, args.recreate) for d in pkg_dirs]
    print("\n== make test-alone: each package in its own venv (.venv-alone/)")
    print(f"{'package':<22} {'venv':<8} {'install':>9} {'tests':>9}  result")
    for r in results:
        print(f"{r['package']:<22} {r['how']:<8} {r['install_s']:>8.0f}s {r['test_s']:>8.0f}s  {r['result']}")
    print(f"total {time.monotonic() - total:.0f} s")
    (ALONE / "last-run.json").write_text(json.dumps(results, indent=1))
    failed = [r["package"] for r in results if r["result"] != "pass"]
    if failed:
        print(f"test-alone: failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
