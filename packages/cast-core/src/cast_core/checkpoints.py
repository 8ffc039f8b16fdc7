"""Checkpoints that a crash can never corrupt.

A checkpoint is a directory ``checkpoints/step-XXXXX/`` holding the policy's adapter (as the
policy saves it: safetensors), the optimizer state and ``state.json`` (step, EMA, counters). It is
written under a temporary name and renamed into place, and only directories whose name is a final
``step-N`` and that contain ``state.json`` count — so a crash never leaves a half-written one.

Damage after the fact (a disk that truncates a file, a hand-deleted ``state.json``, a copy that
stopped halfway) is *detected*, not guessed: every checkpoint carries ``manifest.json`` with the
size and sha256 of each of its files, and :func:`find_intact_checkpoint` walks back from the newest
checkpoint to the newest one that verifies, naming what it skipped and why.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any, Callable, Iterator

import torch

from cast_core.run_dir import WriteError, disk_problem
from cast_core.sharding import full_optimizer_state, full_tensor, shard_optimizer_state

_STEP_DIR = re.compile(r"^step-(\d+)$")


def checkpoint_dirs(run_dir: str | Path) -> list[Path]:
    """Complete checkpoints, oldest first."""
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return []
    found = [
        (int(m.group(1)), p) for p in root.iterdir() if (m := _STEP_DIR.match(p.name)) and (p / "state.json").is_file()
    ]
    return [p for _, p in sorted(found)]


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    dirs = checkpoint_dirs(run_dir)
    return dirs[-1] if dirs else None


MANIFEST = "manifest.json"


def step_dirs(run_dir: str | Path) -> list[Path]:
    """Every final ``step-N`` directory, complete or not, oldest first (temporary ones excluded)."""
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if (m := _STEP_DIR.match(p.name))]
    return [p for _, p in sorted(found)]


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_manifest(directory: Path) -> None:
    """Record the size and sha256 of every file under ``directory`` (the manifest last)."""
    files = sorted(p for p in directory.rglob("*") if p.is_file() and p.name != MANIFEST)
    entries = {str(p.relative_to(directory)): {"bytes": p.stat().st_size, "sha256": _sha256(p)} for p in files}
    (directory / MANIFEST).write_text(json.dumps({"files": entries}, indent=1))


def verify_checkpoint(path: str | Path) -> str | None:
    """Why ``path`` is not an intact checkpoint, or None when it is. Checkpoints written before
    manifests existed are checked for a readable ``state.json`` only."""
    path = Path(path)
    state = path / "state.json"
    if not state.is_file():
        return "state.json is missing"
    try:
        step = json.loads(state.read_text())["step"]
    except (ValueError, KeyError, TypeError, OSError) as err:
        return f"state.json is unreadable ({type(err).__name__})"
    m = _STEP_DIR.match(path.name)
    if m and int(m.group(1)) != step:
        return f"state.json says step {step}"
    manifest = path / MANIFEST
    if not manifest.is_file():
        return None
    try:
        files = json.loads(manifest.read_text())["files"]
    except (ValueError, KeyError, TypeError, OSError) as err:
        return f"{MANIFEST} is unreadable ({type(err).__name__})"
    for name, want in files.items():
        f = path / name
        if not f.is_file():
            return f"{name} is missing"
        if f.stat().st_size != want["bytes"]:
            return f"{name} has {f.stat().st_size} bytes, the manifest says {want['bytes']}"
        if _sha256(f) != want["sha256"]:
            return f"{name} does not match its checksum"
    return None


def step_of(path: str | Path) -> int:
    """The step a ``step-N`` checkpoint directory holds, from its name."""
    return int(_STEP_DIR.match(Path(path).name).group(1))


def verified_checkpoints(run_dir: str | Path) -> Iterator[tuple[Path, str | None]]:
    """Every ``step-N`` directory, newest first, with why it is not intact (None when it is)."""
    for path in reversed(step_dirs(run_dir)):
        yield path, verify_checkpoint(path)


def find_intact_checkpoint(run_dir: str | Path) -> tuple[Path | None, list[tuple[Path, str]]]:
    """The newest checkpoint that verifies, and the newer ones skipped with the reason each."""
    skipped = []
    for path, why in verified_checkpoints(run_dir):
        if why is None:
            return path, skipped
        skipped.append((path, why))
    return None, skipped


def save_checkpoint(
    run_dir: str | Path,
    step: int,
    policy: Any,
    optimizer: torch.optim.Optimizer,
    state: dict[str, Any],
    tensors: dict[str, torch.Tensor] | None = None,
    keep: int = 3,
    write_extra: Callable[[Path], None] | None = None,
    *,
    writer: bool = True,
) -> Path:
    """Write ``checkpoints/step-{step:05d}`` atomically and delete all but the newest ``keep``.
    ``write_extra(directory)`` may add files (e.g. an EMA adapter) before the rename, so they are
    part of the same all-or-nothing checkpoint.

    With sharded (FSDP2) weights every process calls this: the adapter, optimizer state and
    ``tensors`` are gathered whole on every process (collectives), and only the ``writer``
    touches the disk — so the checkpoint holds full tensors and resumes with any process count."""
    root = Path(run_dir) / "checkpoints"
    final = root / f"step-{step:05d}"
    tmp = root / f".step-{step:05d}.tmp"
    blob = None
    try:
        if writer:
            root.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir()
        policy.save_adapter(tmp / "adapter")
        blob = {
            "optimizer": full_optimizer_state(optimizer),
            "tensors": {k: full_tensor(v).detach().cpu() for k, v in (tensors or {}).items()},
        }
        if write_extra is not None:
            write_extra(tmp)
        if not writer:
            return final
        torch.save(blob, tmp / "optimizer.pt")
        (tmp / "state.json").write_text(json.dumps({"step": step, **state}, indent=2))
        write_manifest(tmp)
    except Exception as err:
        if not writer:
            raise
        _refuse_disk_failure(run_dir, step, tmp, err, _tensor_bytes(blob))
    if final.exists():  # re-saving the same step (e.g. after a resume): replace it whole
        shutil.rmtree(final)
    os.replace(tmp, final)
    for old in checkpoint_dirs(run_dir)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


class CheckpointWriteError(WriteError):
    """A checkpoint could not be written (disk full, read-only): the run stops with one line and
    stays resumable from the checkpoint before it, which is left untouched."""


def _tensor_bytes(tree: Any) -> int:
    if isinstance(tree, torch.Tensor):
        return tree.numel() * tree.element_size()
    if isinstance(tree, dict):
        return sum(_tensor_bytes(v) for v in tree.values())
    if isinstance(tree, (list, tuple)):
        return sum(_tensor_bytes(v) for v in tree)
    return 0


def _dir_bytes(path: Path) -> int:
    """Space the files under ``path`` take on disk (whole blocks: a small checkpoint on a nearly
    full disk needs more than its byte count)."""
    if not path.is_dir():
        return 0
    stats = [p.stat() for p in path.rglob("*") if p.is_file()]
    return sum(max(s.st_size, getattr(s, "st_blocks", 0) * 512) for s in stats)


def _refuse_disk_failure(run_dir: str | Path, step: int, tmp: Path, err: Exception, tensor_bytes: int) -> None:
    """Remove the half-written checkpoint and, when the disk caused the failure, raise one line
    that says how much space a checkpoint takes and where the run can resume from; any other
    failure is re-raised as it was."""
    written = _dir_bytes(tmp)
    shutil.rmtree(tmp, ignore_errors=True)
    previous = latest_checkpoint(run_dir)
    needed = _dir_bytes(previous) if previous is not None else max(written, tensor_bytes)
    why = disk_problem(tmp.parent, err, needed or None)
    if why is None:
        raise err
    resume = (
        f"the run can resume from {previous.name}"
        if previous is not None
        else "no earlier checkpoint exists, so a resume starts from step 0"
    )
    raise CheckpointWriteError(
        f"cannot write checkpoint {tmp.parent / f'step-{step:05d}'}: {why}; {resume}: make room, then "
        f"`cast train --resume {run_dir}`"
    ) from None


def load_checkpoint(
    path: str | Path, policy: Any, optimizer: torch.optim.Optimizer
) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """Restore adapter and optimizer from ``path``; returns ``(state, tensors)``."""
    path = Path(path)
    if not (path / "state.json").is_file():
        raise FileNotFoundError(f"{path} is not a complete checkpoint (no state.json)")
    policy.load_adapter(path / "adapter")
    # onto the CPU first: a checkpoint written on a GPU must load on a machine without one;
    # load_state_dict then moves the optimizer state to the parameters' device
    blob = torch.load(path / "optimizer.pt", weights_only=True, map_location="cpu")
    optimizer.load_state_dict(blob["optimizer"])
    shard_optimizer_state(optimizer)  # full tensors on disk; each process keeps its slice
    return json.loads((path / "state.json").read_text()), blob.get("tensors", {})
