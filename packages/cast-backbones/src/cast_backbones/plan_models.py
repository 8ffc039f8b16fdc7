"""``build_for_plan``: a FLUX.2 or Qwen-Image policy at real size on the meta device, for
``cast plan`` (cast_core's :class:`~cast_core.protocols.Plannable` feature).

The policy is the real class around a real diffusers pipeline whose transformer and VAE are
built from :mod:`cast_backbones.architecture_facts` on PyTorch's meta device: every weight has
its shape and dtype and no memory, the LoRA adapter is added by the policy's own constructor
(float32, the run's rank and targets), and the plan then runs the policy's own ``velocity`` and
``decode``. Two things are stand-ins, because a plan needs neither:

* the text encoder: the trainer encodes every prompt before the transformer reaches the GPU and
  offloads the encoder, so the steady state never holds it; an empty module keeps the pipeline
  whole, and the plan reports the encoder's size from the facts (start-up, host RAM);
* the conditioning: rows of the encoder's output shape — FLUX.2 pads every prompt to
  ``max_sequence_length`` tokens of width ``joint_attention_dim`` (3 stacked hidden states);
  Qwen-Image uses the prompt's own length (``text_length`` of the facts) with its mask.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Iterator

import torch

from cast_backbones.architecture_facts import load_architecture
from cast_core.conditioning import PromptEmbeds
from cast_core.types import PlanSubject

__all__ = ["DEFAULT_ARCHITECTURES", "build_for_plan"]

#: the architecture each policy plans when none is named
DEFAULT_ARCHITECTURES = {"flux2": "flux2-dev", "flux2-klein": "flux2-klein-4b", "qwen-image": "qwen-image"}
#: factory options a plan ignores: where the weights are and which devices they would go to
_IGNORED = ("path", "device", "text_encoder_device", "compile", "attention_backend", "load_sharded")
#: pipelines whose prompts are padded to max_sequence_length (the others: the prompt's own length)
_PADS_TEXT = ("Flux2Pipeline", "Flux2KleinPipeline")


class _AbsentTextEncoder(torch.nn.Module):
    """Stands in for the text encoder in a planned pipeline: no weights; the dtype the policy
    reads to draw its noise."""

    def __init__(self, dtype: torch.dtype):
        super().__init__()
        self._dtype = dtype

    @property
    def dtype(self) -> torch.dtype:
        return self._dtype


@contextlib.contextmanager
def _quiet_diffusers() -> Iterator[None]:
    """diffusers warns on every ``.to(dtype)`` of a model without float32 modules; planning
    casts on the meta device, where the warning means nothing."""
    from diffusers.utils import logging

    level = logging.get_verbosity()
    logging.set_verbosity_error()
    try:
        yield
    finally:
        logging.set_verbosity(level)


def _component(config: dict) -> torch.nn.Module:
    import diffusers

    config = dict(config)
    cls = getattr(diffusers, config.pop("_class_name"))
    with torch.device("meta"):
        return cls(**config)


def _architecture_for(cls: type, architecture: str | None, path: Any) -> str | Path:
    if architecture is not None:
        return architecture
    if path is not None and (Path(str(path)).expanduser() / "model_index.json").is_file():
        return Path(str(path)).expanduser()  # the run's own model directory says best
    return DEFAULT_ARCHITECTURES[cls.name]


def build_for_plan(cls: type, architecture: str | None = None, **policy_kwargs: Any) -> PlanSubject:
    """``cls`` (a DiffusersPolicy subclass) at ``architecture``'s real size on the meta device,
    with the run's options (``torch_dtype``, LoRA, ``image_size``, guidance …). ``architecture``
    is a shipped name, an architecture JSON or a pipeline directory; ``None`` is the run's
    ``path`` when it is a local pipeline directory, else :data:`DEFAULT_ARCHITECTURES`."""
    from diffusers import FlowMatchEulerDiscreteScheduler

    from cast_backbones.base import resolve_dtype

    arch = _architecture_for(cls, architecture, policy_kwargs.get("path"))
    facts = load_architecture(arch)
    if facts["policy"] != cls.name:
        raise ValueError(
            f"architecture {facts['name']!r} is a {facts['policy']!r} model; policy {cls.name!r} cannot run it "
            f"(its default is {DEFAULT_ARCHITECTURES[cls.name]!r})"
        )
    options = {k: v for k, v in policy_kwargs.items() if k not in _IGNORED}
    dtype = resolve_dtype(options.get("torch_dtype")) or torch.float32
    with _quiet_diffusers():
        transformer, vae = _component(facts["transformer"]), _component(facts["vae"])
        pipeline = cls.pipeline_class()(
            scheduler=FlowMatchEulerDiscreteScheduler(),
            vae=vae,
            text_encoder=_AbsentTextEncoder(dtype),
            tokenizer=None,
            transformer=transformer,
            **facts.get("pipeline", {}),
        )
        policy = cls.from_pipeline(pipeline, device="meta", **options)
    text = facts["text_encoder"]
    width = int(policy.transformer.config.joint_attention_dim)
    pads = cls.pipeline_class_name in _PADS_TEXT
    length = policy.max_sequence_length if pads else min(policy.max_sequence_length, int(text["text_length"]))

    def conditioning(n: int) -> PromptEmbeds:
        embeds = torch.zeros(n, length, width, dtype=dtype)
        return PromptEmbeds(embeds) if pads else PromptEmbeds(embeds, torch.ones(n, length, dtype=torch.bool))

    def place(device: torch.device) -> None:
        policy.device = policy.text_encoder_device = torch.device(device)
        if policy.uses_negative:  # the negative prompt's rows, as negative() caches them after encoding
            policy._negative = conditioning(1)

    notes = [
        f"text: {length} tokens of width {width} per prompt"
        + (" (FLUX.2 pads every prompt to max_sequence_length)" if pads else " (the prompt's own length, assumed)")
    ]
    if policy.uses_negative:
        notes.append("guidance: true CFG, two transformer passes per velocity (both kept for the backward pass)")
    return PlanSubject(
        policy=policy,
        modules={"transformer": policy.transformer, "vae": policy.pipe.vae},
        conditioning=conditioning,
        place=place,
        shard_units=policy.blocks(),
        shard_root=policy.transformer,
        text_encoder={
            "name": text["name"],
            "parameters": int(text["parameters"]),
            "bytes": int(text["parameters"]) * torch.empty((), dtype=dtype).element_size(),
        },
        architecture=str(facts["name"]),
        notes=notes,
    )
