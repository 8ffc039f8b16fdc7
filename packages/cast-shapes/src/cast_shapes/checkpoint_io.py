"""Saving and loading the shapes network: safetensors weights with the config in the metadata.

Safetensors, never pickle, for anything a user might download; the config travels inside the
file so a weights file is self-describing.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from safetensors import safe_open
from safetensors.torch import save_file

from cast_shapes.model import ShapesModelConfig, ShapesNet

DEFAULT_WEIGHTS = Path(__file__).parent / "weights" / "shapes-policy.safetensors"


def save_net(net: ShapesNet, path: str | Path, extra_metadata: dict | None = None) -> None:
    """Write atomically (temp file + rename) so a crash never leaves a truncated weights file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = {"config": json.dumps(net.cfg.to_dict()), "format": "cast-shapes-net/1"}
    meta.update({k: str(v) for k, v in (extra_metadata or {}).items()})
    tensors = {k: v.detach().contiguous().cpu() for k, v in net.state_dict().items()}
    tmp = path.with_suffix(path.suffix + ".tmp")
    save_file(tensors, str(tmp), metadata=meta)
    os.replace(tmp, path)
    os.chmod(path, 0o644)


def load_net(path: str | Path = DEFAULT_WEIGHTS) -> tuple[ShapesNet, dict[str, str]]:
    """The network stored at ``path`` and the file's metadata."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"no shapes weights at {path}; pass a file written by `cast shapes pretrain` "
            f"(the package ships {DEFAULT_WEIGHTS.name})"
        )
    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata() or {}
        if "config" not in meta:
            raise ValueError(f"{path} has no 'config' metadata; it was not written by cast-shapes")
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    net = ShapesNet(ShapesModelConfig.from_dict(json.loads(meta["config"])))
    net.load_state_dict(tensors)
    return net.eval(), meta
