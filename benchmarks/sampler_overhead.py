"""What sampling through a backbone policy costs next to diffusers' own pipeline, side by side.

For each backbone (``flux2``, ``flux2-klein``, ``qwen-image``) on its tiny random pipeline
(cast_backbones.tiny; the same model object on both sides, so the LoRA layers the policy adds
are in both):

1. ODE sampling, ``cast_core.sampling.sample(policy, window=None)`` vs ``pipe(...)``, same
   prompts, steps, size, batch and generator — target ratio <= 1.05;
2. the SDE window's extra cost per step: every step in the window (SDE + log-probs) vs none;
3. for reference, the pipeline with its LoRA layers vs the bare pipeline (what a rank-64
   adapter costs whoever samples, cast or not);
4. with ``--compile``: cast's ODE sampling with every transformer block compiled (``compile =
   true``, regional torch.compile) vs eager, after one warm-up that compiles. On a CPU and a tiny
   model this says little about a GPU; it is there so the GPU check reports compile on/off.

Timings are medians of interleaved repeats after one warm-up each. On a tiny model the
transformer is cheap, so the ratios are an upper bound on the sampler's relative overhead:
with a real transformer the same fixed cost is a smaller share of a step.

``--gpu``: a training-step check at real layer counts (random weights, bf16 base, float32
LoRA, gradient checkpointing) at 512²: peak memory and step time of one forward/backward on
the SDE objective's velocity. Run it on a machine with a CUDA GPU; ``--gpu-model klein-4b``
is the quick one, ``dev`` needs ~70 GB.

Run: ``python benchmarks/sampler_overhead.py [--repeats N] [--json FILE]`` after ``make install``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import warnings

import torch


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def interleaved(fns: dict, repeats: int) -> dict[str, float]:
    for fn in fns.values():
        fn()
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            times[name].append(timed(fn))
    return {k: statistics.median(v) for k, v in times.items()}


def backbone(name: str, repeats: int, batch: int, steps: int, size: tuple[int, int], compile: bool = False) -> dict:
    from cast_backbones import policy_classes
    from cast_backbones.tiny import TINY_PIPELINES
    from cast_core.sampling import sample
    from cast_core.types import Window

    cls = policy_classes()[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bare = TINY_PIPELINES[name]()
        policy = cls.from_pipeline(TINY_PIPELINES[name](), image_size=size)
        compiled = cls.from_pipeline(TINY_PIPELINES[name](), image_size=size, compile=True) if compile else None
    for p in (bare, policy.pipe):
        p.set_progress_bar_config(disable=True)
    prompts = ["a photo of a red cat and a blue dog"] * batch
    extra = {"negative_prompt": [" "] * batch, "true_cfg_scale": 4.0} if name == "qwen-image" else {}

    def pipeline(p):
        return lambda: p(
            prompt=prompts,
            num_inference_steps=steps,
            height=size[0],
            width=size[1],
            output_type="pt",
            generator=torch.Generator().manual_seed(0),
            **extra,
        )

    def ours(window, pol=policy):
        def run():
            pol._negative = None  # like for like: the pipeline encodes its negative prompt on every call
            return sample(
                pol,
                prompts,
                num_steps=steps,
                image_size=size,
                window=window,
                generator=torch.Generator().manual_seed(0),
            )

        return run

    with torch.no_grad():
        t = interleaved(
            {
                "pipeline_lora": pipeline(policy.pipe),
                "cast_ode": ours(None),
                "cast_sde_all_steps": ours(Window(0, steps)),
                "pipeline_bare": pipeline(bare),
                **({"cast_ode_compiled": ours(None, compiled)} if compiled is not None else {}),
            },
            repeats,
        )
    return {
        **{f"{k}_s": v for k, v in t.items()},
        "ode_ratio": t["cast_ode"] / t["pipeline_lora"],
        "target": 1.05,
        "sde_extra_per_step_s": (t["cast_sde_all_steps"] - t["cast_ode"]) / steps,
        "sde_ratio": t["cast_sde_all_steps"] / t["cast_ode"],
        "lora_ratio": t["pipeline_lora"] / t["pipeline_bare"],
        **({"compile_speedup": t["cast_ode"] / t["cast_ode_compiled"]} if compiled is not None else {}),
        "batch": batch,
        "steps": steps,
        "size": list(size),
    }


# real layer counts (diffusers' defaults for dev; scripts/convert_flux2_to_diffusers.py for klein)
GPU_MODELS = {
    "dev": {
        "num_layers": 8,
        "num_single_layers": 48,
        "num_attention_heads": 48,
        "joint_attention_dim": 15360,
        "guidance_embeds": True,
    },
    "klein-4b": {
        "num_layers": 5,
        "num_single_layers": 20,
        "num_attention_heads": 24,
        "joint_attention_dim": 7680,
        "guidance_embeds": False,
    },
}


def training_step(
    model: str, device: str, size: int = 512, text_tokens: int = 512, batch: int = 1, scale: dict | None = None
) -> dict:
    """One forward + backward of a FLUX.2 transformer at real layer counts with a rank-64 LoRA
    on the DreamBooth targets, bf16 base, gradient checkpointing; ``scale`` overrides config
    entries (used to smoke-test this function on a CPU at toy width)."""
    from diffusers import Flux2Transformer2DModel

    from cast_backbones.lora import add_lora, flux2_targets, lora_parameters

    config = {**GPU_MODELS[model], **(scale or {})}
    dev = torch.device(device)
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)  # built in bf16 on the device: dev in float32 would be 128 GB
    try:
        with dev:
            transformer = Flux2Transformer2DModel(**config)
    finally:
        torch.set_default_dtype(default)
    transformer.requires_grad_(False)
    add_lora(transformer, rank=64, alpha=128, targets=flux2_targets(transformer))
    transformer.enable_gradient_checkpointing()
    transformer.train()
    tokens = (size // 16) ** 2
    width = transformer.config.in_channels
    x = torch.randn(batch, tokens, width, device=dev)
    text = torch.randn(batch, text_tokens, config["joint_attention_dim"], device=dev)
    side = size // 16
    img_ids = torch.cartesian_prod(torch.arange(1), torch.arange(side), torch.arange(side), torch.arange(1)).to(dev)
    txt_ids = torch.cartesian_prod(torch.arange(1), torch.arange(1), torch.arange(1), torch.arange(text_tokens)).to(dev)
    guidance = torch.full((batch,), 4.0, device=dev) if config["guidance_embeds"] else None
    if dev.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    weights_gb = sum(p.numel() * p.element_size() for p in transformer.parameters()) / 1e9
    t = time.perf_counter()
    with torch.autocast(dev.type, dtype=torch.bfloat16):
        v = transformer(
            hidden_states=x,
            timestep=torch.full((batch,), 0.7, device=dev),
            guidance=guidance,
            encoder_hidden_states=text,
            txt_ids=txt_ids[None].expand(batch, -1, -1),
            img_ids=img_ids[None].expand(batch, -1, -1),
            return_dict=False,
        )[0]
    v.float().square().mean().backward()
    if dev.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - t
    return {
        "model": model,
        "device": str(dev),
        "size": size,
        "batch": batch,
        "weights_gb": weights_gb,
        "lora_params": sum(p.numel() for p in lora_parameters(transformer)),
        "step_s": seconds,
        "peak_gb": torch.cuda.max_memory_allocated(dev) / 1e9 if dev.type == "cuda" else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--gpu", action="store_true", help="also the real-size training step on cuda")
    ap.add_argument("--compile", action="store_true", help="also cast's ODE sampling with compiled blocks")
    ap.add_argument("--gpu-model", choices=sorted(GPU_MODELS), default="klein-4b")
    ap.add_argument("--json", dest="json_path")
    a = ap.parse_args()
    torch.manual_seed(0)
    results = {}
    for name in ("flux2", "flux2-klein", "qwen-image"):
        r = backbone(name, a.repeats, a.batch, a.steps, (64, 64), compile=a.compile)
        results[name] = r
        print(
            f"{name:12s} {a.batch} images x {a.steps} steps at 64x64: pipeline {r['pipeline_lora_s'] * 1e3:.1f} ms, "
            f"cast ODE {r['cast_ode_s'] * 1e3:.1f} ms, ratio {r['ode_ratio']:.3f} (target <= {r['target']}); "
            f"SDE window +{r['sde_extra_per_step_s'] * 1e3:.2f} ms/step ({r['sde_ratio']:.3f}x); "
            f"LoRA layers {r['lora_ratio']:.3f}x the bare pipeline"
            + (f"; compiled blocks {r['compile_speedup']:.2f}x eager" if "compile_speedup" in r else "")
        )
    if a.gpu:
        results["gpu_training_step"] = g = training_step(a.gpu_model, "cuda")
        print(
            f"GPU {a.gpu_model} at 512²: weights {g['weights_gb']:.1f} GB, peak {g['peak_gb']:.1f} GB, "
            f"forward+backward {g['step_s']:.2f} s"
        )
    if a.json_path:
        with open(a.json_path, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
