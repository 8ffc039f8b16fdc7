"""Caching measured similarity curves, so ``cast train`` measures a window once.

Measuring the curve samples the whole calibration set at every step — minutes on a real model —
while the knee and window rule applied to it are instant. So the cache stores the *measurement*
(the curve), keyed by everything that determines it: the policy's identity, the number of steps,
the image resolution, the embedder's identity, the calibration prompts, the seeds and the batch
size. Changing the knee method or the window size reuses the measurement; changing the policy,
the schedule, the resolution or the embedder measures again.

Files are JSON under ``cache_dir`` (default ``$CAST_CACHE_DIR/windows`` or
``~/.cache/cast/windows``), named by a hash of the key, written atomically (temp file +
``os.replace``) so two processes measuring at once cannot leave a torn file.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import warnings
from pathlib import Path
from typing import Any

from cast_core.protocols import Identified

CACHE_VERSION = 1


def default_cache_dir() -> Path:
    base = os.environ.get("CAST_CACHE_DIR")
    return (Path(base) if base else Path.home() / ".cache" / "cast") / "windows"


def _simple(value: Any) -> bool:
    if isinstance(value, (bool, int, float, str)) or value is None:
        return True
    return isinstance(value, (tuple, list)) and all(_simple(v) for v in value)


def policy_identity(policy: Any) -> str:
    """What the cache calls this policy.

    ``policy.identity`` if the policy defines it (a model id + revision / checkpoint digest is
    ideal). Otherwise the class plus, if present, ``policy.config`` (its repr), plus the policy's
    plain public attributes (numbers, strings, tuples of those — e.g. the fake policy's seed and
    patch size). The adapter is deliberately not part of it: the window is measured on the model a
    run starts from, and a resumed run must get the same window back.
    """
    ident = policy.identity if isinstance(policy, Identified) else None
    if isinstance(ident, str) and ident:
        return ident
    cls = type(policy)
    parts = [f"{cls.__module__}.{cls.__qualname__}"]
    config = getattr(policy, "config", None)
    if config is not None:
        parts.append(f"config={config!r}")
    attrs = (
        {k: v for k, v in sorted(vars(policy).items()) if not k.startswith("_") and _simple(v)}
        if hasattr(policy, "__dict__")
        else {}
    )
    if attrs:
        parts.append(json.dumps(attrs, sort_keys=True, default=str))
    return " ".join(parts)


def embedder_identity(embedder: Any, name: str | None = None) -> str:
    """``embedder.identity`` if defined, else the registered name or the class path."""
    ident = embedder.identity if isinstance(embedder, Identified) else None
    if isinstance(ident, str) and ident:
        return ident
    if name:
        return name
    cls = type(embedder)
    return f"{cls.__module__}.{cls.__qualname__}"


def cache_key(**fields: Any) -> dict:
    """The key as a JSON-able dict (stored in the file, so a cache entry explains itself)."""
    return {"version": CACHE_VERSION, **fields}


def cache_path(cache_dir: str | Path, key: dict) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:20]
    return Path(cache_dir) / f"curve-{digest}.json"


def read_cache(path: Path, key: dict) -> dict | None:
    """The stored curve if ``path`` holds one for exactly ``key``; ``None`` if missing or unreadable."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    if data.get("key") != json.loads(json.dumps(key, default=str)):
        return None
    return data.get("curve")


def write_cache(path: Path, key: dict, curve: dict) -> None:
    """Store ``curve`` under ``key`` atomically; a cache that cannot be written is not an error."""
    path = Path(path)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".curve-", suffix=".json", dir=path.parent)
        with os.fdopen(fd, "w") as fh:
            json.dump({"key": key, "curve": curve}, fh, default=str)
        os.replace(tmp, path)
    except OSError as err:
        warnings.warn(f"could not cache the similarity curve at {path}: {err}", stacklevel=2)
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
