"""LoRA on a diffusers transformer: the DreamBooth target presets, and adapter files in the
format diffusers' own ``load_lora_weights`` reads.

Why the file format matters: a user's trained adapter must load into the stock pipeline with
one call (``pipe.load_lora_weights(dir)``) on any machine, without cast installed. So we write
through the pipeline class's own ``save_lora_weights`` (``transformer.``-prefixed keys and the
peft config as metadata, so rank *and* alpha survive: without the metadata diffusers would
assume ``alpha = rank`` and silently rescale the update).

Sharded runs (FSDP2): every process gathers the full tensors (a collective), one writes; on
load each process copies the full tensors into its own slices.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import torch

from cast_core.errors import ConfigError, InputError
from cast_core.sharding import copy_full_, full_tensor, is_writer

__all__ = [
    "ADAPTER_FILE",
    "flux2_targets",
    "qwen_image_targets",
    "add_lora",
    "lora_parameters",
    "lora_state",
    "save_lora",
    "load_lora",
    "AdapterFileError",
]

ADAPTER_FILE = "pytorch_lora_weights.safetensors"  # diffusers' LORA_WEIGHT_NAME_SAFE


class AdapterFileError(InputError, ValueError):
    """An adapter file that safetensors cannot read (truncated by a full disk or a cut copy);
    a ``ValueError`` too, so the commands' ``--adapter`` handling reports it on that option."""


def flux2_targets(transformer) -> list[str]:
    """``train_dreambooth_lora_flux2(_klein).py``'s default: the attention projections of both
    streams' image side, the fused QKV+MLP projection of the single-stream blocks, and their
    output projections by full name (a single block's ``to_out`` is a bare Linear that the
    suffix ``to_out.0`` does not match)."""
    singles = transformer.config.num_single_layers
    return [
        "to_k",
        "to_q",
        "to_v",
        "to_out.0",
        "to_qkv_mlp_proj",
        *[f"single_transformer_blocks.{i}.attn.to_out" for i in range(singles)],
    ]


def qwen_image_targets(transformer) -> list[str]:
    """``train_dreambooth_lora_qwen_image.py``'s default: the image stream's attention."""
    return ["to_k", "to_q", "to_v", "to_out.0"]


def add_lora(transformer, *, rank: int, alpha: float, targets: Sequence[str]) -> None:
    """Add a float32 LoRA adapter (B = 0, so the model is unchanged until trained), named
    ``default`` as diffusers and peft expect."""
    from peft import LoraConfig

    from cast_backbones.checks import check_lora_rank, check_lora_size

    rank = check_lora_rank(rank)
    targets = list(targets)
    if not targets:
        raise ConfigError("policy_kwargs.lora_targets is empty: name at least one module (e.g. to_q)")
    check_lora_size(transformer, rank, targets)  # before peft allocates: rank 100000 would take minutes
    transformer.add_adapter(
        LoraConfig(r=int(rank), lora_alpha=float(alpha), init_lora_weights="gaussian", target_modules=targets)
    )
    for p in lora_parameters(transformer):
        p.data = p.data.float()


def lora_parameters(transformer) -> list[torch.nn.Parameter]:
    return [p for n, p in transformer.named_parameters() if "lora_" in n and p.requires_grad]


def _named_lora(transformer) -> dict[str, torch.nn.Parameter]:
    """File key (peft's, without the adapter name) -> parameter."""
    return {n.replace(".default.", "."): p for n, p in transformer.named_parameters() if "lora_" in n}


def lora_state(transformer) -> dict[str, torch.Tensor]:
    """The adapter as full CPU tensors (gathered when sharded: call on every process)."""
    return {k: full_tensor(p.detach()).contiguous().cpu() for k, p in _named_lora(transformer).items()}


def save_lora(pipeline_class, transformer, directory: str | Path) -> None:
    """Write ``directory/pytorch_lora_weights.safetensors`` as ``pipeline_class.save_lora_weights`` does."""
    state = lora_state(transformer)
    if not is_writer():
        return
    config = transformer.peft_config["default"].to_dict()
    config["target_modules"] = (
        sorted(config["target_modules"])
        if isinstance(config.get("target_modules"), (set, list))
        else config.get("target_modules")
    )
    Path(directory).mkdir(parents=True, exist_ok=True)
    pipeline_class.save_lora_weights(
        str(directory), transformer_lora_layers=state, transformer_lora_adapter_metadata=config, safe_serialization=True
    )


def load_lora(transformer, directory: str | Path) -> None:
    """Load an adapter written by :func:`save_lora` (or by diffusers' DreamBooth scripts with
    the same rank and targets) into the transformer's adapter, sharded or not."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    path = Path(directory) / ADAPTER_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"no LoRA weights at {path}; expected a directory written by save_adapter (RUN/checkpoints/step-N/adapter)"
        )
    try:
        _check_metadata(transformer, path)
        state = {k.removeprefix("transformer."): v for k, v in load_file(str(path)).items()}
    except (SafetensorError, OSError) as err:  # torn header, cut data, unreadable file
        why = str(err).splitlines()[0][:160] if str(err) else type(err).__name__
        raise AdapterFileError(
            f"{path} is truncated or damaged and cannot be read ({why}); copy it again, or use another "
            "checkpoint's adapter (RUN/checkpoints/step-N/adapter)"
        ) from None
    params = _named_lora(transformer)
    found = {k: tuple(v.shape) for k, v in state.items()}
    expected = {k: tuple(p.shape) for k, p in params.items()}
    if found != expected:
        bad = sorted(set(found.items()) ^ set(expected.items()))
        raise ValueError(
            f"{path} does not match this policy's LoRA (lora_rank / lora_targets differ): "
            f"{len(bad)} mismatched tensors, e.g. {bad[0][0]} {bad[0][1]}"
        )
    for key, param in params.items():
        copy_full_(param, state[key])


def _check_metadata(transformer, path: Path) -> None:
    """Refuse an adapter whose rank or alpha differ from this policy's: shapes catch a rank
    mismatch, but an alpha mismatch would load silently at another strength (scale = alpha / r).
    Files without diffusers' metadata are checked by shape only."""
    import json

    from safetensors import safe_open

    with safe_open(str(path), "pt") as f:
        raw = (f.metadata() or {}).get("lora_adapter_metadata")
    if not raw:
        return
    meta = {k.removeprefix("transformer."): v for k, v in json.loads(raw).items()}
    ours = transformer.peft_config["default"]
    for key, mine in (("r", ours.r), ("lora_alpha", ours.lora_alpha)):
        if key in meta and float(meta[key]) != float(mine):
            raise ValueError(
                f"{path} was trained with {key} = {meta[key]}, this policy has {mine}; build the policy "
                f"with the run's lora_rank / lora_alpha (policy_kwargs) to load it"
            )
