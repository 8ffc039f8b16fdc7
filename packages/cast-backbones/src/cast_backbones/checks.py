"""What a backbone policy refuses before it loads (or right after, before it allocates): a model
path that holds no pipeline, a device this machine lacks, a LoRA rank that cannot be built, text
layers the encoder does not have.

Why: each of these otherwise surfaces minutes later as a traceback from diffusers, peft or torch
("Found no NVIDIA driver", an IndexError inside ``encode_prompt``, a rank-100000 adapter that
takes the machine's memory). Every error here is one line that names the ``policy_kwargs`` key,
the value, and what would work; they derive from :class:`ConfigError`, which the CLI prints as
``Error: ...``, and the path error is also a ``FileNotFoundError`` for callers that catch that.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from cast_core.errors import ConfigError

__all__ = [
    "ModelPathError",
    "check_lora_rank",
    "check_lora_size",
    "check_out_layers",
    "check_pipeline_dir",
    "encoder_layer_count",
    "encoder_layers_on_disk",
]

INDEX = "model_index.json"


class ModelPathError(ConfigError, FileNotFoundError):
    """``policy_kwargs.path`` names no diffusers pipeline."""


def _contents(pipeline_class_name: str) -> str:
    return (
        f"a directory written by {pipeline_class_name}.save_pretrained ({INDEX}, transformer/, text_encoder/, "
        "tokenizer/, vae/, scheduler/)"
    )


def check_pipeline_dir(owner: str, pipeline_class_name: str, path: Any) -> str:
    """``path`` as the source to load (a local directory's absolute path, or a hub id as given),
    or a :class:`ModelPathError` when it is unset, empty, missing, a file, or a directory without
    ``model_index.json``. ``owner`` is the policy class's name, for the message."""
    wanted = _contents(pipeline_class_name)
    if path is None or not str(path).strip():
        raise ModelPathError(
            f"{owner}: policy_kwargs.path is {'not set' if path is None else 'empty'}; give exactly one of path= "
            f"({wanted}, e.g. --set policy_kwargs.path=DIR) and pipeline= (a built diffusers pipeline)"
        )
    local = Path(str(path)).expanduser()
    if local.is_file():
        raise ModelPathError(f"{owner}: policy_kwargs.path = {path} is a file; give {wanted}")
    if local.is_dir():
        if not (local / INDEX).is_file():
            what = "is empty" if not any(local.iterdir()) else f"has no {INDEX}"
            raise ModelPathError(f"{owner}: policy_kwargs.path = {path} {what}; give {wanted}")
        return str(local.resolve())
    if str(path).startswith((".", "/", "~")) or str(path).count("/") != 1:  # a local path, not org/name
        raise ModelPathError(
            f"{owner}: no pipeline directory at {path} (policy_kwargs.path does not exist); give {wanted}, "
            "or a hub id such as org/name on a machine with network"
        )
    return str(path)


def check_lora_rank(rank: Any) -> int:
    """The rank as an int, refused below 1 or when not a whole number (before anything loads)."""
    whole = isinstance(rank, int) or (isinstance(rank, float) and rank.is_integer())
    if isinstance(rank, bool) or not whole or int(rank) < 1:
        raise ConfigError(
            f"policy_kwargs.lora_rank = {rank!r}: the LoRA rank is a whole number >= 1 (the recipes use 64)"
        )
    return int(rank)


def _adapted_linears(transformer: Any, targets: Sequence[str]) -> list[tuple[str, Any]]:
    """The Linear layers peft adapts for ``targets`` (a module whose name is a target or ends
    with ``.target``), found before peft allocates anything."""
    import torch

    return [
        (name, module)
        for name, module in transformer.named_modules()
        if isinstance(module, torch.nn.Linear) and any(name == t or name.endswith("." + t) for t in targets)
    ]


def check_lora_size(transformer: Any, rank: int, targets: Sequence[str]) -> None:
    """Refuse targets that match no layer, and a rank whose adapter would hold more parameters
    than the transformer it adapts. That bound, not the smallest layer's width, because a rank
    above a layer's ``min(in, out)`` is wasted but harmless (the recipes' rank 64 on the tiny
    test models' 32-wide layers), while a rank like 100000 allocates for minutes and then
    exhausts memory: the check is arithmetic on shapes, before peft creates a tensor (on the meta
    device too)."""
    layers = _adapted_linears(transformer, targets)
    if not layers:
        raise ConfigError(
            f"policy_kwargs.lora_targets = {list(targets)} matches no Linear layer of the transformer; name "
            "module names or their last parts (e.g. to_q, to_k, to_v, to_out.0)"
        )
    per_rank = sum(m.in_features + m.out_features for _, m in layers)  # A is r x in, B is out x r
    total = sum(p.numel() for p in transformer.parameters())
    if rank * per_rank > total:
        name, small = min(layers, key=lambda item: min(item[1].in_features, item[1].out_features))
        raise ConfigError(
            f"policy_kwargs.lora_rank = {rank} is larger than this transformer can use: the adapter would hold "
            f"{rank * per_rank:,} parameters, more than the transformer's own {total:,} (and a layer gains nothing "
            f"above rank min(in, out); the smallest adapted one, {name}, is {small.in_features} x "
            f"{small.out_features}); use lora_rank <= {max(1, total // per_rank)}"
        )


def encoder_layer_count(config: Any) -> int | None:
    """The text encoder's hidden layers, from its config (a dict or a transformers config; a
    multimodal config keeps them in ``text_config``); ``None`` when it does not say (or there is
    no config: ``cast plan``'s stand-in encoder)."""
    if config is None:
        return None
    if not isinstance(config, dict):
        getter = getattr(config, "get_text_config", None)
        config = (getter() if callable(getter) else config).to_dict()
    inner = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    count = inner.get("num_hidden_layers", config.get("num_hidden_layers"))
    return int(count) if isinstance(count, int) else None


def encoder_layers_on_disk(path: Any) -> int | None:
    """The layer count of ``path/text_encoder/config.json``, read before minutes of loading;
    ``None`` when ``path`` is not a local pipeline directory with that file."""
    try:
        config = json.loads((Path(str(path)).expanduser() / "text_encoder" / "config.json").read_text())
    except (OSError, ValueError):
        return None
    return encoder_layer_count(config) if isinstance(config, dict) else None


def check_out_layers(layers: Any, count: int | None) -> tuple[int, ...]:
    """``text_encoder_out_layers`` as ints, each an index into the encoder's hidden states: the
    embedding output (0) and one per layer, so ``0 .. count`` (or negative from the end)."""
    try:
        out = tuple(int(i) for i in layers)
        if not out or any(isinstance(i, bool) or float(i) != int(i) for i in layers):
            raise ValueError
    except (TypeError, ValueError):
        raise ConfigError(
            f"policy_kwargs.text_encoder_out_layers = {layers!r}: give a list of layer numbers, e.g. [10, 20, 30]"
        ) from None
    if count is not None:
        bad = [i for i in out if not -(count + 1) <= i <= count]
        if bad:
            raise ConfigError(
                f"policy_kwargs.text_encoder_out_layers = {list(out)} asks for hidden layer {bad[0]}, but the text "
                f"encoder has {count} layers (hidden states 0 to {count}); choose layers up to {count}"
            )
    return out
