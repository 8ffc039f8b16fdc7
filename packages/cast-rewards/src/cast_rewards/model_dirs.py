"""Model directories and devices of the judges and the LLM decomposer, checked before loading.

Why: transformers answers a missing, empty or mistyped directory with a traceback ("Repo id must
be in the form ...", "no file named model.safetensors"), and a ``device="cuda"`` on a machine
without one with torch's "Found no NVIDIA driver" once the weights are read. Each is one line
here, naming the config key (``scorer_kwargs.path``, ``decomposer_kwargs.device`` …), the value
and what the directory must hold.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cast_core.cpu_overrides import require_device
from cast_core.errors import ConfigError

__all__ = ["ModelPathError", "check_model_dir", "check_device"]


class ModelPathError(ConfigError, FileNotFoundError):
    """A model path that holds no loadable model (also a ``FileNotFoundError`` for callers that
    catch that)."""


def check_model_dir(
    path: Any, *, owner: str, key: str, wants: str, thing: str = "", marker: str = "config.json"
) -> str:
    """``path`` as given when it is a local directory holding ``marker`` or looks like a hub id
    (``org/name``); else a :class:`ModelPathError` naming ``key``, the path and what it must hold
    (``thing``: what cannot be loaded, e.g. "a Qwen3-VL judge")."""
    if path is None or not str(path).strip():
        raise ModelPathError(f"{owner}: {key} is {'not set' if path is None else 'empty'}; give {wants}")
    local = Path(str(path)).expanduser()
    cannot = f"{owner}: cannot load {thing + ' ' if thing else ''}from {str(path)!r}"
    if local.is_file():
        raise ModelPathError(f"{cannot}: it is a file ({key}); give {wants}")
    if local.is_dir():
        if not (local / marker).is_file():
            what = "the directory is empty" if not any(local.iterdir()) else f"the directory has no {marker}"
            raise ModelPathError(f"{cannot}: {what} ({key}); give {wants}")
        return str(path)
    if str(path).startswith((".", "/", "~")) or str(path).count("/") != 1:  # a local path, not org/name
        raise ModelPathError(
            f"{cannot}: no such directory ({key}); give {wants} (or a hub id such as org/name on a machine "
            "with network)"
        )
    return str(path)


def check_device(device: Any, key: str) -> Any:
    """``device`` (``None``: a GPU when there is one) as a torch device, refused in one line
    naming ``key`` when this machine lacks it."""
    import torch

    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return require_device(device, key)
