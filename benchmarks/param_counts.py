"""Parameter counts behind docs/backbones.md's memory plan, computed on PyTorch's meta device
(no weights allocated): the transformers at their real configs (FLUX.2-dev: diffusers' defaults;
klein: scripts/convert_flux2_to_diffusers.py; Qwen-Image: diffusers' defaults), the VAEs, and
the rank-64 LoRA on each policy's default targets.

Run: ``python benchmarks/param_counts.py [--json FILE]`` after ``make install`` (seconds, no GPU).
"""

from __future__ import annotations

import argparse
import json

import torch

FLUX = {
    "dev": {},
    "klein-4b": dict(
        num_layers=5, num_single_layers=20, num_attention_heads=24, joint_attention_dim=7680, guidance_embeds=False
    ),
    "klein-9b": dict(
        num_layers=8, num_single_layers=24, num_attention_heads=32, joint_attention_dim=12288, guidance_embeds=False
    ),
}


def count(module) -> int:
    return sum(p.numel() for p in module.parameters())


def lora_count(transformer, targets) -> int:
    from cast_backbones.lora import add_lora, lora_parameters

    add_lora(transformer, rank=64, alpha=128, targets=targets)
    return sum(p.numel() for p in lora_parameters(transformer))


def main() -> None:
    from diffusers import (
        AutoencoderKLFlux2,
        AutoencoderKLQwenImage,
        Flux2Transformer2DModel,
        QwenImageTransformer2DModel,
    )

    from cast_backbones.lora import flux2_targets, qwen_image_targets

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", dest="json_path")
    a = ap.parse_args()
    out = {}
    with torch.device("meta"):
        for name, config in FLUX.items():
            t = Flux2Transformer2DModel(**config)
            out[f"flux2-{name}"] = {"transformer": count(t)}
            out[f"flux2-{name}"]["lora_r64"] = lora_count(t, flux2_targets(t))
        q = QwenImageTransformer2DModel()
        out["qwen-image"] = {"transformer": count(q), "lora_r64": lora_count(q, qwen_image_targets(q))}
        out["flux2-vae"] = {"vae": count(AutoencoderKLFlux2())}
        out["qwen-image-vae"] = {"vae": count(AutoencoderKLQwenImage())}
    for name, counts in out.items():
        print(name, {k: f"{v / 1e9:.3f}B" if v > 1e9 else f"{v / 1e6:.1f}M" for k, v in counts.items()})
    if a.json_path:
        with open(a.json_path, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
