"""The real models' architectures as small JSON facts, so that ``cast plan`` can build them at real
size without downloading a byte of weights.

Each file in ``architectures/`` (package data, shipped in the wheel) holds what a diffusers
pipeline directory's ``transformer/config.json`` and ``vae/config.json`` say, plus the text
encoder's facts the plan needs (hidden size, stacked layers, a nominal parameter count and the
text length the transformer sees). FLUX.2-dev and Qwen-Image are diffusers' class defaults;
klein 4B / 9B use the block counts of diffusers' conversion script (benchmarks/param_counts.py
counts the same configs; a test checks that the files build to its numbers). The ``*-tiny``
files are the toy widths of :mod:`cast_backbones.tiny`, for tests.

A real model directory works too (:func:`load_architecture` of a path): its own configs are read,
and the text encoder's size comes from its safetensors index.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["ARCHITECTURE_DIR", "architecture_names", "load_architecture"]

ARCHITECTURE_DIR = Path(__file__).resolve().parent / "architectures"
#: the diffusers pipeline class of a model directory -> the policy that runs it
_POLICY_OF_PIPELINE = {"Flux2Pipeline": "flux2", "Flux2KleinPipeline": "flux2-klein", "QwenImagePipeline": "qwen-image"}
#: the text the transformer sees when a model directory does not say: FLUX.2 pads to 512 tokens,
#: Qwen-Image uses the prompt's own length (128 is a long GenEval-style prompt)
_TEXT_LENGTH = {"flux2": 512, "flux2-klein": 512, "qwen-image": 128}
_OUT_LAYERS = {"flux2": [10, 20, 30], "flux2-klein": [9, 18, 27], "qwen-image": [-1]}


def architecture_names() -> list[str]:
    """The shipped architectures, by name (``flux2-dev``, ``qwen-image`` …)."""
    return sorted(p.stem for p in ARCHITECTURE_DIR.glob("*.json"))


def load_architecture(name_or_path: str | Path) -> dict[str, Any]:
    """The facts of a shipped architecture (by name), of a JSON file in the same layout, or of a
    diffusers pipeline directory (``save_pretrained``'s layout)."""
    name = str(name_or_path)
    shipped = ARCHITECTURE_DIR / f"{name}.json"
    if shipped.is_file():
        return json.loads(shipped.read_text(encoding="utf-8"))
    path = Path(name).expanduser()
    if path.is_file() and path.suffix == ".json":
        return json.loads(path.read_text(encoding="utf-8"))
    if (path / "model_index.json").is_file():
        return _from_directory(path)
    raise ValueError(
        f"unknown architecture {name!r}: name one of {', '.join(architecture_names())}, "
        "or give a pipeline directory (with model_index.json) or an architecture JSON file"
    )


def _read(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def _from_directory(path: Path) -> dict[str, Any]:
    index = _read(path / "model_index.json")
    pipeline = index.get("_class_name", "")
    policy = _POLICY_OF_PIPELINE.get(pipeline)
    if policy is None:
        raise ValueError(
            f"{path}: pipeline {pipeline!r} is not one cast-backbones plans ({', '.join(_POLICY_OF_PIPELINE)})"
        )
    strip = lambda d: {k: v for k, v in d.items() if not k.startswith("_") or k == "_class_name"}  # noqa: E731
    facts: dict[str, Any] = {
        "name": path.name,
        "policy": policy,
        "description": f"read from {path}",
        "source": str(path),
        "transformer": strip(_read(path / "transformer" / "config.json")),
        "vae": strip(_read(path / "vae" / "config.json")),
    }
    if "is_distilled" in index:
        facts["pipeline"] = {"is_distilled": bool(index["is_distilled"])}
    facts["text_encoder"] = _text_encoder_facts(path / "text_encoder", policy)
    return facts


def _text_encoder_facts(directory: Path, policy: str) -> dict[str, Any]:
    """Hidden size from the encoder's config, parameters from its safetensors (the index's
    ``total_size`` over the bytes per element of its dtype, or the single file's size)."""
    config = _read(directory / "config.json") if (directory / "config.json").is_file() else {}
    text = config.get("text_config", config)
    dtype = str(config.get("torch_dtype") or text.get("torch_dtype") or "bfloat16")
    width = 4 if "32" in dtype else 2
    index = directory / "model.safetensors.index.json"
    if index.is_file():
        size = int(_read(index).get("metadata", {}).get("total_size", 0))
    else:
        size = sum(f.stat().st_size for f in directory.glob("*.safetensors"))
    return {
        "name": config.get("_name_or_path") or (config.get("architectures") or ["text encoder"])[0],
        "class": (config.get("architectures") or [""])[0],
        "hidden_size": text.get("hidden_size"),
        "out_layers": _OUT_LAYERS[policy],
        "parameters": size // width,
        "text_length": _TEXT_LENGTH[policy],
        "note": f"parameters from the safetensors size at {dtype}",
    }
