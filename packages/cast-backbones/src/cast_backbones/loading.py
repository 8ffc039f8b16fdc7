"""Loading a transformer already sharded: each process builds it on the meta device, shards it
with FSDP2, and reads only its own slice of every weight from the safetensors files.

Why: the plain path (``from_pretrained`` on every process, then ``fully_shard`` in ``prepare``)
holds a whole copy of the transformer in every process before any of it is sliced away — eight
copies of FLUX.2-dev's 60 GiB on an 8-GPU node. Here no process ever holds more than its
1/N of the weights (plus what the file's page cache lends while it is read, which the
processes share). The other known pattern, rank 0 loading everything and broadcasting the
slices, still holds one full copy on rank 0 and sends every byte through a collective;
docs/distributed.md compares the two.

The adapter cannot be drawn as peft draws it (peft's initialisation consumes the global random
stream in module order, and on the meta device it draws nothing), so both paths draw it the same
way after peft has created it: every LoRA ``A`` from its own generator seeded by the run's seed and
the parameter's name (peft's "gaussian" init: standard deviation ``1/r``), every ``B`` zero. A
process draws each whole ``A`` (small: rank × width) and keeps its slice, so the adapter is the
same whatever the process count and whichever path loaded the base.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Callable, Iterable

import torch

__all__ = [
    "draw_lora_seed",
    "init_lora_",
    "load_transformer_sharded",
    "read_header",
    "read_rows_",
    "shard_rows",
    "weight_files",
]

_INDEX = "diffusion_pytorch_model.safetensors.index.json"
_SINGLE = "diffusion_pytorch_model.safetensors"


def draw_lora_seed() -> int:
    """One number from the global random stream (seeded by the trainer), from which every LoRA
    ``A`` is drawn by name: the one draw both loading paths make at the same point."""
    return int(torch.randint(0, 2**62, (1,)).item())


def _name_generator(seed: int, name: str) -> torch.Generator:
    digest = hashlib.sha256(f"{seed}:{name}".encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") & (2**63 - 1))


def shard_rows(param: torch.Tensor) -> tuple[int, int] | None:
    """The rows ``[start, stop)`` of the whole tensor that this process holds of a parameter FSDP2
    sharded on dim 0 (``torch.chunk``'s split: ``ceil(n / world)`` rows each, the last ones short or
    empty); ``None`` for an unsharded tensor."""
    from cast_core.sharding import is_sharded

    if not is_sharded(param):
        return None
    from torch.distributed.tensor import Shard

    placements = tuple(param.placements)
    if len(placements) != 1 or placements[0] != Shard(0):
        raise ValueError(f"sharded loading reads FSDP2's Shard(0) layout on one mesh dimension, got {placements}")
    mesh = param.device_mesh
    world, rank = mesh.size(), mesh.get_local_rank()
    n = param.shape[0]
    chunk = -(-n // world)
    start = min(rank * chunk, n)
    stop = min(start + chunk, n)
    local = param.to_local()
    if tuple(local.shape) != (stop - start, *param.shape[1:]):
        raise ValueError(f"unexpected local shard {tuple(local.shape)} of {tuple(param.shape)} on rank {rank}/{world}")
    return start, stop


def _lora_layers(transformer: torch.nn.Module) -> Iterable[tuple[str, Any]]:
    for name, module in transformer.named_modules():
        if hasattr(module, "lora_A") and "default" in getattr(module, "lora_A", {}):
            yield name, module


@torch.no_grad()
def init_lora_(transformer: torch.nn.Module, seed: int) -> None:
    """Every LoRA ``A`` ~ N(0, (1/r)²) from a generator of (``seed``, its name), every ``B`` = 0
    (so the model is unchanged until trained); sharded or not, each process writes its slice."""
    for name, module in _lora_layers(transformer):
        a = module.lora_A["default"].weight
        b = module.lora_B["default"].weight
        r = int(module.r["default"])
        full = torch.randn(tuple(a.shape), generator=_name_generator(seed, f"{name}.lora_A"), dtype=torch.float32)
        full = full / r
        rows = shard_rows(a)
        target = a.to_local() if rows is not None else a
        target.copy_(full if rows is None else full[rows[0] : rows[1]])
        (b.to_local() if shard_rows(b) is not None else b).zero_()


_DTYPES = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
}
_CHUNK = 64 * 2**20  # bytes read per call when a slice must pass through a buffer (another dtype or device)


def read_header(file: Path) -> tuple[dict, int]:
    """A safetensors file's header (name -> dtype, shape, byte offsets) and where its data starts:
    8 bytes of little-endian header length, the JSON header, then the tensors' bytes."""
    with open(file, "rb") as f:
        length = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(length))
    header.pop("__metadata__", None)
    return header, 8 + length


def weight_files(directory: Path) -> dict[str, Path]:
    """Which safetensors file holds each weight of a diffusers model directory (one file, or
    the shards an index names)."""
    index = directory / _INDEX
    if index.is_file():
        weight_map = json.loads(index.read_text())["weight_map"]
        return {key: directory / file for key, file in weight_map.items()}
    single = directory / _SINGLE
    if single.is_file():
        return {key: single for key in read_header(single)[0]}
    raise FileNotFoundError(
        f"no {_SINGLE} or {_INDEX} in {directory}: sharded loading reads safetensors written by "
        "save_pretrained (set policy_kwargs.load_sharded = false to load other formats the plain way)"
    )


def _file_key(param_name: str) -> str:
    """A parameter's key in the model's own files: peft wraps each adapted Linear, so the base
    weight ``...to_q.weight`` is the parameter ``...to_q.base_layer.weight``."""
    return param_name.replace(".base_layer.", ".")


def _readinto(f: Any, buffer: torch.Tensor, offset: int) -> None:
    view = memoryview(buffer.numpy()).cast("B")
    f.seek(offset)
    done = 0
    while done < len(view):
        n = f.readinto(view[done:])
        if not n:
            raise EOFError(f"{f.name} ends before byte {offset + len(view)}: the file is truncated")
        done += n


@torch.no_grad()
def read_rows_(target: torch.Tensor, f: Any, entry: dict, data_start: int, start: int, stop: int) -> None:
    """Rows ``[start, stop)`` of one stored tensor into ``target``, by plain reads at their byte
    offsets: nothing is memory-mapped, so a process never holds pages of the file beyond the
    bytes it asked for (a mapped file's pages count in each mapping process's memory while they
    are mapped), and the bytes go straight into ``target`` when dtype and device allow."""
    dtype = _DTYPES[entry["dtype"]]
    shape = entry["shape"]
    row = dtype.itemsize
    for size in shape[1:]:
        row *= size
    base = data_start + entry["data_offsets"][0]
    if target.dtype == dtype and target.device.type == "cpu" and target.is_contiguous():
        _readinto(f, target.reshape(-1).view(torch.uint8), base + start * row)
        return
    rows_per_chunk = max(1, _CHUNK // max(row, 1))
    flat = target.reshape(stop - start, -1) if shape else target.reshape(1, -1)
    for a in range(start, stop, rows_per_chunk):
        b = min(a + rows_per_chunk, stop)
        buffer = torch.empty((b - a) * row, dtype=torch.uint8)
        _readinto(f, buffer, base + a * row)
        flat[a - start : b - start].copy_(buffer.view(dtype).reshape(b - a, -1))


@torch.no_grad()
def _read_weights_(transformer: torch.nn.Module, directory: Path) -> None:
    files = weight_files(directory)
    wanted = {n: p for n, p in transformer.named_parameters() if "lora_" not in n}
    missing = sorted(_file_key(n) for n in wanted if _file_key(n) not in files)
    if missing:
        raise ValueError(
            f"{directory} lacks {len(missing)} weight(s) this transformer has, e.g. {missing[0]}: "
            "is the directory the same model family and configuration?"
        )
    by_file: dict[Path, list[str]] = {}
    for name in wanted:
        by_file.setdefault(files[_file_key(name)], []).append(name)
    for file, names in by_file.items():
        header, data_start = read_header(file)
        with open(file, "rb", buffering=0) as f:
            for name in names:
                param, entry = wanted[name], header[_file_key(name)]
                if tuple(entry["shape"]) != tuple(param.shape):
                    raise ValueError(
                        f"{file}: {_file_key(name)} has shape {tuple(entry['shape'])}, "
                        f"the model expects {tuple(param.shape)}"
                    )
                rows = shard_rows(param)
                target = param.to_local() if rows is not None else param
                if target.numel():
                    start, stop = rows if rows is not None else (0, param.shape[0] if param.ndim else 1)
                    read_rows_(target, f, entry, data_start, start, stop)


def load_transformer_sharded(
    transformer_class: Any,
    directory: str | Path,
    *,
    dtype: torch.dtype,
    device: torch.device,
    add_adapter: Callable[[torch.nn.Module], None],
    blocks: Callable[[torch.nn.Module], list[torch.nn.Module]],
    lora_seed: int,
) -> torch.nn.Module:
    """The transformer of ``directory`` (a diffusers model folder) on ``device``, every weight
    already FSDP2-sharded over the default process group, frozen, with its adapter (added by
    ``add_adapter`` on the meta device, drawn by :func:`init_lora_`). ``blocks`` names the modules
    sharded one by one, as ``prepare`` would."""
    from accelerate import init_empty_weights

    from cast_core.sharding import fully_shard_module

    directory = Path(directory)
    config = transformer_class.load_config(str(directory))
    with init_empty_weights(include_buffers=False):
        transformer = transformer_class.from_config(config)
    transformer.to(dtype)
    transformer.requires_grad_(False)
    add_adapter(transformer)
    # buffers were built for real (include_buffers=False); to_empty would leave them uninitialised
    buffers = {n: b.detach().clone() for n, b in transformer.named_buffers()}
    fully_shard_module(transformer, blocks(transformer))
    transformer.to_empty(device=device)
    for name, value in buffers.items():
        owner, _, leaf = name.rpartition(".")
        module = transformer.get_submodule(owner) if owner else transformer
        module._buffers[leaf] = value.to(device)
    _read_weights_(transformer, directory)
    init_lora_(transformer, lora_seed)
    return transformer
