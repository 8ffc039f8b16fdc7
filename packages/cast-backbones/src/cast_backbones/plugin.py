"""Entry point of cast-backbones (``[project.entry-points.cast] backbones = "cast_backbones.plugin"``).

Names and lazy factories only: loading the plugin imports neither torch nor diffusers.

The recipes' numbers and where each comes from (docs/backbones.md has the full table):
LoRA rank 64 / alpha 128 (Flow-GRPO's FLUX.1-dev and Qwen-Image configs, Flow-Factory's FLUX.2
example), lr 3e-4 and clip range 1e-4 (Flow-GRPO, all models), 512² (Flow-GRPO and
Flow-Factory), group size 16 (Flow-Factory's FLUX.2 example, Flow-GRPO's Qwen-Image config),
8 training steps for FLUX.2 (Flow-Factory) and 10 for Qwen-Image (Flow-GRPO), eta 0.9 for FLUX
(Flow-GRPO's FLUX config) and 1.2 for Qwen-Image (Flow-GRPO), beta 0 (Flow-GRPO's FLUX and
Qwen-Image configs).
"""

from cast_core import Recipe, hookimpl, lazy

POLICIES = {
    "flux2": (
        "cast_backbones.flux2:Flux2Policy",
        "FLUX.2-dev (diffusers Flux2Pipeline): guidance-distilled, LoRA; policy_kwargs.path = model directory",
    ),
    "flux2-klein": (
        "cast_backbones.flux2:Flux2KleinPolicy",
        "FLUX.2-klein (Flux2KleinPipeline): true CFG against the empty prompt, LoRA",
    ),
    "qwen-image": (
        "cast_backbones.qwen_image:QwenImagePolicy",
        "Qwen-Image / Qwen-Image-2512 (QwenImagePipeline): true CFG with norm rescale, LoRA",
    ),
}


@hookimpl
def register_policies(register):
    for name, (target, description) in POLICIES.items():
        register(name, lazy(target), description=description)


def _settings(**overrides):
    common = {
        "prompts": "cast_backbones.prompts:train_prompts",
        # the size lives in one place, the policy's default, so the measured window and training
        # agree (config image_size is left unset and follows it)
        # loaded on the CPU; the text encoder alone visits the GPU to encode every training
        # prompt, leaves (offload_text_encoder), and only then does prepare() bring the transformer
        "policy_kwargs": {
            "lora_rank": 64,
            "lora_alpha": 128,
            "image_size": [512, 512],
            "device": "cpu",
            "text_encoder_device": "cuda",
        },
        "base_dtype": "bfloat16",
        "precision": "bf16",
        "gradient_checkpointing": True,
        "offload_text_encoder": True,
        # several processes shard the model (FSDP2) instead of copying it (DDP): every backbone has
        # >= 4B parameters, 8 GB in bf16 before any activation, once per process under DDP
        "sharding": "auto",
        "window_kwargs": {"embedder": "clip", "window_size": 2},
        "group_size": 16,
        "prompts_per_step": 4,
        "lr": 3e-4,
        "clip_range": 1e-4,
        "beta": 0.0,
        "adv_clip": 5.0,
        "ratio_mode": "position",
        "lam": 1.0,
        "gating": "soft",
        "max_grad_norm": 1.0,
        "sample_batch_size": 4,
        "micro_batch_size": 2,
        "decode_batch_size": 4,
        "sample_every": 10,
        "checkpoint_every": 10,
    }
    return {**common, **overrides}


@hookimpl
def register_recipes(register):
    # auto: the template grammar where it reads a prompt, else an LLM (decomposer_kwargs.llm_path), else
    # one prompt-level atom; metrics.jsonl counts which
    parts = {"scorer": "soft-tifa", "decomposer": "auto", "projector": "spatial", "window": "clip-curvature"}
    recipes = {
        "flux2": Recipe(
            policy="flux2",
            **parts,
            settings=_settings(num_steps=8, eta=0.9),
            description="CAST on FLUX.2-dev: --set policy_kwargs.path=DIR (one 80 GB GPU or more)",
        ),
        "flux2-klein": Recipe(
            policy="flux2-klein",
            **parts,
            settings=_settings(num_steps=8, eta=0.9),
            description="CAST on FLUX.2-klein: --set policy_kwargs.path=DIR",
        ),
        "qwen-image": Recipe(
            policy="qwen-image",
            **parts,
            settings=_settings(num_steps=10, eta=1.2),
            description="CAST on Qwen-Image(-2512): --set policy_kwargs.path=DIR",
        ),
    }
    from cast_core.objectives.recipes import objective_variants

    for name, recipe in recipes.items():
        register(name, recipe)
        for variant_name, variant in objective_variants(name, recipe).items():  # flux2-nft, flux2-cast-awm, …
            register(variant_name, variant)
